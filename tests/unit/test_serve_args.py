from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlxcel.cli.serve_args import parse_serve_args, split_llama_server_flags
from mlxcel.cli.usage import UsageError


def test_llama_server_names_and_defaults(tmp_path):
    config = parse_serve_args(["-m", "smollm2-135m-instruct", "-c", "2048", "-np", "2", "-t", "1", "-b", "256",
                               "-ub", "128", "-n", "64", "--temp", "0", "--top-k", "5", "--no-cache-prompt",
                               "--no-slots", "--metrics", "-a", "alias", "-s", "7"])
    assert (config.ctx_size, config.parallel, config.threads, config.threads_batch) == (2048, 2, 1, 1)
    assert (config.batch_size, config.ubatch_size, config.n_predict) == (256, 128, 64)
    assert config.sampling.temperature == 0 and config.sampling.top_k == 5 and config.sampling.seed == 7
    assert not config.cache_prompt and not config.slots_endpoint and config.metrics
    assert config.alias == "alias" and config.hosts == ["127.0.0.1"] and config.port == 8080


def test_a_negative_temperature_is_greedy_as_in_llama_server():
    assert parse_serve_args(["--temp", "-0.5"]).sampling.temperature == 0.0
    assert parse_serve_args(["--temp", "1.5"]).sampling.temperature == 1.5


def test_environment_is_read_and_flags_win(monkeypatch):
    monkeypatch.setenv("LLAMA_ARG_CTX_SIZE", "1234")
    monkeypatch.setenv("LLAMA_ARG_ENDPOINT_METRICS", "true")
    monkeypatch.setenv("LLAMA_API_KEY", "a,b")
    assert parse_serve_args([]).ctx_size == 1234
    assert parse_serve_args(["-c", "99"]).ctx_size == 99
    assert parse_serve_args([]).metrics is True
    assert parse_serve_args([]).api_keys == ["a", "b"]


@pytest.mark.parametrize("argv", [["--tool-call-parser", "nonsense"], ["--chat-template-kwargs", "[1]"],
                                  ["--chat-template-file", "/no/such.jinja"], ["-c", "-1"], ["--temp", "nan"], ["--min-p", "1.5"], ["-fa", "sometimes"],
                                  ["--threads", "x"], ["--bogus"]])
def test_bad_values_raise_usage_error(argv):
    with pytest.raises(UsageError):
        parse_serve_args(argv)


def test_unimplemented_tuning_flags_are_split_off():
    kept, ignored = split_llama_server_flags(
        ["-cb", "-c", "512", "-ctk", "q8_0", "--threads-http=4", "--poll", "50", "-fa", "on",
         "--no-such-thing"])
    assert ignored == ["-cb", "--threads-http", "--poll"]
    assert kept == ["-c", "512", "-ctk", "q8_0", "-fa", "on", "--no-such-thing"]


@pytest.mark.parametrize("flag", ["--tools-runtime", "--mmproj-url", "-hf"])
def test_flags_that_change_what_is_served_are_refused_by_name(flag):
    with pytest.raises(UsageError, match=flag):
        parse_serve_args(["-m", "smollm2-135m-instruct", flag, "x"])


def test_agent_turns_on_every_tool_and_the_proxy_unless_their_own_flags_say_otherwise(monkeypatch):
    base = ["-m", "smollm2-135m-instruct"]
    plain = parse_serve_args(base)
    assert (plain.server_tools, plain.cors_proxy, plain.cors_origins) == ((), False, "*")
    agent = parse_serve_args(base + ["--agent"])
    assert len(agent.server_tools) == 7 and agent.cors_proxy and agent.cors_origins == "localhost"
    narrowed = parse_serve_args(base + ["-ag", "--tools", "read_file", "--no-ui-mcp-proxy"])
    assert (narrowed.server_tools, narrowed.cors_proxy) == (("read_file",), False)
    assert parse_serve_args(base + ["--no-agent"]).server_tools == ()
    for flag in ("--webui-mcp-proxy", "--ui-mcp-proxy"):
        proxy = parse_serve_args(base + [flag])
        assert proxy.cors_proxy and proxy.server_tools == () and proxy.cors_origins == "localhost"
    assert parse_serve_args(base + ["--ui-mcp-proxy", "--cors-origins", "https://app.example"]).cors_origins == (
        "https://app.example")
    monkeypatch.setenv("LLAMA_ARG_AGENT", "1")
    assert parse_serve_args(base).cors_proxy
    monkeypatch.setenv("LLAMA_ARG_AGENT", "0")
    monkeypatch.setenv("LLAMA_ARG_UI_MCP_PROXY", "true")
    from_env = parse_serve_args(base)
    assert from_env.cors_proxy and from_env.server_tools == ()


def test_the_web_ui_takes_its_default_settings_as_a_json_object(tmp_path, monkeypatch):
    base = ["-m", "smollm2-135m-instruct"]
    assert parse_serve_args(base).ui_settings == {}
    given = {"systemMessage": "Be brief.", "temperature": 0.5, "nested": {"a": [1]}}
    assert parse_serve_args(base + ["--webui-config", json.dumps(given)]).ui_settings == given
    assert parse_serve_args(base + ["--ui-config", "{}"]).ui_settings == {}
    settings = tmp_path / "ui.json"
    settings.write_text(json.dumps(given))
    assert parse_serve_args(base + ["--webui-config-file", str(settings)]).ui_settings == given
    monkeypatch.setenv("LLAMA_ARG_UI_CONFIG_FILE", str(settings))
    assert parse_serve_args(base).ui_settings == given
    monkeypatch.delenv("LLAMA_ARG_UI_CONFIG_FILE")
    (tmp_path / "big.json").write_text('{"x": "' + "a" * (1 << 20) + '"}')
    (tmp_path / "bad.json").write_bytes(b'{"x": "\xff"}')  # not UTF-8
    for argv, reason in ((["--webui-config", "[1, 2]"], "JSON object"), (["--webui-config", "{"], "not valid JSON"),
                         (["--webui-config", '{"t": NaN}'], "not valid JSON"),
                         (["--webui-config", "[" * 100_000], "not valid JSON"),
                         (["--webui-config-file", str(tmp_path / "none.json")], "cannot read"),
                         (["--webui-config-file", str(tmp_path / "bad.json")], "cannot read"),
                         (["--webui-config-file", str(tmp_path / "big.json")], "over"),
                         (["--webui-config", "{}", "--webui-config-file", str(settings)], "one of them")):
        with pytest.raises(UsageError, match=reason):
            parse_serve_args(base + argv)


def test_the_web_ui_is_on_unless_turned_off():
    assert parse_serve_args(["-m", "smollm2-135m-instruct"]).webui is True
    for flag in ("--no-webui", "--no-ui"):
        assert parse_serve_args(["-m", "smollm2-135m-instruct", flag]).webui is False
    assert parse_serve_args(["-m", "smollm2-135m-instruct", "--webui"]).webui is True


def test_every_llama_server_flag_is_implemented_refused_or_tuning():
    """No flag can slip through as silently ignored: each one of llama-server's table
    is implemented, refused with a reason, or a pure tuning flag named in a warning."""
    from mlxcel.cli.flag_policy import REFUSED
    from mlxcel.cli.llama_server_flags import LLAMA_SERVER_FLAGS
    from mlxcel.cli.serve_options import implemented_flags

    assert sorted(REFUSED.keys() & implemented_flags()) == []  # implemented flags are not refused
    kept, warned = split_llama_server_flags([f for f in LLAMA_SERVER_FLAGS if f not in REFUSED])
    semantic_words = ("lora", "mmproj", "embed", "rerank", "grammar", "schema", "rope", "yarn", "hf-", "model-url",
                      "pooling", "control-vector", "reasoning", "ssl", "api-prefix")
    # a "--no-..." flag asks for what mlxcel does anyway (no projector, no adapter); where the
    # projector's weights live (GPU offload) changes nothing that is computed; --mmproj-auto
    # only picks the projector of a -hf download (refused), so with -m it changes nothing;
    # --mmproj-device places the projector on a device, as --device places the model
    tuning = {"--mmproj-offload", "--mmproj-auto", "--mmproj-device"}
    leaked = [f for f in warned if not f.startswith("--no-") and f not in tuning
              and any(word in f for word in semantic_words)]
    assert leaked == []


def test_embedding_flags():
    config = parse_serve_args(["--embedding-model", "smollm2-135m-instruct", "--pooling", "CLS", "--embd-normalize", "-1"])
    assert (config.embedding_source, config.embedding_only, config.pooling, config.embd_normalize) == (
        "smollm2-135m-instruct", False, "cls", -1)
    only = parse_serve_args(["--embeddings", "-m", "smollm2-135m-instruct"])
    assert (only.embedding_only, only.embedding_source) == (True, "smollm2-135m-instruct")
    with pytest.raises(UsageError, match="one of them"):
        parse_serve_args(["--embedding", "--embedding-model", "smollm2-135m-instruct"])
    with pytest.raises(UsageError):
        parse_serve_args(["--pooling", "max"])
    with pytest.raises(UsageError, match="--embedding-model"):
        parse_serve_args(["--embedding-model", "/no/such/model.gguf"])


def test_kv_cache_types():
    config = parse_serve_args(["-ctk", "q8_0", "--cache-type-v", "Q8_0", "-ctkd", "q4_0"])
    assert (config.cache_type_k, config.cache_type_v, config.cache_type_k_draft) == ("q8_0", "q8_0", "q4_0")
    with pytest.raises(UsageError):
        parse_serve_args(["-ctk", "q3_bogus"])


def test_ubatch_is_capped_by_batch():
    assert parse_serve_args(["-b", "64", "-ub", "512"]).ubatch_size == 64


def test_tool_parser_and_template_kwargs_options():
    config = parse_serve_args(["--tool-call-parser", "hermes", "--chat-template-kwargs", '{"enable_thinking": false}'])
    assert config.tool_call_parser == "hermes"
    assert config.chat_template_kwargs == {"enable_thinking": False}


def test_responses_store_flags_and_environment(monkeypatch):
    defaults = parse_serve_args([]).responses
    assert (defaults.store_max_entries, defaults.store_max_bytes, defaults.store_ttl_secs) == (1024, 268435456, 3600)
    assert (defaults.background_max_jobs, defaults.background_ephemeral_ttl_secs) == (64, 600)
    assert (defaults.conversation_max_entries, defaults.conversation_max_bytes) == (256, 67108864)
    assert defaults.conversation_ttl_secs == 3600 and defaults.reasoning_echo_max_bytes == 16 * 1024 * 1024
    monkeypatch.setenv("LLAMA_ARG_RESPONSES_STORE_MAX_ENTRIES", "0")
    monkeypatch.setenv("MLXCEL_RESPONSES_STORE_MAX_BYTES", "1000")
    monkeypatch.setenv("LLAMA_ARG_RESPONSES_STORE_TTL_SECS", "5")
    monkeypatch.setenv("MLXCEL_RESPONSES_BACKGROUND_MAX_JOBS", "2")
    monkeypatch.setenv("MLXCEL_RESPONSES_BACKGROUND_EPHEMERAL_TTL_SECS", "9")
    monkeypatch.setenv("LLAMA_ARG_CONVERSATION_STORE_MAX_ENTRIES", "3")
    monkeypatch.setenv("MLXCEL_CONVERSATION_STORE_MAX_BYTES", "0")
    monkeypatch.setenv("LLAMA_ARG_CONVERSATION_STORE_TTL_SECS", "0")
    monkeypatch.setenv("MLXCEL_REASONING_ECHO_MAX_BYTES", "0")
    limits = parse_serve_args(["--responses-store-max-entries", "7"]).responses
    assert (limits.store_max_entries, limits.store_max_bytes, limits.store_ttl_secs) == (7, 1000, 5)
    assert (limits.background_max_jobs, limits.background_ephemeral_ttl_secs) == (2, 9)
    assert (limits.conversation_max_entries, limits.conversation_max_bytes, limits.conversation_ttl_secs) == (3, 0, 0)
    assert limits.reasoning_echo_max_bytes == 0


@pytest.mark.parametrize("argv, env", [
    (["--responses-background-ephemeral-ttl-secs", "0"], {}),
    (["--responses-store-max-entries", "-1"], {}),
    ([], {"MLXCEL_REASONING_ECHO_MAX_BYTES": "lots"}),
])
def test_bad_responses_limits_fail(monkeypatch, argv, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(UsageError):
        parse_serve_args(argv)


def test_speculation_flags_follow_llama_server():
    config = parse_serve_args(["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "4",
                               "--spec-ngram-simple-size-m", "24", "--spec-draft-n-max", "8"])
    assert (config.spec_type, config.spec_ngram_size, config.spec_ngram_size_m) == ("ngram-simple", 4, 24)
    assert config.spec_draft_max == 8
    assert parse_serve_args([]).spec_ngram_size_m == 48  # llama-server's length of the drafted m-gram
    assert parse_serve_args([]).spec_type == "ngram-simple"  # on by default: it drafts only where it pays
    assert parse_serve_args(["--spec-type", "none"]).spec_type == "none"
    with pytest.raises(UsageError):
        parse_serve_args(["--spec-ngram-simple-size-m", "0"])


def test_traffic_drafts_are_on_by_default_and_sized_by_their_flag(monkeypatch):
    assert parse_serve_args([]).spec_ngram_traffic == 65536
    assert parse_serve_args(["--spec-ngram-traffic", "0"]).spec_ngram_traffic == 0
    monkeypatch.setenv("MLXCEL_SPEC_NGRAM_TRAFFIC", "1024")
    assert parse_serve_args([]).spec_ngram_traffic == 1024
    for bad in ("-1", "NaN", str(1 << 30)):
        with pytest.raises(UsageError):
            parse_serve_args(["--spec-ngram-traffic", bad])


@pytest.mark.parametrize("value, runs, noted", [
    ("ngram-mod", "ngram-simple", "--spec-type ngram-mod (mlxcel's prompt lookup"),
    ("ngram-map-k,ngram-mod", "ngram-simple", "--spec-type ngram-map-k"),
    ("ngram-cache", "ngram-simple", "--spec-type ngram-cache"),
    ("ngram-mod,ngram-simple", "ngram-simple", None),  # the one mlxcel runs was asked for too
    ("none", "none", None),
    ("NGRAM-SIMPLE", "ngram-simple", None),
])
def test_llama_server_speculation_types_run_as_prompt_lookup_and_say_so(value, runs, noted):
    config = parse_serve_args(["--spec-type", value])
    assert config.spec_type == runs
    notes = [flag for flag in config.ignored_flags if flag.startswith("--spec-type")]
    assert notes == ([] if noted is None else [notes[0]]) and (noted is None or notes[0].startswith(noted))


@pytest.mark.parametrize("argv, needle", [
    (["--spec-type", "draft-mtp"], "draft-mtp: mlxcel cannot run its drafting head"),
    (["--spec-type", "ngram-simple,draft-eagle3"], "draft-eagle3"),
    (["--spec-type", "draft-simple"], "give its draft model with -md"),
    (["--spec-type", "ngram-bogus"], "invalid value 'ngram-bogus'"),
    (["--spec-draft-n-min", "20", "--spec-draft-n-max", "4"], "no draft could ever be made"),
])
def test_speculation_types_mlxcel_cannot_run_fail_in_one_line(argv, needle):
    with pytest.raises(UsageError, match=needle):
        parse_serve_args(argv)


def test_a_draft_model_runs_draft_simple():
    assert parse_serve_args(["--spec-type", "draft-simple", "-md", "smollm2-135m-instruct"]).spec_type == "draft"


@pytest.mark.parametrize("argv, reason", [
    (["--api-key", ""], "--api-key: the key is empty"),
    (["--api-key", " , "], "--api-key: the key is empty"),
    (["--api-key-file", "EMPTY"], "holds no key"),
    (["--api-key-file", "COMMENTS"], "holds no key"),
    (["--api-key-file", "/no/such/keys.txt"], "--api-key-file: cannot read"),
    (["--api-key-file", "BINARY"], "--api-key-file: cannot read"),
])
def test_key_settings_that_yield_no_key_fail_closed(tmp_path, argv, reason):
    files = {"EMPTY": "\n  \n", "COMMENTS": "# a comment\n# another\n", "BINARY": b"\xff\xfe\x00key"}
    if argv[-1] in files:
        path = tmp_path / "keys"
        content = files[argv[-1]]
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        argv = [argv[0], str(path)]
    with pytest.raises(UsageError, match=reason):
        parse_serve_args(argv)


def test_key_file_and_flag_keys_combine(tmp_path):
    path = tmp_path / "keys"
    path.write_text("# team keys\nk2\n\n  k3  \n")
    assert parse_serve_args(["--api-key", "k1", "--api-key-file", str(path)]).api_keys == ["k1", "k2", "k3"]
    assert parse_serve_args([]).api_keys == []


def test_a_key_file_saved_with_a_byte_order_mark_gives_the_key_without_it(tmp_path):
    path = tmp_path / "keys"
    path.write_bytes("k1\r\nk2\r\n".encode("utf-8-sig"))  # as Windows' Notepad saves it
    assert parse_serve_args(["--api-key-file", str(path)]).api_keys == ["k1", "k2"]


def test_request_caps_are_flags():
    limits = parse_serve_args(["--max-messages", "10", "--max-tools", "2", "--max-stop", "3", "--max-stop-chars", "9",
                               "--max-logit-bias", "5", "--max-prompts", "4", "--max-chars", "1000"]).limits
    assert (limits.max_messages, limits.max_tools, limits.max_stop, limits.max_stop_chars) == (10, 2, 3, 9)
    assert (limits.max_logit_bias, limits.max_prompts, limits.chars_cap(4096)) == (5, 4, 1000)
    automatic = parse_serve_args([]).limits
    assert automatic.chars_cap(4096) == 1 << 20 and automatic.chars_cap(1 << 20) == 32 << 20


def test_llama_server_lists_alias_tags_host_and_cors(monkeypatch):
    config = parse_serve_args(["--alias", "zeta, alpha,,zeta", "--tags", "b,a", "--host", "127.0.0.1, ::1",
                               "--cors-origins", "localhost", "--no-cors-credentials", "--api-prefix", "/v2/"])
    assert config.alias == "alpha" and config.aliases == ["alpha", "zeta"] and config.tags == ["a", "b"]
    assert config.hosts == ["127.0.0.1", "::1"] and config.api_prefix == "/v2"
    assert config.cors_origins == "localhost" and config.cors_credentials is False
    assert config.cors_methods == "GET, POST, DELETE, OPTIONS" and config.cors_headers == "*"
    monkeypatch.setenv("LLAMA_ARG_HOST", "0.0.0.0")
    assert parse_serve_args([]).hosts == ["0.0.0.0"]


@pytest.mark.parametrize("argv", [["--host", " , "], ["--host", "127.0.0.1,::1", "--port", "0"],
                                  ["--api-prefix", "api"]])
def test_bad_listen_settings_raise_usage_error(argv):
    with pytest.raises(UsageError):
        parse_serve_args(argv)


def test_context_shift_keep_and_spm_infill_follow_llama_server(monkeypatch):
    config = parse_serve_args([])
    assert (config.context_shift, config.n_keep, config.spm_infill) == (False, 0, False)  # llama-server's defaults
    config = parse_serve_args(["--context-shift", "--keep", "-1", "--spm-infill"])
    assert (config.context_shift, config.n_keep, config.spm_infill) == (True, -1, True)
    assert parse_serve_args(["--context-shift", "--no-context-shift"]).context_shift is False
    monkeypatch.setenv("LLAMA_ARG_CONTEXT_SHIFT", "1")
    assert parse_serve_args([]).context_shift is True and not parse_serve_args(["--no-context-shift"]).context_shift
    assert parse_serve_args(["--context-shift"]).ignored_flags == []


def test_loading_and_memory_flags_reach_llama_cpps_params(tmp_path):
    """--no-mmap was once set on a field llama.cpp's struct no longer has (ctypes kept it
    silently): every value now goes through fields the struct declares."""
    import llama_cpp

    from mlxcel.engine.llama_runtime import RuntimeConfig, context_params, model_params
    from mlxcel.turn.model_host import _runtime_config

    def runtime(argv):
        return _runtime_config(parse_serve_args(argv), tmp_path / "m.gguf", 512)

    assert model_params(runtime([])).load_mode == llama_cpp.LLAMA_LOAD_MODE_AUTO
    assert model_params(runtime(["--no-mmap"])).load_mode == llama_cpp.LLAMA_LOAD_MODE_NONE
    assert model_params(runtime(["-lm", "mmap+mlock"])).load_mode == llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK
    ctx = context_params(runtime(["--swa-full", "-ctk", "q8_0", "-ctv", "q4_0", "-ub", "64"]))
    assert ctx.swa_full and ctx.type_k == llama_cpp.GGML_TYPE_Q8_0 and ctx.type_v == llama_cpp.GGML_TYPE_Q4_0
    assert ctx.n_ubatch == 64 and ctx.n_ctx == 512
    assert runtime([]).huge_pages is True and runtime(["--no-huge-pages"]).huge_pages is False
    with pytest.raises(UsageError):
        parse_serve_args(["--load-mode", "sideways"])
    from mlxcel.engine import llama_runtime

    with pytest.raises(AttributeError, match="use_mmap"):
        llama_runtime._set(llama_cpp.llama_model_default_params(), use_mmap=False)
    assert RuntimeConfig(tmp_path).load_mode == "auto"


def test_rerank_flags():
    beside = parse_serve_args(["--rerank-model", "smollm2-135m-instruct"])
    assert (beside.rerank_model, beside.rerank_only) == ("smollm2-135m-instruct", False)
    for flag in ("--reranking", "--rerank"):
        only = parse_serve_args([flag, "-m", "smollm2-135m-instruct"])
        assert (only.rerank_only, only.rerank_model) == (True, None)
    with pytest.raises(UsageError, match="--rerank-model"):
        parse_serve_args(["--reranking", "--rerank-model", "smollm2-135m-instruct"])
    with pytest.raises(UsageError, match="--embedding"):
        parse_serve_args(["--reranking", "--embedding"])
    with pytest.raises(UsageError, match="--model"):
        parse_serve_args(["--rerank-model", "/no/such/model.gguf"])


def test_a_unified_kv_pool_and_its_per_slot_cap_reach_llama_cpp(tmp_path, monkeypatch):
    from mlxcel.engine.llama_runtime import context_params
    from mlxcel.turn.model_host import _pool_size, _runtime_config

    def runtime(argv):
        config = parse_serve_args(argv)
        return _runtime_config(config, tmp_path / "m.gguf", _pool_size(config))

    assert context_params(runtime([])).kv_unified is False  # llama-server's default with an explicit -np
    unified = runtime(["-kvu", "-c", "4096", "--kv-unified-per-slot", "1024"])
    assert context_params(unified).kv_unified is True and unified.n_ctx == 4096 and unified.n_ctx_seq_cap == 1024
    assert context_params(runtime(["--kv-unified", "--no-kv-unified"])).kv_unified is False
    sized = runtime(["-kvu", "-np", "3", "--kv-unified-per-slot", "2000"])  # -c unset: the pool is np x cap
    assert sized.n_ctx == 6000
    assert _runtime_config(parse_serve_args(["-kvu"]), tmp_path / "d.gguf", 512, draft=True).kv_unified is False
    monkeypatch.setenv("LLAMA_ARG_KV_UNIFIED", "1")
    assert parse_serve_args([]).kv_unified is True
    assert parse_serve_args(["-kvu"]).ignored_flags == []
    with pytest.raises(UsageError):
        parse_serve_args(["--kv-unified-per-slot", "-5"])


def test_the_context_a_slot_can_hold_follows_the_pool_layout():
    """What -fa auto times a typical request at: a split pool's share, or the unified
    pool capped by --kv-unified-per-slot."""
    from mlxcel.turn.model_host import _slot_context

    assert _slot_context(parse_serve_args(["-np", "4"]), 8192) == 2048
    assert _slot_context(parse_serve_args(["-np", "4", "-kvu"]), 8192) == 8192
    assert _slot_context(parse_serve_args(["-np", "4", "-kvu", "--kv-unified-per-slot", "1024"]), 8192) == 1024
    assert _slot_context(parse_serve_args(["-np", "2", "-kvu", "--kv-unified-per-slot", "9000"]), 8192) == 8192


def test_mlock_locks_what_the_load_mode_loads(tmp_path, monkeypatch):
    """--mlock (llama-server's older flag; this llama.cpp spells it --load-mode) is not
    dropped: it becomes llama.cpp's mlock load mode, over a mapped file or a read copy."""
    import llama_cpp

    from mlxcel.engine.llama_runtime import model_params
    from mlxcel.turn.model_host import _runtime_config

    def mode(argv):
        return model_params(_runtime_config(parse_serve_args(argv), tmp_path / "m.gguf", 512)).load_mode

    assert mode(["--mlock"]) == llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK
    assert mode(["--mlock", "--no-mmap"]) == llama_cpp.LLAMA_LOAD_MODE_MLOCK
    assert mode(["--mlock", "-lm", "none"]) == llama_cpp.LLAMA_LOAD_MODE_MLOCK
    assert mode(["--mlock", "-lm", "mmap"]) == llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK
    assert mode(["--mlock", "-lm", "mlock"]) == llama_cpp.LLAMA_LOAD_MODE_MLOCK
    assert mode([]) == llama_cpp.LLAMA_LOAD_MODE_AUTO
    assert parse_serve_args(["--mlock"]).ignored_flags == []
    with pytest.raises(UsageError, match="--mlock"):
        parse_serve_args(["--mlock", "-lm", "dio"])
    monkeypatch.setenv("LLAMA_ARG_MLOCK", "1")
    assert mode([]) == llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK


@pytest.mark.parametrize("argv", [["-dt", "0.1"], ["--defrag-thold", "0.1"], ["--defrag-thold=-1"]])
def test_defrag_threshold_is_accepted_and_named_deprecated(argv):
    """llama-server accepts -dt only to say it is deprecated: so does the warning line."""
    config = parse_serve_args([*argv, "-c", "512"])
    assert config.ctx_size == 512
    (note,) = config.ignored_flags
    assert note.startswith(argv[0].split("=")[0] + " (") and "deprecated" in note


def test_timeout_is_implemented_not_ignored(monkeypatch):
    """llama-server's -to/--timeout bounds how long a client may stall; mlxcel applies it
    (so it is no longer named in the ignored-flags warning) and refuses nonsense."""
    assert parse_serve_args([]).timeout_s == 3600.0  # llama-server's default (it was 600)
    for argv in (["-to", "5"], ["--timeout", "5"], ["--timeout=5"]):
        config = parse_serve_args(argv)
        assert config.timeout_s == 5.0 and config.ignored_flags == []
    for bad in (["--timeout", "0"], ["-to", "-1"], ["--timeout", "soon"]):
        with pytest.raises(UsageError):
            parse_serve_args(bad)
    monkeypatch.setenv("LLAMA_ARG_TIMEOUT", "30")
    assert parse_serve_args([]).timeout_s == 30.0


@pytest.mark.parametrize(("argv", "mode"), [([], "auto"), (["--no-mmap"], "none"), (["-lm", "mlock"], "mlock"),
                                            (["--load-mode", "dio"], "dio"), (["--mlock"], "mmap+mlock")])
def test_the_encoders_load_as_the_chat_model_does(argv, mode):
    """--load-mode (and its older spellings) reaches the embedding and rerank models too."""
    from mlxcel.turn.embedding_jobs import embedding_runtime_config

    config = parse_serve_args(["--embedding-model", "smollm2-135m-instruct", *argv])
    assert config.model_load_mode == mode
    assert embedding_runtime_config(config, Path("/m.gguf"), "mean").load_mode == mode


def test_metrics_port_turns_metrics_on_and_must_stand_apart():
    config = parse_serve_args(["--metrics-port", "9100"])
    assert config.metrics and config.metrics_port == 9100
    assert not parse_serve_args([]).metrics and parse_serve_args([]).metrics_port is None
    with pytest.raises(UsageError, match="must differ from --port"):
        parse_serve_args(["--port", "9100", "--metrics-port", "9100"])
    with pytest.raises(UsageError, match="replicas serves its metrics"):
        parse_serve_args(["--metrics-port", "9100", "--replicas", "2"])


def test_mcp_servers_come_from_a_file_and_inline_json(tmp_path, caplog):
    base = ["-m", "smollm2-135m-instruct"]
    listed = {"mcpServers": {"files": {"command": "npx", "args": ["-y", "server"], "env": {"K": "v"}, "cwd": "/tmp",
                                       "timeout_ms": 5000},
                             "bare": {"command": "/bin/srv"}, "empty": {"args": []}}}
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(listed))
    inline = json.dumps({"mcpServers": {"bare": {"command": "/other"}, "more": {"command": "m"}}})
    config = parse_serve_args(base + ["--mcp-servers-config", str(path), "--mcp-servers-json", inline])
    assert [s.name for s in config.mcp_servers] == ["files", "bare", "more"]  # the file's "bare" kept
    files = config.mcp_servers[0]
    assert (files.command, files.args, files.env, files.cwd, files.timeout_ms) == (
        "npx", ("-y", "server"), (("K", "v"),), "/tmp", 5000)
    assert config.mcp_servers[1].timeout_ms == 30_000 and config.cors_origins == "localhost"
    assert "'empty' has no command" in caplog.text and "defined twice" in caplog.text
    for value, reason in (("{", "not valid JSON"), ("[]", "mcpServers"), ('{"mcpServers": []}', "mcpServers"),
                          ('{"mcpServers": {"a b": {"command": "x"}}}', "server name"),
                          ('{"mcpServers": {"a": "x"}}', "must be an object"),
                          ('{"mcpServers": {"a": {"command": "x", "args": "y"}}}', "args"),
                          ('{"mcpServers": {"a": {"command": "x", "env": {"A": 1}}}}', "env"),
                          ('{"mcpServers": {"a": {"command": "x", "timeout_ms": 0}}}', "timeout_ms"),
                          ('{"mcpServers": {"a": {"command": "x", "timeout_ms": true}}}', "timeout_ms")):
        with pytest.raises(UsageError, match=reason):
            parse_serve_args(base + ["--mcp-servers-json", value])
    with pytest.raises(UsageError, match="cannot read"):
        parse_serve_args(base + ["--mcp-servers-config", str(tmp_path / "none.json")])


def test_lookup_caches_are_read_beside_prompt_lookup_and_named_where_they_do_nothing(tmp_path, monkeypatch):
    static, dynamic = tmp_path / "static.bin", tmp_path / "dynamic.bin"
    static.write_bytes(b"")
    config = parse_serve_args(["-lcs", str(static), "--lookup-cache-dynamic", str(dynamic)])  # dynamic: made later
    assert (config.lookup_cache_static, config.lookup_cache_dynamic) == (str(static), str(dynamic))
    assert not any(flag.startswith("--lookup-cache") for flag in config.ignored_flags)
    monkeypatch.setenv("MLXCEL_LOOKUP_CACHE_STATIC", str(static))
    assert parse_serve_args([]).lookup_cache_static == str(static)
    monkeypatch.delenv("MLXCEL_LOOKUP_CACHE_STATIC")
    plain = parse_serve_args(["--spec-type", "none", "-lcs", str(static)])
    assert plain.lookup_cache_static is None
    noted = "--lookup-cache-static (drafts beside prompt lookup only"
    assert any(flag.startswith(noted) for flag in plain.ignored_flags)


@pytest.mark.parametrize("argv, needle", [
    (["-lcs", "/no/such/static.bin"], "--lookup-cache-static /no/such/static.bin: no such file"),
    (["-lcd", "/no/such/folder/dynamic.bin"], "its folder does not exist"),
    (["-lcd", "/"], "not a file"),
    (["-lcs", "/etc/hostname", "--models-dir", "/tmp"], "lookup caches hold one model's tokens"),
])
def test_lookup_cache_paths_that_cannot_serve_fail_in_one_line(argv, needle):
    with pytest.raises(UsageError, match=needle):
        parse_serve_args(argv)


def test_a_tuning_flags_negative_value_is_skipped_with_it():
    """llama-server takes the word after a value flag whatever it is: `--threads-http -1`
    and `--prio -1` are its own defaults, not a stray `-1` (it was an unrecognized argument)."""
    kept, ignored = split_llama_server_flags(["--threads-http", "-1", "--prio", "-1", "-c", "512", "--poll", "-0.5"])
    assert ignored == ["--threads-http", "--prio", "--poll"] and kept == ["-c", "512"]
    assert parse_serve_args(["-m", "smollm2-135m-instruct", "--threads-http", "-1", "-np", "2"]).parallel == 2


def test_long_flags_may_be_spelled_with_underscores_as_in_llama_server():
    config = parse_serve_args(["-m", "smollm2-135m-instruct", "--ctx_size", "1024", "--n_predict=7", "--no_slots",
                               "--threads_http", "4", "--api_key", "k"])
    assert (config.ctx_size, config.n_predict, config.slots_endpoint, config.api_keys) == (1024, 7, False, ["k"])
    with pytest.raises(UsageError, match="--hf-repo"):
        parse_serve_args(["--hf_repo", "x/y"])
    # a value that starts with -- is not renamed
    assert split_llama_server_flags(["--alias", "--not_a_flag"])[0] == ["--alias", "--not_a_flag"]


def test_auto_slots_and_threads_read_as_in_llama_server(monkeypatch):
    """-np -1 is llama-server's auto (its default): 4 slots on one shared KV pool; -t and
    -tb of 0 or less mean every CPU. All three were an out-of-range error."""
    base = ["-m", "smollm2-135m-instruct"]
    auto = parse_serve_args(base + ["-np", "-1"])
    assert (auto.parallel, auto.kv_unified) == (4, True)
    assert (parse_serve_args(base).parallel, parse_serve_args(base).kv_unified) == (4, False)
    monkeypatch.setenv("LLAMA_ARG_N_PARALLEL", "-1")
    assert parse_serve_args(base).kv_unified is True
    monkeypatch.delenv("LLAMA_ARG_N_PARALLEL")
    for argv in (["-np", "0"], ["-np", "257"], ["-t", "1025"]):
        with pytest.raises(UsageError):
            parse_serve_args(base + argv)
    everything = parse_serve_args(base).threads
    assert parse_serve_args(base + ["-t", "-1", "-tb", "0"]).threads == everything
    assert parse_serve_args(base + ["-t", "1", "-tb", "-1"]).threads_batch == 1


@pytest.mark.parametrize("variable, value", [("LLAMA_ARG_LOG_COLORS", "maybe"), ("LLAMA_ARG_LOG_VERBOSITY", "loud"),
                                             ("LLAMA_ARG_LOG_JSONL", "maybe"), ("LLAMA_ARG_LOG_PREFIX", "2")])
def test_a_bad_logging_variable_is_one_usage_line(monkeypatch, variable, value):
    """The logging variables were read outside the usage checks: a bad color or verbosity
    was a traceback, a bad boolean silently the default."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(UsageError, match=f"environment variable {variable}"):
        parse_serve_args(["-m", "smollm2-135m-instruct"])


def test_logging_variables_are_read(monkeypatch):
    monkeypatch.setenv("LLAMA_ARG_LOG_COLORS", "off")
    monkeypatch.setenv("LLAMA_ARG_LOG_VERBOSITY", "2")
    monkeypatch.setenv("LLAMA_ARG_LOG_JSONL", "true")
    log = parse_serve_args(["-m", "smollm2-135m-instruct"]).log
    assert (log.colors, log.verbosity, log.jsonl) == ("off", 2, True)


def test_llama_server_variable_names_are_read(monkeypatch):
    """LLAMA_ARG_UI and LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K/V are llama-server's names (mlxcel
    read LLAMA_ARG_WEBUI and LLAMA_ARG_CACHE_TYPE_*_DRAFT only, so llama-server's were
    silently ignored); the former names still work."""
    base = ["-m", "smollm2-135m-instruct"]
    monkeypatch.setenv("LLAMA_ARG_UI", "0")
    monkeypatch.setenv("LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K", "q8_0")
    monkeypatch.setenv("LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V", "q4_0")
    config = parse_serve_args(base)
    assert (config.webui, config.cache_type_k_draft, config.cache_type_v_draft) == (False, "q8_0", "q4_0")
    assert parse_serve_args(base + ["--ui"]).webui is True
    monkeypatch.delenv("LLAMA_ARG_UI")
    monkeypatch.delenv("LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K")
    monkeypatch.setenv("LLAMA_ARG_WEBUI", "off")
    monkeypatch.setenv("LLAMA_ARG_CACHE_TYPE_K_DRAFT", "q5_0")
    former = parse_serve_args(base)
    assert (former.webui, former.cache_type_k_draft) == (False, "q5_0")


@pytest.mark.parametrize("variable, flag", [("LLAMA_ARG_HF_REPO", "--hf-repo"), ("LLAMA_ARG_MODEL_URL", "--model-url"),
                                            ("LLAMA_ARG_MMPROJ_URL", "--mmproj-url"),
                                            ("LLAMA_ARG_TOOLS_RUNTIME", "--tools-runtime")])
def test_a_refused_flags_variable_is_refused_too(monkeypatch, variable, flag):
    """llama-server serves the model LLAMA_ARG_HF_REPO names; mlxcel served its default
    model instead, silently."""
    monkeypatch.setenv(variable, "x")
    with pytest.raises(UsageError, match=f"{variable}: {flag}"):
        parse_serve_args([])
    monkeypatch.setenv("HF_TOKEN", "hf_x")  # other tools' variable: left alone
    monkeypatch.delenv(variable)
    assert parse_serve_args([]).model


@pytest.mark.parametrize("argv", [["-c", "4294975488"], ["--top-k", "4294967297"], ["-b", "99999999999999999999"],
                                  ["-to", "2147483648"], ["--embd-normalize", "-5"]])
def test_a_number_llama_cpp_cannot_hold_is_refused(argv):
    """llama.cpp's int parameters took a larger value wrapped around (-c 4294975488 served a
    context of 8192), as llama-server's stoi
    refuses it; an --embd-normalize below -1 failed every embedding request instead."""
    with pytest.raises(UsageError, match="out of range"):
        parse_serve_args(["-m", "smollm2-135m-instruct", *argv])


def test_tuning_flags_variables_are_named_in_the_warning_and_removed_ones_refused(monkeypatch):
    """LLAMA_ARG_THREADS_HTTP and the like were silently ignored; LLAMA_ARG_DRAFT_MAX, which
    llama-server refuses as it refuses --draft-max, was too."""
    from mlxcel.cli.flag_policy import REFUSED, TUNING_ENV
    from mlxcel.cli.llama_server_flags import LLAMA_SERVER_FLAGS
    from mlxcel.cli.serve_options import implemented_flags

    assert [flag for flag in TUNING_ENV.values()
            if flag not in LLAMA_SERVER_FLAGS or flag in REFUSED or flag in implemented_flags()] == []
    monkeypatch.setenv("LLAMA_ARG_THREADS_HTTP", "4")
    config = parse_serve_args(["-m", "smollm2-135m-instruct", "-cb"])
    assert config.ignored_flags == ["-cb", "LLAMA_ARG_THREADS_HTTP (--threads-http)"]
    monkeypatch.setenv("LLAMA_ARG_DRAFT_MAX", "8")
    with pytest.raises(UsageError, match="LLAMA_ARG_DRAFT_MAX: the argument has been removed"):
        parse_serve_args(["-m", "smollm2-135m-instruct"])


def test_reverse_prompts_and_dry_breakers_read_escapes_as_in_llama_server():
    """llama-server reads `-r '\\n\\n'` as a blank line (its --escape, on by default); mlxcel
    kept the backslashes, so that stop string never matched. --no-escape keeps them."""
    base = ["-m", "smollm2-135m-instruct", "-r", "\\n\\nUser:", "-r", "a\\tb\\x41\\q\\", "--dry-sequence-breaker",
            "\\n", "--dry-sequence-breaker", '\\"']
    config = parse_serve_args(base)
    assert config.default_stop == ["\n\nUser:", "a\tbA\\q\\"]
    assert config.sampling.dry_sequence_breakers == ("\n", '"')
    assert parse_serve_args(base + ["-e"]).default_stop == config.default_stop
    literal = parse_serve_args(base + ["--no-escape"])
    assert literal.default_stop == ["\\n\\nUser:", "a\\tb\\x41\\q\\"] and literal.ignored_flags == []
    assert literal.sampling.dry_sequence_breakers == ("\\n", '\\"')


def test_gpu_layers_take_llama_servers_words(monkeypatch):
    """-ngl auto (llama-server's default) and -ngl all were an invalid-int error."""
    base = ["-m", "smollm2-135m-instruct"]
    for word in ("auto", "all", "AUTO", "-1"):
        assert parse_serve_args(base + ["-ngl", word]).n_gpu_layers == -1
    assert parse_serve_args(base + ["--n-gpu-layers", "12"]).n_gpu_layers == 12
    monkeypatch.setenv("LLAMA_ARG_N_GPU_LAYERS", "all")
    assert parse_serve_args(base).n_gpu_layers == -1
    with pytest.raises(UsageError, match="-ngl"):
        parse_serve_args(base + ["-ngl", "most"])


def test_split_mode_takes_llama_servers_tensor_mode():
    """llama-server's -sm takes none, layer, row and tensor (tensor was refused)."""
    for mode in ("none", "layer", "row", "tensor", "TENSOR"):
        assert parse_serve_args(["-m", "smollm2-135m-instruct", "-sm", mode]).split_mode == mode.lower()


_UNCARRIED_JSON = [('{"a": 1e999}', "range"), ('{"a": NaN}', "NaN"),
                   ('{"a": ' + "[" * 20000, "nested too deeply|recursion depth")]


@pytest.mark.parametrize("flag, text, reason", [
    *[(flag, text, reason) for flag in ("--chat-template-kwargs", "--webui-config", "--mcp-servers-json")
      for text, reason in _UNCARRIED_JSON],
    ("--json-schema", *_UNCARRIED_JSON[2]),  # a schema's numbers are the grammar compiler's to judge
])
def test_json_flags_refuse_what_json_cannot_carry_in_one_line(flag, text, reason):
    """1e999 was read as infinity (GET /props then failed with a 500 for good), NaN was
    taken by --chat-template-kwargs, and a deeply nested value was a RecursionError
    traceback."""
    with pytest.raises(UsageError, match=reason):
        parse_serve_args(["-m", "smollm2-135m-instruct", flag, text])


def test_a_dry_breaker_none_clears_the_ones_before_it_as_in_llama_server():
    """`--dry-sequence-breaker a --dry-sequence-breaker none` leaves no breaker in
    llama-server; mlxcel kept "a"."""
    def breakers(*values):
        argv = ["-m", "smollm2-135m-instruct"]
        for value in values:
            argv += ["--dry-sequence-breaker", value]
        return parse_serve_args(argv).sampling.dry_sequence_breakers

    assert breakers("a", "none") == ()
    assert breakers("a", "none", "b", "c") == ("b", "c")
    assert breakers("none") == () and breakers("a", "b") == ("a", "b")


def test_api_keys_aliases_and_tags_given_again_add_up_as_in_llama_server(monkeypatch):
    """llama-server adds up repeated --api-key, -a and --tags; mlxcel kept the last one, so a
    client with the first key got a 401. The environment's value is still replaced."""
    monkeypatch.setenv("LLAMA_API_KEY", "from-env")
    config = parse_serve_args(["-m", "smollm2-135m-instruct", "--api-key", "a", "--api-key", "b,c", "-a", "y",
                               "--alias", "x,y", "--tags", "t2", "--tags", "t1"])
    assert config.api_keys == ["a", "b", "c"]
    assert (config.aliases, config.alias, config.tags) == (["x", "y"], "x", ["t1", "t2"])
    assert parse_serve_args(["-m", "smollm2-135m-instruct", "--api-key", "a"]).api_keys == ["a"]
    assert parse_serve_args(["-m", "smollm2-135m-instruct"]).api_keys == ["from-env"]


def test_spec_default_is_speculation_tuning_not_a_download():
    """llama-server's --spec-default turns on its n-gram drafting and downloads nothing; it
    was refused as a flag that downloads models."""
    config = parse_serve_args(["-m", "smollm2-135m-instruct", "--spec-default"])
    (note,) = config.ignored_flags
    assert note.startswith("--spec-default (") and "the output is the same" in note


def test_print_and_exit_flags_are_found_spelled_with_underscores(capsys, monkeypatch):
    """`--completion_bash` is llama-server's --completion-bash; it started a server instead."""
    import mlxcel.server.run
    from mlxcel.cli.main import serve

    def no_server(*_args):
        raise AssertionError("a server was started")

    monkeypatch.setattr(mlxcel.server.run, "run_server", no_server)
    assert serve(["--completion_bash"], "mlxcel serve") == 0
    assert "_mlxcel_serve_flags" in capsys.readouterr().out


@pytest.mark.parametrize("order, expected", [("file last", "file"), ("text last", "chatml"), ("file only", "file")])
def test_the_chat_template_flag_given_last_wins_as_in_llama_server(tmp_path, order, expected):
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages[0].content }}")
    file_flag, text_flag = ["--chat-template-file", str(template)], ["--chat-template=chatml"]
    argv = {"file last": text_flag + file_flag, "text last": file_flag + text_flag, "file only": file_flag}[order]
    config = parse_serve_args(["-m", "smollm2-135m-instruct", *argv])
    assert config.chat_template == (str(template) if expected == "file" else expected)
