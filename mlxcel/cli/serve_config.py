"""The ServerConfig a parsed serve command line describes: every value checked against
the others (flags that exclude each other, settings read from the environment), and
the sub-settings built by their own modules."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from mlxcel.cli.arg_types import ranged as _ranged
from mlxcel.cli.cluster_args import ClusterUsageError, cluster_settings, replica_threads
from mlxcel.cli.flag_policy import REFUSED_ENV, UNSERVABLE, UNSERVABLE_ENV, refusal
from mlxcel.cli.grammar_args import GrammarUsageError, default_grammar
from mlxcel.cli.log_args import log_settings
from mlxcel.cli.media_args import MediaUsageError, media_settings
from mlxcel.cli.reasoning_args import reasoning_template_kwargs
from mlxcel.cli.rope_args import RopeUsageError, rope_settings
from mlxcel.cli.sampling_args import reverse_prompts, sampling_defaults
from mlxcel.cli.serve_files import (
    chat_template_setting,
    check_audio_model,
    check_model,
    control_vectors,
    lora_adapters,
    mcp_servers,
    prompts_dir,
    read_api_keys,
    slot_save_path,
    static_path,
    ui_settings,
)
from mlxcel.cli.serve_options import AUTO_PARALLEL, NGRAM_KINDS, REASONING_ECHO_ENV, env_value
from mlxcel.cli.tls_args import TlsError, tls_files
from mlxcel.cli.usage import UsageError
from mlxcel.config import RequestLimits, ResponsesLimits, ServerConfig
from mlxcel.engine.kv_overrides import KvOverride, parse_kv_override
from mlxcel.http.vertex_predict import vertex_settings


def _spec_choice(args: argparse.Namespace, ignored: list[str]) -> str:
    """The speculation the server runs: a draft model when one is given; llama-server's
    n-gram drafters as prompt lookup, named in the warning line of flags run otherwise."""
    kind = args.spec_type
    if args.spec_draft_min > args.spec_draft_max and kind != "none":
        raise UsageError(f"--spec-draft-n-min {args.spec_draft_min} is above --spec-draft-n-max "
                         f"{args.spec_draft_max}: no draft could ever be made")
    if args.model_draft:
        return "draft"
    if kind == "draft-simple":
        raise UsageError("--spec-type draft-simple: give its draft model with -md/--model-draft")
    if kind in NGRAM_KINDS:
        caches = ", and from the lookup caches given" if kind == "ngram-cache" else ""
        ignored.append(f"--spec-type {kind} (mlxcel's prompt lookup, ngram-simple, drafts instead{caches}: the output "
                       "is the same)")
        return "ngram-simple"
    return kind


def _check_lookup_caches(args: argparse.Namespace, ignored: list[str]) -> None:
    """-lcs must name a file; -lcd a file or one that can be made (its folder exists);
    what they hold is read with the model (it must be a lookup cache of its vocabulary).
    Without prompt lookup they do nothing (as llama-server's without ngram-cache): named
    in the warning line of flags not applied."""
    if args.lookup_cache_static and not Path(args.lookup_cache_static).is_file():
        raise UsageError(f"--lookup-cache-static {args.lookup_cache_static}: no such file")
    if args.lookup_cache_dynamic:
        path = Path(args.lookup_cache_dynamic)
        if path.exists() and not path.is_file():
            raise UsageError(f"--lookup-cache-dynamic {path}: not a file")
        if not path.exists() and not path.absolute().parent.is_dir():
            raise UsageError(f"--lookup-cache-dynamic {path}: its folder does not exist")
    if args.model_draft or args.spec_type == "none":
        why = "a draft model drafts" if args.model_draft else "--spec-type none"
        for flag, dest in (("--lookup-cache-static", "lookup_cache_static"),
                           ("--lookup-cache-dynamic", "lookup_cache_dynamic")):
            if getattr(args, dest):
                ignored.append(f"{flag} (drafts beside prompt lookup only; {why})")
                setattr(args, dest, None)


def _metrics_port(args: argparse.Namespace) -> int | None:
    port = args.metrics_port
    if port is not None and port == args.port:
        raise UsageError(f"--metrics-port {port}: it must differ from --port, which serves the API")
    if port is not None and cluster_settings(args) is not None:
        raise UsageError("--metrics-port: a server with replicas serves its metrics on --port (/metrics)")
    return port


def _kv_overrides(values: list[str] | None) -> tuple[KvOverride, ...]:
    """--override-kv, each comma-separated (or LLAMA_ARG_OVERRIDE_KV when none is given)."""
    if values is None and "LLAMA_ARG_OVERRIDE_KV" in os.environ:
        values = [os.environ["LLAMA_ARG_OVERRIDE_KV"]]
    try:
        return tuple(parse_kv_override(part) for value in values or () for part in value.split(",") if part)
    except ValueError as exc:
        raise UsageError(f"--override-kv: {exc}") from None


def _vertex_settings():
    try:
        return vertex_settings()
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _log_settings(args: argparse.Namespace):
    try:
        return log_settings(args)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(str(exc)) from None


def _template_kwargs(text: str | None) -> dict:
    if not text:
        return {}
    from mlxcel.chat.template_kwargs import parse_kwargs_json

    try:
        return parse_kwargs_json(text)
    except ValueError as exc:
        raise UsageError(f"--chat-template-kwargs: {exc}") from None


def _server_tools(text: str | None) -> tuple[str, ...]:
    if text is None:
        return ()
    from mlxcel.toolbox import tool_names

    try:
        return tool_names(text)
    except ValueError as exc:
        raise UsageError(f"--tools: {exc}") from None


def _tool_call_parser(name: str | None) -> str | None:
    if name is None:
        return None
    from mlxcel.chat.tool_parsers import TOOL_PARSERS

    if name not in TOOL_PARSERS:
        raise UsageError(f"--tool-call-parser: unknown parser {name!r} (known: {', '.join(sorted(TOOL_PARSERS))})")
    return name


def _check_loop_env() -> None:
    from mlxcel.engine.loop_detection import LOOP_ENV_VAR, parse_loop_env

    if os.environ.get(LOOP_ENV_VAR, "").strip():
        try:
            parse_loop_env(os.environ[LOOP_ENV_VAR])
        except ValueError as exc:
            raise UsageError(str(exc)) from None


def _responses_limits(args: argparse.Namespace) -> ResponsesLimits:
    echo_bytes = ResponsesLimits.reasoning_echo_max_bytes
    if os.environ.get(REASONING_ECHO_ENV, "").strip():
        echo_bytes = env_value(REASONING_ECHO_ENV, _ranged(int, 0))
    return ResponsesLimits(
        store_max_entries=args.responses_store_max_entries,
        store_max_bytes=args.responses_store_max_bytes,
        store_ttl_secs=args.responses_store_ttl_secs,
        background_max_jobs=args.responses_background_max_jobs,
        background_ephemeral_ttl_secs=args.responses_background_ephemeral_ttl_secs,
        conversation_max_entries=args.conversation_store_max_entries,
        conversation_max_bytes=args.conversation_store_max_bytes,
        conversation_ttl_secs=args.conversation_store_ttl_secs,
        reasoning_echo_max_bytes=echo_bytes,
    )


def _request_limits(args: argparse.Namespace) -> RequestLimits:
    return RequestLimits(
        max_messages=args.max_messages,
        max_tools=args.max_tools,
        max_stop=args.max_stop,
        max_stop_chars=args.max_stop_chars,
        max_logit_bias=args.max_logit_bias,
        max_prompts=args.max_prompts,
        max_chars=args.max_chars,
    )


def _check_rerank(args: argparse.Namespace) -> None:
    if args.rerank_model:
        check_model(args.rerank_model)
    if args.reranking and args.embedding:
        raise UsageError("--reranking and --embedding both serve -m: use one of them")
    if args.reranking and args.rerank_model:
        raise UsageError("--reranking serves -m as the reranker; --rerank-model adds one beside a chat model: "
                         "use one of them")


def _keepalive_interval(args: argparse.Namespace) -> float:
    """--sse-ping-interval (or LLAMA_ARG_SSE_PING_INTERVAL); else MLXCEL_SSE_KEEPALIVE_S; else 30 s."""
    env = os.environ.get("MLXCEL_SSE_KEEPALIVE_S")
    if env is None or "LLAMA_ARG_SSE_PING_INTERVAL" in os.environ or args.sse_ping_interval != 30:
        return args.sse_ping_interval
    try:
        seconds = float(env)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds):
        raise UsageError(f"environment variable MLXCEL_SSE_KEEPALIVE_S: not a number: {env!r}")
    return seconds


def _load_mode_setting(args: argparse.Namespace) -> str:
    """--load-mode, with the older spellings folded in: --mlock locks what is loaded
    (the mapped file, or with --no-mmap the copy read into memory)."""
    mode = args.load_mode
    if not args.mlock:
        return mode
    if mode == "auto":
        mode = "mmap" if args.mmap else "none"
    if mode == "dio":
        raise UsageError("--mlock cannot be combined with --load-mode dio (use --load-mode mlock or mmap+mlock)")
    return {"mmap": "mmap+mlock", "none": "mlock"}.get(mode, mode)


def build_config(args: argparse.Namespace, ignored: list[str]) -> ServerConfig:
    for variable, flag in UNSERVABLE_ENV.items():
        if os.environ.get(variable):
            raise UsageError(f"{variable} ({flag}): {UNSERVABLE[flag]}")
    for variable, flag in REFUSED_ENV.items():
        if os.environ.get(variable):
            raise UsageError(f"environment variable {variable}: {refusal(flag)}")
    vertex = _vertex_settings()
    if args.config_file is None and args.models_dir is None and args.models_preset is None:
        check_model(args.model)
    elif args.lookup_cache_static or args.lookup_cache_dynamic:
        raise UsageError("lookup caches hold one model's tokens: --lookup-cache-static and --lookup-cache-dynamic "
                         "serve with -m, not with --config, --models-dir or --models-preset")
    elif args.lora or args.lora_scaled or args.control_vector or args.control_vector_scaled:
        raise UsageError("LoRA adapters and control vectors belong to one model: --lora and --control-vector serve "
                         "with -m, not with --config, --models-dir or --models-preset (a config file's model takes "
                         "`adapter`, a preset's `lora`)")
    if args.model_draft:
        check_model(args.model_draft)
    if args.mmproj and not Path(args.mmproj).expanduser().is_file():
        raise UsageError(f"--mmproj {args.mmproj}: no such file")
    _check_lookup_caches(args, ignored)
    if args.embedding_model:
        check_model(args.embedding_model, "--embedding-model")
    if args.embedding and args.embedding_model:
        raise UsageError("--embedding serves -m for embeddings; --embedding-model adds one beside a chat model: "
                         "use one of them")
    _check_loop_env()
    _check_rerank(args)
    for model, flag in ((args.stt_model, "--stt-model"), (args.tts_model, "--tts-model")):
        if model:
            check_audio_model(model, flag)
    if args.port == 0 and sum(1 for host in args.host if not host.endswith(".sock")) > 1:
        raise UsageError("--port 0 is not supported with multiple TCP addresses")
    args.ubatch_size = min(args.ubatch_size, args.batch_size)
    try:
        cluster = cluster_settings(args)
    except ClusterUsageError as exc:
        raise UsageError(str(exc)) from None
    threads = replica_threads(args, cluster) or max(1, os.cpu_count() or 1)
    try:
        media = media_settings(args)
    except MediaUsageError as exc:
        raise UsageError(str(exc)) from None
    try:
        rope = rope_settings(args)
    except RopeUsageError as exc:
        raise UsageError(str(exc)) from None
    try:
        tls = tls_files(args.ssl_key_file, args.ssl_cert_file)
    except TlsError as exc:
        raise UsageError(str(exc)) from None
    try:
        grammar = default_grammar(args)
    except GrammarUsageError as exc:
        raise UsageError(str(exc)) from None
    sampling = sampling_defaults(args)
    # llama-server's --agent: every tool and the MCP proxy, unless their own flags say otherwise
    tools = _server_tools("all" if args.agent and args.server_tools is None else args.server_tools)
    cors_proxy = args.ui_mcp_proxy if args.ui_mcp_proxy is not None else bool(args.agent)
    mcp = mcp_servers(args.mcp_servers_config, args.mcp_servers_json)
    return ServerConfig(
        model=args.model,
        cluster=cluster,
        config_file=args.config_file,
        models_dir=args.models_dir,
        models_preset=args.models_preset,
        models_max=args.models_max,
        models_autoload=args.models_autoload,
        explicit_flags=frozenset(getattr(args, "explicit_flags", ())),
        alias=args.alias[0] if args.alias else None,
        aliases=args.alias or [],
        tags=args.tags or [],
        hosts=args.host,
        api_prefix=args.api_prefix,
        cors_origins=args.cors_origins if args.cors_origins is not None else (
            "localhost" if tools or mcp or cors_proxy else "*"),
        cors_methods=args.cors_methods,
        cors_headers=args.cors_headers,
        cors_credentials=args.cors_credentials,
        port=vertex.port if vertex is not None else args.port,
        vertex=vertex,
        ctx_size=args.ctx_size,
        parallel=4 if args.parallel == AUTO_PARALLEL else args.parallel,
        threads=threads,
        threads_batch=args.threads_batch or threads,
        batch_size=args.batch_size,
        ubatch_size=args.ubatch_size,
        n_predict=args.n_predict,
        ignore_eos=args.ignore_eos,
        sse_ping_interval=_keepalive_interval(args),
        timeout_s=float(args.timeout),
        default_stop=reverse_prompts(args),
        context_shift=args.context_shift,
        n_keep=args.keep,
        spm_infill=args.spm_infill,
        api_keys=read_api_keys(args),
        tls=tls,
        default_grammar=grammar,
        slot_save_path=slot_save_path(args.slot_save_path),
        static_path=static_path(args.static_path),
        metrics=args.metrics or args.metrics_port is not None,
        props_endpoint=args.props,
        special=args.special,
        skip_chat_parsing=args.skip_chat_parsing,
        jinja=args.jinja,
        slots_endpoint=args.slots,
        webui=args.webui,
        ui_settings=ui_settings(args.ui_config, args.ui_config_file),
        server_tools=tools,
        mcp_servers=mcp,
        cors_proxy=cors_proxy,
        cache_prompt=args.cache_prompt,
        sampling=sampling,
        flash_attn=args.flash_attn,
        n_gpu_layers=args.n_gpu_layers,
        split_mode=args.split_mode,
        main_gpu=args.main_gpu,
        tensor_split=tuple(args.tensor_split),
        cache_type_k=args.cache_type_k,
        cache_type_v=args.cache_type_v,
        cache_type_k_draft=args.cache_type_k_draft,
        cache_type_v_draft=args.cache_type_v_draft,
        use_mmap=args.mmap,
        load_mode=_load_mode_setting(args),
        swa_full=args.swa_full,
        rope=rope,
        kv_overrides=_kv_overrides(args.override_kv),
        lora=lora_adapters(args),
        control_vectors=control_vectors(args),
        huge_pages=args.huge_pages,
        repack=args.repack,
        kv_unified=args.kv_unified or args.parallel == AUTO_PARALLEL,
        kv_unified_per_slot=args.kv_unified_per_slot,
        warmup=args.warmup,
        sleep_idle_seconds=args.sleep_idle_seconds,
        check_tensors=args.check_tensors,
        metrics_port=_metrics_port(args),
        reuse_port=args.reuse_port,
        offline=args.offline,
        log_prompts_dir=prompts_dir(args.log_prompts_dir),
        queue_cap=args.queue_cap,
        prefill_chunk=args.prefill_chunk,
        max_body_bytes=args.max_body_bytes,
        chat_template=chat_template_setting(args),
        chat_template_kwargs={**reasoning_template_kwargs(args), **_template_kwargs(args.chat_template_kwargs)},
        reasoning_format=args.reasoning_format,
        reasoning_budget=args.reasoning_budget,
        reasoning_budget_message=args.reasoning_budget_message,
        tool_call_parser=_tool_call_parser(args.tool_call_parser),
        cache_ram_mib=args.cache_ram,
        cache_reuse=args.cache_reuse,
        cache_max_entries=args.cache_max_entries,
        cache_ttl_seconds=args.cache_ttl,
        spec_type=_spec_choice(args, ignored),
        model_draft=args.model_draft,
        mmproj=str(Path(args.mmproj).expanduser().resolve()) if args.mmproj else None,
        image_min_tokens=args.image_min_tokens,
        image_max_tokens=args.image_max_tokens,
        spec_ngram_size=args.spec_ngram_size,
        spec_ngram_size_m=args.spec_ngram_size_m,
        spec_ngram_traffic=args.spec_ngram_traffic,
        lookup_cache_static=args.lookup_cache_static,
        lookup_cache_dynamic=args.lookup_cache_dynamic,
        spec_draft_max=args.spec_draft_max,
        spec_draft_min=args.spec_draft_min,
        rerank_model=args.rerank_model,
        rerank_only=args.reranking,
        responses=_responses_limits(args),
        limits=_request_limits(args),
        verbose=args.verbose,
        log=_log_settings(args),
        prefill_assistant=args.prefill_assistant,
        ignored_flags=ignored,
        embedding_model=args.embedding_model,
        embedding_only=args.embedding,
        pooling=args.pooling,
        embd_normalize=args.embd_normalize,
        stt_model=args.stt_model,
        stt_max_seconds=args.stt_max_seconds,
        tts_model=args.tts_model,
        audio_queue_depth=args.audio_queue_depth,
        audio_request_timeout_secs=args.audio_request_timeout_secs,
        state_url=args.state_url,
        media=media,
    )
