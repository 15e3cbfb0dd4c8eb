"""--override-kv: parsed as llama-server parses it, and read by llama.cpp instead of
the GGUF's own metadata while the model loads."""

from __future__ import annotations

import llama_cpp
import pytest

from mlxcel.cli.serve_args import parse_serve_args
from mlxcel.cli.usage import UsageError
from mlxcel.engine.kv_overrides import KvOverride, parse_kv_override
from mlxcel.engine.llama_runtime import LlamaRuntime, RuntimeConfig
from mlxcel.models.pull import pull


def test_each_type_and_the_list_forms(monkeypatch):
    config = parse_serve_args(["--override-kv", "a.b=int:-3,c=float:0.5", "--override-kv", "d=bool:true,e=str:x=y:z"])
    assert config.kv_overrides == (KvOverride("a.b", "int", -3), KvOverride("c", "float", 0.5),
                                   KvOverride("d", "bool", True), KvOverride("e", "str", "x=y:z"))
    assert config.ignored_flags == [] and parse_serve_args([]).kv_overrides == ()
    monkeypatch.setenv("LLAMA_ARG_OVERRIDE_KV", "f=int:1")
    assert parse_serve_args([]).kv_overrides == (KvOverride("f", "int", 1),)


@pytest.mark.parametrize("text, message", [
    ("novalue", "malformed"), ("=int:1", "malformed"), ("k=1", "invalid type"), ("k=long:1", "invalid type"),
    ("k=int:1.5", "invalid int"), ("k=int:" + "9" * 30, "64 bits"), ("k=float:nan", "finite"),
    ("k=bool:yes", "boolean"), ("k=str:" + "x" * 128, "127"), ("k" * 128 + "=int:1", "longer than 127"),
])
def test_malformed_overrides_fail_the_start_in_one_line(text, message):
    with pytest.raises(ValueError, match=message):
        parse_kv_override(text)
    with pytest.raises(UsageError, match="--override-kv"):
        parse_serve_args(["--override-kv", text])


def _runtime(*overrides: str) -> LlamaRuntime:
    path = pull("smollm2-135m-instruct", progress=False, log=lambda _msg: None)  # at once when stored
    return LlamaRuntime(RuntimeConfig(model_path=path, n_ctx=0, n_parallel=1,
                                      kv_overrides=tuple(parse_kv_override(o) for o in overrides)))


def test_llama_cpp_reads_the_overrides():
    plain = _runtime()
    try:
        trained, add_bos = plain.n_ctx_train, llama_cpp.llama_vocab_get_add_bos(plain.vocab)
    finally:
        plain.close()
    flipped = f"tokenizer.ggml.add_bos_token=bool:{str(not add_bos).lower()}"
    overridden = _runtime("llama.context_length=int:2048", flipped)
    try:
        assert (trained, overridden.n_ctx_train, overridden.n_ctx) == (8192, 2048, 2048)  # -c 0: the trained context
        assert llama_cpp.llama_vocab_get_add_bos(overridden.vocab) is (not add_bos)
    finally:
        overridden.close()


def test_an_override_of_the_wrong_type_is_ignored_with_llama_cpps_warning(caplog):
    """As in llama-server: llama.cpp warns and keeps the model's own value."""
    runtime = _runtime("llama.context_length=str:long")
    try:
        assert runtime.n_ctx_train == 8192
    finally:
        runtime.close()
    assert "Bad metadata override type for key 'llama.context_length'" in caplog.text
