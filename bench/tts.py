"""Text to speech: time to the first audio byte of streamed speech for a 300-character
input, the real-time factor of the whole synthesis (wall seconds per audio second),
and, with --chat, the largest gap between tokens of a running chat stream while
speech is synthesised beside it (against the same stream alone).

    python bench/tts.py --tts-model DIR_OR_NAME [--runs 5] [--chat]
    python bench/tts.py --url http://127.0.0.1:8080 [--chat]   # a server already running

The onnxruntime thread count (MLXCEL_TTS_THREADS, default 1) and the worker's nice
(MLXCEL_TTS_NICE, default 10) were chosen with --chat on the 2-core dev machine
(SmolLM2 chat, `-t 2`); medians of 3 alternated rounds:

    threads nice | speech alone: TTFB  total  RTF  | chat alone  | chat beside speech | speech beside chat
    1       0    |               0.19 s 0.89 s .056 | 145 t/s 17ms | 48 t/s, gap 175 ms | 0.98 s
    1       5    |               0.17 s 0.70 s .043 | 155 t/s 12ms | 121 t/s, gap 72 ms | 1.72 s
    1       10   |               0.18 s 0.72 s .044 | 154 t/s 12ms | 142 t/s, gap 17 ms | 1.72 s
    2       0    |               0.11 s 0.42 s .026 | 151 t/s 13ms | 18 t/s, gap 1.9 s  | 0.74 s
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TEXT_300 = ("The morning train was late again, so Clara walked the long way to the harbour. "
            "Gulls circled above the fishing boats while the market stalls opened one by one. "
            "She bought warm bread, a bag of apples, some cheese and a newspaper, then sat on the sea wall "
            "to watch the ferry leave for the distant islands.")


def speak(client: httpx.Client, text: str, fmt: str) -> tuple[float, float, int]:
    """(time to first byte, total time, bytes) of one streamed request."""
    sent = time.perf_counter()
    first, size = None, 0
    body = {"model": "tts-1", "input": text, "voice": "alloy", "response_format": fmt, "stream_format": "audio"}
    with client.stream("POST", "/v1/audio/speech", json=body) as response:
        response.raise_for_status()
        for chunk in response.iter_bytes():
            if chunk and first is None:
                first = time.perf_counter() - sent
            size += len(chunk)
    return first or 0.0, time.perf_counter() - sent, size


def chat_gaps(client: httpx.Client, out: dict) -> None:
    """The largest gap between two streamed tokens of a 200-token chat answer."""
    body = {"messages": [{"role": "user", "content": "Tell me a long story about a lighthouse."}],
            "max_tokens": 200, "stream": True, "temperature": 0, "ignore_eos": True}
    times = []
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                times.append(time.perf_counter())
    times = times[1:]  # the first chunk (the role) comes before the prompt is read
    gaps = [b - a for a, b in itertools.pairwise(times)]
    out["max_gap"] = max(gaps) if gaps else float("nan")
    out["tps"] = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--tts-model")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--chat", action="store_true")
    parser.add_argument("--chat-rounds", type=int, default=3)
    args = parser.parse_args()
    server = None
    if args.url is None:
        from tests.server_process import ServerProcess

        server = ServerProcess("--tts-model", args.tts_model or "piper-joe", "-c", "2048", "-np", "1").wait_ready()
        args.url = server.base_url
    try:
        with httpx.Client(base_url=args.url, timeout=600, trust_env=False) as client:
            speak(client, "Warm up.", "wav")
            results = {}
            for fmt in ("pcm", "mp3"):
                runs = [speak(client, TEXT_300, fmt) for _ in range(args.runs)]
                ttfb = statistics.median(r[0] for r in runs)
                total = statistics.median(r[1] for r in runs)
                results[fmt] = {"ttfb_s": round(ttfb, 3), "total_s": round(total, 3)}
            audio_s = speak(client, TEXT_300, "pcm")[2] / 2 / 22050
            results["audio_s"] = round(audio_s, 2)
            results["rtf"] = round(results["pcm"]["total_s"] / audio_s, 3)
            if args.chat:
                chat_gaps(client, {})  # warm-up: the first chat request pays one-time costs
                rounds: dict = {"chat_alone": [], "chat_with_speech": [], "speech_beside_chat_s": []}
                for _ in range(args.chat_rounds):  # alternated, so a neighbour's load hits both alike
                    alone: dict = {}
                    chat_gaps(client, alone)
                    rounds["chat_alone"].append(alone)
                    beside: dict = {}
                    thread = threading.Thread(target=chat_gaps, args=(client, beside))
                    thread.start()
                    time.sleep(0.3)
                    while thread.is_alive():
                        rounds["speech_beside_chat_s"].append(speak(client, TEXT_300, "pcm")[1])
                    thread.join()
                    rounds["chat_with_speech"].append(beside)
                for key in ("chat_alone", "chat_with_speech"):
                    results[key] = {k: round(statistics.median(r[k] for r in rounds[key]), 3)
                                    for k in ("max_gap", "tps")}
                results["speech_beside_chat_total_s"] = round(statistics.median(rounds["speech_beside_chat_s"]), 3)
            print(json.dumps({"input_chars": len(TEXT_300), **results}, indent=1))
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
