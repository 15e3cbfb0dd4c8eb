"""--sleep-idle-seconds for the speech models served beside the chat model (server/
idle_sleep.py decides when, by the audio routes' own requests): the Whisper model or the
piper voice is dropped with its worker thread, and loaded again, on a loader thread of
its own as at start, by the next request that needs it."""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger("mlxcel.server")


class SleepingSpeech:
    """Mixed into SttHost and SpeechHost, which hold `model_id` and `ready`, load with
    `start_loading(on_failure)` and free their model and worker with `_release()`."""

    kind = "speech"  # for the log lines

    def _init_sleep(self) -> None:
        self.sleeping = False  # freed until a request wakes it
        self.asleep: dict = {}  # the describing routes list no speech model: nothing to keep
        self._on_failure: Callable[[str], None] = lambda _message: None

    def _release(self) -> None:
        raise NotImplementedError

    def mark_sleeping(self) -> None:
        """On the event loop, before sleep() runs on a thread."""
        self.sleeping = True

    def sleep(self) -> None:
        """Free the model and stop its worker until wake(); no job waits (idle_sleep.py)."""
        self.sleeping, self.ready = True, False
        self._release()
        log.info("%s model %s is asleep: its memory is freed until a request needs it", self.kind, self.model_id)

    def wake(self) -> bool:
        """Load the model again after sleep(): True once ready. It loads on a thread of its
        own (the loader lowers its thread's priority, which a pool thread must not keep)."""
        log.info("%s model %s is waking", self.kind, self.model_id)
        self.start_loading(self._on_failure).join()
        self.sleeping, self.asleep = False, {}
        return self.ready
