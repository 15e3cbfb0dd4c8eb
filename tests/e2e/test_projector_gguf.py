"""The test projectors load and run in llama.cpp's mtmd against SmolLM2 (low-level ctypes).

Model-loading: run under the CPU lock.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
from pathlib import Path

import llama_cpp
import numpy as np
import pytest
from llama_cpp import mtmd_cpp as mtmd

from tests.audio_clips import wav_bytes
from tests.projector_gguf import (
    AUDIO_SAMPLE_RATE,
    audio_tokens,
    gemma3_image_tokens,
    image_tokens,
    png_bytes,
    write_audio_projector,
    write_gemma3_projector,
    write_vision_projector,
)

MODEL = Path.home() / ".cache/mlxcel/models/SmolLM2-135M-Instruct.Q4_1.gguf"
N_EMBD = 576
CHUNK_TEXT = mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT
CHUNK_IMAGE = mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE
CHUNK_AUDIO = mtmd.MTMD_INPUT_CHUNK_TYPE_AUDIO


@pytest.fixture(scope="module")
def text_model():
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    model = llama_cpp.llama_model_load_from_file(str(MODEL).encode(), params)
    assert model, "SmolLM2 did not load"
    yield model
    llama_cpp.llama_model_free(model)


class Mtmd:
    """One mtmd context: tokenize a marked prompt with media, encode media chunks."""

    def __init__(self, projector: Path, model) -> None:
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = False
        params.print_timings = False
        params.n_threads = 2
        params.warmup = False
        self.ctx = mtmd.mtmd_init_from_file(str(projector).encode(), model, params)
        assert self.ctx, f"mtmd could not load {projector}"
        self.marker = mtmd.mtmd_default_marker().decode()

    def close(self) -> None:
        mtmd.mtmd_free(self.ctx)

    def tokenize(self, text: str, bitmaps: list) -> list[tuple[int, int, object]]:
        """[(chunk type, n_tokens, chunk)]; the chunks live until the next call."""
        data = text.encode()
        inp = mtmd.mtmd_input_text(data, len(data), True, True)
        arr = (mtmd.mtmd_bitmap_p_ctypes * len(bitmaps))(*bitmaps)
        if hasattr(self, "_chunks"):
            mtmd.mtmd_input_chunks_free(self._chunks)
        self._chunks = mtmd.mtmd_input_chunks_init()
        rc = mtmd.mtmd_tokenize(self.ctx, self._chunks, ctypes.byref(inp), arr, len(bitmaps))
        assert rc == 0, f"mtmd_tokenize returned {rc}"
        out = []
        for i in range(mtmd.mtmd_input_chunks_size(self._chunks)):
            chunk = mtmd.mtmd_input_chunks_get(self._chunks, i)
            out.append((mtmd.mtmd_input_chunk_get_type(chunk), mtmd.mtmd_input_chunk_get_n_tokens(chunk), chunk))
        return out

    def encode(self, chunk, n_tokens: int) -> np.ndarray:
        assert mtmd.mtmd_encode_chunk(self.ctx, chunk) == 0
        ptr = mtmd.mtmd_get_output_embd(self.ctx)
        return np.ctypeslib.as_array(ptr, shape=(n_tokens * N_EMBD,)).reshape(n_tokens, N_EMBD).copy()


def rgb(width: int, height: int):
    pixels = bytes((x * 7 + y * 3 + c * 50) % 256 for y in range(height) for x in range(width) for c in range(3))
    return mtmd.mtmd_bitmap_init(width, height, (ctypes.c_uint8 * len(pixels)).from_buffer_copy(pixels))


def pcm(seconds: float) -> np.ndarray:
    n = int(seconds * AUDIO_SAMPLE_RATE)
    return (0.3 * np.sin(2 * math.pi * 440 * np.arange(n) / AUDIO_SAMPLE_RATE)).astype(np.float32)


def tone(seconds: float):
    samples = pcm(seconds)
    return mtmd.mtmd_bitmap_init_from_audio(len(samples), samples.ctypes.data_as(ctypes.POINTER(ctypes.c_float))), len(samples)


def from_file_bytes(ctx: Mtmd, data: bytes):
    """What llama-server does with a media file: mtmd's helper decodes it (stb_image, miniaudio)."""
    buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(ctx.ctx, buf, len(data), False)
    assert bitmap, "mtmd could not decode the file"
    return bitmap


def test_projector_files_are_deterministic(tmp_path):
    digests = set()
    for i in range(2):
        write_vision_projector(tmp_path / f"v{i}.gguf")
        write_audio_projector(tmp_path / f"a{i}.gguf")
        write_gemma3_projector(tmp_path / f"g{i}.gguf")
        digests.add(b"".join(hashlib.sha256((tmp_path / f"{k}{i}.gguf").read_bytes()).digest() for k in "vag"))
    assert len(digests) == 1


def _loaded(text_model, tmp_path_factory, write):
    """The projector `write` makes, loaded by mtmd against the text model."""
    path = tmp_path_factory.mktemp("mmproj") / f"{write.__name__}.gguf"
    write(path)
    ctx = Mtmd(path, text_model)
    yield ctx
    ctx.close()


@pytest.fixture(scope="module")
def vision(text_model, tmp_path_factory):
    yield from _loaded(text_model, tmp_path_factory, write_vision_projector)


@pytest.fixture(scope="module")
def audio(text_model, tmp_path_factory):
    yield from _loaded(text_model, tmp_path_factory, write_audio_projector)


@pytest.fixture(scope="module")
def gemma3(text_model, tmp_path_factory):
    yield from _loaded(text_model, tmp_path_factory, write_gemma3_projector)


def assert_encodes_stably(ctx, chunk, n_tokens: int) -> None:
    """The chunk encodes to finite, varied rows, the same on a second encode."""
    first = ctx.encode(chunk, n_tokens)
    assert np.isfinite(first).all() and first.std() > 0
    assert np.array_equal(first, ctx.encode(chunk, n_tokens))


def text_of(chunk) -> list[int]:
    n = ctypes.c_size_t(0)
    pointer = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
    return pointer[: n.value]


@pytest.mark.parametrize("size", [(32, 32), (100, 60)])
def test_gemma3_image_is_non_causal_between_start_and_end_of_image_text(gemma3, text_model, size):
    assert mtmd.mtmd_support_vision(gemma3.ctx) and not mtmd.mtmd_decode_use_mrope(gemma3.ctx)
    bitmap = rgb(*size)
    try:
        chunks = gemma3.tokenize(gemma3.marker, [bitmap])
        assert [c[0] for c in chunks] == [CHUNK_TEXT, CHUNK_IMAGE, CHUNK_TEXT]
        _, n_tokens, chunk = chunks[1]
        assert mtmd.mtmd_decode_use_non_causal(gemma3.ctx, chunk)
        assert n_tokens == gemma3_image_tokens() == 36
        vocab = llama_cpp.llama_model_get_vocab(text_model)
        around = []
        for kind, _, text_chunk in (chunks[0], chunks[2]):
            pieces = []
            for token in text_of(text_chunk):
                buf = ctypes.create_string_buffer(64)
                n = llama_cpp.llama_token_to_piece(vocab, token, buf, 64, 0, False)
                pieces.append(buf.raw[:n].decode())
            around.append("".join(pieces))
        assert around == ["<start_of_image>", "<end_of_image>"]
        assert_encodes_stably(gemma3, chunk, n_tokens)
    finally:
        mtmd.mtmd_bitmap_free(bitmap)


def test_vision_projector_loads_causal_and_without_mrope(vision):
    assert mtmd.mtmd_support_vision(vision.ctx)
    assert not mtmd.mtmd_support_audio(vision.ctx)
    assert not mtmd.mtmd_decode_use_mrope(vision.ctx)
    assert not mtmd.mtmd_decode_use_non_causal(vision.ctx, None)


@pytest.mark.parametrize("size", [(32, 32), (100, 60)])
def test_image_encodes_to_fixed_token_count(vision, size):
    bitmap = rgb(*size)
    try:
        chunks = vision.tokenize(f"Look: {vision.marker} what is it?", [bitmap])
        assert [c[0] for c in chunks] == [CHUNK_TEXT, CHUNK_IMAGE, CHUNK_TEXT]
        _, n_tokens, chunk = chunks[1]
        assert n_tokens == image_tokens() == 64
        assert_encodes_stably(vision, chunk, n_tokens)
    finally:
        mtmd.mtmd_bitmap_free(bitmap)


def test_audio_projector_loads_causal_and_without_mrope(audio):
    assert mtmd.mtmd_support_audio(audio.ctx)
    assert not mtmd.mtmd_support_vision(audio.ctx)
    assert mtmd.mtmd_get_audio_sample_rate(audio.ctx) == AUDIO_SAMPLE_RATE
    assert not mtmd.mtmd_decode_use_mrope(audio.ctx)


@pytest.mark.parametrize("seconds", [1, 3])
def test_audio_encodes_to_window_token_count(audio, seconds):
    bitmap, n_samples = tone(seconds)
    try:
        chunks = audio.tokenize(f"Listen: {audio.marker} what is it?", [bitmap])
        assert [c[0] for c in chunks] == [CHUNK_TEXT, CHUNK_AUDIO, CHUNK_TEXT]
        _, n_tokens, chunk = chunks[1]
        assert not mtmd.mtmd_decode_use_non_causal(audio.ctx, chunk)
        assert n_tokens == audio_tokens(n_samples) == 25
        assert_encodes_stably(audio, chunk, n_tokens)
    finally:
        mtmd.mtmd_bitmap_free(bitmap)


def test_png_decoded_by_mtmd_helper_takes_the_same_tokens(vision):
    bitmap = from_file_bytes(vision, png_bytes(100, 60))
    try:
        assert (mtmd.mtmd_bitmap_get_nx(bitmap), mtmd.mtmd_bitmap_get_ny(bitmap)) == (100, 60)
        chunks = vision.tokenize(vision.marker, [bitmap])
        assert [(c[0], c[1]) for c in chunks] == [(CHUNK_IMAGE, image_tokens())]
    finally:
        mtmd.mtmd_bitmap_free(bitmap)


def test_wav_decoded_by_mtmd_helper_takes_the_same_tokens(audio):
    samples = (pcm(3) * 32767).astype(np.int16)
    bitmap = from_file_bytes(audio, wav_bytes(samples, AUDIO_SAMPLE_RATE))
    try:
        assert mtmd.mtmd_bitmap_is_audio(bitmap)
        chunks = audio.tokenize(audio.marker, [bitmap])
        assert [(c[0], c[1]) for c in chunks] == [(CHUNK_AUDIO, audio_tokens(3 * AUDIO_SAMPLE_RATE))]
    finally:
        mtmd.mtmd_bitmap_free(bitmap)


def test_audio_past_30_seconds_is_one_chunk_per_window(audio):
    bitmap, n_samples = tone(31)
    try:
        chunks = audio.tokenize(audio.marker, [bitmap])
        assert [(c[0], c[1]) for c in chunks] == [(CHUNK_AUDIO, 25), (CHUNK_AUDIO, 25)]
        assert audio_tokens(n_samples) == 50
        assert all(np.isfinite(audio.encode(c[2], c[1])).all() for c in chunks)
    finally:
        mtmd.mtmd_bitmap_free(bitmap)
