"""The served model: loaded on a background thread while HTTP already answers."""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import llama_cpp

from mlxcel.config import ServerConfig
from mlxcel.engine import attention_choice
from mlxcel.engine.control_vectors import ControlVectors
from mlxcel.engine.cost_cache import cost_file, load_costs, save_costs
from mlxcel.engine.draft_model import DraftModel
from mlxcel.engine.draft_policy import DecodeCosts
from mlxcel.engine.engine import Engine
from mlxcel.engine.engine_config import EngineConfig
from mlxcel.engine.host_memory import MemoryProbeError, read_host_memory
from mlxcel.engine.llama_runtime import FLASH_ATTN_TYPES, LlamaRuntime, RuntimeConfig
from mlxcel.engine.lookup_cache import LookupCaches
from mlxcel.engine.lora import apply_scales
from mlxcel.engine.prompt_cache import HostPromptCache
from mlxcel.engine.rope import RopeSettings
from mlxcel.engine.tokenizer import Tokenizer
from mlxcel.media import MediaLoader
from mlxcel.models.catalog import CATALOG
from mlxcel.models.store import mlxcel_home
from mlxcel.structured.constraint import BatchMasker
from mlxcel.turn.errors import EngineUnavailable, GenerationFailed, ServerBusy
from mlxcel.turn.structured_output import server_grammar

log = logging.getLogger("mlxcel.server")
# "0" turns off sizing drafts by measured batch costs: every proposed draft is verified
# (tests that must see drafts on a host whose verify batches cost as much a token as
# single decodes; output is the same either way)
COST_MODEL_ENV = "MLXCEL_SPEC_COST_MODEL"
ENGINE_FAILURE_DRAIN_S = 2.0  # after the engine fails: answer 503s this long, then exit


def without_unsupported_speculation(cfg: ServerConfig, runtime: LlamaRuntime) -> ServerConfig:
    """`cfg` with speculative decoding off, with a warning, where the model's memory
    cannot drop a verify batch's rejected drafts (a recurrent or hybrid model): their
    tokens would stay in its state and change every token after them."""
    if cfg.spec_type == "none" or not runtime.keeps_recurrent_state:
        return cfg
    log.warning("speculative decoding (--spec-type %s) is not supported by this model's recurrent memory, "
                "which cannot drop rejected drafts: it is disabled", cfg.spec_type)
    return dataclasses.replace(cfg, spec_type="none", model_draft=None)


def _pool_size(cfg: ServerConfig) -> int:
    """-c, or (as llama-server) parallel x --kv-unified-per-slot when -c is unset."""
    if cfg.ctx_size == 0 and cfg.kv_unified_per_slot > 0:
        return cfg.parallel * cfg.kv_unified_per_slot
    return cfg.ctx_size


def _slot_context(cfg: ServerConfig, pool: int) -> int:
    """The most context one slot can hold in a pool of `pool` cells: its share of a
    split pool, or the unified pool up to --kv-unified-per-slot."""
    if not cfg.kv_unified:
        return pool // max(1, cfg.parallel)
    return min(pool, cfg.kv_unified_per_slot) if cfg.kv_unified_per_slot > 0 else pool


def _runtime_config(cfg: ServerConfig, path: Path, n_ctx: int, draft: bool = False) -> RuntimeConfig:
    return RuntimeConfig(
        model_path=path,
        n_ctx=n_ctx,
        n_parallel=cfg.parallel,
        n_batch=cfg.batch_size,
        n_ubatch=cfg.ubatch_size,
        n_threads=cfg.threads,
        n_threads_batch=cfg.threads_batch,
        flash_attn=FLASH_ATTN_TYPES[cfg.flash_attn],
        n_gpu_layers=cfg.n_gpu_layers,
        split_mode=cfg.split_mode,
        main_gpu=cfg.main_gpu,
        tensor_split=cfg.tensor_split,
        load_mode=cfg.model_load_mode,
        swa_full=cfg.swa_full,
        rope=RopeSettings() if draft else cfg.rope,
        kv_overrides=() if draft else cfg.kv_overrides,
        lora=() if draft else cfg.lora,
        control_vectors=ControlVectors() if draft else cfg.control_vectors,
        huge_pages=cfg.huge_pages,
        check_tensors=cfg.check_tensors,
        repack=cfg.repack,
        kv_unified=cfg.kv_unified and not draft,
        n_ctx_seq_cap=0 if draft else cfg.kv_unified_per_slot,
        type_k=cfg.cache_type_k_draft if draft else cfg.cache_type_k,
        type_v=cfg.cache_type_v_draft if draft else cfg.cache_type_v,
    )


class HostState(str, enum.Enum):
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"
    ABSENT = "absent"  # --embedding / --reranking: -m is the embedding or rerank worker's; nothing generates
    SLEEPING = "sleeping"  # --sleep-idle-seconds: unloaded while idle; the next request loads it again


# what llama-server answers a generation on a server started with --embedding
NO_GENERATION = "the current context does not support logits computation. skipping"


class ModelHost:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.state = HostState.ABSENT if config.embedding_only or config.rerank_only else HostState.LOADING
        self.model_id = config.alias or (config.model if config.model in CATALOG else Path(config.model).name)
        self.model_path: Path | None = None
        self.runtime: LlamaRuntime | None = None
        self.tokenizer: Tokenizer | None = None
        self.engine: Engine | None = None
        self.chat_template: str | None = None  # the template source in force
        self.template = None  # mlxcel.chat.template.ChatTemplate
        self.tool_parser_cls = None  # the tool-call format of the template, if any
        self.template_caps: dict[str, bool] | None = None  # /props' chat_template_caps (probed at load with --jinja)
        self.model_family: str | None = None  # general.architecture
        self.host_cache = self._make_host_cache(config)
        self.projector = None  # mlxcel.engine.projector.Projector, with --mmproj
        self.default_grammar = None  # the server's --grammar / --json-schema (a GrammarSpec), compiled at load
        self.media_loader = MediaLoader(config.media)  # fetches and decodes media parts under the policy
        self.created = int(time.time())
        self.error: str | None = None
        self._on_failure: Callable[[str], None] = lambda _message: None
        self.asleep: dict = {}  # while SLEEPING: what the routes that do not wake it answer (server/idle_sleep.py)
        self._carried_stats = None  # the engine's counters across a sleep (EngineStats)
        self._lookup_caches: LookupCaches | None = None  # read with the model once; kept across a sleep
        self._carried_lora: list[float] | None = None  # POST /lora-adapters' scales across a sleep
        self._waking = False  # loading again after a sleep: still described as asleep until ready

    def start_loading(self, on_failure: Callable[[str], None]) -> threading.Thread:
        """Load on a background thread. `on_failure` is told, once, when loading fails
        or (after a short drain) when the engine fails: the server then exits."""
        self._on_failure = on_failure
        if self.state is HostState.ABSENT:
            return threading.Thread()
        thread = threading.Thread(target=self._load, args=(on_failure,), name="mlxcel-loader", daemon=True)
        thread.start()
        return thread

    def _engine_failed(self, reason: str) -> None:
        """Called on the engine thread once the llama context or the engine thread
        failed: from now on every request is a 503 naming `reason`; the process exits
        after the in-flight answers have drained, for a supervisor to restart it."""
        self.state = HostState.FAILED
        self.error = reason
        timer = threading.Timer(ENGINE_FAILURE_DRAIN_S, self._on_failure, args=(f"the engine failed: {reason}",))
        timer.daemon = True
        timer.start()

    def _measure_decode_costs(self, runtime: LlamaRuntime, draft_model: bool) -> DecodeCosts | None:
        """What each batch size costs to decode, for sizing drafts: read back from the
        last start with this model and these settings, else measured (and saved); an
        assumed curve, not saved, when it cannot be measured; None (drafts then take
        whatever is proposed) only when COST_MODEL_ENV turns the model off."""
        if os.environ.get(COST_MODEL_ENV, "").strip().lower() in {"0", "off", "false", "no"}:
            log.info("speculation drafts whatever is proposed: no cost model (%s)", COST_MODEL_ENV)
            return None
        cfg = self.config
        most = min(cfg.spec_draft_max if draft_model else cfg.spec_ngram_size_m, runtime.n_batch) + cfg.parallel
        settings = {"most": most, "config": runtime.config, "curve": 2}  # 2: measured with the cores to itself
        path = cost_file(mlxcel_home() / "decode-costs", Path(self.model_path), settings)
        measured = load_costs(path)
        if measured is not None:
            log.info("decode cost by batch size read back from %s", path)
            return DecodeCosts(measured)
        try:
            costs = DecodeCosts.measure(runtime, most)
        except RuntimeError as exc:  # core_share.Contended included: neither used nor kept
            device = "gpu" if cfg.n_gpu_layers != 0 and llama_cpp.llama_supports_gpu_offload() else "cpu"
            log.warning("speculation sizes drafts by an assumed cost curve (a %s's, rescaled to the decodes it "
                        "sees) until a start measures one: %s", device.upper(), exc)
            return DecodeCosts.assumed(most, device)
        log.info("decode cost by batch size (ms): %s",
                 " ".join(f"{n}:{1000 * c:.1f}" for n, c in costs.measured.items()))
        save_costs(path, costs.measured)
        return costs

    @property
    def flash_attn(self) -> str:
        """The attention kernel the context runs: on, off, or auto (left to llama.cpp)."""
        runtime = self.runtime
        chosen = runtime.config.flash_attn if runtime is not None else FLASH_ATTN_TYPES[self.config.flash_attn]
        return next(name for name, value in FLASH_ATTN_TYPES.items() if value == chosen)

    def _choose_flash_attn(self, model, params) -> int:
        """-fa auto with every layer on the CPU: the attention kernel that serves a
        typical request faster on this machine (engine/attention_choice.py)."""
        cfg = self.config
        if not attention_choice.probe_needed(cfg.n_gpu_layers, cfg.cache_type_v):
            return llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO
        per_slot = _slot_context(cfg, _pool_size(cfg) or llama_cpp.llama_model_n_ctx_train(model))
        settings = {"threads": cfg.threads, "threads_batch": cfg.threads_batch, "type_k": cfg.cache_type_k,
                    "type_v": cfg.cache_type_v, "ubatch": min(cfg.ubatch_size, cfg.batch_size), "repack": cfg.repack,
                    "probe": (attention_choice.PROBE_DEPTH, attention_choice.PROBE_STEPS)}
        path = cost_file(mlxcel_home() / "attention", Path(self.model_path), settings)
        scores = attention_choice.plain_scores_bytes(int(params.n_ubatch), per_slot,
                                                     int(llama_cpp.llama_model_n_head(model)))
        try:
            memory = read_host_memory().total_bytes
        except MemoryProbeError:
            memory = 0  # unknown: the timings decide alone
        chosen, why = attention_choice.decide(model, params, path, attention_choice.typical_depth(per_slot),
                                              cfg.threads, scores, memory)
        log.info("flash attention (-fa auto): %s", why)
        return chosen

    def _load(self, on_failure: Callable[[str], None]) -> None:
        from mlxcel.models.pull import resolve_model

        try:
            started = time.monotonic()
            self.model_path = resolve_model(self.config.model, log=lambda line: log.info("%s", line))
            cfg = self.config
            runtime = LlamaRuntime(_runtime_config(cfg, self.model_path, _pool_size(cfg)), self._choose_flash_attn)
            if self._carried_lora is not None and runtime.loras:  # the scales it slept with
                for adapter, scale in zip(runtime.loras, self._carried_lora):
                    adapter.scale = scale
                apply_scales(runtime.ctx, runtime.loras, self._carried_lora)
            tokenizer = Tokenizer(runtime.vocab, render_special=cfg.special)
            self._load_chat_support(runtime, tokenizer)
            self.default_grammar = server_grammar(cfg.default_grammar, tokenizer)
            projector = self._load_projector(runtime) if cfg.mmproj else None
            if cfg.warmup:
                runtime.warm_up(max(tokenizer.bos, 0))
            cfg = self.config = without_unsupported_speculation(cfg, runtime)
            drafter = self._load_drafter(cfg, tokenizer, runtime.n_ctx) if cfg.model_draft else None
            lookup_ngram = cfg.spec_ngram_size if cfg.spec_type == "ngram-simple" else 0
            if cfg.context_shift and not runtime.can_shift:  # as llama-server: off, with a warning
                log.warning("context shift is not supported by this model's memory: it is disabled")
                cfg = self.config = dataclasses.replace(cfg, context_shift=False)
            if cfg.cache_reuse and (not runtime.can_shift or projector is not None):  # as llama-server
                log.warning("--cache-reuse is not supported %s: it is disabled",
                            "with a multimodal projector" if projector is not None else "by this model's memory")
                cfg = self.config = dataclasses.replace(cfg, cache_reuse=0)
            costs = None
            if drafter is not None or lookup_ngram:
                costs = self._measure_decode_costs(runtime, drafter is not None)
            if lookup_ngram and self._lookup_caches is None and (cfg.lookup_cache_static or cfg.lookup_cache_dynamic):
                self._lookup_caches = LookupCaches.load(cfg.lookup_cache_static, cfg.lookup_cache_dynamic,
                                                        tokenizer.n_vocab)
            engine = Engine(
                runtime,
                tokenizer,
                EngineConfig(
                    queue_cap=cfg.queue_cap,
                    prefill_chunk=cfg.prefill_chunk,
                    cache_prompt=cfg.cache_prompt,
                    cache_reuse=cfg.cache_reuse,
                    context_shift=cfg.context_shift,
                    host_cache=self.host_cache,
                    lookup_ngram=lookup_ngram,
                    drafter=drafter,
                    draft_max=cfg.spec_draft_max,
                    lookup_max=cfg.spec_ngram_size_m,
                    traffic_tokens=cfg.spec_ngram_traffic,
                    lookup_caches=self._lookup_caches,
                    draft_min=cfg.spec_draft_min,
                    decode_costs=costs,
                    on_failure=self._engine_failed,
                    masker=BatchMasker,
                ),
                stats=self._carried_stats,
            )
            engine.start()
        except Exception as exc:  # noqa: BLE001 - any failure here ends the server
            self.state = HostState.FAILED
            self.error = str(exc) or type(exc).__name__
            log.error("could not load the model: %s", self.error)
            on_failure(f"could not load the model: {self.error}")
            return
        self.runtime, self.tokenizer, self.engine, self.projector = runtime, tokenizer, engine, projector
        self.model_family = runtime.metadata("general.architecture")
        self.state = HostState.READY
        log.info(
            "model %s loaded in %.1fs: %s, context %d (%d per slot x %d slots)",
            self.model_id,
            time.monotonic() - started,
            runtime.description(),
            runtime.n_ctx,
            runtime.n_ctx_seq,
            cfg.parallel,
        )

    @staticmethod
    def _load_drafter(cfg: ServerConfig, tokenizer: Tokenizer, n_ctx: int) -> DraftModel:
        from mlxcel.models.pull import resolve_model

        path = resolve_model(cfg.model_draft, log=lambda line: log.info("%s", line))
        runtime = LlamaRuntime(_runtime_config(cfg, path, n_ctx, draft=True))
        draft_vocab = int(llama_cpp.llama_vocab_n_tokens(runtime.vocab))
        if draft_vocab != tokenizer.n_vocab:
            runtime.close()
            raise ValueError(f"--model-draft {cfg.model_draft} has {draft_vocab} tokens, the model {tokenizer.n_vocab}")
        return DraftModel(runtime, tokenizer.n_vocab)

    def _load_projector(self, runtime: LlamaRuntime):
        from mlxcel.engine.projector import Projector

        cfg = self.config
        projector = Projector(Path(cfg.mmproj), runtime.model, runtime.n_embd_input(), cfg.threads_batch or cfg.threads,
                              cfg.image_min_tokens, cfg.image_max_tokens, runtime.n_ubatch)
        kinds = [kind for kind, present in (("images", projector.vision), ("audio", projector.audio)) if present]
        log.info("projector %s loaded: %s", Path(cfg.mmproj).name, " and ".join(kinds) or "no media")
        return projector

    @property
    def modalities(self) -> dict[str, bool]:
        """What the model takes besides text (/props' `modalities`)."""
        projector = self.projector
        if projector is None and "modalities" in self.asleep:
            return self.asleep["modalities"]
        return {"vision": bool(projector and projector.vision), "audio": bool(projector and projector.audio)}

    @staticmethod
    def _make_host_cache(config: ServerConfig) -> HostPromptCache | None:
        if not config.cache_prompt or config.cache_ram_mib == 0:
            return None
        capacity = (1 << 62) if config.cache_ram_mib < 0 else config.cache_ram_mib * 1024 * 1024
        return HostPromptCache(capacity, config.cache_max_entries, config.cache_ttl_seconds)

    def _load_chat_support(self, runtime: LlamaRuntime, tokenizer: Tokenizer) -> None:
        from mlxcel.chat.template import CHATML_TEMPLATE, ChatTemplate, load_chat_template
        from mlxcel.chat.template_caps import probe_caps
        from mlxcel.chat.tool_parsers import TOOL_PARSERS, detect_parser

        def token_text(token: int) -> str:
            return tokenizer.special_piece(token).decode("utf-8", "replace") if token >= 0 else ""

        bos, eos = token_text(tokenizer.bos), token_text(tokenizer.eos)
        setting = self.config.chat_template
        if not self.config.jinja:  # --no-jinja: llama.cpp's built-in formats, content-only output
            from mlxcel.chat.builtin_template import BuiltinTemplate

            if setting and Path(setting).is_file():
                setting = Path(setting).read_text(encoding="utf-8", errors="replace")
            self.template = BuiltinTemplate(setting or runtime.chat_template() or "chatml")
            self.chat_template = self.template.source
            self.tool_parser_cls = None
            return
        if setting and Path(setting).is_file():
            self.template = load_chat_template(runtime.chat_template(), setting, bos, eos)
        elif setting:
            source = CHATML_TEMPLATE if setting.strip().lower() == "chatml" else setting
            self.template = ChatTemplate(source, bos_token=bos, eos_token=eos)
        else:
            self.template = load_chat_template(runtime.chat_template(), None, bos, eos)
        self.chat_template = self.template.source
        self.template_caps = probe_caps(self.template)  # here, off the event loop: probes render the template
        if self.config.tool_call_parser:
            self.tool_parser_cls = TOOL_PARSERS[self.config.tool_call_parser]
        else:
            self.tool_parser_cls = detect_parser(self.chat_template)

    @property
    def ready(self) -> bool:
        return self.state is HostState.READY

    @property
    def absent(self) -> bool:
        """Started with --embedding: no chat model is loaded."""
        return self.state is HostState.ABSENT

    @property
    def failed(self) -> bool:
        return self.state is HostState.FAILED

    def adapters(self) -> list:
        """The LoRA adapters it serves, once ready (none with --embedding / --reranking,
        where no model generates)."""
        if self.absent:
            return []
        self.require_ready()
        return self.runtime.loras

    def require_ready(self) -> tuple[Engine, Tokenizer]:
        if self.state is HostState.FAILED:
            raise EngineUnavailable(self.error or "the model failed")
        if self.state is HostState.ABSENT:
            raise GenerationFailed(NO_GENERATION)
        if self.state is HostState.SLEEPING:
            raise ServerBusy("the model is asleep (--sleep-idle-seconds): retry to wake it")
        if self.state is not HostState.READY:
            raise ServerBusy("Loading model")
        return self.engine, self.tokenizer

    @property
    def slot_context(self) -> int:
        return self.runtime.n_ctx_seq if self.runtime else self.asleep.get("slot_context", 0)

    @property
    def health_tool_call_parser(self) -> str | None:
        """The spec's /health field: "mlxcel" when the template supports tool calls."""
        return "mlxcel" if self.tool_parser_cls is not None else None

    def shutdown(self) -> None:
        self.media_loader.close()
        if self.engine is not None:
            self.engine.stop()

    @property
    def sleeping(self) -> bool:
        """Asleep, or waking: /health and /props answer as before it slept until it is ready
        (llama-server's sleeping flag also holds until its reload is done)."""
        return self.state is HostState.SLEEPING or self._waking

    @property
    def outstanding(self) -> int:
        """Requests the engine holds (queued or in a slot)."""
        return self.engine.outstanding if self.engine is not None else 0

    def mark_sleeping(self) -> None:
        """On the event loop, before sleep() runs on a thread: routes answer as asleep from now."""
        self.state = HostState.SLEEPING

    def sleep(self) -> None:
        """--sleep-idle-seconds: free the weights, the KV cache, the compute buffers and
        the host prompt cache, as an unload does, keeping the engine's counters and the
        template; wake() loads the model again. Called with no request in the engine."""
        self.state = HostState.SLEEPING
        self.asleep = {**self.asleep, "modalities": self.modalities, "slot_context": self.slot_context}
        if self.engine is not None:
            self._carried_stats = self.engine.stats
        if self.runtime is not None:
            self._carried_lora = [adapter.scale for adapter in self.runtime.loras]
        self._free()
        self.tokenizer = None  # its vocabulary was the model's
        self.default_grammar = None
        log.info("model %s is asleep: its memory is freed until a request needs it", self.model_id)

    def wake(self) -> bool:
        """Load the model again after sleep() (on the calling thread): True once ready.
        A model that cannot be loaded again fails the host, and the server exits, as
        llama-server aborts then."""
        self._waking = True
        self.state = HostState.LOADING
        log.info("model %s is waking", self.model_id)
        try:
            self._load(self._on_failure)
        finally:
            self._waking = False
        self.asleep = {}
        return self.state is HostState.READY

    def close(self) -> None:
        """Stop the engine and free the llama context and weights (an unload): the
        host is then ABSENT and holds no memory."""
        self._free()
        self.state = HostState.ABSENT

    def _free(self) -> None:
        engine, runtime = self.engine, self.runtime
        if engine is not None:
            engine.stop()
            drafter = engine.config.drafter
            if drafter is not None:
                drafter.runtime.close()
        self.engine = self.runtime = None
        if self.projector is not None:
            self.projector.close()
            self.projector = None
        if runtime is not None and (engine is None or not engine.alive):
            runtime.close()
        if self.host_cache is not None:
            self.host_cache.reset()
