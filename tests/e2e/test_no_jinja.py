"""--no-jinja: chat prompts rendered by llama.cpp's built-in formats, as llama-server
renders them without Jinja. The prompts /apply-template shows and the greedy chat
answers are the reference llama-server's, byte for byte; tools are refused as there;
a template llama.cpp knows no format like fails the start in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.reference_server import BUILD_HINT, ReferenceServer, reference_binary, same_attention
from tests.server_process import ServerProcess

CONVERSATIONS = [
    [{"role": "user", "content": "Name a colour."}],
    [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Name a colour."}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
     {"role": "user", "content": [{"type": "text", "text": "Name a colour."}, {"type": "text", "text": "Quickly."}]}],
]


@pytest.fixture(scope="module")
def legacy():
    proc = ServerProcess("-c", "1024", "-np", "1", "--no-jinja")
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def _prompts_and_answers(client) -> tuple[list[str], list[str]]:
    prompts, answers = [], []
    for messages in CONVERSATIONS:
        rendered = client.post("/apply-template", json={"messages": messages})
        assert rendered.status_code == 200, rendered.text
        prompts.append(rendered.json()["prompt"])
        answer = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 12, "temperature": 0})
        assert answer.status_code == 200, answer.text
        answers.append(answer.json()["choices"][0]["message"]["content"])
    return prompts, answers


def test_prompts_and_answers_are_llama_servers_without_jinja(legacy, http):
    binary = reference_binary()
    if binary is None:
        pytest.skip(f"the reference llama-server is not built: {BUILD_HINT}")
    with legacy.client() as client:
        ours = _prompts_and_answers(client)
    theirs_server = ReferenceServer(binary, "SmolLM2-135M-Instruct.Q4_1.gguf", "-c", "1024", "-np", "1",
                                    "--no-jinja", *same_attention(legacy))
    try:
        theirs_server.wait_ready()
        with theirs_server.client() as client:
            theirs = _prompts_and_answers(client)
    finally:
        theirs_server.stop()
    assert ours == theirs
    assert ours[0][0] == "<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n"
    assert "Name a colour.\nQuickly." in ours[0][2]
    jinja = http.post("/apply-template", json={"messages": CONVERSATIONS[0]}).json()["prompt"]
    assert jinja != ours[0][0]  # SmolLM2's own template adds its default system message


def test_tools_need_jinja(legacy):
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    with legacy.client() as client:
        with_tools = client.post("/v1/chat/completions", json={"messages": CONVERSATIONS[0], "tools": [tool]})
        forced = client.post("/v1/chat/completions", json={"messages": CONVERSATIONS[0], "tool_choice": "required"})
        still = client.post("/v1/chat/completions", json={"messages": CONVERSATIONS[0], "max_tokens": 2})
    assert with_tools.status_code == 400 and "requires --jinja" in with_tools.json()["error"]["message"]
    assert forced.status_code == 400 and "tool_choice param requires --jinja" in forced.json()["error"]["message"]
    assert still.status_code == 200


def test_a_template_llama_cpp_does_not_know_fails_the_start():
    done = subprocess.run([sys.executable, "-m", "mlxcel", "serve", "--port", "0", "-c", "512", "--no-jinja",
                           "--chat-template", "{{ messages[0].content }}"],
                          capture_output=True, text=True, timeout=120)
    errors = [line for line in done.stderr.splitlines() if line.startswith("mlxcel: error:")]
    assert done.returncode == 1 and len(errors) == 1, done.stderr[-2000:]
    assert "built-in chat template" in errors[0] and "chatml" in errors[0]
