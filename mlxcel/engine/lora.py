"""LoRA adapters (llama-server's --lora, --lora-scaled, --lora-init-without-apply and
/lora-adapters): loaded beside the model, applied to the context with a scale each.
Which scales each request and each step runs with: lora_sets.py."""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass

import llama_cpp

MAX_SCALE = 1000.0  # far past any useful scale (they sit near 1), far below float32's range


class LoraError(RuntimeError):
    pass


@dataclass
class LoraAdapter:
    path: str
    scale: float  # the server's scale: requests that name none run with it (0: loaded, not applied)
    handle: object  # llama.cpp's llama_adapter_lora *
    task_name: str = ""
    prompt_prefix: str = ""


def _meta(handle, key: str) -> str:
    buf = ctypes.create_string_buffer(1024)
    n = llama_cpp.llama_adapter_meta_val_str(handle, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", "replace") if n >= 0 else ""


def load_adapters(model, specs: tuple[tuple[str, float], ...]) -> list[LoraAdapter]:
    adapters = []
    for path, scale in specs:
        handle = llama_cpp.llama_adapter_lora_init(model, path.encode())
        if not handle:
            raise LoraError(f"llama.cpp could not load the LoRA adapter {path} (not a LoRA GGUF of this model)")
        adapters.append(LoraAdapter(path, scale, handle, _meta(handle, "adapter.lora.task_name"),
                                    _meta(handle, "adapter.lora.prompt_prefix")))
    return adapters


def apply_scales(ctx, adapters: list[LoraAdapter], scales: list[float]) -> None:
    """Run the context with these scales (the adapters freed with the model)."""
    if len(scales) != len(adapters) or not all(math.isfinite(s) for s in scales):
        raise LoraError("one finite scale per adapter")
    active = [(a.handle, s) for a, s in zip(adapters, scales) if s != 0.0]
    if not active:
        llama_cpp.llama_set_adapters_lora(ctx, None, 0, None)
        return
    handles = (type(active[0][0]) * len(active))(*(h for h, _ in active))
    values = (ctypes.c_float * len(active))(*(s for _, s in active))
    llama_cpp.llama_set_adapters_lora(ctx, handles, len(active), values)


def requested_scales(adapters: list[LoraAdapter], entries: list[dict]) -> list[float]:
    """llama-server's reading of a `[{id, scale}]` list: listed ids get their scale,
    the others 0. A LoraError for an id that names no adapter or a bad entry."""
    scales = [0.0] * len(adapters)
    for entry in entries:
        if not isinstance(entry, dict):
            raise LoraError("each entry must be an object {id, scale}")
        index, scale = entry.get("id"), entry.get("scale", 1.0)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(adapters):
            loaded = f"{len(adapters)} LoRA adapter(s) loaded" if adapters else "no LoRA adapter is loaded (--lora)"
            raise LoraError(f"invalid adapter id: {index!r} ({loaded})")
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
            raise LoraError(f"adapter {index}: scale must be a finite number")
        if abs(scale) > MAX_SCALE:  # llama.cpp computes in float32: 1e300 is inf there, and kills the process
            raise LoraError(f"adapter {index}: scale must be within ±{MAX_SCALE:g}")
        scales[index] = float(scale)
    return scales
