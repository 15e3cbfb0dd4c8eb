from __future__ import annotations

import pytest

from tests.redis_server import RedisServer
from tests.server_process import ServerProcess


@pytest.fixture(scope="session")
def server():
    """The shared server: SmolLM2, 4 slots of 1024 tokens, metrics on."""
    proc = ServerProcess("-c", "4096", "-np", "4", "--metrics", "--queue-cap", "8")
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


@pytest.fixture
def http(server):
    with server.client() as client:
        yield client


@pytest.fixture
def openai_client(server):
    from openai import OpenAI

    return OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def qwen():
    """Qwen2.5-Coder-0.5B: the model with a tool-calling template and FIM tokens."""
    # it speculates (the default) and verifies every draft, whatever batches cost here
    proc = ServerProcess("-c", "8192", "-np", "2", model="qwen2.5-coder-0.5b-instruct",
                         env={"MLXCEL_SPEC_COST_MODEL": "0"})
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


@pytest.fixture
def qwen_client(qwen):
    from openai import OpenAI

    return OpenAI(base_url=f"{qwen.base_url}/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """A real redis-server of our own (never the system's on 6379)."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    try:
        yield server.wait_ready()
    finally:
        server.stop()
