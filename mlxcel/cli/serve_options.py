"""`mlxcel serve`'s options: llama-server's names where they overlap, each with an
environment variable, and the value types that check them as they are parsed, so a bad
value fails in one line."""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable
from typing import Any

import llama_cpp

from mlxcel.cli.arg_types import ranged as _ranged
from mlxcel.cli.cluster_args import CLUSTER_OPTIONS
from mlxcel.cli.grammar_args import GRAMMAR_FLAGS, add_grammar_options
from mlxcel.cli.log_args import LOG_FLAGS, add_log_options
from mlxcel.cli.media_args import MEDIA_LISTS, MEDIA_OPTIONS, add_media_lists
from mlxcel.cli.reasoning_args import REASONING_OPTIONS, REASONING_SWITCHES
from mlxcel.cli.rope_args import ROPE_OPTIONS
from mlxcel.cli.sampling_args import (
    ESCAPE_FLAGS,
    SAMPLING_LISTS,
    SAMPLING_OPTIONS,
    SAMPLING_SWITCHES,
    add_sampling_lists,
)
from mlxcel.cli.usage import UsageError
from mlxcel.engine.llama_runtime import CACHE_TYPES, LOAD_MODES, SPLIT_MODES
from mlxcel.models.catalog import CATALOG, DEFAULT_MODEL
from mlxcel.state.url import StateUrlError, parse_state_url
from mlxcel.turn.sampling_fields import INT32_MAX

_TRUE = {"1", "true", "yes", "on", "enabled"}


_FALSE = {"0", "false", "no", "off", "disabled"}


def _load_mode(text: str) -> str:
    if text.lower() not in LOAD_MODES:
        raise argparse.ArgumentTypeError(f"invalid load mode {text!r} (expected one of {', '.join(LOAD_MODES)})")
    return text.lower()


def _state_url(text: str) -> str:
    try:
        parse_state_url(text)
    except StateUrlError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _cache_type(text: str) -> str:
    if text.lower() not in CACHE_TYPES:
        raise argparse.ArgumentTypeError(f"invalid KV cache type {text!r} (expected one of {', '.join(CACHE_TYPES)})")
    return text.lower()


def _split_mode(text: str) -> str:
    if text.lower() not in SPLIT_MODES:
        raise argparse.ArgumentTypeError(f"invalid split mode {text!r} (expected one of {', '.join(SPLIT_MODES)})")
    return text.lower()


def _tensor_split(text: str) -> tuple[float, ...]:
    """llama-server's -ts: proportions separated by commas or slashes, one per GPU."""
    parts = [p for p in re.split(r"[,/]+", text.strip()) if p.strip()]
    most = llama_cpp.llama_max_devices()
    if not parts or len(parts) > most:
        raise argparse.ArgumentTypeError(f"invalid tensor split {text!r}: 1 to {most} proportions, e.g. 3,1")
    try:
        shares = tuple(float(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid tensor split {text!r}: proportions are numbers") from None
    if not all(math.isfinite(v) and v >= 0 for v in shares) or not any(shares):
        raise argparse.ArgumentTypeError(f"invalid tensor split {text!r}: finite, non-negative, not all zero")
    return shares


def _flash_attn(text: str) -> str:
    value = text.strip().lower()
    if value in ("on", "off", "auto"):
        return value
    if value in _TRUE:
        return "on"
    if value in _FALSE:
        return "off"
    raise argparse.ArgumentTypeError(f"invalid value {text!r} (expected on, off or auto)")


# llama-server's other speculation types: its n-gram drafters run as mlxcel's prompt lookup
# (same output, speed only); those that need a drafting head mlxcel cannot run are refused
NGRAM_KINDS = ("ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")


HEAD_KINDS = ("draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark")


def _spec_type(text: str) -> str:
    """--spec-type: llama-server's comma-separated list of types, read as the one mlxcel
    runs ("none", "ngram-simple", or "draft-simple" for a draft model); an n-gram type
    stays named ("ngram-mod", ...) until build_config notes the stand-in."""
    aliases = {"ngram": "ngram-simple", "prompt-lookup": "ngram-simple", "lookup": "ngram-simple",
               "draft": "draft-simple"}
    names = [aliases.get(name, name) for name in (part.strip().lower() for part in text.split(",")) if name]
    known = ("none", "ngram-simple", "draft-simple", *NGRAM_KINDS)
    for name in names:
        if name in HEAD_KINDS:
            raise argparse.ArgumentTypeError(
                f"{name}: mlxcel cannot run its drafting head; use draft-simple with -md/--model-draft, or "
                "ngram-simple (prompt lookup)")
        if name not in known:
            raise argparse.ArgumentTypeError(f"invalid value {name!r} (expected one of {', '.join(known)})")
    for choice in ("draft-simple", "ngram-simple", *NGRAM_KINDS):  # the strongest drafter asked for
        if choice in names:
            return choice
    return "none"


def _csv(text: str) -> list[str]:
    """A comma-separated list, as llama-server reads --alias and --tags: stripped,
    empties dropped, duplicates merged, sorted (it keeps them in a std::set)."""
    return sorted({item.strip() for item in text.split(",") if item.strip()})


def _hosts(text: str) -> list[str]:
    hosts = [item.strip() for item in text.split(",") if item.strip()]
    if not hosts:
        raise argparse.ArgumentTypeError("--host requires at least one address")
    return hosts


def _pooling(text: str) -> str:
    value = text.strip().lower()
    if value not in ("none", "mean", "cls", "last", "rank", "unspecified"):
        raise argparse.ArgumentTypeError(f"{text!r} is not one of none, mean, cls, last, rank")
    return value


def _sleep_seconds(text: str) -> int:
    """--sleep-idle-seconds: -1 (never) or a positive count, as llama-server takes it."""
    value = _ranged(int)(text)
    if value == 0 or value < -1:
        raise argparse.ArgumentTypeError(f"invalid value {text}: cannot be 0 or less than -1")
    return value


def _gpu_layers(text: str) -> int:
    """-ngl: a layer count, -1 for all, or llama-server's words: `all`, and `auto` (as many as
    fit there; here all of them, llama.cpp's own reading of -1, without shrinking to fit)."""
    if text.strip().lower() in ("auto", "all"):
        return -1
    return _ranged(int, -1, INT32_MAX)(text)


AUTO_PARALLEL = -1


def _parallel(text: str) -> int:
    """-np: 1 to 256 slots, or llama-server's auto (-1, any negative): 4 slots sharing one
    KV pool, which build_config sets up."""
    value = _ranged(int, None, 256, what="1 to 256 slots, or -1: auto")(text)
    if value == 0:
        raise argparse.ArgumentTypeError("0 is not a number of slots (1 to 256, or -1: auto)")
    return AUTO_PARALLEL if value < 0 else value


def _threads(text: str) -> int | None:
    """-t/-tb: a thread count, or 0 or less for the default (every CPU), as llama-server reads them."""
    value = _ranged(int, None, 1024, what="at most 1024")(text)
    return value if value > 0 else None


def _api_prefix(text: str) -> str:
    prefix = text.strip().rstrip("/")
    if prefix and not prefix.startswith("/"):
        raise argparse.ArgumentTypeError(f"{text!r} must start with '/'")
    return prefix


# (flags, dest, type, default, environment variable, help)
_VALUE_OPTIONS: list[tuple[tuple[str, ...], str, Any, Any, str, str]] = [
    (("-m", "--model"), "model", str, DEFAULT_MODEL, "LLAMA_ARG_MODEL",
     f"catalog name ({', '.join(CATALOG)}) or path to a .gguf file; a catalog model is pulled on first use"),
    (("--config",), "config_file", str, None, "MLXCEL_CONFIG",
     "serve many models from a YAML file (ids, aliases, profiles, residency); see docs/config.md"),
    (("-a", "--alias"), "alias", _csv, None, "LLAMA_ARG_ALIAS",
     "model name aliases, comma-separated; the first in sorted order is the model id (default: the model's name)"),
    (("--tags",), "tags", _csv, None, "LLAMA_ARG_TAGS", "model tags, comma-separated, listed by /v1/models"),
    (("--rerank-model",), "rerank_model", str, None, "MLXCEL_RERANK_MODEL",
     "reranker served on /v1/rerank beside the chat model (catalog name or .gguf path): a cross-encoder "
     "(pooling rank) scores with its classification head, an embedding model by cosine similarity"),
    (("--host",), "host", _hosts, ["127.0.0.1"], "LLAMA_ARG_HOST",
     "addresses to listen on, comma-separated (IPv4, IPv6 such as ::1, or UNIX socket paths ending in .sock)"),
    (("--port",), "port", _ranged(int, 0, 65535), 8080, "LLAMA_ARG_PORT", "port to listen on"),
    (("-c", "--ctx-size"), "ctx_size", _ranged(int, 0, INT32_MAX), 0, "LLAMA_ARG_CTX_SIZE",
     "total context in tokens, split evenly across the slots (0: the model's trained context)"),
    (("-np", "--parallel"), "parallel", _parallel, 4, "LLAMA_ARG_N_PARALLEL",
     "number of slots decoding together (-1: auto, as llama-server's: 4 slots sharing one KV pool, -kvu)"),
    (("-t", "--threads"), "threads", _threads, None, "LLAMA_ARG_THREADS",
     "threads for generation (default, or 0 or less: the number of CPUs)"),
    (("-tb", "--threads-batch"), "threads_batch", _threads, None, "LLAMA_ARG_THREADS_BATCH",
     "threads for prompt processing (default, or 0 or less: --threads)"),
    (("--metrics-port",), "metrics_port", _ranged(int, 1, 65535), None, "MLXCEL_METRICS_PORT",
     "also serve GET /metrics on this port (on the --host addresses; it turns --metrics on); nothing else is "
     "served there"),
    (("--log-prompts-dir",), "log_prompts_dir", str, None, "MLXCEL_LOG_PROMPTS_DIR",
     "write each completion's prompt (a chat turn's as its template rendered it) to a file in this directory, "
     "made if missing (for debugging, as llama-server's)"),
    (("--sleep-idle-seconds",), "sleep_idle_seconds", _sleep_seconds, -1, "MLXCEL_SLEEP_IDLE_SECONDS",
     "seconds without a request after which the model sleeps: its weights, KV cache and buffers are freed "
     "until the next request reloads them (-1: never)"),
    (("-b", "--batch-size"), "batch_size", _ranged(int, 1, INT32_MAX), 2048, "LLAMA_ARG_BATCH",
     "logical batch size: most tokens per decode step"),
    (("-ub", "--ubatch-size"), "ubatch_size", _ranged(int, 1, INT32_MAX), 512, "LLAMA_ARG_UBATCH",
     "physical batch size"),
    (("-n", "--n-predict", "--predict"), "n_predict", _ranged(int, -1, INT32_MAX), -1, "LLAMA_ARG_N_PREDICT",
     "default most tokens to generate (-1: until end of generation or of the slot's context)"),
    (("--api-prefix",), "api_prefix", _api_prefix, "", "LLAMA_ARG_API_PREFIX",
     "path prefix every route is served under, without the trailing slash"),
    (("--cors-origins",), "cors_origins", str, None, "LLAMA_ARG_CORS_ORIGINS",
     "allowed CORS origins, comma-separated; '*' allows any, 'localhost' only localhost pages (default: '*', "
     "'localhost' with --tools)"),
    (("--tools",), "server_tools", str, None, "LLAMA_ARG_TOOLS",
     "built-in tools the web UI's agent may run on this machine through POST /tools, comma-separated, or 'all': "
     "read_file, file_glob_search, grep_search, exec_shell_command, write_file, edit_file, get_info (default: "
     "none). They read and write files and run commands as the server's user: do not enable in untrusted "
     "environments"),
    (("--cors-methods",), "cors_methods", str, "GET, POST, DELETE, OPTIONS", "LLAMA_ARG_CORS_METHODS",
     "CORS methods allowed, comma-separated"),
    (("--cors-headers",), "cors_headers", str, "*", "LLAMA_ARG_CORS_HEADERS", "CORS headers allowed, comma-separated"),
    (("--keep",), "keep", _ranged(int, -1, INT32_MAX), 0, "MLXCEL_KEEP",
     "prompt tokens a context shift keeps at the start, BOS excluded (-1: all); a request's n_keep overrides it"),
    (("--api-key",), "api_key", str, None, "LLAMA_API_KEY", "API key(s) clients must send, comma-separated"),
    (("--api-key-file",), "api_key_file", str, None, "LLAMA_ARG_API_KEY_FILE", "file with one API key per line"),
    (("--webui-config", "--ui-config"), "ui_config", str, None, "LLAMA_ARG_UI_CONFIG",
     "a JSON object of the web UI's default settings (systemMessage, temperature, top_k, top_p, min_p, "
     "max_tokens, seed, agenticMaxTurns); a user's own settings win over them; /props lists it as ui_settings"),
    (("--webui-config-file", "--ui-config-file"), "ui_config_file", str, None, "LLAMA_ARG_UI_CONFIG_FILE",
     "the same JSON object, read from a file"),
    (("--mcp-servers-config",), "mcp_servers_config", str, None, "LLAMA_ARG_MCP_SERVERS_CONFIG",
     "a JSON file of MCP servers (Cursor's format: {\"mcpServers\": {NAME: {\"command\", \"args\", \"env\", "
     "\"cwd\", \"timeout_ms\"}}}) whose tools POST /tools serves as NAME_TOOL; they run as the server's user: do "
     "not enable in untrusted environments"),
    (("--mcp-servers-json",), "mcp_servers_json", str, None, "LLAMA_ARG_MCP_SERVERS_JSON",
     "the same MCP server definitions as inline JSON"),
    (("--path",), "static_path", str, None, "LLAMA_ARG_STATIC_PATH",
     "serve the files of this folder as they are (GET /: its index.html), beside the API"),
    (("--models-dir",), "models_dir", str, None, "LLAMA_ARG_MODELS_DIR",
     "serve every GGUF in this folder by name (llama-server's router mode; sub-folders: one model each)"),
    (("--models-preset",), "models_preset", str, None, "LLAMA_ARG_MODELS_PRESET",
     "INI file of model presets (llama-server's router mode): a section per model, keys as llama-server flags"),
    (("--models-max",), "models_max", _ranged(int, 0), 4, "LLAMA_ARG_MODELS_MAX",
     "with --models-dir or --config: most models loaded at once, least recently used unloaded first (0: no limit)"),
    (("--slot-save-path",), "slot_save_path", str, None, "LLAMA_ARG_SLOT_SAVE_PATH",
     "directory for slot files: POST /slots/{id}?action=save|restore|erase (created if missing)"),
    (("--ssl-key-file",), "ssl_key_file", str, None, "LLAMA_ARG_SSL_KEY_FILE",
     "PEM private key: serve HTTPS (with --ssl-cert-file)"),
    (("--ssl-cert-file",), "ssl_cert_file", str, None, "LLAMA_ARG_SSL_CERT_FILE",
     "PEM certificate (chain) for the key of --ssl-key-file"),
    (("-fa", "--flash-attn"), "flash_attn", _flash_attn, "auto", "LLAMA_ARG_FLASH_ATTN",
     "flash attention: on, off or auto (on a CPU, whichever kernel is faster here, timed once per model)"),
    (("-lm", "--load-mode"), "load_mode", _load_mode, "auto", "LLAMA_ARG_LOAD_MODE",
     f"how llama.cpp loads the model ({', '.join(LOAD_MODES)})"),
    (("-ctk", "--cache-type-k"), "cache_type_k", _cache_type, "f16", "LLAMA_ARG_CACHE_TYPE_K",
     f"KV cache type for K ({', '.join(CACHE_TYPES)})"),
    (("-ctv", "--cache-type-v"), "cache_type_v", _cache_type, "f16", "LLAMA_ARG_CACHE_TYPE_V",
     "KV cache type for V (a quantized V needs flash attention)"),
    (("-ctkd", "--cache-type-k-draft", "--spec-draft-type-k"), "cache_type_k_draft", _cache_type, "f16",
     "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K", "KV cache type for K of the draft model"),
    (("-ctvd", "--cache-type-v-draft", "--spec-draft-type-v"), "cache_type_v_draft", _cache_type, "f16",
     "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V", "KV cache type for V of the draft model"),
    (("-ngl", "--n-gpu-layers", "--gpu-layers"), "n_gpu_layers", _gpu_layers, 0, "LLAMA_ARG_N_GPU_LAYERS",
     "layers to offload to a GPU, where llama.cpp was built with one (-1, all or auto: every layer)"),
    (("-sm", "--split-mode"), "split_mode", _split_mode, "layer", "LLAMA_ARG_SPLIT_MODE",
     "how the model spans several GPUs: none, layer, row or tensor (a GPU build of llama.cpp)"),
    (("-mg", "--main-gpu"), "main_gpu", _ranged(int, 0, INT32_MAX), 0, "LLAMA_ARG_MAIN_GPU",
     "the GPU for the model (split none) or for intermediate results and KV (split row)"),
    (("-ts", "--tensor-split"), "tensor_split", _tensor_split, (), "LLAMA_ARG_TENSOR_SPLIT",
     "the share of the model each GPU takes, e.g. 3,1"),
    (("--chat-template",), "chat_template", str, None, "LLAMA_ARG_CHAT_TEMPLATE",
     "chat template overriding the model's: a file path, a Jinja template string, or 'chatml'"),
    (("--chat-template-file",), "chat_template_file", str, None, "LLAMA_ARG_CHAT_TEMPLATE_FILE",
     "file holding a chat template overriding the model's"),
    (("--chat-template-kwargs",), "chat_template_kwargs", str, None, "LLAMA_ARG_CHAT_TEMPLATE_KWARGS",
     "JSON object of extra chat-template variables, e.g. '{\"enable_thinking\": false}'"),
    (("--tool-call-parser",), "tool_call_parser", str, None, "MLXCEL_TOOL_CALL_PARSER",
     "tool-call format (default: detected from the chat template)"),
    (("--kv-unified-per-slot",), "kv_unified_per_slot", _ranged(int, 0, INT32_MAX), 0, "LLAMA_ARG_KV_UNIFIED_PER_SLOT",
     "most tokens one slot may hold (0: no cap); with -c unset the KV pool is -np times this"),
    (("-cram", "--cache-ram"), "cache_ram", _ranged(int, -1, INT32_MAX), 8192, "LLAMA_ARG_CACHE_RAM",
     "host-RAM prompt cache size in MiB (-1: no limit, 0: off)"),
    (("--cache-reuse",), "cache_reuse", _ranged(int, 0, INT32_MAX), 0, "LLAMA_ARG_CACHE_REUSE",
     "shortest run of cached tokens past the shared prefix moved to where the prompt has it (KV shifting, as "
     "llama-server's; 0: off). Keys are re-rotated, so output may differ slightly from a fresh prefill"),
    (("--cache-max-entries",), "cache_max_entries", _ranged(int, 1), 1024, "MLXCEL_CACHE_MAX_ENTRIES",
     "most entries in the host-RAM prompt cache"),
    (("--cache-ttl",), "cache_ttl", _ranged(float, 0.0), 3600.0, "MLXCEL_CACHE_TTL_SECS",
     "seconds an unused prompt-cache entry lives (0: no expiry)"),
    (("--spec-type",), "spec_type", _spec_type, "ngram-simple", "LLAMA_ARG_SPEC_TYPE",
     ("speculative decoding: ngram-simple (the default; prompt lookup: drafts copied from the prompt and output,"
      " only where they pay; verified, so each token is the model's pick, and text that is not copied runs at"
      " plain speed), none, or "
      "draft-simple (a draft model, -md); llama-server's other n-gram types run as ngram-simple")),
    (("-md", "--model-draft", "--spec-draft-model"), "model_draft", str, None, "LLAMA_ARG_SPEC_DRAFT_MODEL",
     "draft model for speculative decoding (catalog name or .gguf path; same vocabulary as --model)"),
    (("-mm", "--mmproj"), "mmproj", str, None, "LLAMA_ARG_MMPROJ",
     "multimodal projector GGUF for the model: images and/or audio in messages (llama.cpp's mtmd)"),
    (("--image-min-tokens",), "image_min_tokens", _ranged(int, -1, 1 << 16), -1, "LLAMA_ARG_IMAGE_MIN_TOKENS",
     "dynamic-resolution projectors: fewest tokens per image (-1: the projector's own)"),
    (("--image-max-tokens",), "image_max_tokens", _ranged(int, -1, 1 << 16), -1, "LLAMA_ARG_IMAGE_MAX_TOKENS",
     "dynamic-resolution projectors: most tokens per image (-1: the projector's own)"),
    (("--spec-ngram-simple-size-n",), "spec_ngram_size", _ranged(int, 1, 64), 3, "LLAMA_ARG_SPEC_NGRAM_SIMPLE_SIZE_N",
     "prompt lookup: length of the n-gram searched for"),
    (("--spec-ngram-simple-size-m",), "spec_ngram_size_m", _ranged(int, 1, 1024), 48,
     "MLXCEL_SPEC_NGRAM_SIMPLE_SIZE_M", "prompt lookup: most tokens drafted per verify round"),
    (("--spec-ngram-traffic",), "spec_ngram_traffic", _ranged(int, 0, 1 << 24), 65536, "MLXCEL_SPEC_NGRAM_TRAFFIC",
     ("prompt lookup: how many tokens of earlier requests' outputs it also drafts from (the latest; ~150 bytes "
      "each at most), where the model repeats what it wrote before, as agents' tool calls do; drafts are verified, "
      "so each token is the model's pick (0: only the request's own text)")),
    (("-lcs", "--lookup-cache-static"), "lookup_cache_static", str, None, "MLXCEL_LOOKUP_CACHE_STATIC",
     ("prompt lookup: also draft from this llama.cpp lookup cache (n-gram counts from a corpus, as "
      "llama-lookup-create writes them); read only")),
    (("-lcd", "--lookup-cache-dynamic"), "lookup_cache_dynamic", str, None, "MLXCEL_LOOKUP_CACHE_DYNAMIC",
     ("prompt lookup: also draft from this llama.cpp lookup cache, which counts what the server generates "
      "and is written back when idle and at exit (made if missing)")),
    (("--spec-draft-n-max",), "spec_draft_max", _ranged(int, 1, 256), 16, "LLAMA_ARG_SPEC_DRAFT_N_MAX",
     "draft model: most tokens drafted per verify round"),
    (("--spec-draft-n-min",), "spec_draft_min", _ranged(int, 1, 256), 2, "LLAMA_ARG_SPEC_DRAFT_N_MIN",
     "fewer drafted tokens than this are not verified"),
    (("-to", "--timeout"), "timeout", _ranged(int, 1, INT32_MAX), 3600, "LLAMA_ARG_TIMEOUT",
     ("seconds a client may go without progress while sending a request or reading its response; then the "
      "connection is closed (408 where an answer can still be sent) and its request cancelled; a request's "
      "head must arrive whole within this, at most 60 s")),
    (("--sse-ping-interval",), "sse_ping_interval", _ranged(int, -1, INT32_MAX), 30, "LLAMA_ARG_SSE_PING_INTERVAL",
     "seconds a stream may stay silent before an SSE comment ping goes out (-1: never)"),
    (("--queue-cap",), "queue_cap", _ranged(int, 0), 64, "MLXCEL_QUEUE_CAP",
     "requests that may wait for a slot; beyond it new requests get 503 server_busy"),
    (("--prefill-chunk",), "prefill_chunk", _ranged(int, 16), 256, "MLXCEL_PREFILL_CHUNK",
     "prompt tokens prefilled per step while other slots are decoding"),
    (("--max-body-bytes",), "max_body_bytes", _ranged(int, 1024), 32 * 1024 * 1024, "MLXCEL_MAX_BODY_BYTES",
     "largest request body accepted"),
    (("--max-messages",), "max_messages", _ranged(int, 1), 4096, "MLXCEL_MAX_MESSAGES",
     "most messages (or Responses input items) in one request"),
    (("--max-tools",), "max_tools", _ranged(int, 0), 512, "MLXCEL_MAX_TOOLS", "most tools declared in one request"),
    (("--max-stop",), "max_stop", _ranged(int, 0), 64, "MLXCEL_MAX_STOP", "most stop strings in one request"),
    (("--max-stop-chars",), "max_stop_chars", _ranged(int, 1), 1024, "MLXCEL_MAX_STOP_CHARS",
     "most characters in one stop string"),
    (("--max-logit-bias",), "max_logit_bias", _ranged(int, 0), 4096, "MLXCEL_MAX_LOGIT_BIAS",
     "most logit_bias entries in one request"),
    (("--max-prompts",), "max_prompts", _ranged(int, 1), 64, "MLXCEL_MAX_PROMPTS",
     "most prompts in one completion request (each gets its own result)"),
    (("--max-chars",), "max_chars", _ranged(int, 0), 0, "MLXCEL_MAX_CHARS",
     "most characters in all the strings of one request body (0: 32 per token of the total context, "
     "at least 1 Mi)"),
    (("--responses-store-max-entries",), "responses_store_max_entries", _ranged(int, 0), 1024,
     "LLAMA_ARG_RESPONSES_STORE_MAX_ENTRIES", "stored Responses API responses (0: storage off)"),
    (("--responses-store-max-bytes",), "responses_store_max_bytes", _ranged(int, 0), 256 * 1024 * 1024,
     "MLXCEL_RESPONSES_STORE_MAX_BYTES", "rough JSON bytes stored responses may hold (0: evicted at once)"),
    (("--responses-store-ttl-secs",), "responses_store_ttl_secs", _ranged(int, 0), 3600,
     "LLAMA_ARG_RESPONSES_STORE_TTL_SECS", "seconds a stored response is kept (0: no expiry)"),
    (("--responses-background-max-jobs",), "responses_background_max_jobs", _ranged(int, 0), 64,
     "MLXCEL_RESPONSES_BACKGROUND_MAX_JOBS", "background responses active at once (0: background mode off)"),
    (("--responses-background-ephemeral-ttl-secs",), "responses_background_ephemeral_ttl_secs", _ranged(int, 1),
     600, "MLXCEL_RESPONSES_BACKGROUND_EPHEMERAL_TTL_SECS",
     "seconds the final object of a background request with store: false can be polled"),
    (("--embedding-model",), "embedding_model", str, None, "MLXCEL_EMBEDDING_MODEL",
     "embedding model served on /v1/embeddings and /embedding beside the chat model (catalog name or .gguf path)"),
    (("--stt-model",), "stt_model", str, None, "MLXCEL_STT_MODEL",
     "speech-to-text model served on /v1/audio/transcriptions and /v1/audio/translations beside the chat model "
     "(catalog name such as whisper-tiny.en or whisper-base, or a CTranslate2 Whisper folder)"),
    (("--stt-max-seconds",), "stt_max_seconds", _ranged(float, 1.0), 7200.0, "MLXCEL_STT_MAX_SECONDS",
     "longest audio /v1/audio/transcriptions and /v1/audio/translations take; longer is a 400, counted as the file "
     "is read (a small file can claim hours)"),
    (("--tts-model",), "tts_model", str, None, "MLXCEL_TTS_MODEL",
     "text-to-speech model served on /v1/audio/speech beside the chat model (catalog name such as piper-joe, "
     "or a piper voice)"),
    (("--audio-queue-depth",), "audio_queue_depth", _ranged(int, 1), 8, "MLXCEL_AUDIO_QUEUE_DEPTH",
     "audio requests that may wait per audio model; beyond it 503"),
    (("--audio-request-timeout-secs",), "audio_request_timeout_secs", _ranged(float, 0.001), 300.0,
     "MLXCEL_AUDIO_REQUEST_TIMEOUT_SECS", "an audio request still running after this many seconds answers 504"),
    (("--pooling",), "pooling", _pooling, "unspecified", "LLAMA_ARG_POOLING",
     "pooling type for embeddings: none, mean, cls, last or rank (default: the model's)"),
    (("--embd-normalize",), "embd_normalize", _ranged(int, -1, INT32_MAX), 2, "LLAMA_ARG_EMBD_NORMALIZE",
     "default normalisation of native embeddings: -1 none, 0 max absolute int16, 1 taxicab, 2 euclidean, >2 p-norm"),
    (("--conversation-store-max-entries",), "conversation_store_max_entries", _ranged(int, 0), 256,
     "LLAMA_ARG_CONVERSATION_STORE_MAX_ENTRIES", "conversation transcripts kept (0: conversations off)"),
    (("--conversation-store-max-bytes",), "conversation_store_max_bytes", _ranged(int, 0), 64 * 1024 * 1024,
     "MLXCEL_CONVERSATION_STORE_MAX_BYTES", "rough JSON bytes transcripts may hold (0: evicted at once)"),
    (("--conversation-store-ttl-secs",), "conversation_store_ttl_secs", _ranged(int, 0), 3600,
     "LLAMA_ARG_CONVERSATION_STORE_TTL_SECS", "seconds a conversation transcript is kept (0: no expiry)"),
    (("--state-url",), "state_url", _state_url, None, "MLXCEL_STATE_URL",
     "where stored responses, conversations and background jobs live: sqlite:///ABSOLUTE/PATH, or "
     "redis://[:PASSWORD@]HOST:PORT/DB shared by replicas (default: $MLXCEL_HOME/state/mlxcel.sqlite3)"),
]


REASONING_ECHO_ENV = "MLXCEL_REASONING_ECHO_MAX_BYTES"


# (positive flags, negative flags, dest, default, environment variable, help)
_SWITCHES: list[tuple[tuple[str, ...], tuple[str, ...], str, bool | None, str, str]] = [
    (("--embedding", "--embeddings"), (), "embedding", False, "LLAMA_ARG_EMBEDDINGS",
     "serve -m for embeddings only (the generation routes then answer an error)"),
    (("--metrics",), (), "metrics", False, "LLAMA_ARG_ENDPOINT_METRICS", "serve Prometheus metrics on /metrics"),
    (("--models-autoload",), ("--no-models-autoload",), "models_autoload", True, "LLAMA_ARG_MODELS_AUTOLOAD",
     "with --models-dir or --config: a request loads its model (off: only POST /v1/keep loads one)"),
    (("--lora-init-without-apply",), (), "lora_init_without_apply", False, "MLXCEL_LORA_INIT_WITHOUT_APPLY",
     "load the LoRA adapters with scale 0 (POST /lora-adapters applies them)"),
    (("--props",), (), "props", False, "LLAMA_ARG_ENDPOINT_PROPS",
     "accept POST /props (llama-server's: it changes no property and answers success)"),
    (("-sp", "--special"), (), "special", False, "MLXCEL_SPECIAL",
     "special tokens' text in the output (an end-of-generation token's too), as llama-server's -sp"),
    (("--jinja",), ("--no-jinja",), "jinja", True, "LLAMA_ARG_JINJA",
     "render chat prompts with the chat template's Jinja (--no-jinja: llama.cpp's built-in formats, no tools)"),
    (("--skip-chat-parsing",), ("--no-skip-chat-parsing",), "skip_chat_parsing", False, "LLAMA_ARG_SKIP_CHAT_PARSING",
     "chat output is all content: no reasoning split, no tool-call parsing"),
    (("--slots",), ("--no-slots",), "slots", True, "LLAMA_ARG_ENDPOINT_SLOTS", "serve the /slots endpoint"),
    (("--webui", "--ui"), ("--no-webui", "--no-ui"), "webui", True, "LLAMA_ARG_UI",
     "serve the chat web UI at / to browsers (API clients there still get the health answer)"),
    (("--reranking", "--rerank"), (), "reranking", False, "LLAMA_ARG_RERANKING",
     "serve -m as a reranker (pooling rank) on /v1/rerank only, as llama-server's --reranking"),
    (("--cache-prompt",), ("--no-cache-prompt",), "cache_prompt", True, "LLAMA_ARG_CACHE_PROMPT",
     "reuse a slot's previous tokens as a prompt prefix"),
    (("--context-shift",), ("--no-context-shift",), "context_shift", False, "LLAMA_ARG_CONTEXT_SHIFT",
     "shift the context when a generation reaches its end: drop the older half of the tokens past --keep"),
    (("--spm-infill",), (), "spm_infill", False, "MLXCEL_SPM_INFILL",
     "/infill: suffix/prefix/middle order instead of prefix/suffix/middle, as some models prefer"),
    (("--mmap",), ("--no-mmap",), "mmap", True, "LLAMA_ARG_MMAP", "memory-map the model file"),
    (("--mlock",), (), "mlock", False, "LLAMA_ARG_MLOCK",
     "keep the model in RAM (no swapping or compressing): llama.cpp's load mode mmap+mlock, or mlock with --no-mmap"),
    (("--repack",), ("-nr", "--no-repack"), "repack", None, "LLAMA_ARG_REPACK",
     "repack the weights for faster CPU kernels (default: on, but off where llama.cpp would use its AMX "
     "kernels, which crash)"),
    (("--swa-full",), (), "swa_full", False, "LLAMA_ARG_SWA_FULL", "full-size KV cache for sliding-window layers"),
    (("--huge-pages",), ("--no-huge-pages",), "huge_pages", True, "MLXCEL_HUGE_PAGES",
     "put the context's KV cache and compute buffers on transparent huge pages (madvise)"),
    (("-kvu", "--kv-unified"), ("-no-kvu", "--no-kv-unified"), "kv_unified", False, "LLAMA_ARG_KV_UNIFIED",
     "one KV pool shared by every slot (a slot may use all of -c; idle slots give their room back)"),
    (("--warmup",), ("--no-warmup",), "warmup", True, "LLAMA_ARG_WARMUP", "decode once at start-up"),
    (("--check-tensors",), (), "check_tensors", False, "MLXCEL_CHECK_TENSORS",
     "check the model's tensor data for invalid values while it loads (a bad file fails the start)"),
    (("--reuse-port",), (), "reuse_port", False, "LLAMA_ARG_REUSE_PORT",
     "let other sockets bind the same port (SO_REUSEPORT): servers started alike share its connections"),
    (("--ui-mcp-proxy", "--webui-mcp-proxy"), ("--no-ui-mcp-proxy", "--no-webui-mcp-proxy"), "ui_mcp_proxy", None,
     "LLAMA_ARG_UI_MCP_PROXY",
     "serve /cors-proxy?url=URL: the server forwards a web page's request to another server (a remote MCP "
     "server's), headers named x-llama-server-proxy-header-NAME going as NAME; limits --cors-origins to "
     "localhost by default. Any page it allows can reach what this machine reaches: do not enable in untrusted "
     "environments"),
    (("-ag", "--agent"), ("-no-ag", "--no-agent"), "agent", None, "LLAMA_ARG_AGENT",
     "every built-in tool (--tools all) and the MCP proxy (--ui-mcp-proxy), as llama-server's --agent: do not "
     "enable in untrusted environments"),
    (("--offline",), (), "offline", False, "LLAMA_ARG_OFFLINE",
     "never download: a catalog model that is not pulled yet fails the start instead of being fetched"),
    (("--cors-credentials",), ("--no-cors-credentials",), "cors_credentials", True, "LLAMA_ARG_CORS_CREDENTIALS",
     "allow credentials in CORS requests (with --cors-origins '*', the request's Origin is echoed)"),
    (("-v", "--verbose", "--log-verbose"), (), "verbose", False, "MLXCEL_VERBOSE",
     "log debug detail; responses carry llama-server's __verbose object"),
    (("--prefill-assistant",), ("--no-prefill-assistant",), "prefill_assistant", True, "LLAMA_ARG_PREFILL_ASSISTANT",
     "continue a final assistant message instead of answering it"),
]


_ALL_VALUE_OPTIONS = (_VALUE_OPTIONS + SAMPLING_OPTIONS + CLUSTER_OPTIONS + MEDIA_OPTIONS + ROPE_OPTIONS
                      + REASONING_OPTIONS)


_ALL_SWITCHES = _SWITCHES + SAMPLING_SWITCHES + REASONING_SWITCHES


# llama-server's variable names that mlxcel once read under another name, still read when
# llama-server's is not set
FORMER_ENV_NAMES = {"LLAMA_ARG_UI": "LLAMA_ARG_WEBUI",
                    "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K": "LLAMA_ARG_CACHE_TYPE_K_DRAFT",
                    "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V": "LLAMA_ARG_CACHE_TYPE_V_DRAFT"}


def _set_variable(env: str) -> str | None:
    """The variable an option reads that is set: llama-server's name, else its former one."""
    for name in (env, FORMER_ENV_NAMES.get(env)):
        if name and name in os.environ:
            return name
    return None


# options llama-server adds up when given again (its other options keep the last value)
ACCUMULATED = ("api_key", "alias", "tags")


class _Accumulated(argparse.Action):
    """--api-key, -a and --tags given again add to what the command line gave before (the
    environment's value is replaced, not added to): keys joined by commas, names merged."""

    def __call__(self, parser, namespace, values, option_string=None):
        seen = f"_{self.dest}_given"
        previous = getattr(namespace, self.dest) if getattr(namespace, seen, False) else None
        if previous is not None:
            values = f"{previous},{values}" if isinstance(values, str) else sorted({*previous, *values})
        setattr(namespace, seen, True)
        setattr(namespace, self.dest, values)


def env_value(name: str, parse: Callable[[str], Any]) -> Any:
    text = os.environ[name]
    try:
        return parse(text)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"environment variable {name}: {exc}") from None


def _env_bool(name: str) -> bool:
    text = os.environ[name].strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise UsageError(f"environment variable {name}: invalid boolean {os.environ[name]!r}")


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    for flags, dest, kind, default, env, help_text in _ALL_VALUE_OPTIONS:
        if variable := _set_variable(env):
            default = env_value(variable, kind)
        action = _Accumulated if dest in ACCUMULATED else "store"
        parser.add_argument(*flags, dest=dest, type=kind, default=default, action=action,
                            help=f"{help_text} [env: {env}]")
    add_sampling_lists(parser)
    add_media_lists(parser)
    add_grammar_options(parser)
    add_log_options(parser)
    parser.add_argument("--lora", dest="lora", action="append", default=None,
                        help="LoRA adapter GGUF(s), comma-separated, applied with scale 1; repeatable")
    parser.add_argument("--lora-scaled", dest="lora_scaled", action="append", default=None,
                        help="LoRA adapter(s) with a scale each: FNAME:SCALE[,...]; repeatable")
    parser.add_argument("--control-vector", dest="control_vector", action="append", default=None,
                        help="control vector GGUF(s), comma-separated, added with scale 1; repeatable")
    parser.add_argument("--control-vector-scaled", dest="control_vector_scaled", action="append", default=None,
                        help="control vector(s) with a scale each: FNAME:SCALE[,...]; repeatable")
    parser.add_argument("--control-vector-layer-range", dest="control_vector_layer_range", nargs=2, type=int,
                        default=None, metavar=("START", "END"),
                        help="the layers the control vectors apply to, both inclusive (default: all)")
    parser.add_argument("--override-kv", dest="override_kv", action="append", default=None,
                        help="KEY=TYPE:VALUE[,...] (TYPE int, float, bool or str): model metadata llama.cpp reads "
                             "instead of the GGUF's; repeatable [env: LLAMA_ARG_OVERRIDE_KV]")
    for positive, negative, dest, default, env, help_text in _ALL_SWITCHES:
        if variable := _set_variable(env):
            default = _env_bool(variable)
        parser.add_argument(*positive, dest=dest, action="store_true", default=default, help=f"{help_text} [env: {env}]")
        if negative:
            parser.add_argument(*negative, dest=dest, action="store_false", help=f"do not {help_text}")


def implemented_flags() -> set[str]:
    flags = {flag for option in _ALL_VALUE_OPTIONS for flag in option[0]}
    flags |= {flag for switch in _ALL_SWITCHES for flag in switch[0] + switch[1]}
    flags |= {flag for option in SAMPLING_LISTS + MEDIA_LISTS for flag in option[0]} | {"--override-kv", "--lora", "--lora-scaled"}
    flags |= {"--control-vector", "--control-vector-scaled", "--control-vector-layer-range"}
    flags |= GRAMMAR_FLAGS | LOG_FLAGS | ESCAPE_FLAGS
    return flags | {"-h", "--help", "--usage", "--version", "--list-devices", "-cl", "--cache-list",
                    "--completion-bash"}
