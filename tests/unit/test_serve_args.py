from __future__ import annotations

import pytest

from mlxcel.cli.serve_args import UsageError, parse_serve_args, split_llama_server_flags


def test_llama_server_names_and_defaults(tmp_path):
    config = parse_serve_args(["-m", "smollm2-135m-instruct", "-c", "2048", "-np", "2", "-t", "1", "-b", "256",
                               "-ub", "128", "-n", "64", "--temp", "0", "--top-k", "5", "--no-cache-prompt",
                               "--no-slots", "--metrics", "-a", "alias", "-s", "7"])
    assert (config.ctx_size, config.parallel, config.threads, config.threads_batch) == (2048, 2, 1, 1)
    assert (config.batch_size, config.ubatch_size, config.n_predict) == (256, 128, 64)
    assert config.sampling.temperature == 0 and config.sampling.top_k == 5 and config.sampling.seed == 7
    assert not config.cache_prompt and not config.slots_endpoint and config.metrics
    assert config.alias == "alias" and config.host == "127.0.0.1" and config.port == 8080


def test_environment_is_read_and_flags_win(monkeypatch):
    monkeypatch.setenv("LLAMA_ARG_CTX_SIZE", "1234")
    monkeypatch.setenv("LLAMA_ARG_ENDPOINT_METRICS", "true")
    monkeypatch.setenv("LLAMA_API_KEY", "a,b")
    assert parse_serve_args([]).ctx_size == 1234
    assert parse_serve_args(["-c", "99"]).ctx_size == 99
    assert parse_serve_args([]).metrics is True
    assert parse_serve_args([]).api_keys == ["a", "b"]


@pytest.mark.parametrize("argv", [["--tool-call-parser", "nonsense"], ["--chat-template-kwargs", "[1]"],
                                  ["--chat-template-file", "/no/such.jinja"], ["-c", "-1"], ["--temp", "-0.5"], ["--min-p", "1.5"], ["-fa", "sometimes"],
                                  ["--threads", "x"], ["--bogus"]])
def test_bad_values_raise_usage_error(argv):
    with pytest.raises(UsageError):
        parse_serve_args(argv)


def test_unimplemented_llama_server_flags_are_split_off():
    kept, ignored = split_llama_server_flags(
        ["--jinja", "-c", "512", "-ctk", "q8_0", "--cache-reuse=0", "--lora-scaled", "a.gguf:0.5", "-fa", "on",
         "--no-such-thing"])
    assert ignored == ["--jinja", "-ctk", "--cache-reuse", "--lora-scaled"]
    assert kept == ["-c", "512", "-fa", "on", "--no-such-thing"]


def test_ubatch_is_capped_by_batch():
    assert parse_serve_args(["-b", "64", "-ub", "512"]).ubatch_size == 64


def test_tool_parser_and_template_kwargs_options():
    config = parse_serve_args(["--tool-call-parser", "hermes", "--chat-template-kwargs", '{"enable_thinking": false}'])
    assert config.tool_call_parser == "hermes"
    assert config.chat_template_kwargs == {"enable_thinking": False}
