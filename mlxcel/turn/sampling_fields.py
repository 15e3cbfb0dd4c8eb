"""Sampling fields shared by every generation route (llama-server and OpenAI names).

Every number has a range: floats are finite, windows and lengths fit llama.cpp's
int32 (the engine further clamps penalty windows to the slot's context). The counted
caps (stop strings and their length, logit_bias entries) are the server's
RequestLimits, checked on the raw body before validation."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

INT32_MAX = 2**31 - 1
# llama.cpp divides logits by the repeat penalty, in float32: a penalty that is 0 there
# (0, or one below float32's smallest normal) turns the -inf of a banned or
# grammar-masked token into NaN, and that token can then be drawn
MIN_REPEAT_PENALTY = 2.0**-126


class SamplingFields(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, allow_inf_nan=False)

    temperature: float | None = Field(default=None, ge=0.0, le=100.0)
    top_k: int | None = Field(default=None, ge=-1, le=INT32_MAX)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    typical_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repeat_penalty: float | None = Field(default=None, le=100.0)  # above 0: _check_repeat_penalty
    repetition_penalty: float | None = Field(default=None, le=100.0)
    repeat_last_n: int | None = Field(default=None, ge=-1, le=INT32_MAX)
    repetition_context_size: int | None = Field(default=None, ge=-1, le=INT32_MAX)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    top_n_sigma: float | None = Field(default=None, ge=-1.0, le=100.0)
    p_less: StrictBool | None = None
    dry_multiplier: float | None = Field(default=None, ge=0.0, le=100.0)
    dry_base: float | None = Field(default=None, ge=1.0, le=100.0)
    dry_allowed_length: int | None = Field(default=None, ge=0, le=INT32_MAX)
    dry_penalty_last_n: int | None = Field(default=None, ge=-1, le=INT32_MAX)
    # llama-server refuses an empty list ("must be a non-empty array of strings")
    dry_sequence_breakers: list[int | str] | None = Field(default=None, min_length=1, max_length=64)
    xtc_probability: float | None = Field(default=None, ge=0.0, le=1.0)
    xtc_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    dynatemp_range: float | None = Field(default=None, ge=0.0, le=100.0)
    dynatemp_exponent: float | None = Field(default=None, ge=0.0, le=100.0)
    mirostat: int | None = Field(default=None, ge=0, le=2)
    mirostat_tau: float | None = Field(default=None, ge=0.0, le=100.0)
    mirostat_eta: float | None = Field(default=None, ge=0.0, le=1.0)
    adaptive_target: float | None = Field(default=None, le=1.0, ge=-1e9)
    adaptive_decay: float | None = Field(default=None, ge=0.0, le=0.99)
    min_keep: int | None = Field(default=None, ge=0, le=INT32_MAX)
    samplers: list[str] | str | None = Field(default=None, max_length=64)
    logit_bias: dict[str, float | bool] | list[list[int | str | float | bool]] | None = None
    max_pattern_size: int | None = Field(default=None, ge=0, le=512)
    min_pattern_size: int | None = Field(default=None, ge=0, le=512)
    min_count: int | None = Field(default=None, le=4096)  # below 2: no loop detection for the request
    seed: int | None = None
    stop: str | list[str] | None = None
    ignore_eos: StrictBool = False
    cache_prompt: StrictBool | None = None
    n_cache_reuse: int | None = Field(default=None, ge=0, le=INT32_MAX)  # --cache-reuse for this request
    # context shift (--context-shift): prompt tokens kept (-1: all) and tokens dropped per shift (0: half)
    n_keep: int | None = Field(default=None, ge=-1, le=INT32_MAX)
    n_discard: int | None = Field(default=None, ge=0, le=INT32_MAX)
    # llama-server's stops for code completion: a later line indented less than n_indent;
    # a newline after t_max_predict_ms of generation
    n_indent: int | None = Field(default=None, ge=0, le=INT32_MAX)
    t_max_predict_ms: int | None = Field(default=None, ge=-1, le=2**53)
    sse_ping_interval: int | None = Field(default=None, ge=-1, le=INT32_MAX)  # seconds; -1 or 0: no pings
    lora: list[dict] | None = Field(default=None, max_length=64)
    id_slot: int | None = Field(default=None, ge=-1, le=INT32_MAX)  # llama-server: run in this slot (-1: any)


    def ping_seconds(self, server_default: int) -> float | None:
        """SSE comment pings while a stream is silent (llama-server's sse_ping_interval)."""
        interval = self.sse_ping_interval if self.sse_ping_interval is not None else server_default
        return float(interval) if interval > 0 else None

    @field_validator("stop")
    @classmethod
    def _check_stop(cls, value: str | list[str] | None) -> list[str]:
        stops = [value] if isinstance(value, str) else list(value or [])
        return [s for s in stops if s]

    @field_validator("repeat_penalty", "repetition_penalty")
    @classmethod
    def _check_repeat_penalty(cls, value: float | None) -> float | None:
        if value is not None and value < MIN_REPEAT_PENALTY:
            raise ValueError("must be above 0 (1.0: no penalty): llama.cpp divides logits by it")
        return value

    def extra_cache_prompt(self) -> bool | None:
        """`cache_prompt` as the OpenAI SDK may nest it: {"extra_body": {"cache_prompt": ...}}."""
        if self.cache_prompt is not None:
            return self.cache_prompt
        extra_body = (self.model_extra or {}).get("extra_body")
        if isinstance(extra_body, dict) and isinstance(extra_body.get("cache_prompt"), bool):
            return extra_body["cache_prompt"]
        return None
