"""Media prompts sent to mlxcel and to the reference llama-server, both started with the
same model and the same --mmproj (the tiny projectors tests/projector_gguf.py writes):
the prompt token counts must be equal, so media are placed and counted as llama.cpp's
own server does, and greedy answers equal too (same llama.cpp, same embeddings).
"gemma3" is a non-causal projector: its image rows attend to each other both ways, so
an answer only matches when the whole image is decoded in one batch with causal
attention off, as llama-server's mtmd helper does.
Skipped, with the reason shown, when the reference has not been built."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from tests.projector_gguf import png_bytes, write_audio_projector, write_gemma3_projector, write_vision_projector
from tests.reference_server import BUILD_HINT, ReferenceServer, reference_binary, same_attention
from tests.server_process import ServerProcess
from tests.unit.media_samples import wav_bytes

FLAGS = ("-c", "2048", "-np", "1")


def _png(w: int, h: int) -> dict:
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png_bytes(w, h)).decode()}}


def _wav(seconds: float) -> dict:
    t = np.arange(int(16000 * seconds)) / 16000
    data = wav_bytes((0.3 * np.sin(2 * np.pi * 330 * t))[:, None], 16000)
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": "wav"}}


def _text(text: str) -> dict:
    return {"type": "text", "text": text}


CASES = {
    "vision": [
        [_text("Describe this."), _png(32, 32)],
        [_png(100, 60), _text("What is it?")],
        [_text("A"), _png(20, 30), _text("B")],
        [_text("Compare"), _png(8, 8), _png(64, 64)],
        [_text("one"), _text("two"), _png(12, 12)],
    ],
    "gemma3": [
        [_text("Describe this."), _png(32, 32)],
        [_png(100, 60), _text("What is it?")],
        [_text("A"), _png(20, 30), _text("B")],
        [_text("Compare"), _png(8, 8), _png(64, 64)],
    ],
    "audio": [
        [_text("Transcribe."), _wav(1.0)],
        [_wav(3.0), _text("What was said?")],
        [_text("Long:"), _wav(31.0)],
    ],
}


@pytest.fixture(scope="module", params=["vision", "gemma3", "audio"])
def pair(request, tmp_path_factory):
    binary = reference_binary()
    if binary is None:
        pytest.skip(f"the reference llama-server is not built: {BUILD_HINT}")
    projector = tmp_path_factory.mktemp("mmproj") / f"{request.param}.gguf"
    writers = {"vision": write_vision_projector, "gemma3": write_gemma3_projector, "audio": write_audio_projector}
    writers[request.param](projector)
    ours = ServerProcess(*FLAGS, "--mmproj", str(projector))
    theirs = None
    try:
        ours.wait_ready()
        theirs = ReferenceServer(binary, "SmolLM2-135M-Instruct.Q4_1.gguf", *FLAGS, "--mmproj", str(projector),
                                 *same_attention(ours))
        theirs.wait_ready()
        with ours.client(timeout=120) as a, theirs.client(timeout=120) as b:
            yield request.param, a, b
    finally:
        ours.stop()
        if theirs is not None:
            theirs.stop()


def test_props_report_the_same_modalities(pair):
    _, ours, theirs = pair
    mine, reference = ours.get("/props").json()["modalities"], theirs.get("/props").json()["modalities"]
    assert mine["vision"] == reference["vision"] and mine["audio"] == reference["audio"]


def test_chat_prompts_with_media_count_and_answer_as_llama_server(pair):
    kind, ours, theirs = pair
    for content in CASES[kind]:
        body = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": content}],
                "max_tokens": 6, "temperature": 0}
        a, b = ours.post("/v1/chat/completions", json=body), theirs.post("/v1/chat/completions", json=body)
        assert a.status_code == b.status_code == 200, (a.text, b.text)
        assert a.json()["usage"]["prompt_tokens"] == b.json()["usage"]["prompt_tokens"], content
        assert a.json()["choices"][0]["message"]["content"] == b.json()["choices"][0]["message"]["content"]


def test_completion_multimodal_data_counts_and_answers_as_llama_server(pair):
    """Twice each: the second prompt is served from each server's prompt cache. A
    prompt whose last item is the media only for gemma3, which adds <end_of_image>
    text after it: a prompt ending in media chunk aborts the reference llama-server
    (server-context.cpp GGML_ASSERT(batch.size() > 0)); test_multimodal_noncausal.py
    covers it on mlxcel alone."""
    kind, ours, theirs = pair
    media = png_bytes(24, 24) if kind != "audio" else base64.b64decode(_wav(1.0)["input_audio"]["data"])
    for template in ("Here: {} and then", "Look: {}") if kind == "gemma3" else ("Here: {} and then",):
        results = []
        for client in (ours, theirs):
            marker = client.get("/props").json()["media_marker"]
            body = {"prompt": {"prompt_string": template.format(marker),
                               "multimodal_data": [base64.b64encode(media).decode()]},
                    "n_predict": 4, "temperature": 0}
            for _ in range(2):
                response = client.post("/completion", json=body)
                assert response.status_code == 200, response.text
                results.append((response.json()["tokens_evaluated"], response.json()["content"]))
        assert results[0] == results[1] == results[2] == results[3], (template, results)
