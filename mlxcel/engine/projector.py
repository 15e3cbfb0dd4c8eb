"""A multimodal projector (`--mmproj`) through llama.cpp's mtmd library: a prompt's
text pieces and decoded media become one token sequence, with each media chunk encoded
into embedding rows for the engine to decode (engine.media_span).

Its methods block and use one mtmd context: call them on `executor`, its one thread.
Encoded chunks are kept in an LRU by content hash, so a repeated image or clip is not
encoded again even after its KV memory was evicted.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import numpy as np
from llama_cpp import mtmd_cpp as mtmd

from mlxcel.engine.llama_runtime import route_mtmd_logs
from mlxcel.engine.media_span import MediaSpan, stand_in_tokens

log = logging.getLogger("mlxcel.projector")
EMBEDDING_CACHE_BYTES = 256 << 20


@functools.lru_cache(maxsize=64)
def projector_caps(path: str) -> tuple[bool, bool]:
    """(takes images, takes audio) read from a projector file's header, without loading it."""
    route_mtmd_logs()
    caps = mtmd.mtmd_get_cap_from_file(path.encode())
    return bool(caps.inp_vision), bool(caps.inp_audio)


class ProjectorError(RuntimeError):
    """The projector cannot be used, or refused an input (a 400 for the request)."""


@dataclass(frozen=True, eq=False)
class Bitmap:
    """One decoded image (RGB8, width x height) or audio clip (mono float32 samples at
    the projector's rate); `key` is its content hash."""

    key: bytes
    width: int = 0
    height: int = 0
    rgb: bytes = b""
    samples: np.ndarray | None = None

    @property
    def is_audio(self) -> bool:
        return self.samples is not None


@dataclass
class ProjectedPrompt:
    tokens: list[int]  # text token ids, and stand-in ids at media positions
    spans: tuple[MediaSpan, ...]  # without embeddings (zero columns) when only counted


class Projector:
    def __init__(self, path: Path, model: llama_cpp.llama_model_p, n_embd: int, n_threads: int,
                 image_min_tokens: int = -1, image_max_tokens: int = -1, n_ubatch: int = 0) -> None:
        route_mtmd_logs()
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = False
        params.print_timings = False
        params.warmup = False
        params.n_threads = max(1, n_threads)
        params.image_min_tokens = image_min_tokens
        params.image_max_tokens = image_max_tokens
        self.ctx = mtmd.mtmd_init_from_file(str(path).encode(), model, params)
        if not self.ctx:
            raise ProjectorError(f"llama.cpp's mtmd could not load the projector {path} for this model")
        if mtmd.mtmd_decode_use_mrope(self.ctx):
            self.close()
            raise ProjectorError(f"{path}: this projector places media with M-RoPE positions (the Qwen2-VL family), "
                                 "which mlxcel does not run yet")
        self.path = path
        self.n_embd = n_embd
        self.n_ubatch = n_ubatch  # a non-causal chunk must fit one micro-batch (0: unchecked)
        self.vision = bool(mtmd.mtmd_support_vision(self.ctx))
        self.audio = bool(mtmd.mtmd_support_audio(self.ctx))
        self.audio_sample_rate = int(mtmd.mtmd_get_audio_sample_rate(self.ctx)) if self.audio else 0
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlxcel-projector")
        self._cache: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._cache_bytes = 0
        self._lock = threading.Lock()  # close() against a running call
        self.encoded = 0  # chunks encoded (cache misses), for tests and stats
        self.reused = 0  # chunks taken from the embedding cache

    def project(self, pieces: list[str | Bitmap], add_special: bool, encode: bool = True) -> ProjectedPrompt:
        """Tokenize the pieces in order (text with special tokens parsed, as the chat
        prompt is) and, with `encode`, compute each media chunk's embedding rows."""
        with self._lock:
            if not self.ctx:
                raise ProjectorError("the projector is closed")
            bitmaps = [self._bitmap(piece) for piece in pieces if isinstance(piece, Bitmap)]
            chunks = mtmd.mtmd_input_chunks_init()
            try:
                self._tokenize(pieces, bitmaps, chunks, add_special)
                return self._collect(chunks, encode)
            finally:
                mtmd.mtmd_input_chunks_free(chunks)
                for bitmap in bitmaps:
                    mtmd.mtmd_bitmap_free(bitmap)

    def _bitmap(self, piece: Bitmap):
        if piece.is_audio:
            if not self.audio:
                raise ProjectorError("the loaded projector takes no audio")
            samples = np.ascontiguousarray(piece.samples, dtype=np.float32)
            bitmap = mtmd.mtmd_bitmap_init_from_audio(len(samples), samples.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
        else:
            if not self.vision:
                raise ProjectorError("the loaded projector takes no images")
            if len(piece.rgb) != piece.width * piece.height * 3 or piece.width <= 0 or piece.height <= 0:
                raise ProjectorError("an image's pixels do not match its size")
            data = (ctypes.c_uint8 * len(piece.rgb)).from_buffer_copy(piece.rgb)
            bitmap = mtmd.mtmd_bitmap_init(piece.width, piece.height, data)
        if not bitmap:
            raise ProjectorError("llama.cpp's mtmd could not take this media")
        mtmd.mtmd_bitmap_set_id(bitmap, piece.key.hex().encode())
        return bitmap

    def _tokenize(self, pieces: list[str | Bitmap], bitmaps: list, chunks, add_special: bool) -> None:
        texts, parts = [], []
        media = iter(bitmaps)
        for piece in pieces:
            if isinstance(piece, Bitmap):
                parts.append(mtmd.mtmd_input_part(text=None, bitmap=next(media)))
            elif piece:
                raw = piece.encode("utf-8")
                texts.append(mtmd.mtmd_input_text(text=raw, text_len=len(raw), add_special=add_special,
                                                  parse_special=True))
                parts.append(mtmd.mtmd_input_part(text=ctypes.pointer(texts[-1]), bitmap=None))
        array = (ctypes.POINTER(mtmd.mtmd_input_part) * len(parts))(*(ctypes.pointer(part) for part in parts))
        rc = mtmd.mtmd_tokenize_from_parts(self.ctx, chunks, array, len(parts), add_special)
        if rc != 0:
            raise ProjectorError(f"llama.cpp's mtmd could not tokenize the prompt's media (code {rc})")

    def _collect(self, chunks, encode: bool) -> ProjectedPrompt:
        tokens: list[int] = []
        spans: list[MediaSpan] = []
        seen: dict[bytes, int] = {}  # an audio clip may be several chunks: each gets its own key
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            if mtmd.mtmd_input_chunk_get_type(chunk) == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                n = ctypes.c_size_t(0)
                pointer = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                tokens.extend(pointer[: n.value] if n.value else [])
                continue
            n_tokens = int(mtmd.mtmd_input_chunk_get_n_tokens(chunk))
            media_id = mtmd.mtmd_input_chunk_get_id(chunk) or b""
            ordinal = seen.get(media_id, 0)
            seen[media_id] = ordinal + 1
            key = hashlib.sha256(media_id + b"/" + str(ordinal).encode() + b"/" + str(n_tokens).encode()).digest()
            non_causal = bool(mtmd.mtmd_decode_use_non_causal(self.ctx, chunk))
            if non_causal and 0 < self.n_ubatch < n_tokens:
                raise ProjectorError(f"a media chunk of {n_tokens} tokens, which this projector decodes in one "
                                     f"micro-batch, exceeds the server's --ubatch-size {self.n_ubatch}")
            rows = self._embeddings(chunk, key, n_tokens) if encode else np.zeros((n_tokens, 0), np.float32)
            spans.append(MediaSpan(len(tokens), rows, non_causal))
            tokens.extend(stand_in_tokens(key, n_tokens))
        return ProjectedPrompt(tokens, tuple(spans))

    def _embeddings(self, chunk, key: bytes, n_tokens: int) -> np.ndarray:
        rows = self._cache.get(key)
        if rows is not None:
            self._cache.move_to_end(key)
            self.reused += 1
            return rows
        rc = mtmd.mtmd_encode_chunk(self.ctx, chunk)
        if rc != 0:
            raise ProjectorError(f"llama.cpp's mtmd could not encode a media chunk (code {rc})")
        pointer = mtmd.mtmd_get_output_embd(self.ctx)
        rows = np.ctypeslib.as_array(pointer, shape=(n_tokens * self.n_embd,)).copy().reshape(n_tokens, self.n_embd)
        self.encoded += 1
        if rows.nbytes <= EMBEDDING_CACHE_BYTES:
            self._cache[key] = rows
            self._cache_bytes += rows.nbytes
            while self._cache_bytes > EMBEDDING_CACHE_BYTES:
                _, old = self._cache.popitem(last=False)
                self._cache_bytes -= old.nbytes
        return rows

    def close(self) -> None:
        with self._lock:
            if self.ctx:
                mtmd.mtmd_free(self.ctx)
                self.ctx = None
            self._cache.clear()
            self._cache_bytes = 0
        executor = getattr(self, "executor", None)
        if executor is not None:
            executor.shutdown(wait=False)
