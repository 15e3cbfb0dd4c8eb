"""Server settings, resolved once from the command line and environment."""

from __future__ import annotations

from dataclasses import dataclass, field

from mlxcel.engine.control_vectors import ControlVectors
from mlxcel.engine.kv_overrides import KvOverride
from mlxcel.engine.rope import RopeSettings
from mlxcel.engine.sampling import SamplingParams


@dataclass(frozen=True)
class McpServer:
    """One --mcp-servers-config / --mcp-servers-json entry: a stdio MCP server whose tools
    POST /tools serves as `<name>_<tool>`."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # merged over the server's own environment
    cwd: str | None = None
    timeout_ms: int = 30_000  # one tool call's


@dataclass(frozen=True)
class TlsFiles:
    """--ssl-key-file / --ssl-cert-file: the PEM pair every listener serves HTTPS with."""

    key_file: str
    cert_file: str


@dataclass
class ResponsesLimits:
    """The Responses API's in-memory stores and background jobs (0 disables, as
    each flag's help says); the reasoning echo store's byte cap."""

    store_max_entries: int = 1024
    store_max_bytes: int = 256 * 1024 * 1024
    store_ttl_secs: int = 3600
    background_max_jobs: int = 64
    background_ephemeral_ttl_secs: int = 600
    conversation_max_entries: int = 256
    conversation_max_bytes: int = 64 * 1024 * 1024
    conversation_ttl_secs: int = 3600
    reasoning_echo_max_bytes: int = 16 * 1024 * 1024


@dataclass
class RequestLimits:
    """Caps on what one request may carry, checked at the edge before any work (each
    is a `serve` flag; beyond a cap the request gets a 400 naming it)."""

    max_messages: int = 4096  # chat/Anthropic messages, Responses input items
    max_tools: int = 512
    max_stop: int = 64  # stop strings
    max_stop_chars: int = 1024  # characters in one stop string
    max_logit_bias: int = 4096  # logit_bias entries
    max_prompts: int = 64  # prompts in one completion request
    max_chars: int = 0  # characters in all strings of a body; 0: 32 per token of total context (floor 1 Mi)
    max_depth: int = 128  # nesting of JSON arrays and objects

    def chars_cap(self, n_ctx: int) -> int:
        return self.max_chars if self.max_chars > 0 else max(1 << 20, 32 * n_ctx)


@dataclass
class ClusterSettings:
    """--replicas N: N engine replicas on Ray Serve behind one endpoint (mlxcel.cluster)."""

    replicas: int = 1
    ray_address: str | None = None  # None: a Ray instance of our own on this machine
    router: str = "prefix"  # or "round-robin"
    min_replicas: int | None = None  # both set: replicas scale by queue depth between them
    max_replicas: int | None = None
    ray_cpus: int | None = None  # CPUs a local Ray instance offers (default: all of this machine's)


@dataclass(frozen=True)
class VertexSettings:
    """Google Cloud Vertex AI's custom-container contract (AIP_MODE=PREDICTION)."""

    health_route: str | None  # AIP_HEALTH_ROUTE: a second, open health path
    predict_route: str  # AIP_PREDICT_ROUTE: POST {"instances": [...]}
    port: int  # AIP_HTTP_PORT: the port served, whatever --port says


@dataclass(frozen=True)
class LogSettings:
    """Where and how the server logs: llama-server's --log-* flags."""

    file: str | None = None  # --log-file: every line also goes to this file (appended)
    disabled: bool = False  # --log-disable: nothing is logged
    jsonl: bool = False  # --log-jsonl: one JSON object a line, on stdout
    colors: str = "auto"  # --log-colors: on, off, or auto (on where stderr is a terminal)
    prefix: bool = True  # --log-prefix: each line starts with its level and logger (and time)
    timestamps: bool = True  # --log-timestamps: each prefix carries the time
    verbosity: int | None = None  # -lv: 1 errors, 2 warnings, 3 info, 4+ debug (None: info, debug with -v)


@dataclass(frozen=True)
class MediaSettings:
    """How media content parts are fetched and decoded (mlxcel.media): the spec's access
    policy and the size, time and count limits, each a `serve` flag or variable."""

    media_paths: tuple[str, ...] = ()  # --media-path roots (real paths); none: local files refused
    allow_private_urls: bool = False  # MLXCEL_ALLOW_PRIVATE_MEDIA_URLS=1: remote URLs may reach any address
    video_dirs: tuple[str, ...] = ()  # MLXCEL_VIDEO_DIR_ALLOWLIST, read once at start; none: no local video
    max_bytes: int = 20 * 1024 * 1024  # one image or audio item, encoded
    max_video_bytes: int = 100 * 1024 * 1024  # one video item, encoded
    fetch_timeout_s: float = 10.0  # one remote fetch, redirects included
    load_timeout_s: float = 60.0  # all the media of one request, fetched and decoded
    max_redirects: int = 5
    max_items: int = 16  # media parts in one request
    max_pixels: int = 1 << 25  # width * height of one image or frame (decompression bombs)
    max_audio_seconds: float = 600.0
    max_decoded_bytes: int = 1 << 30  # decoded media (pixels, samples) all requests may hold at once
    video_max_frames: int = 32  # frames sampled from one video
    video_fps: float = 4.0  # frames sampled per second when a part gives no fps (llama-server's default)
    temp_dir: str | None = None  # where downloaded video is written (None: the system's temp dir)


@dataclass
class ServerConfig:
    model: str
    cluster: ClusterSettings | None = None  # --replicas / --ray-address: served by replicas on Ray
    config_file: str | None = None  # --config: many models from a YAML file (mlxcel.fleet)
    context_budget: bool = False  # 003 (many models): prompt + max_tokens beyond the slot's context is a 400
    explicit_flags: frozenset[str] = frozenset()  # flags given on the command line (they win over the file)
    alias: str | None = None  # the model id; the first of `aliases` in sorted order
    aliases: list[str] = field(default_factory=list)  # --alias, all listed by /v1/models
    tags: list[str] = field(default_factory=list)  # --tags, informational
    rerank_model: str | None = None  # --rerank-model: a reranker beside the chat model
    rerank_only: bool = False  # --reranking: -m is served as a reranker only
    hosts: list[str] = field(default_factory=lambda: ["127.0.0.1"])  # addresses or UNIX socket paths (.sock)
    port: int = 8080
    api_prefix: str = ""  # every route is served under it
    cors_origins: str = "*"  # '*', 'localhost', or a comma-separated list
    cors_methods: str = "GET, POST, DELETE, OPTIONS"
    cors_headers: str = "*"
    cors_credentials: bool = True
    ctx_size: int = 0  # 0: the model's trained context
    parallel: int = 4
    threads: int = 2
    threads_batch: int = 2
    batch_size: int = 2048
    ubatch_size: int = 512
    n_predict: int = -1
    timeout_s: float = 3600.0  # --timeout: a client's most seconds without progress sending or reading
    sse_ping_interval: float = 30  # seconds of silence before an SSE comment ping (<= 0: none; MLXCEL_SSE_KEEPALIVE_S)
    ignore_eos: bool = False  # --ignore-eos: every request bans end-of-generation tokens
    default_stop: list[str] = field(default_factory=list)  # --reverse-prompt: stops when a request has none
    context_shift: bool = False  # at the slot context's end, drop old tokens and go on (else stop)
    n_keep: int = 0  # prompt tokens a context shift keeps (-1: all)
    spm_infill: bool = False  # /infill: suffix, prefix, middle order
    api_keys: list[str] = field(default_factory=list)
    tls: TlsFiles | None = None  # --ssl-key-file / --ssl-cert-file: HTTPS
    default_grammar: tuple[str, str] | None = None  # --grammar / --json-schema: (gbnf | json_schema, text)
    slot_save_path: str | None = None  # --slot-save-path: slot files' directory (POST /slots/{id})
    static_path: str | None = None  # --path: a folder's files served beside the API
    metrics: bool = False
    models_dir: str | None = None  # --models-dir: every GGUF in the folder, by name (router mode)
    models_preset: str | None = None  # --models-preset: an INI file of models and their flags (router mode)
    models_max: int = 4  # --models-max: most models resident at once (0: no limit)
    models_autoload: bool = True  # --no-models-autoload: requests do not load their model
    props_endpoint: bool = False  # --props: POST /props answers success
    special: bool = False  # -sp: special tokens' text in the output
    skip_chat_parsing: bool = False  # --skip-chat-parsing: chat output is all content
    jinja: bool = True  # --no-jinja: chat prompts by llama.cpp's built-in template formats
    slots_endpoint: bool = True
    webui: bool = True  # the chat web UI at / for browsers (server/webui)
    ui_settings: dict = field(default_factory=dict)  # --webui-config: the web UI's default settings
    server_tools: tuple[str, ...] = ()  # --tools: the built-in tools POST /tools runs (toolbox)
    mcp_servers: tuple[McpServer, ...] = ()  # --mcp-servers-config/-json: their tools beside those
    cors_proxy: bool = False  # --webui-mcp-proxy (or --agent): /cors-proxy forwards the web UI's MCP requests
    cache_prompt: bool = True
    sampling: SamplingParams = field(default_factory=SamplingParams)
    flash_attn: str = "auto"  # on | off | auto
    n_gpu_layers: int = 0
    split_mode: str = "layer"  # -sm: none | layer | row (a GPU build of llama.cpp)
    main_gpu: int = 0  # -mg
    tensor_split: tuple[float, ...] = ()  # -ts: each GPU's share of the model
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    cache_type_k_draft: str = "f16"
    cache_type_v_draft: str = "f16"
    use_mmap: bool = True
    load_mode: str = "auto"  # --load-mode: auto, none, mmap, mlock, mmap+mlock, dio
    swa_full: bool = False
    rope: RopeSettings = field(default_factory=RopeSettings)  # --rope-* / --yarn-*: the model's unless set
    kv_overrides: tuple[KvOverride, ...] = ()  # --override-kv: model metadata read instead of the GGUF's
    lora: tuple[tuple[str, float], ...] = ()  # --lora / --lora-scaled: (adapter GGUF, scale) each
    control_vectors: ControlVectors = field(default_factory=ControlVectors)  # --control-vector*
    huge_pages: bool = True  # the context's buffers on transparent huge pages (engine/huge_pages.py)
    repack: bool | None = None  # --repack / --no-repack; None: on unless the weights would go to AMX buffers
    kv_unified: bool = False  # one KV pool shared by every slot (-kvu); else n_ctx / parallel cells each
    kv_unified_per_slot: int = 0  # cap on a slot's context in a unified pool (0: the whole pool)
    warmup: bool = True
    sleep_idle_seconds: int = -1  # --sleep-idle-seconds: unload the model after this long unused (-1: never)
    check_tensors: bool = False  # --check-tensors: llama.cpp validates the tensor data while loading
    metrics_port: int | None = None  # --metrics-port: GET /metrics also on this port (and only it there)
    reuse_port: bool = False  # --reuse-port: SO_REUSEPORT on the listening sockets
    offline: bool = False  # --offline: never download a catalog model
    log_prompts_dir: str | None = None  # --log-prompts-dir: each completion's prompt written to a file there
    queue_cap: int = 64
    prefill_chunk: int = 256
    max_body_bytes: int = 32 * 1024 * 1024
    chat_template: str | None = None  # a file path, a template string, or "chatml"
    chat_template_kwargs: dict = field(default_factory=dict)
    reasoning_format: str = "deepseek"  # --reasoning-format: none leaves thoughts in the content
    reasoning_budget: int = -1  # --reasoning-budget: a request's default thinking budget (-1: none)
    reasoning_budget_message: str = ""  # --reasoning-budget-message: put before the forced end of thinking
    tool_call_parser: str | None = None  # None: detected from the chat template
    cache_ram_mib: int = 8192  # host prompt cache: -1 no limit, 0 off
    cache_reuse: int = 0  # --cache-reuse: shortest cached run moved into place past the prefix (0: off)
    cache_max_entries: int = 1024
    cache_ttl_seconds: float = 3600.0
    spec_type: str = "ngram-simple"  # ngram-simple (prompt lookup) | none | draft (--model-draft)
    model_draft: str | None = None
    mmproj: str | None = None  # --mmproj: a multimodal projector GGUF beside the model (images, audio)
    image_min_tokens: int = -1  # --image-min-tokens / --image-max-tokens: a dynamic-resolution
    image_max_tokens: int = -1  # projector's token budget per image (-1: the projector's own)
    spec_ngram_size: int = 3
    spec_ngram_size_m: int = 48  # prompt lookup: most tokens drafted per round
    spec_ngram_traffic: int = 65536  # prompt lookup: tokens of earlier outputs also drafted from (0: none)
    lookup_cache_static: str | None = None  # -lcs: llama.cpp lookup cache drafted from (read only)
    lookup_cache_dynamic: str | None = None  # -lcd: llama.cpp lookup cache drafted from and counted into
    spec_draft_max: int = 16
    spec_draft_min: int = 2
    responses: ResponsesLimits = field(default_factory=ResponsesLimits)
    limits: RequestLimits = field(default_factory=RequestLimits)
    verbose: bool = False  # also the default of a request's `verbose` (llama-server's __verbose object)
    log: LogSettings = field(default_factory=LogSettings)
    vertex: VertexSettings | None = None  # AIP_MODE=PREDICTION: Vertex AI's predict and health routes
    prefill_assistant: bool = True  # a final assistant message is continued (llama-server's default)
    ignored_flags: list[str] = field(default_factory=list)
    embedding_model: str | None = None  # --embedding-model: an embedding worker beside the chat model
    embedding_only: bool = False  # --embedding: -m is served for embeddings only
    pooling: str = "unspecified"  # --pooling: none | mean | cls | last | rank (unspecified: the GGUF's)
    embd_normalize: int = 2  # the native routes' default normalisation (llama-server's --embd-normalize)
    stt_model: str | None = None  # --stt-model: speech to text (faster-whisper) beside the chat model
    stt_max_seconds: float = 7200.0  # --stt-max-seconds: longer uploads are refused while decoding
    tts_model: str | None = None  # --tts-model: text to speech (piper) beside the chat model
    audio_queue_depth: int = 8  # audio requests waiting per worker; beyond it 503
    audio_request_timeout_secs: float = 300.0  # an audio request running longer answers 504
    state_url: str | None = None  # --state-url: the state store (None: SQLite under $MLXCEL_HOME)
    media: MediaSettings = field(default_factory=MediaSettings)  # media content parts (mlxcel.media)

    @property
    def model_load_mode(self) -> str:
        """How llama.cpp loads every model of this server: --load-mode, where --no-mmap
        (llama-server's older spelling of --load-mode none) reads as none."""
        return "none" if not self.use_mmap and self.load_mode == "auto" else self.load_mode

    @property
    def embedding_source(self) -> str | None:
        """The model the embedding worker loads, if any."""
        return self.model if self.embedding_only else self.embedding_model
