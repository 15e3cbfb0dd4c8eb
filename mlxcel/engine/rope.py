"""RoPE and YaRN settings of a llama context: llama-server's --rope-scaling,
--rope-scale / --rope-freq-scale, --rope-freq-base and --yarn-* flags. Every field
left at its default keeps what the model's GGUF says."""

from __future__ import annotations

from dataclasses import dataclass

import llama_cpp

SCALING_TYPES = {
    "none": llama_cpp.LLAMA_ROPE_SCALING_TYPE_NONE,
    "linear": llama_cpp.LLAMA_ROPE_SCALING_TYPE_LINEAR,
    "yarn": llama_cpp.LLAMA_ROPE_SCALING_TYPE_YARN,
}


@dataclass(frozen=True)
class RopeSettings:
    scaling: str | None = None  # none | linear | yarn; None: the model's
    freq_base: float = 0.0  # 0: the model's
    freq_scale: float = 0.0  # 1 / the context's expansion factor; 0: the model's
    yarn_orig_ctx: int = 0  # the model's original context for YaRN; 0: its trained context
    yarn_ext_factor: float = -1.0  # negative: llama.cpp's (1 under YaRN, else 0)
    yarn_attn_factor: float = -1.0  # negative: the model's
    yarn_beta_fast: float = -1.0
    yarn_beta_slow: float = -1.0

    @property
    def is_default(self) -> bool:
        return self == RopeSettings()

    def context_fields(self) -> dict:
        """These as llama_context_params fields."""
        fields = {"rope_freq_base": self.freq_base, "rope_freq_scale": self.freq_scale,
                  "yarn_orig_ctx": self.yarn_orig_ctx, "yarn_ext_factor": self.yarn_ext_factor,
                  "yarn_attn_factor": self.yarn_attn_factor, "yarn_beta_fast": self.yarn_beta_fast,
                  "yarn_beta_slow": self.yarn_beta_slow}
        if self.scaling is not None:
            fields["rope_scaling_type"] = SCALING_TYPES[self.scaling]
        return fields

    def describe(self) -> str:
        """The settings that differ from the model's, for the start-up log."""
        default = RopeSettings()
        return ", ".join(f"{name} {value}" for name, value in vars(self).items() if value != getattr(default, name))
