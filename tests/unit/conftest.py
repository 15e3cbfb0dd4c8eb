"""Model files for unit tests: pulled from the catalog when missing, or written."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxcel.models.pull import pull
from tests.fixtures.think_model import write_think_model


def _pull_quietly(name: str) -> Path:
    return pull(name, progress=False, log=lambda _msg: None)


@pytest.fixture(scope="session")
def think_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random llama GGUF with SmolLM2's vocabulary and Qwen3's thinking template."""
    return write_think_model(tmp_path_factory.mktemp("think-model") / "think.gguf")


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    return _pull_quietly("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def qwen_coder_path() -> Path:
    return _pull_quietly("qwen2.5-coder-0.5b-instruct")
