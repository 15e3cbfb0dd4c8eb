"""--sleep-idle-seconds for an encoder worker (the embedding or rerank model of a server
started with --embedding or --reranking; server/idle_sleep.py decides when): its model,
context and buffers are freed until a request needs them again."""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger("mlxcel.server")


class SleepingWorker:
    """Mixed into EmbeddingHost and RerankHost, which hold `engine`, `runtime`,
    `tokenizer`, `model_id` and `_load(on_failure)`, and say how they stop being ready."""

    kind = "encoder"  # for the log lines

    def _init_sleep(self) -> None:
        self.sleeping = False  # freed until a request wakes it
        self.asleep: dict = {}  # while sleeping: what the routes that do not wake it answer
        self._on_failure: Callable[[str], None] = lambda _message: None

    def _unready(self) -> None:
        raise NotImplementedError

    @property
    def outstanding(self) -> int:
        return self.engine.queue_depth if self.engine is not None else 0

    def mark_sleeping(self) -> None:
        """On the event loop, before sleep() runs on a thread: routes answer as asleep from now."""
        self.sleeping = True

    def sleep(self) -> None:
        """Free the model (weights, context, buffers) until wake(); no job in the engine."""
        engine, runtime = self.engine, self.runtime
        self.sleeping = True
        self._unready()
        self.engine = self.runtime = None
        self.tokenizer = None  # its vocabulary was the model's
        if engine is not None:
            engine.stop()
        if runtime is not None and (engine is None or not engine.alive):
            runtime.close()
        log.info("%s model %s is asleep: its memory is freed until a request needs it", self.kind, self.model_id)

    def wake(self) -> bool:
        """Load the model again after sleep() (on the calling thread): True once ready;
        a model that cannot be loaded again ends the server, as at start."""
        log.info("%s model %s is waking", self.kind, self.model_id)
        self._load(self._on_failure)
        self.sleeping, self.asleep = False, {}
        return self.ready
