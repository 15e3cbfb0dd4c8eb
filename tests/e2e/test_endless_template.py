"""A chat template that never ends (an operator's --chat-template-file): each request that
renders it fails alone with a template_error once the render's time is up, in each API's
error shape, while /props and /health answer at once."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.server_process import ServerProcess

ENDLESS = ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
           "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:")
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def endless(tmp_path_factory):
    folder = tmp_path_factory.mktemp("endless")
    (folder / "endless.jinja").write_text(ENDLESS)
    proc = ServerProcess("-c", "512", "-np", "1", "--chat-template-file", str(folder / "endless.jinja"))
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def test_each_render_fails_its_request_while_the_server_answers(endless):
    requests = [
        ("/v1/chat/completions", {"messages": HI, "max_tokens": 4}),
        ("/v1/chat/completions", {"messages": HI, "max_tokens": 4, "stream": True}),
        ("/v1/messages", {"model": "m", "messages": HI, "max_tokens": 4}),
        ("/v1/responses", {"input": "hi", "max_output_tokens": 16}),
    ]
    with endless.client() as client, ThreadPoolExecutor(len(requests)) as pool:
        renders = [pool.submit(client.post, path, json=body) for path, body in requests]
        time.sleep(1)  # the renders are running
        started = time.monotonic()
        props = client.get("/props")
        health = client.get("/health")
        waited = time.monotonic() - started
        answers = [render.result() for render in renders]
    assert props.status_code == 200 and health.status_code == 200
    assert waited < 5, f"/props and /health waited {waited:.1f} s"
    assert not any(props.json()["chat_template_caps"].values())  # its probes ran out of time too
    for (path, _), answer in zip(requests, answers):
        assert answer.status_code == 400, (path, answer.text)
        error = answer.json()["error"]
        assert "rendering took longer than 10 s" in error["message"], (path, error)
        assert error["type"] == "invalid_request_error"
    assert answers[2].json()["type"] == "error"  # Anthropic's envelope
    assert "Traceback" not in endless.log()
