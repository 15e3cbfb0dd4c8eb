"""Speculative decoding is turned off, with a warning, on a model whose memory cannot
drop a verify batch's rejected drafts (recurrent or hybrid): they would stay in its
state and change the output."""

import logging
from types import SimpleNamespace

import pytest

from mlxcel.config import ServerConfig
from mlxcel.turn.model_host import without_unsupported_speculation


@pytest.mark.parametrize("spec_type, model_draft", [("ngram-simple", None), ("draft-simple", "draft.gguf")])
def test_a_recurrent_model_runs_without_speculation(caplog, spec_type, model_draft):
    cfg = ServerConfig(model="m.gguf", spec_type=spec_type, model_draft=model_draft)
    with caplog.at_level(logging.WARNING, logger="mlxcel.server"):
        plain = without_unsupported_speculation(cfg, SimpleNamespace(keeps_recurrent_state=True))
    assert (plain.spec_type, plain.model_draft) == ("none", None)
    assert "recurrent" in caplog.text and spec_type in caplog.text


def test_a_transformer_keeps_its_speculation():
    cfg = ServerConfig(model="m.gguf", spec_type="draft-simple", model_draft="draft.gguf")
    assert without_unsupported_speculation(cfg, SimpleNamespace(keeps_recurrent_state=False)) is cfg
