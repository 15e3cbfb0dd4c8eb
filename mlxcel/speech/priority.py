"""The audio workers' threads run at a lower priority than the chat engine's."""

from __future__ import annotations

import os
import threading

WHISPER_NICENESS = 10  # the whisper threads yield to the chat engine's: ~1/10 of a contended core each


def lower_thread_priority(niceness: int = WHISPER_NICENESS) -> None:
    """Lower the calling thread's scheduling priority (Linux: niceness is per thread and
    threads started from it inherit it, CTranslate2's and onnxruntime's included), so
    a transcription takes the CPU the chat engine leaves rather than stalling its
    streams. Best effort: elsewhere it does nothing."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)
    except (AttributeError, OSError):
        pass
