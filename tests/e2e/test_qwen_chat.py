"""Chat completions on Qwen2.5-Coder-0.5B through the OpenAI SDK."""

from __future__ import annotations

QUESTION = [{"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": "Write a Python one-liner that reverses the string s."}]


def test_chat_and_stream_agree(qwen_client):
    # cache_prompt false: a prefix-cache hit may flip a near-tie greedy token (see the spec)
    cold = {"cache_prompt": False}
    whole = qwen_client.chat.completions.create(model="qwen", messages=QUESTION, temperature=0, max_tokens=40,
                                                extra_body=cold)
    assert "[::-1]" in whole.choices[0].message.content
    chunks = list(qwen_client.chat.completions.create(model="qwen", messages=QUESTION, temperature=0, max_tokens=40,
                                                      stream=True, extra_body=cold))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content


def test_health_reports_a_tool_call_parser(qwen):
    with qwen.client() as client:
        assert client.get("/health").json()["tool_call_parser"] == "mlxcel"
