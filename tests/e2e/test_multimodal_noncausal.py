"""A non-causal projector end to end: SmolLM2 with the tiny ``gemma3`` projector the tests
write (tests/projector_gguf.py: 36 tokens per image between <start_of_image> and
<end_of_image> text, random weights). Its image rows attend to each other both ways, so
the engine decodes an image whole, in a batch of its own with causal attention off, even
where prefill is chunked (--prefill-chunk 16 here, which would split a causal image), and
never keeps part of one in its prompt cache. test_multimodal_parity.py checks the answers
against llama-server; here, that they do not change with what runs beside them or with
what the cache holds, and that an image too wide for one micro-batch is refused instead of
aborting the process (llama.cpp's GGML_ASSERT)."""

from __future__ import annotations

import base64
import json
import threading

import pytest

from tests.projector_gguf import gemma3_image_tokens, png_bytes, write_gemma3_projector
from tests.server_process import ServerProcess

IMAGE_TOKENS = gemma3_image_tokens()


@pytest.fixture(scope="module")
def projector(tmp_path_factory):
    path = tmp_path_factory.mktemp("projector") / "gemma3-mmproj.gguf"
    write_gemma3_projector(path)
    return path


@pytest.fixture(scope="module")
def client(projector):
    proc = ServerProcess("-c", "4096", "-np", "2", "--mmproj", str(projector), "--prefill-chunk", "16")
    try:
        proc.wait_ready()
        with proc.client(timeout=120) as http:
            yield http
    finally:
        proc.stop()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def image_chat(png: bytes, text: str = "Describe this.", max_tokens: int = 12) -> dict:
    content = [{"type": "text", "text": text},
               {"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64(png)}}]
    return {"messages": [{"role": "user", "content": content}], "temperature": 0, "max_tokens": max_tokens}


def n_tokens(client, text: str) -> int:
    return len(client.post("/tokenize", json={"content": text}).json()["tokens"])


def completion(client, prompt, **extra) -> dict:
    response = client.post("/completion", json={"prompt": prompt, "n_predict": 8, "temperature": 0, **extra})
    assert response.status_code == 200, response.text
    return response.json()


def test_an_image_costs_its_tokens_and_the_text_around_it(client):
    marker = client.get("/props").json()["media_marker"]
    assert client.get("/props").json()["modalities"]["vision"] is True
    plain = completion(client, "Look: ")["tokens_evaluated"]
    with_image = completion(client, {"prompt_string": f"Look: {marker}", "multimodal_data": [b64(png_bytes(16, 16))]})
    around = n_tokens(client, "<start_of_image>") + n_tokens(client, "<end_of_image>")
    assert with_image["tokens_evaluated"] == plain + around + IMAGE_TOKENS


def answer(response) -> tuple[str, list]:
    """The text and, rounded, the first position's top log-probabilities: rows split
    into chunks of 16 move these in the second decimal even where the greedy text holds."""
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    top = choice["logprobs"]["content"][0]["top_logprobs"]
    return choice["message"]["content"], [(t["token"], round(t["logprob"], 3)) for t in top]


@pytest.mark.parametrize("size", [(64, 48), (16, 16)])
def test_an_image_answers_the_same_alone_and_beside_a_decoding_stream(client, size):
    """Beside a decoding stream, prefill takes 16 rows a step; the 36 image rows still go
    whole: split, the first rows would not see the later ones and the answer would move."""
    body = {**image_chat(png_bytes(*size), max_tokens=24), "logprobs": True, "top_logprobs": 3, "cache_prompt": False}
    alone = answer(client.post("/v1/chat/completions", json=body))
    decoding, finished, served = threading.Event(), threading.Event(), threading.Event()
    # long enough to outlast the image on a slow host, and with nothing to draft from
    # another request's output (the same stream ran for the other size): it is closed
    # once the image is served
    text = {"prompt": "Count from one to one hundred in words.", "n_predict": 2000, "ignore_eos": True,
            "temperature": 0, "stream": True, "cache_prompt": False}

    def stream():
        with client.stream("POST", "/completion", json=text) as response:
            for line in response.iter_lines():
                if served.is_set():
                    return
                if line.startswith("data: ") and json.loads(line[6:]).get("content"):
                    decoding.set()
        finished.set()

    thread = threading.Thread(target=stream)
    thread.start()
    try:
        assert decoding.wait(60)
        beside = answer(client.post("/v1/chat/completions", json=body))
        assert not finished.is_set(), "the text stream ended before the image was served: nothing ran beside it"
    finally:
        served.set()
        thread.join()
    assert beside == alone


def test_a_prompt_ending_in_an_image_answers_the_same_from_the_cache(client):
    """mtmd puts <end_of_image> text after a gemma3 image, so the image is not the last
    position: the second request reuses the whole image from the slot and decodes only
    the last position again. The answer equals the one computed with no cache at all."""
    marker = client.get("/props").json()["media_marker"]
    prompt = {"prompt_string": f"Look: {marker}", "multimodal_data": [b64(png_bytes(40, 30))]}
    first, second = completion(client, prompt), completion(client, prompt)
    uncached = completion(client, prompt, cache_prompt=False)
    assert first["content"] == second["content"] == uncached["content"]
    assert second["tokens_evaluated"] == first["tokens_evaluated"]
    assert second["timings"]["cache_n"] == first["tokens_evaluated"] - 1
    assert uncached["timings"]["cache_n"] == 0


def test_an_image_wider_than_a_micro_batch_is_refused_not_fatal(projector):
    """llama.cpp aborts the process when a non-causal batch exceeds n_ubatch (and so does
    llama-server with its mtmd helper): mlxcel refuses the request with a 400."""
    proc = ServerProcess("-c", "2048", "-np", "1", "-b", "64", "-ub", "16", "--mmproj", str(projector))
    try:
        proc.wait_ready()
        with proc.client(timeout=120) as http:
            response = http.post("/v1/chat/completions", json=image_chat(png_bytes(16, 16), max_tokens=2))
            assert response.status_code == 400, response.text
            assert "--ubatch-size 16" in response.json()["error"]["message"]
            assert http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                           "max_tokens": 2}).status_code == 200
    finally:
        proc.stop()
