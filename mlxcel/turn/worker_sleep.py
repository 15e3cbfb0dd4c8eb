"""--sleep-idle-seconds for the models other than the chat model (server/idle_sleep.py
decides when): an embedding model or reranker (served by --embedding / --reranking, or
beside the chat model), Whisper and a piper voice. Asleep, the model and whatever runs
it are freed until a request needs them again."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from mlxcel.engine.embedding_engine import EmbeddingStats
from mlxcel.turn.errors import EngineUnavailable, ServerBusy

log = logging.getLogger("mlxcel.server")


class SleepingModel:
    """Mixed into a host holding `model_id`, `ready` and `error`, which says how it
    loads (`_load`, raising what stops it) and what it frees (`_release`); how it stops
    being ready (`_unready`) and loads again (`_reload`) have defaults here."""

    kind = "encoder"  # for the log lines
    noun = "encoder"  # "could not load the <noun> model"
    loader = "encoder"  # its loading thread is mlxcel-<loader>-loader

    def _init_sleep(self) -> None:
        self.sleeping = False  # freed until a request wakes it
        self.asleep: dict = {}  # while sleeping: what the routes that do not wake it answer
        self._on_failure: Callable[[str], None] = lambda _message: None

    def _load(self) -> None:
        raise NotImplementedError

    def start_loading(self, on_failure: Callable[[str], None]) -> threading.Thread:
        """Load on a thread of its own; a load that fails ends the server (`on_failure`)."""
        self._on_failure = on_failure
        thread = threading.Thread(target=self._load_or_fail, name=f"mlxcel-{self.loader}-loader", daemon=True)
        thread.start()
        return thread

    def _load_or_fail(self) -> None:
        try:
            self._load()
        except Exception as exc:  # noqa: BLE001 - any failure here ends the server
            self.error = str(exc) or type(exc).__name__
            log.error("could not load the %s model: %s", self.noun, self.error)
            self._on_failure(f"could not load the {self.noun} model: {self.error}")

    def _check_ready(self) -> None:
        """EngineUnavailable once its load failed; ServerBusy while it loads."""
        if self.error is not None:
            raise EngineUnavailable(self.error)
        if not self.ready:
            raise ServerBusy("Loading model")

    def _unready(self) -> None:
        self.ready = False

    def _release(self) -> None:
        raise NotImplementedError

    def _reload(self) -> None:
        """On a loader thread of its own, as at start: the loader lowers its thread's
        priority, which a pool thread must not keep."""
        self.start_loading(self._on_failure).join()

    def mark_sleeping(self) -> None:
        """On the event loop, before sleep() runs on a thread: routes answer as asleep from now."""
        self.sleeping = True

    def sleep(self) -> None:
        """Free the model until wake(); nothing of it waits or runs (idle_sleep.py)."""
        self.sleeping = True
        self._unready()
        self._release()
        log.info("%s model %s is asleep: its memory is freed until a request needs it", self.kind, self.model_id)

    def wake(self) -> bool:
        """Load the model again after sleep(): True once ready; a model that cannot be
        loaded again ends the server, as at start."""
        log.info("%s model %s is waking", self.kind, self.model_id)
        self._reload()
        self.sleeping, self.asleep = False, {}
        return self.ready


class SleepingWorker(SleepingModel):
    """An encoder host (EmbeddingHost, RerankHost): `engine`, `runtime` and `tokenizer`,
    loaded again on the calling thread."""

    def _init_sleep(self) -> None:
        super()._init_sleep()
        self._slept_stats = EmbeddingStats()  # the counters of the engines sleeps released

    @property
    def outstanding(self) -> int:
        return self.engine.queue_depth if self.engine is not None else 0

    @property
    def stats(self) -> EmbeddingStats:
        """The counters of every engine it has run (a sleep releases one; /metrics' series go on)."""
        return self._slept_stats + self.engine.stats if self.engine is not None else self._slept_stats

    def _release(self) -> None:
        engine, runtime = self.engine, self.runtime
        if engine is not None:
            self._slept_stats = self.stats
        self.engine = self.runtime = None
        self.tokenizer = None  # its vocabulary was the model's
        if engine is not None:
            engine.stop()
        if runtime is not None and (engine is None or not engine.alive):
            runtime.close()

    def _reload(self) -> None:
        self._load_or_fail()
