"""Feature benchmarks, one server at a time, reported as ratios:

  cache       TTFT of a request whose 1,500-token prefix another slot processed two
              requests earlier, mlxcel against llama-server with its --cache-ram on
              (default) and off, in two cases: "busy", the request that brought the
              prefix is still generating in its slot (the new one must get another
              slot); "evicted", four unrelated requests have since overwritten every
              slot (only a host-RAM cache can help).
  lookup      decode tokens/s on an editing task (rewrite a ~400-token function with
              one change): mlxcel with prompt lookup against mlxcel plain, and
              llama-server with and without its ngram-simple speculation.
  lookup-free aggregate tokens/s of 4 concurrent streams of free generation (text
              the model does not copy): mlxcel with prompt lookup against mlxcel
              plain, both servers up for the whole run and taking the rounds in
              turn (the order flipped each round). Drafting must back off where it
              does not pay: target >= 0.98.
  traffic     decode tokens/s over a run of similar coding requests (an agent's loop:
              the same kind of function for other names, no prompt repeated): mlxcel
              with its defaults against --spec-ngram-traffic 0 (rounds alternating),
              and llama-server with and without its ngram-simple speculation.
  lookup-cache decode tokens/s over more of those requests (cache_prompt false,
              no traffic drafts) with and without a static lookup cache (-lcs)
              made, as llama-lookup-create makes one from a corpus, from the greedy
              replies to the first six: mlxcel, and llama-server with its own
              ngram-cache speculation; all four servers up, rounds in turn.
  structured  decode tokens/s with a json_schema against without, on mlxcel.
  predicted   decode tokens/s through /v1/chat/completions with OpenAI's `prediction`
              against the same request without one, on each server with its defaults
              (llama-server ignores the field): the editing task with the original
              function as the prediction, and a request predicted with the reply an
              identical earlier request got.

    .venv/bin/python bench/features.py [--only cache,lookup,lookup-free,traffic,lookup-cache,structured,predicted]
        [--rounds 3] [--model GGUF] [--mlxcel-cmd CMD]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from reference import ensure_llama_server  # noqa: E402
from servers import Server, llama_server_argv, start_server  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# llama-server closes idle keep-alive connections; a pooled one can be dead on reuse
NO_KEEPALIVE = httpx.Limits(max_keepalive_connections=0)
MODEL = Path.home() / ".cache/mlxcel/models/SmolLM2-135M-Instruct.Q4_1.gguf"


def sse_chunks(response: httpx.Response):
    """(text, is_final, chunk) for each JSON chunk of a native or OpenAI stream."""
    response.raise_for_status()
    for line in response.iter_lines():
        if not line.startswith("data:") or line.endswith("[DONE]"):
            continue
        chunk = json.loads(line[5:])
        text = chunk.get("content")
        if text is None and chunk.get("choices"):
            text = (chunk["choices"][0].get("delta") or {}).get("content")
        final = bool(chunk.get("stop") or (chunk.get("choices") and chunk["choices"][0].get("finish_reason")))
        yield text, final, chunk


def streamed(client: httpx.Client, url: str, body: dict) -> tuple[float, list[float], dict]:
    """(time to first token, arrival time of each token chunk, final chunk)."""
    sent = time.perf_counter()
    arrivals: list[float] = []
    final: dict = {}
    with client.stream("POST", url, json={**body, "stream": True}) as response:
        for text, last, chunk in sse_chunks(response):
            if text:
                arrivals.append(time.perf_counter())
            if last:
                final = chunk
            elif chunk.get("usage") and not chunk.get("choices"):  # OpenAI's usage chunk, after the finish
                final = {**final, "usage": chunk["usage"]}
    return (arrivals[0] - sent if arrivals else float("nan")), arrivals, final


def decode_rate(arrivals: list[float]) -> float:
    return (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])


def words(seed: str, n: int) -> str:
    return " ".join(f"{seed}{i % 97} item{i}" for i in range(n))


# -- scenarios ------------------------------------------------------------------------

def cache_ttft_evicted(url: str, rounds: int) -> list[float]:
    samples = []
    with httpx.Client(timeout=600, trust_env=False, limits=NO_KEEPALIVE) as client:
        for r in range(rounds + 1):  # round 0 warms up
            prefix = f"Document {r}: " + words(f"d{r}w", 176)  # about 1,500 tokens
            client.post(f"{url}/completion", json={"prompt": prefix + " Question one?", "n_predict": 1,
                                                   "temperature": 0})
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(lambda i: client.post(f"{url}/completion", json={
                    "prompt": words(f"u{r}x{i}", 40), "n_predict": 4, "temperature": 0}), range(4)))
            ttft, _, _ = streamed(client, f"{url}/completion", {"prompt": prefix + " Question two?",
                                                                "n_predict": 1, "temperature": 0})
            if r:
                samples.append(ttft)
    return samples


def _generate_until(url: str, body: dict, started: threading.Event, stop: threading.Event, state: dict) -> None:
    """Stream `body` until `stop` is set, then hang up; `started` once a token came."""
    with httpx.Client(timeout=600, trust_env=False, limits=NO_KEEPALIVE) as client:
        with client.stream("POST", f"{url}/completion", json={**body, "stream": True}) as response:
            for text, last, _ in sse_chunks(response):
                if text:
                    started.set()
                if last:
                    state["finished_early"] = True
                    break
                if stop.is_set():
                    break
    started.set()


def cache_ttft_busy(url: str, rounds: int) -> list[float]:
    samples = []
    with httpx.Client(timeout=600, trust_env=False, limits=NO_KEEPALIVE) as client:
        for r in range(rounds + 1):  # round 0 warms up
            prefix = f"Report {r}: " + words(f"b{r}w", 176)  # about 1,500 tokens
            started, stop, state = threading.Event(), threading.Event(), {}
            first = threading.Thread(target=_generate_until, args=(url, {
                "prompt": prefix + " Question one?", "n_predict": 500, "temperature": 0, "ignore_eos": True},
                started, stop, state))
            first.start()
            started.wait()
            client.post(f"{url}/completion", json={"prompt": words(f"v{r}x", 40), "n_predict": 4,
                                                   "temperature": 0})
            ttft, _, _ = streamed(client, f"{url}/completion", {"prompt": prefix + " Question two?",
                                                                "n_predict": 1, "temperature": 0})
            still_running = not state.get("finished_early")
            stop.set()
            first.join()
            if not still_running:
                raise RuntimeError("the first request ended before the measured one: raise its n_predict")
            if r:
                samples.append(ttft)
            time.sleep(0.5)  # let the hung-up request end
    return samples


FUNCTION = "\n".join(
    f"    value_{i} = compute_step(value_{i - 1}, factor={i}, label='step {i}')  # update the running value"
    for i in range(1, 22)
)
EDIT_PROMPT = ("<|im_start|>user\nRewrite this function with one change: the label of step 3 becomes 'third step'. "
               "Return the whole function.\n```python\ndef pipeline(value_0):\n" + FUNCTION +
               "\n    return value_21\n```<|im_end|>\n<|im_start|>assistant\n```python\ndef pipeline(value_0):\n")


def lookup_decode(url: str, rounds: int) -> list[float]:
    samples = []
    with httpx.Client(timeout=600, trust_env=False, limits=NO_KEEPALIVE) as client:
        for r in range(rounds + 1):
            _, arrivals, final = streamed(client, f"{url}/completion", {
                "prompt": EDIT_PROMPT, "n_predict": 400, "temperature": 0, "cache_prompt": False})
            if r:
                samples.append(decode_rate(arrivals))
    timings = final.get("timings") or {}
    if timings.get("draft_n"):
        print(f"    last round: {len(arrivals)} chunks, drafted {timings['draft_n']}, "
              f"accepted {timings.get('draft_n_accepted')}")
    return samples


ORIGINAL = "```python\ndef pipeline(value_0):\n" + FUNCTION + "\n    return value_21\n```"
EDIT_MESSAGES = [{"role": "user", "content": "Rewrite this function with one change: the label of step 3 becomes "
                  "'third step'. Return the whole function.\n" + ORIGINAL}]


ASK_MESSAGES = [{"role": "user", "content": "Write a Python class for a bank account with deposit, withdraw and "
                 "balance methods, with docstrings."}]


def predicted_decode(url: str, rounds: int) -> dict[str, list[float]]:
    """Decode tokens/s with and without OpenAI's `prediction`, alternating (the first
    round warms up), on two tasks: `edit`, the chat edit with the original function as
    the prediction (editors send it; the prompt holds it too), and `reply`, a request
    whose prediction is the reply an identical earlier request got (the prompt holds
    none of it: a client regenerating a known answer)."""
    out: dict[str, list[float]] = {f"{task}-{kind}": [] for task in ("edit", "reply") for kind in ("predicted", "plain")}
    with httpx.Client(timeout=600, trust_env=False, limits=NO_KEEPALIVE) as client:
        answer = client.post(f"{url}/v1/chat/completions", json={
            "messages": ASK_MESSAGES, "max_tokens": 300, "temperature": 0, "cache_prompt": False}).json()
        predictions = {"edit": (EDIT_MESSAGES, ORIGINAL), "reply": (ASK_MESSAGES,
                                                                  answer["choices"][0]["message"]["content"])}
        for r in range(rounds + 1):
            for name in out:
                task, kind = name.split("-")
                messages, prediction = predictions[task]
                body = {"messages": messages, "max_tokens": 400 if task == "edit" else 300, "temperature": 0,
                        "cache_prompt": False, "stream": True, "stream_options": {"include_usage": True}}
                if kind == "predicted":
                    body["prediction"] = {"type": "content", "content": prediction}
                _, arrivals, final = streamed(client, f"{url}/v1/chat/completions", body)
                if r:
                    out[name].append(decode_rate(arrivals))
                details = (final.get("usage") or {}).get("completion_tokens_details")
                if r == rounds and details:
                    print(f"    last round, {name}: {len(arrivals)} chunks, {details}")
    return out


FREE_TOPICS = ("a lighthouse keeper who finds a map", "the history of bread in three countries",
               "a robot learning to paint", "a winter journey across the mountains")


def free_round(client: httpx.Client, url: str, r: int) -> tuple[float, int, int]:
    """One round of 4 concurrent streams of free (sampled, seeded) generation: their
    aggregate tokens/s, and the tokens drafted and accepted in it."""
    def one(i: int) -> tuple[int, int, int]:
        body = {"messages": [{"role": "user", "content": f"Write a long story about {FREE_TOPICS[i]}."}],
                "max_tokens": 256, "temperature": 0.8, "seed": 1000 * r + i, "ignore_eos": True,
                "cache_prompt": False}
        _, arrivals, final = streamed(client, f"{url}/v1/chat/completions", body)
        timings = final.get("timings") or {}
        return ((final.get("usage") or {}).get("completion_tokens") or len(arrivals),
                timings.get("draft_n", 0), timings.get("draft_n_accepted", 0))

    started = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, range(4)))
    rate = sum(n for n, _, _ in results) / (time.perf_counter() - started)
    return rate, sum(d for _, d, _ in results), sum(a for _, _, a in results)


def free_client() -> httpx.Client:
    return httpx.Client(timeout=600, trust_env=False,
                        limits=httpx.Limits(max_keepalive_connections=0, max_connections=8))


def free_aggregate(url: str, rounds: int) -> list[float]:
    """Aggregate tokens/s of 4 concurrent streams of free generation, a round at a time
    after one that warms up."""
    samples, drafted, accepted = [], 0, 0
    with free_client() as client:
        for r in range(rounds + 1):  # round 0 warms up
            rate, drafted, accepted = free_round(client, url, r)
            if r:
                samples.append(rate)
    if drafted:
        print(f"    last round: drafted {drafted}, accepted {accepted}")
    return samples


@contextlib.contextmanager
def kept_up(variants: dict[str, list[str]], log_dir: Path) -> Iterator[dict[str, Server]]:
    """Every variant's server, all up until the block ends (each idle while another runs)."""
    servers: dict[str, Server] = {}
    try:
        for name, argv in variants.items():
            servers[name] = start_server(name, argv, log_dir)
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def in_turn(servers: dict[str, Server], r: int) -> list[str]:
    """Round r's order: the variants' own, reversed every other round."""
    return list(servers) if r % 2 == 0 else list(reversed(servers))


def free_paired(variants: dict[str, list[str]], log_dir: Path, rounds: int) -> dict[str, list[float]]:
    """free_aggregate's rounds on servers that all stay up (each idle while another
    runs), the variants taking every round in turn, the order flipped each round: every
    pair of figures comes from the same two processes minutes apart, so neither a
    process's own speed (where its buffers landed) nor the host's drift between starts
    separates them, as it does servers started afresh per round."""
    out: dict[str, list[float]] = {name: [] for name in variants}
    drafts: dict[str, list[int]] = {name: [0, 0] for name in variants}
    with kept_up(variants, log_dir) as servers, free_client() as client:
        for name, server in servers.items():
            free_round(client, server.url, 0)  # warm-up
        for r in range(1, rounds + 1):
            for name in in_turn(servers, r - 1):
                rate, drafted, accepted = free_round(client, servers[name].url, r)
                out[name].append(rate)
                drafts[name][0] += drafted
                drafts[name][1] += accepted
        for name, server in servers.items():
            profile = step_profile(server.url)
            print(f"    {name}: drafted {drafts[name][0]}, accepted {drafts[name][1]}"
                  + (f"; {profile}" if profile else ""))
    return out


TRAFFIC_NAMES = ("invoice", "customer", "shipment", "order", "product", "account", "payment", "refund", "ticket",
                 "session", "profile", "report", "budget", "contract", "vendor", "warehouse", "schedule", "license",
                 "device", "sensor", "campaign", "survey", "policy", "claim", "booking", "route", "tenant", "asset")
TRAFFIC_FIELDS = ("id", "total", "status", "owner", "created_at", "items", "region", "priority")
TRAFFIC_PER_ROUND = 6


def traffic_task(k: int) -> str:
    """The k-th of the similar coding requests: the same kind of function for another name."""
    name, field = TRAFFIC_NAMES[k % len(TRAFFIC_NAMES)], TRAFFIC_FIELDS[k % len(TRAFFIC_FIELDS)]
    return (f"Write a Python function load_{name}(path: str) that reads the JSON file at path and returns "
            f"its '{field}' field, raising KeyError with a clear message when the field is missing. "
            "Include type hints and a docstring.")


def traffic_round(client: httpx.Client, url: str, first: int, cache_prompt: bool = True) -> tuple[int, float, int, int]:
    """TRAFFIC_PER_ROUND greedy chat requests, tasks first.. on: (tokens after each first,
    seconds from each first token to its last, tokens drafted, accepted)."""
    tokens, seconds, drafted, accepted = 0, 0.0, 0, 0
    for k in range(first, first + TRAFFIC_PER_ROUND):
        _, arrivals, final = streamed(client, f"{url}/v1/chat/completions", {
            "messages": [{"role": "user", "content": traffic_task(k)}], "max_tokens": 200, "temperature": 0,
            "cache_prompt": cache_prompt, "stream_options": {"include_usage": True}})
        n = (final.get("usage") or {}).get("completion_tokens") or len(arrivals)
        tokens += n - 1  # the first token ends the prefill
        seconds += arrivals[-1] - arrivals[0]
        timings = final.get("timings") or {}  # mlxcel's, where it drafted
        drafted += timings.get("draft_n", 0)
        accepted += timings.get("draft_n_accepted", 0)
    return tokens, seconds, drafted, accepted


def traffic_decode(url: str, rounds: int) -> list[float]:
    """Decode tokens/s (streamed, first token to last, summed over requests) of
    TRAFFIC_PER_ROUND greedy chat requests a round, each asking for the same kind of function for a name no
    earlier request had: the replies share their boilerplate, not their prompts.
    The first round warms up (and fills mlxcel's traffic drafts)."""
    samples = []
    with httpx.Client(timeout=600, trust_env=False, limits=NO_KEEPALIVE) as client:
        for r in range(rounds + 1):
            tokens, seconds, drafted, accepted = traffic_round(client, url, r * TRAFFIC_PER_ROUND)  # cache_prompt
            if r:
                samples.append(tokens / seconds)
    if drafted:
        print(f"    last round: {tokens} tokens, drafted {drafted}, accepted {accepted}")
    return samples


CORPUS_TASKS = TRAFFIC_PER_ROUND  # the first tasks' replies make the static lookup cache


def write_corpus_cache(argv: list[str], log_dir: Path, path: Path) -> None:
    """A static lookup cache, as llama-lookup-create makes one from a corpus: the 2-gram
    counts of the greedy replies a plain server gives to the first CORPUS_TASKS tasks."""
    from mlxcel.engine.lookup_cache import write_counts

    server = start_server("mlxcel-corpus", [*argv, "--spec-type", "none"], log_dir)
    counts: dict[tuple[int, int], dict[int, int]] = {}
    try:
        with httpx.Client(timeout=600, trust_env=False, base_url=server.url) as client:
            for k in range(CORPUS_TASKS):
                reply = client.post("/v1/chat/completions", json={
                    "messages": [{"role": "user", "content": traffic_task(k)}], "max_tokens": 200,
                    "temperature": 0, "cache_prompt": False}).json()["choices"][0]["message"]["content"]
                tokens = client.post("/tokenize", json={"content": reply}).json()["tokens"]
                for a, b, c in zip(tokens, tokens[1:], tokens[2:]):
                    part = counts.setdefault((a, b), {})
                    part[c] = part.get(c, 0) + 1
    finally:
        server.stop()
    write_counts(path, counts)
    print(f"    static lookup cache: {len(counts)} 2-grams from {CORPUS_TASKS} replies")


def lookup_cache_paired(variants: dict[str, list[str]], log_dir: Path, rounds: int) -> dict[str, list[float]]:
    """traffic_round's decode rate on servers that all stay up, the variants taking the
    rounds in turn (the order flipped each round), on tasks after the corpus's, with
    cache_prompt false (neither the traffic drafts nor the prompt cache apply)."""
    out: dict[str, list[float]] = {name: [] for name in variants}
    with kept_up(variants, log_dir) as servers, \
            httpx.Client(timeout=600, trust_env=False, limits=NO_KEEPALIVE) as client:
        for server in servers.values():  # warm-up: one request, a task no round sends
            streamed(client, f"{server.url}/v1/chat/completions", {
                "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "cache_prompt": False})
        for r in range(rounds):
            first = CORPUS_TASKS + r * TRAFFIC_PER_ROUND
            for name in in_turn(servers, r):
                tokens, seconds, drafted, accepted = traffic_round(client, servers[name].url, first, False)
                out[name].append(tokens / seconds)
                print(f"    round {r + 1} {name}: {tokens / seconds:.1f} tok/s, drafted {drafted}, "
                      f"accepted {accepted}")
    return out


SCHEMA = {"type": "object", "properties": {"story": {"type": "string", "minLength": 3000}}, "required": ["story"]}


def structured_decode(url: str, rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"json_schema": [], "plain": []}
    messages = [{"role": "user", "content": "Write a long story about a lighthouse keeper, as JSON."}]
    with httpx.Client(timeout=600, trust_env=False, limits=NO_KEEPALIVE) as client:
        for r in range(rounds + 1):
            for kind in ("json_schema", "plain"):
                body = {"messages": messages, "max_tokens": 200, "temperature": 0.7, "seed": r,
                        "cache_prompt": False, "ignore_eos": True}
                if kind == "json_schema":
                    body["response_format"] = {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}}
                _, arrivals, _ = streamed(client, f"{url}/v1/chat/completions", body)
                if r:
                    out[kind].append(decode_rate(arrivals))
    return out


# -- driver ---------------------------------------------------------------------------

def step_profile(url: str) -> str:
    """mlxcel's engine step counters (milliseconds per step by phase), if it serves them."""
    with httpx.Client(timeout=10, trust_env=False) as client:
        response = client.get(f"{url}/metrics")
    if response.status_code != 200:
        return ""
    values = dict(line.split() for line in response.text.splitlines() if line.startswith("mlxcel_engine_step"))
    steps = float(values.get("mlxcel_engine_steps_total", 0))
    if not steps:
        return ""
    phases = " ".join(f"{phase} {1e3 * float(values[f'mlxcel_engine_step_{phase}_seconds_total']) / steps:.2f}"
                      for phase in ("schedule", "fill", "decode", "sample", "emit"))
    return f"{int(steps)} steps, ms/step: {phases}"


def run_variant(name: str, argv: list[str], log_dir: Path, fn, rounds: int):
    server = start_server(name, argv, log_dir)
    try:
        result = fn(server.url, rounds)
        if name.startswith("mlxcel") and (profile := step_profile(server.url)):
            print(f"    {name}: {profile}")
        return result
    finally:
        server.stop()


def alternate(variants: dict[str, list[str]], log_dir: Path, fn, rounds: int) -> dict[str, list[float]]:
    """Each round on each variant in turn (a fresh server per round and variant), so
    that the load on a shared machine drifts over all of them alike."""
    out: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, argv in variants.items():
            out[name] += run_variant(name, argv, log_dir, fn, 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="cache,lookup,lookup-free,traffic,lookup-cache,structured,predicted")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", type=Path, default=MODEL, help="GGUF file (default SmolLM2-135M-Instruct)")
    ap.add_argument("--log-dir", type=Path, default=ROOT / "bench/results/logs")
    ap.add_argument("--mlxcel-cmd", default=f"{ROOT / '.venv/bin/mlxcel'} serve",
                    help="how to start mlxcel (default: .venv/bin/mlxcel serve)")
    args = ap.parse_args()
    ref = str(ensure_llama_server())
    common = ["-m", str(args.model), "-c", "8192", "-np", "4", "-t", str(args.threads)]
    mlxcel = [*shlex.split(args.mlxcel_cmd), *common, "--metrics"]
    llama = llama_server_argv(ref, common)
    med = statistics.median
    only = set(args.only.split(","))
    if "cache" in only:
        for case, fn in (("busy", cache_ttft_busy), ("evicted", cache_ttft_evicted)):
            a = med(run_variant("mlxcel", mlxcel, args.log_dir, fn, args.rounds))
            b = med(run_variant("llama-server", llama, args.log_dir, fn, args.rounds))
            c = med(run_variant("llama-server-nocache", [*llama, "--cache-ram", "0"], args.log_dir, fn, args.rounds))
            print(f"cache TTFT s ({case}): mlxcel {a:.3f}  llama-server {b:.3f}  llama-server --cache-ram 0 {c:.3f}")
            print(f"  ratio mlxcel/llama-server {a / b:.3f}  mlxcel/llama-server(no cache-ram) {a / c:.3f}"
                  "  target <= 0.5")
    if "lookup" in only:
        plain = med(run_variant("mlxcel", [*mlxcel, "--spec-type", "none"], args.log_dir, lookup_decode, args.rounds))
        # every round sends the same edit, whose greedy reply the traffic would hold from the
        # round before: prompt lookup alone here, as llama-server's ngram-simple
        spec = med(run_variant("mlxcel-lookup", [*mlxcel, "--spec-type", "ngram-simple", "--spec-ngram-traffic", "0"],
                               args.log_dir, lookup_decode, args.rounds))
        ref_plain = med(run_variant("llama-server", llama, args.log_dir, lookup_decode, args.rounds))
        ref_spec = med(run_variant("llama-server-lookup", [*llama, "--spec-type", "ngram-simple"], args.log_dir,
                                   lookup_decode, args.rounds))
        print(f"editing decode tok/s: mlxcel plain {plain:.1f}  lookup {spec:.1f}  "
              f"llama-server plain {ref_plain:.1f}  ngram-simple {ref_spec:.1f}")
        print(f"  ratio mlxcel lookup/plain {spec / plain:.3f} (target >= 1.5)  "
              f"mlxcel lookup / llama-server ngram-simple {spec / ref_spec:.3f}")
    if "lookup-free" in only:
        variants = {"mlxcel": [*mlxcel, "--spec-type", "none"],
                    "mlxcel-lookup": [*mlxcel, "--spec-type", "ngram-simple"]}
        rates = free_paired(variants, args.log_dir, args.rounds)
        plain, spec = med(rates["mlxcel"]), med(rates["mlxcel-lookup"])
        ratios = [b / a for a, b in zip(rates["mlxcel"], rates["mlxcel-lookup"])]
        print(f"free generation, 4 streams, aggregate tok/s: mlxcel plain {plain:.1f}  lookup {spec:.1f}")
        print(f"  ratio lookup/plain, median of rounds {med(ratios):.3f} "
              f"(per round {' '.join(f'{x:.3f}' for x in ratios)}, "
              f"won {sum(x >= 1 for x in ratios)} of {len(ratios)}; target >= 0.98)")
    if "traffic" in only:
        variants = {"mlxcel": mlxcel, "mlxcel-no-traffic": [*mlxcel, "--spec-ngram-traffic", "0"]}
        rates = alternate(variants, args.log_dir, traffic_decode, args.rounds)
        ours, alone = med(rates["mlxcel"]), med(rates["mlxcel-no-traffic"])
        ref_plain = med(run_variant("llama-server", llama, args.log_dir, traffic_decode, args.rounds))
        ref_spec = med(run_variant("llama-server-lookup", [*llama, "--spec-type", "ngram-simple"], args.log_dir,
                                   traffic_decode, args.rounds))
        ratios = [a / b for a, b in zip(rates["mlxcel"], rates["mlxcel-no-traffic"])]
        print(f"similar requests, decode tok/s: mlxcel {ours:.1f}  without traffic drafts {alone:.1f}  "
              f"llama-server plain {ref_plain:.1f}  ngram-simple {ref_spec:.1f}")
        print(f"  ratio mlxcel / without traffic {ours / alone:.3f} (per round {' '.join(f'{x:.3f}' for x in ratios)})"
              f"  mlxcel / llama-server plain {ours / ref_plain:.3f}  / ngram-simple {ours / ref_spec:.3f}")
    if "lookup-cache" in only:
        path = args.log_dir / "corpus-lookup-cache.bin"
        write_corpus_cache(mlxcel, args.log_dir, path)
        plain = [*mlxcel, "--spec-ngram-traffic", "0"]
        rates = lookup_cache_paired({
            "mlxcel": plain, "mlxcel-lcs": [*plain, "-lcs", str(path)], "llama-server": llama,
            "llama-server-lcs": [*llama, "--spec-type", "ngram-cache", "-lcs", str(path)]}, args.log_dir, args.rounds)

        def ratio(a: str, b: str) -> str:
            per_round = [x / y for x, y in zip(rates[a], rates[b])]
            return f"{med(per_round):.3f} (per round {' '.join(f'{x:.3f}' for x in per_round)})"

        print("similar requests after a corpus, decode tok/s: "
              + "  ".join(f"{name} {med(values):.1f}" for name, values in rates.items()))
        print(f"  mlxcel with / without the static lookup cache {ratio('mlxcel-lcs', 'mlxcel')}")
        print(f"  llama-server ngram-cache with it / plain {ratio('llama-server-lcs', 'llama-server')}")
        print(f"  mlxcel / llama-server, each with it {ratio('mlxcel-lcs', 'llama-server-lcs')}")
    if "structured" in only:
        rates = run_variant("mlxcel", mlxcel, args.log_dir, structured_decode, args.rounds)
        a, b = med(rates["json_schema"]), med(rates["plain"])
        print(f"structured decode tok/s: json_schema {a:.1f}  plain {b:.1f}  ratio {a / b:.3f} (target >= 0.85)")
    if "predicted" in only:
        ours = run_variant("mlxcel", mlxcel, args.log_dir, predicted_decode, args.rounds)
        theirs = run_variant("llama-server", llama, args.log_dir, predicted_decode, args.rounds)
        for task in ("edit", "reply"):
            a, b = med(ours[f"{task}-predicted"]), med(ours[f"{task}-plain"])
            c, d = med(theirs[f"{task}-predicted"]), med(theirs[f"{task}-plain"])
            print(f"predicted output, {task}: decode tok/s mlxcel with prediction {a:.1f}  without {b:.1f}  "
                  f"llama-server with {c:.1f}  without {d:.1f}")
            print(f"  ratio mlxcel with / without {a / b:.3f}  mlxcel with / llama-server with {a / c:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
