"""bench/bare_loop.py as a third column of bench/run.py: a worker process that keeps
the model loaded and runs the bare loop on request, with the servers' context settings.

For each stream-count scenario it measures the loop twice per round, with the KV
layout the servers use (kv_unified False: each of the -np sequences gets -c / -np
cells) and with kv_unified True (as ../shared/bare_decode_loop.py does)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from client import CHAT_SAMPLING

BARE_LOOP = Path(__file__).resolve().parent / "bare_loop.py"

# scenario -> (sequences, decode steps, the loop's figure, the scenario's metric it is compared with)
STREAM_SCENARIOS = {
    "decode": (1, 127, "decode_tps", "decode_tps"),  # 128 tokens: the first, then 127 timed
    "chat_decode": (1, 127, "decode_tps", "chat_decode_tps"),
    "aggregate4": (4, 127, "wall_tps", "aggregate_tps"),  # counts the prefill and all 128 tokens
}
# how the loop picks tokens per scenario: greedy argmax unless named here (then llama.cpp's
# own sampler chain with the request's settings, as both servers sample that request)
SAMPLING = {"chat_decode": CHAT_SAMPLING}
LAYOUTS = {"split": False, "unified": True}


class BareWorker:
    def __init__(self, model: Path, ctx: int, parallel: int, threads: int, log_path: Path) -> None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, str(BARE_LOOP), str(model), "--worker", "-c", str(ctx), "-np", str(parallel),
             "-t", str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True, start_new_session=True)
        ready = self.proc.stdout.readline()
        if not ready:
            self.stop()
            raise RuntimeError(f"the bare loop worker did not start (see {log_path})")

    def run(self, nseq: int, steps: int, kv_unified: bool, seed: str, sampling: dict | None = None) -> dict:
        self.proc.stdin.write(json.dumps({"nseq": nseq, "steps": steps, "kv_unified": kv_unified,
                                          "seed": seed, "sampling": sampling}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the bare loop worker exited")
        return json.loads(line)

    def measure(self, scenario: str, rnd: int) -> dict[str, float] | None:
        """{layout: the figure compared with the scenario's metric} for one round, and
        every figure of the loop under "<layout>_<figure>"."""
        if scenario not in STREAM_SCENARIOS:
            return None
        nseq, steps, figure, _metric = STREAM_SCENARIOS[scenario]
        out: dict[str, float] = {}
        for layout, unified in LAYOUTS.items():
            res = self.run(nseq, steps, unified, f"{scenario}-{rnd}", SAMPLING.get(scenario))
            out[layout] = res[figure]
            out |= {f"{layout}_{k}": v for k, v in res.items() if k.endswith("_tps")}
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
