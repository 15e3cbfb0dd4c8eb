"""Images (and video, as frames) in prompts, end to end: SmolLM2 with the tiny LLaVA-style
projector the tests write (tests/projector_gguf.py: 64 tokens per image, random
weights). What the model says means nothing; what is asserted is that every API's media
part runs through the projector, counts its tokens as llama.cpp does, is deterministic
under greedy sampling, is reused from the cache by content, and that bad media fails
alone with a 4xx."""

from __future__ import annotations

import base64
import json
import threading

import pytest

from tests.projector_gguf import image_tokens, png_bytes, write_vision_projector
from tests.server_process import ServerProcess
from tests.unit.media_samples import image_bytes, png_header, video_bytes

IMAGE_TOKENS = image_tokens()
GREEDY = {"temperature": 0, "max_tokens": 8}


@pytest.fixture(scope="module")
def media_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("media-root")
    (root / "photo.png").write_bytes(png_bytes(40, 30))
    outside = tmp_path_factory.mktemp("outside") / "secret.png"
    outside.write_bytes(png_bytes(8, 8))
    (root / "escape.png").symlink_to(outside)
    return root


@pytest.fixture(scope="module")
def video_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("videos")
    (folder / "clip.mp4").write_bytes(video_bytes(seconds=1.0, fps=10))
    return folder


@pytest.fixture(scope="module")
def vision(tmp_path_factory, media_root, video_dir):
    projector = tmp_path_factory.mktemp("projector") / "vision-mmproj.gguf"
    write_vision_projector(projector)
    slot_files = tmp_path_factory.mktemp("slot-files")
    proc = ServerProcess("-c", "4096", "-np", "2", "--metrics", "--mmproj", str(projector),
                         "--slot-save-path", str(slot_files),
                         "--media-path", str(media_root), "--prefill-chunk", "16",
                         env={"MLXCEL_VIDEO_DIR_ALLOWLIST": str(video_dir)})
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


@pytest.fixture
def client(vision):
    with vision.client(timeout=120) as http:
        yield http


def data_uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def chat(content, **extra) -> dict:
    return {"messages": [{"role": "user", "content": content}], **GREEDY, **extra}


def image_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


PNG = data_uri(png_bytes(100, 60))


def text_tokens(client, text: str = "Describe this.") -> int:
    response = client.post("/v1/chat/completions", json=chat(text))
    assert response.status_code == 200, response.text
    return response.json()["usage"]["prompt_tokens"]


def metric(client, name: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def test_props_and_models_say_what_the_model_takes(client):
    assert client.get("/props").json()["modalities"] == {"vision": True, "video": True, "audio": False}
    models = client.get("/v1/models").json()
    assert models["data"][0]["vlm"] is True
    assert "multimodal" in models["models"][0]["capabilities"]


def test_an_image_costs_its_projector_tokens_and_runs_deterministically(client):
    n_text = text_tokens(client)
    body = chat([{"type": "text", "text": "Describe this."}, image_part(PNG)])
    first = client.post("/v1/chat/completions", json=body)
    assert first.status_code == 200, first.text
    assert first.json()["usage"]["prompt_tokens"] == n_text + IMAGE_TOKENS
    second = client.post("/v1/chat/completions", json=body)
    assert second.json()["choices"][0]["message"] == first.json()["choices"][0]["message"]


def test_a_repeated_image_is_neither_encoded_nor_decoded_again(client):
    body = chat([image_part(data_uri(png_bytes(33, 44))), {"type": "text", "text": "And this?"}])
    encoded = metric(client, "mlxcel_media_chunks_encoded_total")
    first = client.post("/v1/chat/completions", json=body).json()
    assert metric(client, "mlxcel_media_chunks_encoded_total") == encoded + 1
    second = client.post("/v1/chat/completions", json=body).json()
    assert metric(client, "mlxcel_media_chunks_encoded_total") == encoded + 1  # not encoded again
    # its KV memory is reused too: every position but the last one decoded again
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == first["usage"]["prompt_tokens"] - 1
    assert second["choices"][0]["message"] == first["choices"][0]["message"]


def test_a_different_image_in_the_same_place_is_not_taken_from_the_cache(client):
    first = client.post("/v1/chat/completions", json=chat([image_part(data_uri(png_bytes(20, 20)))])).json()
    other = data_uri(image_bytes("PNG", size=(20, 20), colour=(0, 0, 255)))
    second = client.post("/v1/chat/completions", json=chat([image_part(other)])).json()
    assert second["usage"]["prompt_tokens"] == first["usage"]["prompt_tokens"]
    # the shared prefix ends where the image starts
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] < first["usage"]["prompt_tokens"] - IMAGE_TOKENS


def test_streamed_chat_with_an_image_matches_the_whole_answer(client):
    body = chat([{"type": "text", "text": "Describe this."}, image_part(PNG)])
    whole = client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
    text = ""
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for choice in json.loads(line[6:]).get("choices", []):
                    text += choice["delta"].get("content") or ""
    assert text == whole


def test_an_image_prefills_beside_other_streams_without_changing_them(client):
    """Batched with text streams (prefill chunks of 16 here): each answer is what it is alone."""
    image_body = chat([{"type": "text", "text": "Describe this."}, image_part(data_uri(png_bytes(64, 48)))],
                      max_tokens=12)
    text_body = chat("Count from one to twenty in words.", max_tokens=40)
    alone = [client.post("/v1/chat/completions", json=b).json()["choices"][0]["message"]["content"]
             for b in (image_body, text_body)]
    results = [None, None]

    def run(i, b):
        results[i] = client.post("/v1/chat/completions", json=b).json()["choices"][0]["message"]["content"]

    threads = [threading.Thread(target=run, args=(1, text_body)), threading.Thread(target=run, args=(0, image_body))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == alone


def test_a_slot_saved_with_an_image_restores_and_answers_as_before(client):
    """The file keeps the image's positions as their stand-in ids: restored into another
    slot, the same request takes its prompt from it and answers as before (the restore
    was a 400 "Invalid tokens in slot save file")."""
    body = chat([{"type": "text", "text": "What is in it?"}, image_part(data_uri(png_bytes(48, 20)))])
    first = client.post("/v1/chat/completions", json={**body, "id_slot": 0}).json()
    saved = client.post("/slots/0?action=save", json={"filename": "with-image.bin"})
    assert saved.status_code == 200, saved.text
    assert saved.json()["n_saved"] >= first["usage"]["prompt_tokens"]
    assert client.post("/v1/chat/completions", json={**chat("Something else."), "id_slot": 1}).status_code == 200
    restored = client.post("/slots/1?action=restore", json={"filename": "with-image.bin"})
    assert restored.status_code == 200, restored.text
    assert restored.json()["n_restored"] == saved.json()["n_saved"]
    again = client.post("/v1/chat/completions", json={**body, "id_slot": 1}).json()
    assert again["choices"][0]["message"] == first["choices"][0]["message"]
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == first["usage"]["prompt_tokens"] - 1


def test_anthropic_image_blocks_base64_and_url(client, media_root):
    def count(content) -> int:
        body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": content}]}
        response = client.post("/v1/messages/count_tokens", json=body)
        assert response.status_code == 200, response.text
        return response.json()["input_tokens"]

    n_text = count("Describe this.")
    png = base64.b64encode(png_bytes(10, 10)).decode()
    blocks = [{"type": "text", "text": "Describe this."},
              {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}]
    assert count(blocks) == n_text + IMAGE_TOKENS
    response = client.post("/v1/messages", json={"model": "m", "max_tokens": 4, "temperature": 0,
                                                  "messages": [{"role": "user", "content": blocks}]})
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]  # Anthropic's input_tokens leave out what the cache held
    assert usage["input_tokens"] + usage.get("cache_read_input_tokens", 0) == n_text + IMAGE_TOKENS
    local = [{"type": "image", "source": {"type": "url", "url": (media_root / "photo.png").as_uri()}}]
    assert count(local) > IMAGE_TOKENS


def test_anthropic_tool_result_carries_an_image(client):
    """A tool_result's content may hold image blocks (a screenshot tool's answer), as
    Anthropic's API takes them: the image is placed and counted (it was a 400, "image
    blocks are not supported here"); a bad one is refused at its own path."""
    def messages(result_content) -> list[dict]:
        return [{"role": "user", "content": "Take a screenshot."},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": result_content}]}]

    def count(result_content):
        return client.post("/v1/messages/count_tokens", json={"model": "m", "messages": messages(result_content)})

    png = base64.b64encode(png_bytes(10, 10)).decode()
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}
    text_only, with_image = count([{"type": "text", "text": "done"}]), count([{"type": "text", "text": "done"}, image])
    assert with_image.status_code == 200, with_image.text
    assert with_image.json()["input_tokens"] == text_only.json()["input_tokens"] + IMAGE_TOKENS
    answer = client.post("/v1/messages", json={"model": "m", "max_tokens": 2, "messages": messages([image])})
    assert answer.status_code == 200, answer.text
    bad = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    refused = count([{"type": "text", "text": "done"}, bad])
    assert refused.status_code == 415 and refused.json()["error"]["message"].startswith(
        "messages[2].content[0].content[1]: "), refused.text


def test_responses_input_image(client):
    item = {"role": "user", "content": [{"type": "input_text", "text": "Describe this."},
                                        {"type": "input_image", "image_url": PNG, "detail": "auto"}]}
    body = {"model": "m", "input": [item], "max_output_tokens": 4, "temperature": 0, "store": False}
    response = client.post("/v1/responses", json=body)
    assert response.status_code == 200, response.text
    text_only = client.post("/v1/responses", json={**body, "input": "Describe this."}).json()
    assert response.json()["usage"]["input_tokens"] == text_only["usage"]["input_tokens"] + IMAGE_TOKENS
    counted = client.post("/v1/responses/input_tokens", json={"model": "m", "input": [item]})
    assert counted.json()["input_tokens"] == response.json()["usage"]["input_tokens"]
    by_file = {"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]}
    refused = client.post("/v1/responses", json={**body, "input": [by_file]})
    assert refused.status_code == 400 and "file_id" in refused.json()["error"]["message"]


def test_responses_function_call_output_carries_an_image(client):
    """A function_call_output's `output` may be content parts with an input_image (a
    screenshot tool's answer, as OpenAI's Responses takes it): the image is placed and
    counted (it was a 400, "input_image input is not supported here"); a bad one is
    refused at the client's own path, input[i].output[j]."""
    def items(output) -> list[dict]:
        return [{"role": "user", "content": "Take a screenshot."},
                {"type": "function_call", "call_id": "c1", "name": "shot", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": output}]

    def count(output):
        return client.post("/v1/responses/input_tokens", json={"model": "m", "input": items(output)})

    text = {"type": "input_text", "text": "done"}
    with_image = count([text, {"type": "input_image", "image_url": PNG}])
    assert with_image.status_code == 200, with_image.text
    assert with_image.json()["input_tokens"] == count([text]).json()["input_tokens"] + IMAGE_TOKENS
    body = {"model": "m", "input": items([{"type": "input_image", "image_url": PNG}]), "max_output_tokens": 2,
            "store": False}
    answer = client.post("/v1/responses", json=body)
    assert answer.status_code == 200, answer.text
    refused = count([text, {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}])
    assert refused.status_code == 415 and refused.json()["error"]["message"].startswith("input[2].output[1]: "), \
        refused.text


def test_completion_multimodal_data_at_the_media_marker(client):
    marker = client.get("/props").json()["media_marker"]
    plain = client.post("/completion", json={"prompt": "Look:  now", "n_predict": 4, "temperature": 0}).json()
    raw = base64.b64encode(png_bytes(16, 16)).decode()
    body = {"prompt": {"prompt_string": f"Look: {marker} now", "multimodal_data": [raw]}, "n_predict": 4,
            "temperature": 0}
    response = client.post("/completion", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["tokens_evaluated"] == plain["tokens_evaluated"] + IMAGE_TOKENS
    wrong = {"prompt": {"prompt_string": "no marker here", "multimodal_data": [raw]}, "n_predict": 1}
    assert client.post("/completion", json=wrong).status_code == 400


def test_completion_multimodal_data_takes_a_webp_image(client):
    """A WebP file starts with RIFF like a WAV: it is an image all the same (it was sent
    to the audio decoder, a 415 "unsupported audio format")."""
    marker = client.get("/props").json()["media_marker"]
    webp = base64.b64encode(image_bytes("WEBP", (16, 16))).decode()
    body = {"prompt": {"prompt_string": f"Look: {marker} now", "multimodal_data": [webp]}, "n_predict": 1}
    response = client.post("/completion", json=body)
    assert response.status_code == 200, response.text
    plain = client.post("/completion", json={"prompt": "Look:  now", "n_predict": 1}).json()
    assert response.json()["tokens_evaluated"] == plain["tokens_evaluated"] + IMAGE_TOKENS


def test_a_prompt_ending_in_an_image_samples_right_after_it(client):
    """The image is the prompt's last item (the mlp projector adds no text after it): its
    last row's logits are sampled, after the whole image (64 rows, prefilled in chunks of
    16 beside nothing) and, from the cache, after that row alone; both answer as with no
    cache. (llama-server aborts on this prompt: GGML_ASSERT(batch.size() > 0).)"""
    marker = client.get("/props").json()["media_marker"]
    body = {"prompt": {"prompt_string": f"Look: {marker}", "multimodal_data": [base64.b64encode(png_bytes(28, 36)).decode()]},
            "n_predict": 8, "temperature": 0}
    first, second = (client.post("/completion", json=body).json() for _ in range(2))
    uncached = client.post("/completion", json={**body, "cache_prompt": False}).json()
    assert first["content"] == second["content"] == uncached["content"] != ""
    assert second["timings"]["cache_n"] == first["tokens_evaluated"] - 1
    assert uncached["timings"]["cache_n"] == 0


def test_video_frames_are_ordered_images(client):
    clip = data_uri(video_bytes(seconds=1.0, fps=10), "video/mp4")
    body = chat([{"type": "text", "text": "What happens?"},
                 {"type": "video_url", "video_url": {"url": clip, "fps": 3}}], max_tokens=2)
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    n_frames = (response.json()["usage"]["prompt_tokens"] - text_tokens(client, "What happens?")) / IMAGE_TOKENS
    assert n_frames == 3


def test_local_media_only_under_the_roots_and_video_only_under_the_allowlist(client, media_root, video_dir):
    ok = client.post("/v1/chat/completions", json=chat([image_part(str(media_root / "photo.png"))]))
    assert ok.status_code == 200, ok.text
    escape = client.post("/v1/chat/completions", json=chat([image_part((media_root / "escape.png").as_uri())]))
    assert escape.status_code == 400, escape.text
    dotdot = client.post("/v1/chat/completions", json=chat([image_part(f"{media_root}/../x/../photo.png")]))
    assert dotdot.status_code == 400, dotdot.text
    video = {"type": "video_url", "video_url": {"url": str(video_dir / "clip.mp4"), "fps": 2}}
    assert client.post("/v1/chat/completions", json=chat([video])).status_code == 200
    (media_root / "clip.mp4").write_bytes((video_dir / "clip.mp4").read_bytes())
    outside = {"type": "video_url", "video_url": {"url": str(media_root / "clip.mp4")}}
    assert client.post("/v1/chat/completions", json=chat([outside])).status_code == 400


@pytest.mark.parametrize("content, status, needle", [
    ([image_part("data:image/png;base64,@@@not-base64@@@")], 400, "base64"),
    ([image_part(data_uri(b"not an image at all"))], 415, ""),
    ([image_part(data_uri(png_header(100_000, 100_000)))], 413, "too large"),
    ([{"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}], 400, "audio"),
    ([{"type": "image_url", "image_url": {}}], 400, "url"),
    ([{"type": "image_url", "image_url": 5}], 400, "url"),
    ([{"type": "image_url", "image_url": {"url": ["x"]}}], 400, "url"),
    ([image_part("data:image/png;base64,")], 400, ""),
    ([image_part("ftp://example.com/a.png")], 400, ""),
    ([{"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA", "fps": -1}}], 400, "fps"),
    ([image_part(PNG)] * 17, 400, "16"),
    ([image_part("http://127.0.0.1:9/secret.png")], 400, ""),
    ([image_part("file:///etc/passwd")], 400, ""),
    ([{"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}},
      {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}], 400,
     "Combined video and audio inputs are not supported"),
])
def test_bad_media_fails_alone_with_a_4xx(client, content, status, needle):
    response = client.post("/v1/chat/completions", json=chat(content))
    assert response.status_code == status, response.text
    assert needle in response.json()["error"]["message"]
    assert client.post("/v1/chat/completions", json=chat("Still there?")).status_code == 200


def test_the_media_marker_in_text_cannot_stand_for_media(client):
    marker = client.get("/props").json()["media_marker"]
    response = client.post("/v1/chat/completions", json=chat([{"type": "text", "text": f"x {marker} y"},
                                                              image_part(PNG)]))
    assert response.status_code == 400


def test_media_on_a_text_only_model_is_a_400_naming_it(http):
    response = http.post("/v1/chat/completions", json=chat([image_part(PNG)]))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "unsupported_content_type" and "smollm2" in error["message"].lower()


def test_a_config_file_gives_one_model_its_projector(tmp_path):
    """Many models in one server (--config): a model's `mmproj` key is its --mmproj."""
    projector = tmp_path / "mmproj.gguf"
    write_vision_projector(projector)
    config = tmp_path / "models.yaml"
    config.write_text(f"models:\n  seeing:\n    path: smollm2-135m-instruct\n    mmproj: {projector}\n"
                      "  blind:\n    path: smollm2-135m-instruct\n")
    proc = ServerProcess("--config", str(config), model=None)
    try:
        with proc.wait_ready().client(timeout=120) as fleet:
            listed = {m["id"]: m for m in fleet.get("/v1/models").json()["data"]}
            assert listed["seeing"]["vlm"] is True and listed["seeing"]["modalities"]["vision"] is True
            assert listed["blind"]["vlm"] is False
            seen = fleet.post("/v1/chat/completions", json={**chat([image_part(PNG)]), "model": "seeing"})
            assert seen.status_code == 200, seen.text
            refused = fleet.post("/v1/chat/completions", json={**chat([image_part(PNG)]), "model": "blind"})
            assert refused.status_code == 400 and "blind" in refused.json()["error"]["message"]
    finally:
        proc.stop()


def test_a_dry_run_renders_a_media_request_without_loading_its_media(client):
    """003: a media request is rendered but not estimated: nothing is fetched or encoded."""
    encoded = metric(client, "mlxcel_media_chunks_encoded_total")
    body = chat([{"type": "text", "text": "Describe this."}, image_part(data_uri(png_bytes(71, 13)))], dry_run=True)
    answer = client.post("/v1/chat/completions", json=body).json()
    assert answer["media_parts"] == 1 and answer["est_ttft_s"] is None and answer["prompt_tokens_estimated"] is True
    assert answer["prompt_tokens"] == text_tokens(client, "Describe this.")  # the text, media not counted
    assert metric(client, "mlxcel_media_chunks_encoded_total") == encoded
