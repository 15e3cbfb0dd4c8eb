"""Speech to text beside chat: the real-time factor of a transcription, and what it
does to a running chat stream.

    .venv/bin/python bench/audio.py [--seconds 60] [--stt whisper-tiny.en] [--port 0] [--json OUT]

Starts `mlxcel serve -m smollm2-135m-instruct --stt-model STT -t 2` and, with a clip of
about --seconds of speech synthesised by the piper-joe voice:
  rtf         audio seconds per wall second of one transcription alone (median of 3)
  chat alone  the largest gap between two tokens of a chat stream (and its median)
  chat + stt  the same stream's largest gap while the transcription runs
  chat + pre  the same stream's largest gap while a ~3,000-token prompt prefills in
              another slot (the chunked-prefill stall the issue compares against)
MLXCEL_STT_THREADS=N (in the environment) overrides the whisper worker's thread count.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.audio_clips import SENTENCES, Speaker, wav_bytes  # noqa: E402
from tests.server_process import free_port  # noqa: E402


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def start(port: int, stt: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "mlxcel", "serve", "-m", "smollm2-135m-instruct", "--stt-model", stt, "-t", "2",
           "-c", "8192", "-np", "2", "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=open("/tmp/mlxcel-bench-audio.log", "wb"))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("server did not start: see /tmp/mlxcel-bench-audio.log")


def clip(seconds: float) -> tuple[bytes, float]:
    speaker = Speaker()
    parts, total = [], 0.0
    while total < seconds:
        for sentence in SENTENCES:
            samples = speaker.samples(sentence)
            parts.append(samples)
            total += len(samples) / speaker.rate
    import numpy as np

    samples = np.concatenate(parts)
    return wav_bytes(samples, speaker.rate), len(samples) / speaker.rate


def transcribe(url: str, wav: bytes) -> float:
    started = time.perf_counter()
    r = httpx.post(f"{url}/v1/audio/transcriptions", files={"file": ("a.wav", wav)}, timeout=600)
    r.raise_for_status()
    return time.perf_counter() - started


def chat_gaps(url: str, tokens: int, started: threading.Event | None = None) -> list[float]:
    """Arrival times of a streamed chat's tokens (ignore_eos: exactly `tokens`)."""
    body = {"messages": [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}],
            "max_tokens": tokens, "stream": True, "ignore_eos": True, "temperature": 0.7}
    arrivals = []
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=600) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and '"content"' in line:
                arrivals.append(time.perf_counter())
                if started is not None and len(arrivals) == 5:
                    started.set()
    return arrivals


def gaps_within(arrivals: list[float], start: float, end: float) -> list[float]:
    return [b - a for a, b in zip(arrivals, arrivals[1:]) if a >= start and b <= end]


def beside(url: str, tokens: int, work) -> tuple[list[float], float, float]:
    """A chat stream, and `work` started once the stream runs: the stream's gaps while it ran."""
    started = threading.Event()
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("arrivals", chat_gaps(url, tokens, started)))
    thread.start()
    started.wait(60)
    t0 = time.perf_counter()
    work()
    t1 = time.perf_counter()
    thread.join()
    return gaps_within(result["arrivals"], t0, t1), t0, t1


def long_prompt(url: str) -> None:
    text = " ".join(f"Item {i}: the lighthouse keeper counted ships and wrote their names." for i in range(260))
    r = httpx.post(f"{url}/v1/completions", json={"prompt": text, "max_tokens": 1, "cache_prompt": False},
                   timeout=600)
    r.raise_for_status()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--stt", default="whisper-tiny.en")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    port = args.port or free_port()
    url = f"http://127.0.0.1:{port}"
    wav, duration = clip(args.seconds)
    log(f"clip: {duration:.1f} s of speech")
    proc = start(port, args.stt)
    try:
        for _ in range(60):  # the whisper model loads after /health turns 200
            try:
                transcribe(url, wav_bytes(__import__("numpy").zeros(16000, "int16"), 16000))
                break
            except httpx.HTTPStatusError:
                time.sleep(0.5)
        walls = [transcribe(url, wav) for _ in range(3)]
        rtf = duration / statistics.median(walls)
        log(f"rtf {rtf:.1f}x (walls {', '.join(f'{w:.2f}' for w in walls)} s)")
        alone = chat_gaps(url, 400)
        alone_gaps = [b - a for a, b in zip(alone, alone[1:])]
        with_stt, t0, t1 = beside(url, 2000, lambda: transcribe(url, wav))
        with_prefill, p0, p1 = beside(url, 400, lambda: long_prompt(url))
        report = {
            "stt_model": args.stt, "stt_threads": os.environ.get("MLXCEL_STT_THREADS", "default"),
            "clip_s": round(duration, 1), "rtf": round(rtf, 2), "transcribe_wall_s": [round(w, 2) for w in walls],
            "chat_alone_max_gap_ms": round(1000 * max(alone_gaps), 1),
            "chat_alone_median_gap_ms": round(1000 * statistics.median(alone_gaps), 1),
            "chat_during_stt_max_gap_ms": round(1000 * max(with_stt), 1) if with_stt else None,
            "chat_during_stt_median_gap_ms": round(1000 * statistics.median(with_stt), 1) if with_stt else None,
            "transcription_beside_chat_s": round(t1 - t0, 2),
            "chat_during_prefill_max_gap_ms": round(1000 * max(with_prefill), 1) if with_prefill else None,
            "prefill_s": round(p1 - p0, 2),
        }
    finally:
        proc.terminate()
        proc.wait(20)
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
