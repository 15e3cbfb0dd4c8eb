"""Changing the tempo of speech without changing its pitch (FFmpeg's atempo filter,
through PyAV): what makes a requested speed exact where piper's length scale alone
falls short (the pauses between phonemes keep a floor of one frame each)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

MIN_TEMPO, MAX_TEMPO = 0.5, 100.0  # atempo's range


def stretch(samples: np.ndarray, rate: int, tempo: float) -> np.ndarray:
    """16-bit mono `samples` played `tempo` times as fast (len / tempo samples)."""
    import av

    if not len(samples) or tempo == 1.0:
        return samples
    tempo = min(max(tempo, MIN_TEMPO), MAX_TEMPO)
    graph = av.filter.Graph()
    source = graph.add_abuffer(format="s16", sample_rate=rate, layout="mono", time_base=Fraction(1, rate))
    atempo = graph.add("atempo", f"{tempo:.6f}")
    sink = graph.add("abuffersink")
    source.link_to(atempo)
    atempo.link_to(sink)
    graph.configure()
    frame = av.AudioFrame.from_ndarray(samples.astype(np.int16).reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate = rate
    frame.time_base = Fraction(1, rate)
    frame.pts = 0
    graph.push(frame)
    graph.push(None)
    out = []
    while True:
        try:
            out.append(graph.pull().to_ndarray().reshape(-1))
        except (av.error.BlockingIOError, av.error.EOFError):
            break
    return np.concatenate(out).astype(np.int16) if out else np.zeros(0, dtype=np.int16)
