"""Soak: many mixed requests from concurrent clients against one mlxcel server.

Every API (OpenAI chat and completions, llama-server's /completion, Anthropic
/v1/messages, the Responses API), streamed and not; some cancelled at a random moment
(before the answer, or mid-stream); some invalid (malformed JSON, wrong types, lone
surrogates, NaN and Infinity, huge numbers, unknown fields, bodies over the limits).
Reports status codes per API, 5xx and hung requests, latency of the successful ones,
the server's RSS (after a warm-up, peak, end; the start and end figures with the
host-RAM prompt cache emptied, since it grows by design) and open descriptors, and
checks at the end that every slot is idle, the metrics are at rest and /health answers
200. Exits 1 on any 5xx, hung request, broken stream, connection error or bad end state.

    .venv/bin/python bench/soak.py                          # 1,000 requests, 32 clients
    .venv/bin/python bench/soak.py -n 200 --clients 8 --out bench/results/soak.json
    .venv/bin/python bench/soak.py --url http://127.0.0.1:8080 --pid 1234   # a running server
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from servers import HOST, Server, free_port  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
APIS = ("chat", "completions", "native", "messages", "responses")
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "native": "/completion",
         "messages": "/v1/messages", "responses": "/v1/responses"}
MAX_BODY = 32 * 1024 * 1024  # the server's default --max-body-bytes
WORDS = ("river stone lantern harbor quiet engine orbit meadow copper signal winter garden "
         "paper falcon thunder velvet candle summit mirror canyon ember violin island forest "
         "marble comet anchor prism cedar tide beacon glacier saddle pepper quartz ribbon").split()
QUESTIONS = ("Write a short poem about {}.", "Explain {} to a child.", "List three facts about {}.",
             "What rhymes with {}?", "Describe a {} in one sentence.", "Tell me a story about a {} and a {}.")


# -- the request mix ---------------------------------------------------------------------

@dataclass
class Plan:
    """One request to send, decided up front from the seed."""
    index: int
    api: str
    kind: str                       # ok | cancel | invalid
    label: str                      # what it tests, e.g. "invalid:nan-temperature"
    body: bytes
    stream: bool
    cancel_after_s: float | None = None      # drop the request this long after sending
    cancel_after_events: int | None = None   # drop the stream after this many SSE events
    chunked: bool = False                    # send the body without Content-Length


class Raw(str):
    """A piece of JSON text written as is (NaN, 1e400, a lone surrogate escape...)."""


def dumps(body: dict) -> bytes:
    raws: list[str] = []

    def mark(value):
        if isinstance(value, Raw):
            raws.append(str(value))
            return f"@@RAW{len(raws) - 1}@@"
        if isinstance(value, dict):
            return {k: mark(v) for k, v in value.items()}
        if isinstance(value, list):
            return [mark(v) for v in value]
        return value

    text = json.dumps(mark(body))
    for i, raw in enumerate(raws):
        text = text.replace(f'"@@RAW{i}@@"', raw)
    return text.encode()


def oversized_body(_cache: list[bytes] = []) -> bytes:  # noqa: B006 - one shared copy
    if not _cache:
        _cache.append(b'{"x": "' + b"a" * (MAX_BODY + 1024) + b'"}')
    return _cache[0]


def question(rng: random.Random) -> str:
    template = rng.choice(QUESTIONS)
    return template.format(*(rng.choice(WORDS) for _ in range(template.count("{}"))))


def valid_body(api: str, rng: random.Random, stream: bool) -> dict:
    """A well-formed request of `api` with a short generation and some variety."""
    n = rng.randint(8, 48)
    text = question(rng)
    common = {"temperature": round(rng.uniform(0, 1.2), 2), "seed": rng.randint(0, 2**31)}
    if rng.random() < 0.2:
        common["stop"] = [rng.choice(WORDS), "\n\n"]
    if api == "chat":
        body = {"model": "x", "messages": [{"role": "user", "content": text}], "max_tokens": n, **common}
        if rng.random() < 0.3:
            body["messages"].insert(0, {"role": "system", "content": "You are terse."})
        if rng.random() < 0.15:
            body.update(logprobs=True, top_logprobs=rng.randint(0, 5))
        if rng.random() < 0.1:
            body["response_format"] = {"type": "json_object"}
        if stream and rng.random() < 0.5:
            body["stream_options"] = {"include_usage": True}
    elif api == "completions":
        body = {"model": "x", "prompt": text, "max_tokens": n, **common}
        if rng.random() < 0.15:
            body["logprobs"] = rng.randint(1, 3)
    elif api == "native":
        body = {"prompt": text, "n_predict": n, "cache_prompt": rng.random() < 0.7, **common}
        if rng.random() < 0.2:
            body["n_probs"] = rng.randint(1, 4)
    elif api == "messages":
        body = {"model": "x", "max_tokens": n, "messages": [{"role": "user", "content": text}], **common}
        body["stop_sequences"] = body.pop("stop", [])
        if rng.random() < 0.3:
            body["system"] = "You are terse."
    else:
        body = {"model": "x", "input": text, "max_output_tokens": n, "store": rng.random() < 0.5, **common}
        if rng.random() < 0.3:
            body["instructions"] = "Answer briefly."
    body["stream"] = stream
    return body


def _set_text(api: str, body: dict, value) -> dict:
    """`body` with its user text replaced by `value`."""
    if api in ("chat", "messages"):
        body["messages"][-1]["content"] = value
    elif api == "responses":
        body["input"] = value
    else:
        body["prompt"] = value
    return body


def _max_field(api: str) -> str:
    return {"native": "n_predict", "responses": "max_output_tokens"}.get(api, "max_tokens")


def invalid_cases(api: str) -> list[tuple[float, str, object]]:
    """(weight, label, build(rng) -> body bytes | (bytes, chunked)) for `api`."""
    def mutate(change):
        return lambda rng: dumps(change(valid_body(api, rng, rng.random() < 0.5), rng))

    def with_field(name, value):
        return mutate(lambda b, rng: {**b, name: value})

    long_prompt = " ".join(WORDS[i % len(WORDS)] for i in range(4000))  # beyond a slot's 2,048 tokens
    cases = [
        (1, "malformed-json", lambda rng: dumps(valid_body(api, rng, False))[:-7]),
        (1, "trailing-comma", lambda rng: dumps(valid_body(api, rng, False))[:-1] + b",}"),
        (0.5, "empty-body", lambda rng: b""),
        (0.5, "not-an-object", lambda rng: b"[1, 2, 3]"),
        (0.5, "deep-nesting", lambda rng: b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
        (1, "invalid-utf8", lambda rng: dumps(_set_text(api, valid_body(api, rng, False), "@@BYTES@@"))
            .replace(b"@@BYTES@@", b"caf\xc3( \xff\xfe")),
        (2, "lone-surrogate", mutate(lambda b, rng: _set_text(api, b, Raw('"say \\ud800 now"')))),
        (1, "lone-low-surrogate", mutate(lambda b, rng: _set_text(api, b, Raw('"\\udfff\\ud83d"')))),
        (1, "surrogate-in-stop", with_field("stop_sequences" if api == "messages" else "stop", Raw('["\\ud800"]'))),
        (1, "nan-temperature", with_field("temperature", Raw("NaN"))),
        (1, "infinity-top-p", with_field("top_p", Raw("Infinity"))),
        (1, "infinity-repeat-penalty", with_field("repeat_penalty", Raw("Infinity"))),
        (1, "neg-infinity-presence", with_field("presence_penalty", Raw("-Infinity"))),
        (1, "max-tokens-1e400", with_field(_max_field(api), Raw("1e400"))),
        (1, "max-tokens-string", with_field(_max_field(api), "ten")),
        (1, "max-tokens-negative-huge", with_field(_max_field(api), Raw("-99999999999999999999999"))),
        (1, "seed-2^80", with_field("seed", 2**80)),
        (1, "top-k-huge", with_field("top_k", 10**20)),
        (1, "temperature-string", with_field("temperature", "hot")),
        (1, "stream-string", with_field("stream", "yes")),
        (1, "stop-number", with_field("stop", 5)),
        (1, "too-many-stops", with_field("stop", [f"s{i}" for i in range(65)])),
        (1, "logit-bias-[[1]]", with_field("logit_bias", [[1]])),
        (1, "logit-bias-bad-key", with_field("logit_bias", {"abc": 1})),
        (1, "logit-bias-out-of-vocab", with_field("logit_bias", {"99999999": 5})),
        (1, "unknown-fields", with_field("frobnicate", {"x": [1, 2, {"y": None}]})),
        (1, "prompt-over-context", mutate(lambda b, rng: _set_text(api, b, long_prompt))),
        (0.5, "text-wrong-type", mutate(lambda b, rng: _set_text(api, b, {"nested": 1}))),
        (0.1, "body-over-limit", lambda rng: oversized_body()),
        (0.1, "body-over-limit-chunked", lambda rng: (oversized_body(), True)),
    ]
    specific = {
        "chat": [
            (1, "tool-choice-function-string", with_field("tool_choice", {"type": "function", "function": "x"})),
            (1, "tool-choice-required-no-tools", with_field("tool_choice", "required")),
            (1, "messages-string", with_field("messages", "hi")),
            (1, "messages-empty", with_field("messages", [])),
            (1, "role-unknown", mutate(lambda b, rng: {**b, "messages": [{"role": "wizard", "content": "x"}]})),
            (1, "n-huge", with_field("n", 10**9)),
            (1, "top-logprobs-huge", mutate(lambda b, rng: {**b, "logprobs": True, "top_logprobs": 10**6})),
            (1, "json-schema-bad", with_field("response_format", {"type": "json_schema",
                                                             "json_schema": {"schema": "not a schema"}})),
            (1, "tools-bad", with_field("tools", [{"type": "function", "function": {"name": ""}}])),
        ],
        "completions": [
            (1, "prompt-token-ids-out-of-range", with_field("prompt", [[-5, 99999999]])),
            (1, "prompt-object", with_field("prompt", {})),
            (1, "logprobs-huge", with_field("logprobs", 10**9)),
            (1, "best-of-zero", with_field("best_of", 0)),
        ],
        "native": [
            (1, "n-probs-huge", with_field("n_probs", 10**9)),
            (1, "prompt-token-ids-out-of-range", with_field("prompt", [-1, 99999999])),
            (1, "grammar-bad", with_field("grammar", "root ::= (")),
            (1, "json-schema-bad", with_field("json_schema", {"type": 5})),
            (1, "samplers-bad", with_field("samplers", 7)),
        ],
        "messages": [
            (1, "max-tokens-missing", mutate(lambda b, rng: {k: v for k, v in b.items() if k != "max_tokens"})),
            (1, "block-type-unknown", mutate(lambda b, rng: _set_text(api, b, [{"type": "hologram"}]))),
            (1, "thinking-bad", with_field("thinking", {"type": "sometimes"})),
            (1, "system-number", with_field("system", 42)),
            (1, "tool-choice-bad", with_field("tool_choice", {"type": "tool"})),
        ],
        "responses": [
            (1, "input-number", with_field("input", 42)),
            (1, "previous-response-unknown", with_field("previous_response_id", "resp_doesnotexist")),
            (1, "text-format-bad", with_field("text", {"format": {"type": "json_schema", "schema": 3}})),
            (1, "tools-bad", with_field("tools", [{"type": "function"}])),
            (1, "background-stream", mutate(lambda b, rng: {**b, "background": True, "stream": True})),
        ],
    }
    return cases + specific[api]


def make_plans(n: int, seed: int) -> list[Plan]:
    rng = random.Random(seed)
    catalogue = {api: invalid_cases(api) for api in APIS}
    uncovered = {api: rng.sample(cases, len(cases)) for api, cases in catalogue.items()}  # each case once first
    plans = []
    for i in range(n):
        api = rng.choice(APIS)
        kind = rng.choices(("ok", "cancel", "invalid"), weights=(55, 20, 25))[0]
        if kind == "invalid":
            cases = catalogue[api]
            if uncovered[api]:
                _, label, build = uncovered[api].pop()
            else:
                _, label, build = rng.choices(cases, weights=[c[0] for c in cases])[0]
            built = build(rng)
            body, chunked = built if isinstance(built, tuple) else (built, False)
            stream = b'"stream": true' in body[:4096]
            plans.append(Plan(i, api, kind, f"invalid:{label}", body, stream, chunked=chunked))
            continue
        stream = rng.random() < 0.55
        plan = Plan(i, api, kind, f"{kind}:{'stream' if stream else 'whole'}",
                    dumps(valid_body(api, rng, stream)), stream)
        if kind == "cancel":
            moment = rng.choice(("early", "late") if not stream else ("early", "events"))
            if moment == "early":      # before headers, while queued or in prefill
                plan.cancel_after_s = rng.uniform(0.005, 0.5)
            elif moment == "late":     # a whole answer dropped before it arrives
                plan.cancel_after_s = rng.uniform(0.3, 4.0)
            else:                      # mid-stream
                plan.cancel_after_events = rng.randint(1, 12)
            plan.label = f"cancel:{'stream' if stream else 'whole'}-{moment}"
        plans.append(plan)
    return plans


# -- sending -----------------------------------------------------------------------------

@dataclass
class Outcome:
    index: int
    api: str
    label: str
    status: int | None = None        # None: no headers came back
    result: str = "ok"               # ok | cancelled | hung | conn_error | broken | stream_error | incomplete
    latency_s: float = 0.0
    detail: str = ""


TERMINAL = {"chat": "[DONE]", "completions": "[DONE]", "native": '"stop":true',
            "messages": "message_stop", "responses": "response.completed"}


async def read_stream(api: str, response: httpx.Response, outcome: Outcome, stop_after: int | None) -> None:
    """Reads SSE events; sets outcome.result to stream_error / incomplete / cancelled."""
    events = 0
    async for line in response.aiter_lines():
        if not line.startswith(("data:", "event:")):
            continue
        if line.startswith("data:"):
            events += 1
        compact = line.replace(" ", "")
        if line.startswith("event:") and line[6:].strip() in ("error", "response.failed"):
            outcome.result, outcome.detail = "stream_error", line
        elif '"error":' in compact and api != "responses" and line.startswith("data:"):
            outcome.result, outcome.detail = "stream_error", line[:300]
        elif TERMINAL[api] in (compact if api == "native" else line) or "response.incomplete" in line:
            if outcome.result == "ok":
                outcome.result = "done"
        if stop_after is not None and events >= stop_after:
            outcome.result = "cancelled"
            return  # leaving the `async with` closes the connection mid-stream
    if outcome.result == "ok":
        outcome.result = "incomplete"


async def exchange(client: httpx.AsyncClient, url: str, plan: Plan, outcome: Outcome) -> None:
    headers = {"content-type": "application/json", "x-api-key": "unused"}
    content: object = plan.body
    if plan.chunked:
        async def chunks(body=plan.body):
            for start in range(0, len(body), 1 << 20):
                yield body[start:start + (1 << 20)]
        content = chunks()
    async with client.stream("POST", url + PATHS[plan.api], content=content, headers=headers) as response:
        outcome.status = response.status_code
        if response.status_code == 200 and plan.stream and "event-stream" in response.headers.get("content-type", ""):
            await read_stream(plan.api, response, outcome, plan.cancel_after_events)
            if outcome.result == "done":
                outcome.result = "ok"
            return
        body = await response.aread()
        if response.status_code >= 400:
            outcome.detail = body[:300].decode(errors="replace")


async def run_one(client: httpx.AsyncClient, url: str, plan: Plan, timeout: float) -> Outcome:
    outcome = Outcome(plan.index, plan.api, plan.label)
    started = time.perf_counter()
    try:
        limit = min(plan.cancel_after_s, timeout) if plan.cancel_after_s is not None else timeout
        await asyncio.wait_for(exchange(client, url, plan, outcome), limit)
    except (asyncio.TimeoutError, httpx.TimeoutException):
        outcome.result = "cancelled" if plan.cancel_after_s is not None and plan.cancel_after_s < timeout else "hung"
    except httpx.HTTPError as exc:
        # after the headers: the server cut the body short; before: the connection failed
        outcome.result = "broken" if outcome.status is not None else "conn_error"
        outcome.detail = f"{type(exc).__name__}: {exc}"
    outcome.latency_s = time.perf_counter() - started
    return outcome


async def run_all(url: str, plans: list[Plan], clients: int, timeout: float) -> list[Outcome]:
    queue: asyncio.Queue[Plan] = asyncio.Queue()
    for plan in plans:
        queue.put_nowait(plan)
    outcomes: list[Outcome] = []
    started = time.monotonic()
    limits = httpx.Limits(max_connections=clients * 2, max_keepalive_connections=clients)
    async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(timeout, connect=10), limits=limits) as client:
        async def worker():
            while not queue.empty():
                outcome = await run_one(client, url, queue.get_nowait(), timeout)
                outcomes.append(outcome)
                if len(outcomes) % 100 == 0:
                    print(f"  {len(outcomes)}/{len(plans)} done, {time.monotonic() - started:.0f}s",
                          file=sys.stderr, flush=True)

        await asyncio.gather(*(worker() for _ in range(clients)))
    return sorted(outcomes, key=lambda o: o.index)


# -- watching the server -----------------------------------------------------------------

def read_rss_mib(pid: int, key: str = "VmRSS") -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def count_fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


class RssSampler(threading.Thread):
    """VmRSS every `interval` seconds from /proc (the peak, and a series for the JSON)."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak = 0.0
        self.series: list[tuple[float, float]] = []
        self._halt = threading.Event()
        self._t0 = time.monotonic()

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            rss = read_rss_mib(self.pid)
            if rss is not None:
                self.peak = max(self.peak, rss)
                self.series.append((round(time.monotonic() - self._t0, 1), round(rss, 1)))

    def stop(self) -> None:
        self._halt.set()
        self.join()


def metrics(client: httpx.Client) -> dict[str, float]:
    response = client.get("/metrics")
    if response.status_code != 200:
        return {}
    values = {}
    for line in response.text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def at_rest(values: dict[str, float]) -> bool:
    """Prometheus series of an idle server: nothing queued or running, every sequence
    that started also completed (True when the server has no /metrics)."""
    if not values:
        return True
    return (values["mlxcel_queue_depth"] == 0 and values["mlxcel_batch_current_size"] == 0
            and values["mlxcel_slots_available"] == values["mlxcel_slots_total"]
            and values["mlxcel_batch_sequences_started"] == values["mlxcel_batch_sequences_completed"])


def end_state(url: str, settle_s: float = 30.0) -> dict:
    """Waits up to `settle_s` for every slot to go idle, then reads /health and /metrics."""
    with httpx.Client(base_url=url, trust_env=False, timeout=30) as client:
        deadline = time.monotonic() + settle_s
        started = time.monotonic()
        slots = client.get("/slots").json()
        while any(s["state"] != "idle" for s in slots) and time.monotonic() < deadline:
            time.sleep(0.1)
            slots = client.get("/slots").json()
        health = client.get("/health")
        probe = client.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "temperature": 0})
        probe_text = probe.json()["choices"][0]["message"]["content"] if probe.status_code == 200 else ""
        return {
            "slots_idle": all(s["state"] == "idle" for s in slots),
            "slot_states": [s["state"] for s in slots],
            "seconds_to_idle": round(time.monotonic() - started, 2),
            "health_status": health.status_code,
            "health": health.json(),
            "probe_status": probe.status_code,
            "probe_has_content": bool(probe_text),
            "metrics": metrics(client),
            "cache": client.get("/v1/cache/stats").json(),
        }


def empty_prompt_cache(url: str) -> int:
    """Empties the host-RAM prompt cache (it grows by design, up to --cache-ram) so that
    RSS measured next shows what else stayed; returns the bytes it held."""
    with httpx.Client(base_url=url, trust_env=False, timeout=30) as client:
        freed = client.post("/v1/cache/reset").json().get("freed_bytes", 0)
    time.sleep(1.0)
    return freed


def warm_up(url: str, seed: int) -> None:
    rng = random.Random(seed + 1)
    with httpx.Client(base_url=url, trust_env=False, timeout=120) as client:
        for api in APIS:
            for stream in (False, True):
                body = dumps(valid_body(api, rng, stream))
                response = client.post(PATHS[api], content=body, headers={"content-type": "application/json"})
                if response.status_code != 200:
                    raise RuntimeError(f"warm-up {api} stream={stream}: HTTP {response.status_code} {response.text}")


# -- the report --------------------------------------------------------------------------

def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def summarise(outcomes: list[Outcome]) -> dict:
    by_api: dict[str, Counter] = defaultdict(Counter)
    for o in outcomes:
        by_api[o.api][str(o.status) if o.status is not None else "none"] += 1
        if o.result != "ok":
            by_api[o.api][o.result] += 1
    ok = [o for o in outcomes if o.result == "ok" and o.status is not None and 200 <= o.status < 300]
    lat = [o.latency_s for o in ok]
    return {
        "by_api": {api: dict(sorted(c.items())) for api, c in sorted(by_api.items())},
        "totals": dict(Counter(o.result for o in outcomes)),
        "status_totals": dict(sorted(Counter(str(o.status) for o in outcomes).items())),
        "server_errors": [asdict(o) for o in outcomes if o.status is not None and o.status >= 500
                          and not (o.status == 503 and "server_busy" in o.detail)],
        "busy": sum(1 for o in outcomes if o.status in (503, 529) and ("server_busy" in o.detail
                                                                      or "overloaded" in o.detail)),
        "hung": [asdict(o) for o in outcomes if o.result == "hung"],
        "broken_streams": [asdict(o) for o in outcomes if o.result in ("stream_error", "incomplete", "broken")],
        # an oversized upload may be cut off by the 413 that answers it: that one is fine
        "conn_errors": [asdict(o) for o in outcomes if o.result == "conn_error" and "over-limit" not in o.label],
        "latency_ok": {"n": len(lat), "p50_s": percentile(lat, 0.5), "p99_s": percentile(lat, 0.99),
                       "max_s": max(lat) if lat else None},
        "status_by_label": {label: dict(c) for label, c in sorted(_by_label(outcomes).items())},
    }


def _by_label(outcomes: list[Outcome]) -> dict[str, Counter]:
    table: dict[str, Counter] = defaultdict(Counter)
    for o in outcomes:
        table[f"{o.api} {o.label}"][o.result if o.result not in ("ok",) else str(o.status)] += 1
    return table


def print_report(report: dict) -> None:
    summary = report["summary"]
    columns = sorted({k for c in summary["by_api"].values() for k in c}, key=lambda k: (not k.isdigit(), k))
    print(f"\n{'api':<12}" + "".join(f"{c:>13}" for c in columns))
    for api, counts in summary["by_api"].items():
        print(f"{api:<12}" + "".join(f"{counts.get(c, 0):>13}" for c in columns))
    lat, mem, fds = summary["latency_ok"], report["rss_mib"], report["fds"]
    fmt = lambda v: "n/a" if v is None else f"{v:.2f}"  # noqa: E731
    print(f"\nrequests {report['requests']} from {report['clients']} clients in {report['wall_s']:.0f}s; "
          f"results {summary['totals']}")
    print(f"5xx (not server_busy): {len(summary['server_errors'])}   busy 503/529: {summary['busy']}   "
          f"hung: {len(summary['hung'])}   broken streams: {len(summary['broken_streams'])}   "
          f"connection errors: {len(summary['conn_errors'])}")
    print(f"latency of {lat['n']} successful requests: p50 {fmt(lat['p50_s'])}s  p99 {fmt(lat['p99_s'])}s  "
          f"max {fmt(lat['max_s'])}s")
    print(f"RSS MiB: after warm-up {fmt(mem['start'])}  peak {fmt(mem['peak'])} (VmHWM {fmt(mem['hwm'])})  "
          f"end {fmt(mem['end_with_cache'])} with the prompt cache ({report['cache_mib']['end']:.1f} MiB), "
          f"{fmt(mem['end'])} without (end/start {fmt(mem['end_over_start'])})")
    print(f"open fds: after warm-up {fds['start']}  end {fds['end']}")
    end = report["end"]
    print(f"end: slots {end['slot_states']} (idle after {end['seconds_to_idle']}s), /health {end['health_status']}, "
          f"probe {end['probe_status']} content={end['probe_has_content']}, "
          f"queue_depth {end['health']['batch']['queue_depth']}")
    for item in summary["server_errors"][:40]:
        print(f"  5xx #{item['index']} {item['api']} {item['label']}: {item['status']} {item['detail'][:160]}")
    for item in (summary["hung"] + summary["broken_streams"] + summary["conn_errors"])[:20]:
        print(f"  {item['result']} #{item['index']} {item['api']} {item['label']}: {item['detail'][:160]}")
    for name, passed in report["targets"].items():
        print(f"target {name}: {'PASS' if passed else 'FAIL'}")


def server_log_errors(path: Path | None) -> list[str]:
    if path is None or not path.exists():
        return []
    pattern = re.compile(r"Traceback|ERROR|Exception|Error:")
    return [line for line in path.read_text(errors="replace").splitlines() if pattern.search(line)][:200]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--requests", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="a request slower than this is hung (generous: 32 clients queue on 4 slots)")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="catalog name or .gguf path")
    parser.add_argument("--server-args", default="-c 8192 -np 4 -t 2", help="flags for `mlxcel serve`")
    parser.add_argument("--url", help="use this running server instead of starting one")
    parser.add_argument("--pid", type=int, help="the running server's pid (RSS and fds; with --url)")
    parser.add_argument("--out", type=Path, help="write the report as JSON here")
    parser.add_argument("--log", type=Path, default=ROOT / "bench/results/logs/soak-server.log")
    args = parser.parse_args()
    args.out = args.out.resolve() if args.out else None

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the server is stopped too
    server = None
    if args.url:
        url, pid, log_path = args.url.rstrip("/"), args.pid, None
    else:
        port = free_port()
        argv = [sys.executable, "-m", "mlxcel", "serve", "-m", args.model, *args.server_args.split(),
                "--metrics", "--host", HOST, "--port", str(port)]
        os.chdir(ROOT)  # `python -m mlxcel` then runs this checkout's package
        server = Server("mlxcel", argv, port, args.log.resolve())
        server.start()
        server.wait_healthy()
        url, pid, log_path = server.url, server.proc.pid, server.log_path
        print(f"server: {' '.join(argv)} (pid {pid}, log {log_path})", file=sys.stderr)
    try:
        plans = make_plans(args.requests, args.seed)
        warm_up(url, args.seed)
        cache_start = empty_prompt_cache(url)
        rss_start, fds_start = (read_rss_mib(pid), count_fds(pid)) if pid else (None, None)
        sampler = RssSampler(pid) if pid else None
        if sampler:
            sampler.start()
        started = time.monotonic()
        outcomes = asyncio.run(run_all(url, plans, args.clients, args.timeout))
        wall = time.monotonic() - started
        end = end_state(url)
        rss_end_cached = read_rss_mib(pid) if pid else None
        cache_end = empty_prompt_cache(url)
        rss_end, fds_end = (read_rss_mib(pid), count_fds(pid)) if pid else (None, None)
        hwm = read_rss_mib(pid, "VmHWM") if pid else None
        if sampler:
            sampler.stop()
    finally:
        log_errors = server_log_errors(log_path)
        if server is not None:
            server.stop()

    summary = summarise(outcomes)
    ratio = rss_end / rss_start if rss_start and rss_end else None
    report = {
        "requests": len(outcomes), "clients": args.clients, "seed": args.seed, "wall_s": wall,
        "server_args": args.server_args, "model": args.model, "timeout_s": args.timeout,
        "summary": summary,
        "rss_mib": {"start": rss_start, "peak": sampler.peak if sampler else None, "hwm": hwm,
                    "end_with_cache": rss_end_cached, "end": rss_end, "end_over_start": ratio,
                    "series": sampler.series if sampler else []},
        "fds": {"start": fds_start, "end": fds_end},
        "cache_mib": {"after_warm_up": cache_start / 2**20, "end": cache_end / 2**20},
        "end": end,
        "server_log_errors": log_errors,
        "outcomes": [asdict(o) for o in outcomes],
    }
    report["targets"] = {
        "no 5xx": not summary["server_errors"],
        "no hung request": not summary["hung"],
        "no broken stream": not summary["broken_streams"],
        "no connection error": not summary["conn_errors"],
        "slots idle, /health 200, probe answered": end["slots_idle"] and end["health_status"] == 200
        and end["probe_status"] == 200 and end["probe_has_content"],
        "metrics at rest": at_rest(end["metrics"]),
        "RSS at end within 10% of after warm-up": ratio is not None and ratio <= 1.10,
    }
    print_report(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1, default=str))
    hard = ("no 5xx", "no hung request", "no broken stream", "no connection error",
            "slots idle, /health 200, probe answered", "metrics at rest")
    return 0 if all(report["targets"][name] for name in hard) else 1


if __name__ == "__main__":
    sys.exit(main())
