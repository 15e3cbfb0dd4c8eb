"""The llama.cpp model and context, loaded through llama-cpp-python's low-level API.

Only the engine thread decodes through a `LlamaRuntime`; the vocabulary it exposes
is read-only and safe to tokenize with from other threads.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import logging
import mmap
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import numpy as np

from mlxcel.engine import _topset, held_wakeups, kv_pages
from mlxcel.engine.compute_gate import COMPUTE_GATE
from mlxcel.engine.control_vectors import ControlVectorError, ControlVectors, apply_control_vectors
from mlxcel.engine.cpu_repack import repack_overrides
from mlxcel.engine.huge_pages import ContextPages
from mlxcel.engine.kv_fit import host_cache_refusal
from mlxcel.engine.kv_overrides import KvOverride, override_array
from mlxcel.engine.lora import LoraError, apply_scales, load_adapters
from mlxcel.engine.rope import RopeSettings
from mlxcel.engine.weight_buffers import avoids_amx, repack_weights
from mlxcel.engine.weight_pages import MAPPINGS, release_after_load

log = logging.getLogger("mlxcel.llama")

_BYTE_P = ctypes.POINTER(ctypes.c_uint8)
_backend_lock = threading.Lock()
_backend_ready = False


# -fa as the command line spells it -> llama.cpp's flash_attn_type
FLASH_ATTN_TYPES = {
    "auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}


class ModelLoadError(RuntimeError):
    """The GGUF file could not be loaded or a context could not be created."""


@dataclass(frozen=True)
class RuntimeConfig:
    model_path: Path
    n_ctx: int = 0  # 0 = the model's trained context
    n_parallel: int = 4
    n_batch: int = 2048
    n_ubatch: int = 512
    n_threads: int = 2
    n_threads_batch: int = 2
    flash_attn: int = llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO
    n_gpu_layers: int = 0
    split_mode: str = "layer"  # -sm: how a model spans GPUs (none, layer, row)
    main_gpu: int = 0  # -mg: the GPU for the model (split none) or for intermediate results (split row)
    tensor_split: tuple[float, ...] = ()  # -ts: the share of the model each GPU takes
    load_mode: str = "auto"  # llama.cpp's model loading: auto, none, mmap, mlock, mmap+mlock, dio
    swa_full: bool = False  # full-size KV for sliding-window layers (more memory, no SWA eviction)
    rope: RopeSettings = RopeSettings()  # RoPE / YaRN scaling (the model's unless set)
    kv_overrides: tuple[KvOverride, ...] = ()  # --override-kv: metadata read instead of the GGUF's
    lora: tuple[tuple[str, float], ...] = ()  # --lora / --lora-scaled: (adapter GGUF, scale) each
    control_vectors: ControlVectors = ControlVectors()  # --control-vector*: directions added per layer
    huge_pages: bool = True  # the context's buffers on transparent huge pages (huge_pages.py)
    check_tensors: bool = False  # --check-tensors: llama.cpp validates the tensor data while loading
    type_k: str = "f16"  # KV cache element types, named as llama.cpp's -ctk / -ctv take them
    type_v: str = "f16"
    kv_unified: bool = False  # one KV pool for every sequence (a sequence may use all of it)
    n_ctx_seq_cap: int = 0  # most tokens one sequence may hold (0: what llama.cpp gives it)
    repack: bool | None = None  # --repack / --no-repack; None: weight_buffers.repack_weights decides


# llama.cpp's llama_load_mode, by the names llama-server's --load-mode takes
LOAD_MODES = {"auto": llama_cpp.LLAMA_LOAD_MODE_AUTO, "none": llama_cpp.LLAMA_LOAD_MODE_NONE,
              "mmap": llama_cpp.LLAMA_LOAD_MODE_MMAP, "mlock": llama_cpp.LLAMA_LOAD_MODE_MLOCK,
              "mmap+mlock": llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK, "dio": llama_cpp.LLAMA_LOAD_MODE_DIRECT_IO}

# the KV cache types llama.cpp accepts for -ctk / -ctv
CACHE_TYPES = {
    "f32": llama_cpp.GGML_TYPE_F32, "f16": llama_cpp.GGML_TYPE_F16, "bf16": 30,  # GGML_TYPE_BF16 (not exported by llama_cpp)
    "q8_0": llama_cpp.GGML_TYPE_Q8_0, "q4_0": llama_cpp.GGML_TYPE_Q4_0, "q4_1": llama_cpp.GGML_TYPE_Q4_1,
    "iq4_nl": llama_cpp.GGML_TYPE_IQ4_NL, "q5_0": llama_cpp.GGML_TYPE_Q5_0, "q5_1": llama_cpp.GGML_TYPE_Q5_1,
}


# ggml_log_level: 1 debug, 2 info, 3 warn, 4 error, 5 continuation of the previous line
_LOG_LEVELS = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}


@llama_cpp.llama_log_callback
def _llama_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    """Route llama.cpp's own log lines to Python logging (errors and warnings only)."""
    message = text.decode("utf-8", errors="replace").rstrip()
    kv_pages.offer(message)  # kept while the thread making a context listens (its KV buffer's size)
    py_level = _LOG_LEVELS.get(level, logging.DEBUG)
    if py_level >= logging.WARNING and message and log.isEnabledFor(py_level):
        log.log(py_level, "%s", message)


def route_mtmd_logs() -> None:
    """llama.cpp's multimodal library logs through its own hooks: the same routing."""
    from llama_cpp import mtmd_cpp

    mtmd_cpp.mtmd_log_set(_llama_log, ctypes.c_void_p(0))
    mtmd_cpp.mtmd_helper_log_set(_llama_log, ctypes.c_void_p(0))


def _init_backend() -> None:
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            llama_cpp.llama_log_set(_llama_log, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            _backend_ready = True


def _set(params, **values):
    """Set fields of a llama.cpp params struct, refusing a name it does not have (ctypes
    would silently keep it as a plain Python attribute that llama.cpp never reads)."""
    names = {name for name, _ in type(params)._fields_}
    for name, value in values.items():
        if name not in names:
            raise AttributeError(f"{type(params).__name__} has no field {name!r}")
        setattr(params, name, value)
    return params


SPLIT_MODES = {"none": llama_cpp.LLAMA_SPLIT_MODE_NONE, "layer": llama_cpp.LLAMA_SPLIT_MODE_LAYER,
               "row": llama_cpp.LLAMA_SPLIT_MODE_ROW, "tensor": llama_cpp.LLAMA_SPLIT_MODE_TENSOR}


def model_params(config: RuntimeConfig):
    """llama.cpp's model parameters. The GPU placement (-ngl, -sm, -mg, -ts) takes effect
    where llama.cpp was built with a GPU backend; a CPU build loads every layer on the CPU
    (as llama-server there, with a warning at start). The tensor split array is kept on
    the params object: llama.cpp reads it while the model loads."""
    params = _set(llama_cpp.llama_model_default_params(), n_gpu_layers=config.n_gpu_layers,
                  split_mode=SPLIT_MODES[config.split_mode], main_gpu=config.main_gpu,
                  load_mode=LOAD_MODES[config.load_mode], check_tensors=config.check_tensors)
    if config.tensor_split:
        shares = (ctypes.c_float * llama_cpp.llama_max_devices())(*config.tensor_split)
        params.tensor_split = ctypes.cast(shares, ctypes.POINTER(ctypes.c_float))
        params._tensor_split_shares = shares  # alive as long as the params
    if config.kv_overrides:
        overrides = override_array(config.kv_overrides)
        params.kv_overrides = ctypes.cast(overrides, ctypes.POINTER(llama_cpp.llama_model_kv_override))
        params._kv_overrides = overrides  # alive as long as the params
    return place_weights(params, config.repack, Path(config.model_path))


def place_weights(params, repack: bool | None, model_path: Path):
    """Where the weights go (weight_buffers.py): llama.cpp's extra buffers as --repack /
    --no-repack say, and where AMX is skipped, CPU_REPACK for each weight it takes
    (cpu_repack.py; the overrides are kept on the params, which llama.cpp reads while
    the model loads)."""
    params.use_extra_bufts = repack_weights(repack)
    if avoids_amx(repack):
        overrides, n = repack_overrides(model_path)
        if overrides is not None:
            params.tensor_buft_overrides = ctypes.cast(overrides, ctypes.c_void_p)
            params._tensor_overrides = overrides
            log.info("%d weight tensors of %s in llama.cpp's CPU_REPACK buffers (AMX skipped)", n, model_path.name)
    return params


def context_params(config: RuntimeConfig):
    return _set(
        llama_cpp.llama_context_default_params(),
        n_ctx=config.n_ctx,
        n_batch=config.n_batch,
        n_ubatch=min(config.n_ubatch, config.n_batch),
        n_seq_max=config.n_parallel,
        n_threads=config.n_threads,
        n_threads_batch=config.n_threads_batch,
        flash_attn_type=config.flash_attn,
        type_k=CACHE_TYPES[config.type_k],
        type_v=CACHE_TYPES[config.type_v],
        kv_unified=config.kv_unified,
        swa_full=config.swa_full,
        no_perf=True,
        **config.rope.context_fields(),
    )


class LlamaRuntime:
    """Owns one llama_model and one llama_context with `n_parallel` sequences.

    `choose_flash_attn`, when given and the config leaves flash attention to auto, is
    called with the loaded model and the context's parameters before the context is
    created, and returns the llama_flash_attn_type the context gets (`config` then
    records it)."""

    def __init__(self, config: RuntimeConfig,
                 choose_flash_attn: Callable[[object, object], int] | None = None) -> None:
        _init_backend()
        with MAPPINGS:  # one model's memory mapped or dropped at a time (weight_pages.py)
            self._open(config, choose_flash_attn)

    def _open(self, config: RuntimeConfig, choose_flash_attn: Callable[[object, object], int] | None) -> None:
        weights = ContextPages(config.huge_pages, what="the weights llama.cpp copied (repacked or read in)")
        self.model = llama_cpp.llama_model_load_from_file(str(config.model_path).encode(), model_params(config))
        if not self.model:
            raise ModelLoadError(f"llama.cpp could not load {config.model_path}")
        weights.back()
        try:
            self.loras = load_adapters(self.model, config.lora)
        except LoraError as exc:
            llama_cpp.llama_model_free(self.model)
            raise ModelLoadError(str(exc)) from None
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        release_after_load(config.model_path, config.load_mode)  # before the context's buffers: a lower peak
        if config.n_gpu_layers == 0 or not llama_cpp.llama_supports_gpu_offload():  # the cache in host memory
            n_ctx = config.n_ctx or llama_cpp.llama_model_n_ctx_train(self.model)
            refusal = host_cache_refusal(config.model_path, n_ctx, config.type_k, config.type_v, config.swa_full)
            if refusal is not None:
                llama_cpp.llama_model_free(self.model)
                raise ModelLoadError(refusal)
        ctx_params = context_params(config)
        if choose_flash_attn is not None and config.flash_attn == llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO:
            try:
                chosen = choose_flash_attn(self.model, ctx_params)
            except BaseException:
                llama_cpp.llama_model_free(self.model)
                raise
            config = dataclasses.replace(config, flash_attn=chosen)
            ctx_params.flash_attn_type = chosen
        self.config = config
        pages = ContextPages(config.huge_pages, kv=True)
        with kv_pages.captured_llama_log() as lines:
            self.ctx = llama_cpp.llama_init_from_model(self.model, ctx_params)
        if not self.ctx:
            llama_cpp.llama_model_free(self.model)
            raise ModelLoadError(
                f"llama.cpp could not create a context (n_ctx={config.n_ctx}, parallel={config.n_parallel})"
            )
        pages.back(kv_pages.kv_buffer_sizes(lines))
        if self.loras:
            apply_scales(self.ctx, self.loras, [scale for _, scale in config.lora])
        if config.control_vectors.files:
            try:
                apply_control_vectors(self.ctx, self.model, config.control_vectors)
            except ControlVectorError as exc:
                self.close()
                raise ModelLoadError(f"control vectors: {exc}") from None
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.n_ctx = llama_cpp.llama_n_ctx(self.ctx)
        self.n_ctx_seq = llama_cpp.llama_n_ctx_seq(self.ctx)
        if config.n_ctx_seq_cap > 0:
            self.n_ctx_seq = min(self.n_ctx_seq, config.n_ctx_seq_cap)
        self.kv_unified = config.kv_unified
        self.n_batch = llama_cpp.llama_n_batch(self.ctx)
        self.n_ubatch = llama_cpp.llama_n_ubatch(self.ctx)
        self.n_ctx_train = llama_cpp.llama_model_n_ctx_train(self.model)
        if not config.rope.is_default:
            log.info("RoPE settings of %s: %s (trained context now %d)", config.model_path.name,
                     config.rope.describe(), self.n_ctx_train)

    def warm_up(self, token: int) -> None:
        """Decode one token once so the first request does not pay for lazy set-up."""
        batch = llama_cpp.llama_batch_get_one((llama_cpp.llama_token * 1)(token), 1)
        with COMPUTE_GATE.hold(guest=True):  # other models may be decoding meanwhile
            llama_cpp.llama_decode(self.ctx, batch)
        # the cells only: clearing the data too would write the whole KV buffer, bringing back the pages
        # dropped after the context was made (kv_pages.py); the warm-up's one cell holds finite values
        llama_cpp.llama_memory_clear(self.memory, False)

    # -- metadata -------------------------------------------------------------------

    def metadata(self, key: str) -> str | None:
        size = 1 << 16
        while True:
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_model_meta_val_str(self.model, key.encode(), buf, size)
            if n < 0:
                return None
            if n < size:
                return buf.value.decode("utf-8", errors="replace")
            size = n + 1

    def chat_template(self) -> str | None:
        raw = llama_cpp.llama_model_chat_template(self.model, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    def description(self) -> str:
        buf = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(self.model, buf, 256)
        return buf.value.decode("utf-8", errors="replace")

    def n_params(self) -> int:
        return int(llama_cpp.llama_model_n_params(self.model))

    def model_size(self) -> int:
        return int(llama_cpp.llama_model_size(self.model))

    def n_embd(self) -> int:
        return int(llama_cpp.llama_model_n_embd(self.model))

    def n_embd_input(self) -> int:
        """The width of an input embedding row (a projector's output)."""
        if hasattr(llama_cpp, "llama_model_n_embd_inp"):
            return int(llama_cpp.llama_model_n_embd_inp(self.model))
        return self.n_embd()

    def vocab_type(self) -> int:
        return int(llama_cpp.llama_vocab_type(self.vocab))

    def ftype_name(self) -> str:
        """The weights' file type as llama.cpp names it, e.g. "Q8_0"."""
        name = llama_cpp.llama_ftype_name(llama_cpp.llama_model_ftype(self.model))
        return name.decode("utf-8", errors="replace") if isinstance(name, bytes) else str(name or "")

    # -- sequence memory (engine thread only) ---------------------------------------

    def seq_remove(self, seq_id: int, start: int, end: int = -1) -> bool:
        return bool(llama_cpp.llama_memory_seq_rm(self.memory, seq_id, start, end))

    @property
    def keeps_recurrent_state(self) -> bool:
        """Whether the model's memory holds a recurrent state (a recurrent or hybrid
        model): it cannot drop a sequence's latest positions, such as a verify batch's
        rejected drafts (llama_memory_seq_rm refuses)."""
        return bool(llama_cpp.llama_model_is_recurrent(self.model) or llama_cpp.llama_model_is_hybrid(self.model))

    @property
    def can_shift(self) -> bool:
        """Whether cached positions can be moved (context shift); not for recurrent memory."""
        return bool(llama_cpp.llama_memory_can_shift(self.memory))

    def shift_seq(self, seq_id: int, n_keep: int, n_discard: int) -> bool:
        """Drop positions [n_keep, n_keep + n_discard) and move everything after them
        down by n_discard (llama.cpp re-rotates the moved keys)."""
        if not llama_cpp.llama_memory_seq_rm(self.memory, seq_id, n_keep, n_keep + n_discard):
            return False
        llama_cpp.llama_memory_seq_add(self.memory, seq_id, n_keep + n_discard, -1, -n_discard)
        return True

    def move_seq(self, seq_id: int, start: int, end: int, to: int) -> bool:
        """Move positions [start, end) down to `to`, dropping [to, start) first (llama.cpp
        re-rotates the moved keys at the next decode)."""
        if to < start and not llama_cpp.llama_memory_seq_rm(self.memory, seq_id, to, start):
            return False
        llama_cpp.llama_memory_seq_add(self.memory, seq_id, start, end, to - start)
        return True

    def seq_clear(self, seq_id: int) -> None:
        llama_cpp.llama_memory_seq_rm(self.memory, seq_id, -1, -1)

    def seq_state(self, seq_id: int) -> np.ndarray:
        """The sequence's KV state (a byte buffer, copied once), to restore later
        with restore_seq_state."""
        held_wakeups.release()  # milliseconds without the GIL: the loops run meanwhile
        size = llama_cpp.llama_state_seq_get_size(self.ctx, seq_id)
        buf = _state_buffer(size)
        written = llama_cpp.llama_state_seq_get_data(self.ctx, buf.ctypes.data_as(_BYTE_P), size, seq_id)
        return buf if written == size else buf[:written].copy()

    def copy_seq(self, src: int, dst: int) -> None:
        """Make `dst` hold what `src` holds. Sequences live in separate KV streams,
        so the whole stream is copied (during the next decode): a few ms."""
        llama_cpp.llama_memory_seq_cp(self.memory, src, dst, -1, -1)

    def restore_seq_state(self, seq_id: int, state: np.ndarray) -> bool:
        held_wakeups.release()  # milliseconds without the GIL: the loops run meanwhile
        return llama_cpp.llama_state_seq_set_data(self.ctx, state.ctypes.data_as(_BYTE_P), len(state), seq_id) > 0

    def decode(self, batch: llama_cpp.llama_batch, causal: bool = True) -> int:
        """llama_decode; `causal` False: the batch's positions attend to each other both
        ways (a non-causal projector's media), only for this call."""
        held_wakeups.release()  # the loops woken now run beside the decode, not inside the engine's Python
        if causal:
            return int(llama_cpp.llama_decode(self.ctx, batch))
        llama_cpp.llama_set_causal_attn(self.ctx, False)
        try:
            return int(llama_cpp.llama_decode(self.ctx, batch))
        finally:
            llama_cpp.llama_set_causal_attn(self.ctx, True)

    def close(self) -> None:
        free_model(self)


def free_model(runtime) -> None:
    """Free a runtime's context and model (each once), holding MAPPINGS (weight_pages.py)."""
    with MAPPINGS:
        if runtime.ctx:
            llama_cpp.llama_free(runtime.ctx)
            runtime.ctx = None
        if runtime.model:
            llama_cpp.llama_model_free(runtime.model)
            runtime.model = None


def _state_buffer(size: int) -> np.ndarray:
    """An uninitialised byte buffer in its own anonymous mapping, populated in one
    call: a 1,500-token state (34 MB) costs ~9 ms here, against ~13 ms for a zeroed
    ctypes array and ~20 ms faulting small pages one by one while llama.cpp writes."""
    if size <= 0:
        return np.empty(0, dtype=np.uint8)
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
    return np.frombuffer(mmap.mmap(-1, size, flags=flags), dtype=np.uint8)


# llama_get_logits_ith answering the row's address as an int: right after a decode (cold
# caches) np.frombuffer over it costs ~60 us against ~90 us for np.ctypeslib.as_array on
# the POINTER llama_cpp's binding returns (bench/after_decode.py's setting)
_logits_address = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)(
    ("llama_get_logits_ith", llama_cpp.llama_cpp._lib))


@functools.cache
def _row_type(n_vocab: int) -> type:
    return ctypes.c_float * n_vocab


# its own address, for the picks in C (the greedy one, a narrowed chain's)
LOGITS_ITH = ctypes.cast(llama_cpp.llama_cpp._lib.llama_get_logits_ith, ctypes.c_void_p).value


def greedy_token(ctx: llama_cpp.llama_context_p, batch_index: int, n_vocab: int, bans: np.ndarray) -> int:
    """The argmax of one batch output's logits row, with the int32 `bans` ids set to
    -inf in it first (the lowest id on ties, the first NaN if any: numpy's argmax), in
    one C call that keeps the GIL: right after a decode, wrapping the row in numpy and
    taking its argmax cost ~45 us, mostly the wrapping on cold caches."""
    return _topset.argmax_row(LOGITS_ITH, ctx, batch_index, n_vocab, bans)


def logits_row(ctx: llama_cpp.llama_context_p, batch_index: int, n_vocab: int) -> np.ndarray:
    """A writable numpy view of the logits llama.cpp produced for one batch output."""
    address = _logits_address(ctx, batch_index)
    if not address:  # llama.cpp logged why (an index without logits)
        raise ValueError(f"no logits for batch output {batch_index}")
    return np.frombuffer(_row_type(n_vocab).from_address(address), dtype=np.float32)

