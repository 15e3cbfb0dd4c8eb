"""Prompt-lookup speculative decoding (on by default): drafts verified in one batch,
greedy output unchanged, and the draft counters exactly where the spec puts them.

The comparisons stay under 256 positions per sequence: below that, llama.cpp's CPU
kernels give bit-identical logits for one token and for a verify batch with the test
servers' two threads (with one thread, SmolLM2's part from about position 80); past 256
KV cells they differ in the last bits by batch shape, so a near-tie can flip (the
same split-computation effect as a prompt-cache hit). A token decoded in the same batch
as another slot's prompt can differ that way too (seen once in CI: 0.05 nats apart at
the second token), so the test beside another slot allows a split at a near tie."""

from __future__ import annotations

import json

import pytest

from tests.server_process import ServerProcess

CODE = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n    return a * b\n"
EDIT = [{"role": "user", "content": f"Rewrite this code, renaming add to plus:\n```python\n{CODE}```"}]


# Verify batches cost as much a token as single decodes on some CPUs (SmolLM2 on a Zen 3
# guest: 1 token 9 ms, 8 tokens 70 ms), where the cost model rightly drafts nothing:
# these servers verify every proposed draft, so the drafts themselves are tested.
DRAFT_ALWAYS = {"MLXCEL_SPEC_COST_MODEL": "0"}


def _spec_server(model, *args):
    proc = ServerProcess("-c", "2048", "-np", "2", "--spec-type", "ngram-simple", "--spec-draft-n-max", "8", *args,
                         model=model, env=DRAFT_ALWAYS)
    return proc


@pytest.fixture(scope="module")
def smol_spec():
    proc = _spec_server("smollm2-135m-instruct", "--metrics")
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def smol_plain():
    proc = ServerProcess("-c", "2048", "-np", "4", "--spec-type", "none")
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def _chat(client, **extra):
    body = {"messages": EDIT, "temperature": 0, "max_tokens": 90, "cache_prompt": False, **extra}
    return client.post("/v1/chat/completions", json=body).json()


def test_greedy_output_is_identical_with_and_without_speculation_smollm2(smol_spec, smol_plain):
    with smol_plain.client() as client:
        plain = _chat(client)
    with smol_spec.client() as client:
        fast = _chat(client)
    assert fast["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    assert fast["usage"]["prompt_tokens"] + fast["usage"]["completion_tokens"] < 256
    timings = fast["timings"]
    assert timings["draft_kind"] == "prompt-lookup"
    assert timings["draft_rounds"] > 0 and 0 < timings["draft_n_accepted"] <= timings["draft_n"]
    assert "timings" not in plain  # no drafter, no timings object


def test_greedy_output_is_identical_with_and_without_speculation_qwen(qwen):
    """The shared Qwen server speculates (the default); a plain one is started here.
    Verifying a draft decodes several of the slot's tokens in one batch, which takes
    other matrix kernels than one token at a time: on a Sapphire Rapids guest the
    two runs met a near tie (' sub' / ' minus') and split there, with the weights
    repacked or plain. So they must agree but at such a tie."""
    scored = {"logprobs": True, "top_logprobs": 2}
    proc = ServerProcess("-c", "2048", "-np", "2", "--spec-type", "none", model="qwen2.5-coder-0.5b-instruct")
    try:
        proc.wait_ready()
        with proc.client() as client:
            plain = _chat(client, **scored)
    finally:
        proc.stop()
    with qwen.client() as client:
        fast = _chat(client, **scored)
    _assert_same_greedy_text_but_at_a_near_tie(fast, plain)
    assert fast["timings"]["draft_n_accepted"] > 0


STORIES = ["a lighthouse keeper", "a robot learning to paint", "bread in three countries", "a winter journey"]


def test_free_generation_on_four_streams_is_the_plain_greedy_text(smol_spec, smol_plain):
    """Text the model does not copy, four streams at once: whatever drafting does or
    does not do (it backs off where proposals fail), the output is plain greedy's."""
    from concurrent.futures import ThreadPoolExecutor

    def story(proc, topic):
        with proc.client() as client:
            return client.post("/completion", json={
                "prompt": f"Write a short story about {topic}.\n", "n_predict": 160, "temperature": 0,
                "cache_prompt": False}).json()

    with ThreadPoolExecutor(4) as pool:
        fast = list(pool.map(lambda topic: story(smol_spec, topic), STORIES))
    plain = [story(smol_plain, topic) for topic in STORIES]
    for f, p in zip(fast, plain):
        assert f["content"] == p["content"] and f["tokens_predicted"] == p["tokens_predicted"]
        assert f["tokens_evaluated"] + f["tokens_predicted"] < 256
    assert "draft_n" not in plain[0]["timings"]


def test_draft_counters_only_on_the_finish_chunk_and_native_timings(smol_spec):
    with smol_spec.client() as client:
        with client.stream("POST", "/v1/chat/completions", json={
            "messages": EDIT, "temperature": 0, "max_tokens": 60, "stream": True, "cache_prompt": False
        }) as response:
            chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
        native = client.post("/completion", json={"prompt": CODE + CODE, "n_predict": 40, "temperature": 0,
                                                  "cache_prompt": False}).json()
    finishing = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finishing) == 1 and finishing[0]["timings"]["draft_kind"] == "prompt-lookup"
    assert all("timings" not in c for c in chunks if c not in finishing)
    assert native["timings"]["draft_kind"] == "prompt-lookup" and native["timings"]["draft_rounds"] > 0


def test_metrics_count_the_accepted_drafts_per_draft_position(smol_spec):
    """llama-server's labeled counter llamacpp:spec_decode_num_accepted_tokens_per_pos_total:
    a series per draft position, each round's accepted drafts counted at their positions,
    so the series fall with the position and add up to the accepted-tokens counter."""
    with smol_spec.client() as client:
        reply = _chat(client, max_tokens=60)
        assert reply["timings"]["draft_n_accepted"] > 0
        text = client.get("/metrics").text
    name = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
    assert f"# TYPE {name} counter" in text
    per_position = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            label, value = line[len(name):].split(" ")
            per_position[int(label.removeprefix('{position="').removesuffix('"}'))] = float(value)
    counts = [per_position[i] for i in range(len(per_position))]
    assert len(counts) >= 8 and counts[0] > 0
    assert counts == sorted(counts, reverse=True)  # a draft is accepted only after those before it
    totals = dict(line.split(" ") for line in text.splitlines() if line.startswith("llamacpp:spec_decode_num_"))
    assert sum(counts) == float(totals["llamacpp:spec_decode_num_accepted_tokens_total"])
    assert counts[0] <= float(totals["llamacpp:spec_decode_num_drafts_total"])


def _assert_same_greedy_text_but_at_a_near_tie(beside: dict, alone: dict, margin: float = 0.25) -> None:
    """Two greedy runs of one request agree token for token, except where llama.cpp's
    batch-shaped arithmetic meets a near tie: a token decoded in the same batch as another
    slot's prompt goes through other matrix kernels than alone, and its logits differ in
    the last bits. So at the first token they differ, both picks must be the lone run's two
    likeliest, within `margin` nats of each other."""
    ours = beside["choices"][0]["logprobs"]["content"]
    reference = alone["choices"][0]["logprobs"]["content"]
    picks, expected = [t["token"] for t in ours], [t["token"] for t in reference]
    if picks == expected:
        return
    at = next(i for i, (a, b) in enumerate(zip(picks, expected)) if a != b)
    top = {c["token"]: c["logprob"] for c in reference[at]["top_logprobs"]}
    assert picks[at] in top, f"token {at}: {picks[at]!r} is not among the lone run's two likeliest {top}"
    assert abs(top[picks[at]] - top[expected[at]]) < margin, f"token {at} split at no tie: {top}"


def test_speculation_runs_alongside_other_slots(smol_spec):
    from concurrent.futures import ThreadPoolExecutor

    def run(extra):
        with smol_spec.client() as client:
            return _chat(client, **extra)

    scored = {"logprobs": True, "top_logprobs": 2}
    story = {"messages": [{"role": "user", "content": "Tell me a story."}]}
    with ThreadPoolExecutor(2) as pool:
        edited, story = pool.map(run, [scored, story])
    with smol_spec.client() as client:
        alone = _chat(client, **scored)
    assert edited["timings"]["draft_n"] > 0  # it speculated while the other slot ran
    _assert_same_greedy_text_but_at_a_near_tie(edited, alone)
    assert story["choices"][0]["message"]["content"]


def test_draft_model_speculation(smol_plain):
    """A draft model with the same vocabulary (here the model itself, so every draft
    is accepted): greedy output unchanged, counters of kind draft-model."""
    proc = ServerProcess("-c", "2048", "-np", "1", "--model-draft", "smollm2-135m-instruct", "--spec-draft-n-max", "6",
                         env=DRAFT_ALWAYS)
    try:
        proc.wait_ready()
        with proc.client() as client:
            fast = _chat(client)
            unpredicted = _ask(client)
            reply = unpredicted["choices"][0]["message"]["content"]
            predicted = _ask(client, prediction=_predicted(reply))
    finally:
        proc.stop()
    with smol_plain.client() as client:
        plain = _chat(client)
    assert fast["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    timings = fast["timings"]
    assert timings["draft_kind"] == "draft-model" and timings["draft_rounds"] > 0
    # a model agrees with itself: only the round that ends the generation loses drafts
    # (up to 6 past the end, counted: that round is the request's too), and a near tie's
    assert timings["draft_n"] - timings["draft_n_accepted"] <= 12
    # beside the draft model, a prediction expected to hold longer is drafted instead
    assert predicted["choices"][0]["message"]["content"] == reply
    details = predicted["usage"]["completion_tokens_details"]
    assert details["accepted_prediction_tokens"] >= 0.5 * predicted["usage"]["completion_tokens"], details


def test_draft_model_must_share_the_vocabulary():
    proc = ServerProcess("-c", "1024", "-np", "1", "--model-draft", "qwen2.5-coder-0.5b-instruct")
    try:
        with pytest.raises(RuntimeError, match="tokens"):
            proc.wait_ready(timeout=120)
    finally:
        proc.stop()


def test_speculation_is_on_by_default_and_none_turns_it_off(smol_plain):
    body = {"prompt": CODE + CODE, "n_predict": 40, "temperature": 0, "cache_prompt": False}
    proc = ServerProcess("-c", "2048", "-np", "1", env=DRAFT_ALWAYS)  # no --spec-type: the default
    try:
        with proc.wait_ready().client() as client:
            copied = client.post("/completion", json=body).json()
    finally:
        proc.stop()
    assert copied["timings"]["draft_kind"] == "prompt-lookup" and copied["timings"]["draft_n_accepted"] > 0
    with smol_plain.client() as client:
        plain = client.post("/completion", json=body).json()
    assert "draft_n" not in plain["timings"] and plain["content"] == copied["content"]


def test_a_draft_model_drafts_and_leaves_greedy_output_unchanged(smol_plain):
    """`-md`: a second model drafts greedily (its argmax taken on its own logits row in
    C) and the target verifies. SmolLM2 drafting for itself proposes what the target
    would pick, so drafts are accepted and the answer is the plain server's."""
    from mlxcel.models.pull import resolve_model

    draft = str(resolve_model("smollm2-135m-instruct"))
    proc = ServerProcess("-c", "2048", "-np", "1", "-md", draft, "--spec-draft-n-max", "8", env=DRAFT_ALWAYS)
    try:
        proc.wait_ready()
        with smol_plain.client() as client:
            plain = _chat(client)
        with proc.client() as client:
            drafted = _chat(client)
    finally:
        proc.stop()
    assert drafted["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    timings = drafted["timings"]
    assert timings["draft_kind"] == "draft-model"
    assert timings["draft_rounds"] > 0 and 0 < timings["draft_n_accepted"] <= timings["draft_n"]


# OpenAI's predicted outputs: a reply that is not in the prompt, predicted by the client
ASK = [{"role": "user", "content": "Write a short Python function that adds two numbers, with a docstring."}]


def _ask(client, **extra):
    body = {"messages": ASK, "temperature": 0, "max_tokens": 120, "cache_prompt": False, **extra}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def _predicted(text):
    return {"type": "content", "content": text}


def test_a_predicted_output_is_drafted_and_leaves_the_reply_unchanged(smol_spec, smol_plain):
    with smol_plain.client() as client:
        plain = _ask(client)
    reply = plain["choices"][0]["message"]["content"]
    # no prediction (and no reasoning): OpenAI's zeros
    assert plain["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0, "accepted_prediction_tokens": 0,
                                                           "rejected_prediction_tokens": 0}
    with smol_spec.client() as client:
        unpredicted = _ask(client)
        predicted = _ask(client, prediction=_predicted(reply))
    assert predicted["usage"]["prompt_tokens"] + predicted["usage"]["completion_tokens"] < 256
    assert predicted["choices"][0]["message"]["content"] == reply == unpredicted["choices"][0]["message"]["content"]
    n = predicted["usage"]["completion_tokens"]
    details = predicted["usage"]["completion_tokens_details"]
    # every token after the first (sampled from the prompt's logits) can come from the prediction
    assert details["accepted_prediction_tokens"] >= 0.8 * n, details
    assert details["rejected_prediction_tokens"] <= 2, details
    assert predicted["timings"]["draft_n_accepted"] >= details["accepted_prediction_tokens"]
    # prompt lookup alone finds little of a reply its prompt does not hold
    assert unpredicted.get("timings", {}).get("draft_n_accepted", 0) < details["accepted_prediction_tokens"] / 2


def test_a_prediction_the_reply_departs_from_is_rejoined_after_the_change(smol_spec, smol_plain):
    with smol_plain.client() as client:
        reply = _ask(client)["choices"][0]["message"]["content"]
    words = reply.split(" ")
    middle = len(words) // 2
    edited = " ".join(words[:middle] + ["banana"] + words[middle + 1 :])  # one word of the middle changed
    parts = [{"type": "text", "text": edited[:10]}, {"type": "text", "text": edited[10:]}]
    with smol_spec.client() as client:
        answer = _ask(client, prediction={"type": "content", "content": parts})
        n = answer["usage"]["completion_tokens"]
        details = answer["usage"]["completion_tokens_details"]
        streamed = client.post("/v1/chat/completions", json={
            "messages": ASK, "temperature": 0, "max_tokens": 120, "cache_prompt": False, "stream": True,
            "stream_options": {"include_usage": True}, "prediction": _predicted(edited)})
    assert answer["choices"][0]["message"]["content"] == reply
    assert details["rejected_prediction_tokens"] >= 1  # the changed word was drafted and refused
    assert details["accepted_prediction_tokens"] >= 0.6 * n, details  # both sides of it held
    events = [json.loads(line[6:]) for line in streamed.text.splitlines()
              if line.startswith("data: {")]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert text == reply
    assert events[-1]["usage"]["completion_tokens_details"] == details


def test_a_prediction_without_speculation_changes_nothing(smol_plain):
    with smol_plain.client() as client:
        plain = _ask(client)
        predicted = _ask(client, prediction=_predicted(plain["choices"][0]["message"]["content"]))
    assert predicted["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    assert predicted["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0, "accepted_prediction_tokens": 0,
                                                               "rejected_prediction_tokens": 0}


@pytest.mark.parametrize("prediction", [
    {"type": "text", "content": "x"},
    {"type": "content"},
    {"type": "content", "content": 5},
    {"type": "content", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]},
    {"type": "content", "content": [{"type": "text"}]},
    "just text",
])
def test_a_malformed_prediction_is_a_400(smol_plain, prediction):
    with smol_plain.client() as client:
        response = client.post("/v1/chat/completions", json={"messages": ASK, "max_tokens": 4,
                                                             "prediction": prediction})
        assert response.status_code == 400, response.text
        assert "prediction" in response.json()["error"]["message"]
        assert client.get("/health").status_code == 200


def _twice(proc, prompt: str, **extra) -> tuple[dict, dict]:
    body = {"prompt": prompt, "n_predict": 120, "temperature": 0, **extra}
    with proc.client() as client:
        return client.post("/completion", json=body).json(), client.post("/completion", json=body).json()


def test_an_output_the_server_wrote_before_is_drafted_from_its_traffic(smol_spec):
    """The second request gets the same greedy reply as the first: prompt lookup drafts
    it from the first's output (the prompt holds none of it), and the text is unchanged."""
    first, second = _twice(smol_spec, "Write a short story about a lighthouse keeper named Ottoline.\n")
    assert second["content"] == first["content"] and second["tokens_predicted"] == 120
    assert second["timings"]["draft_n_accepted"] >= first["timings"].get("draft_n_accepted", 0) + 40
    assert second["tokens_evaluated"] + second["tokens_predicted"] < 256
    opted_out = _twice(smol_spec, "Write a short story about a clockmaker named Anselm.\n", cache_prompt=False)
    assert opted_out[1]["content"] == opted_out[0]["content"]
    # cache_prompt false: no drafts from (or for) other requests, so exactly what the first got
    assert opted_out[1]["timings"].get("draft_n_accepted", 0) == opted_out[0]["timings"].get("draft_n_accepted", 0)


def test_spec_ngram_traffic_0_drafts_only_from_the_request_itself():
    proc = ServerProcess("-c", "2048", "-np", "1", "--spec-ngram-traffic", "0", env=DRAFT_ALWAYS)
    try:
        first, second = _twice(proc.wait_ready(), "Write a short story about a glassblower named Peregrine.\n")
    finally:
        proc.stop()
    assert second["content"] == first["content"]
    assert second["timings"].get("draft_n_accepted", 0) == first["timings"].get("draft_n_accepted", 0)
