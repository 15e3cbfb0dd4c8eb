"""llama.cpp's CPU_REPACK weight buffers without its AMX ones.

Asked to repack (`use_extra_bufts`), llama.cpp offers each weight to its extra buffer
types in turn, AMX first where the CPU has it, and AMX's kernels crash on the hosts
weight_buffers.py names. Turning the extra buffers off altogether also loses CPU_REPACK,
whose AVX2/AVX-512 kernels are the ones every other x86 host runs (on a Sapphire Rapids
guest, Qwen2.5-0.5B requantized to Q4_0: prefill 1.45x, four streams' decode 1.26x).
So where AMX must be avoided, mlxcel names the weights CPU_REPACK takes, one tensor
override each (llama-server's `-ot NAME=BUFFER`, which cannot name CPU_REPACK).

Which weights: the 2-D matrices a transformer multiplies by (attention, feed-forward,
the output head), each asked of llama.cpp the way its loader asks: a MUL_MAT of that
type and shape with the weight in a CPU_REPACK buffer, offered to the CPU device's
supports_op. A tensor override is taken without that check, and a weight CPU_REPACK
cannot hold aborts the load, so nothing is named that llama.cpp did not accept."""

from __future__ import annotations

import ctypes
import functools
import logging
import re
from pathlib import Path

import llama_cpp

log = logging.getLogger("mlxcel.llama")

# the weights llama.cpp's graphs use in a MUL_MAT (embedding tables are read by GET_ROWS,
# which CPU_REPACK does not run: they must stay out)
MATMUL_WEIGHT = re.compile(r"^(output|blk\.\d+\.(attn_(q|k|v|qkv|output|q_a|q_b|kv_a_mqa|kv_b|k_b|v_b)"
                           r"|ffn_(gate|up|down|gate_shexp|up_shexp|down_shexp)))\.weight$")
_CPU_DEVICE = 0  # GGML_BACKEND_DEVICE_TYPE_CPU
_F32 = 0  # GGML_TYPE_F32
_BUFFER_OFFSET = 8  # struct ggml_tensor { enum ggml_type type; struct ggml_backend_buffer * buffer; ...}


class _Override(ctypes.Structure):  # struct llama_model_tensor_buft_override
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


class _InitParams(ctypes.Structure):  # struct ggml_init_params
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


class _Ggml:
    """The few ggml calls this needs, from the libraries llama-cpp-python loaded."""

    def __init__(self) -> None:
        lib = Path(llama_cpp.__file__).parent / "lib"
        libs = [ctypes.CDLL(str(lib / name)) for name in ("libggml-base.so", "libggml.so")]
        vp, sz, i64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64
        signatures = {
            "ggml_tensor_overhead": (sz, []), "ggml_init": (vp, [_InitParams]), "ggml_free": (None, [vp]),
            "ggml_new_tensor_2d": (vp, [vp, ctypes.c_int, i64, i64]),
            "ggml_new_tensor_4d": (vp, [vp, ctypes.c_int, i64, i64, i64, i64]),
            "ggml_mul_mat": (vp, [vp, vp, vp]),
            "ggml_backend_dev_by_type": (vp, [ctypes.c_int]), "ggml_backend_dev_backend_reg": (vp, [vp]),
            "ggml_backend_reg_get_proc_address": (vp, [vp, ctypes.c_char_p]),
            "ggml_backend_buft_name": (ctypes.c_char_p, [vp]),
            "ggml_backend_buft_alloc_buffer": (vp, [vp, sz]), "ggml_backend_buffer_free": (None, [vp]),
            "ggml_backend_dev_supports_op": (ctypes.c_bool, [vp, vp]),
        }
        for name, (restype, argtypes) in signatures.items():
            function = next(getattr(lib_, name) for lib_ in libs if hasattr(lib_, name))
            function.restype, function.argtypes = restype, argtypes
            setattr(self, name.removeprefix("ggml_"), function)
        self.device = self.backend_dev_by_type(_CPU_DEVICE)
        self.cpu_repack = self.extra_buffer_type("CPU_REPACK")

    def extra_buffer_type(self, name: str) -> int | None:
        """The CPU device's extra buffer type of this name (CPU_REPACK, AMX, ...)."""
        if not self.device:
            return None
        address = self.backend_reg_get_proc_address(self.backend_dev_backend_reg(self.device),
                                                    b"ggml_backend_dev_get_extra_bufts")
        if not address:
            return None
        bufts = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(address)(self.device)
        i = 0
        while bufts and bufts[i]:
            if self.backend_buft_name(bufts[i]).decode() == name:
                return bufts[i]
            i += 1
        return None

    def takes_matmul(self, buft: int, ggml_type: int, ne0: int, ne1: int) -> bool:
        """Whether the CPU device runs a MUL_MAT of this weight held in `buft`."""
        ctx = self.init(_InitParams(self.tensor_overhead() * 8, None, True))
        buffer = self.backend_buft_alloc_buffer(buft, 0)
        try:
            weight = self.new_tensor_2d(ctx, ggml_type, ne0, ne1)
            product = self.mul_mat(ctx, weight, self.new_tensor_4d(ctx, _F32, ne0, 512, 1, 1))
            ctypes.c_void_p.from_address(weight + _BUFFER_OFFSET).value = buffer
            return bool(self.backend_dev_supports_op(self.device, product))
        finally:
            self.backend_buffer_free(buffer)
            self.free(ctx)


@functools.cache
def _ggml() -> _Ggml:
    return _Ggml()


def repacked_weights(model_path: Path) -> list[str]:
    """The names of this GGUF's weights that llama.cpp's CPU_REPACK buffers take."""
    import gguf

    ggml = _ggml()
    buft = ggml.cpu_repack
    if buft is None:
        return []
    if not model_path.is_file():  # a pipe is read once, by llama.cpp's loader (which reports what is wrong)
        return []
    try:
        tensors = gguf.GGUFReader(model_path).tensors
    except Exception as exc:  # noqa: BLE001 - a file gguf cannot read: the load that follows reports it
        log.debug("cannot list %s's weights for CPU_REPACK: %s", model_path, exc)
        return []
    verdicts: dict[tuple[int, int, int], bool] = {}
    names = []
    for tensor in tensors:
        if len(tensor.shape) != 2 or not MATMUL_WEIGHT.match(tensor.name):
            continue
        key = (int(tensor.tensor_type), int(tensor.shape[0]), int(tensor.shape[1]))
        if key not in verdicts:
            verdicts[key] = ggml.takes_matmul(buft, *key)
        if verdicts[key]:
            names.append(tensor.name)
    return names


def repack_overrides(model_path: Path) -> tuple[ctypes.Array | None, int]:
    """llama.cpp's tensor_buft_overrides (NULL-terminated) putting each weight CPU_REPACK
    takes there, and how many; (None, 0) when it takes none. The array holds its
    pattern strings: keep it alive while the model loads."""
    names = repacked_weights(model_path)
    if not names:
        return None, 0
    buft = _ggml().cpu_repack
    overrides = (_Override * (len(names) + 1))()
    patterns = [("^" + re.escape(name) + "$").encode() for name in names]
    for entry, pattern in zip(overrides, patterns):
        entry.pattern, entry.buft = pattern, buft
    overrides._patterns = patterns  # c_char_p fields do not own their bytes
    return overrides, len(names)
