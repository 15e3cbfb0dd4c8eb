"""What other threads call on an engine. Each call either refuses at once (the queue
is at its cap, the engine failed or is stopping) or puts a command in the engine
thread's inbox, which that thread applies between turns (Engine._drain_inbox).
Nothing here touches the llama context."""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass

from mlxcel.engine.engine_config import EngineConfig
from mlxcel.engine.faults import EngineFailedError
from mlxcel.engine.lora_sets import LoraChange
from mlxcel.engine.request import Failure, FinishReason, GenerationRequest
from mlxcel.engine.slot_files import SlotAction, SlotFileError
from mlxcel.engine.slots import SlotTable
from mlxcel.engine.stats import EngineStats

SLOT_ACTIONS_MAX = 16  # slot saves / restores / erases waiting at once (for busy slots)


class QueueFullError(RuntimeError):
    """The prefill queue is at its cap."""


class EngineStoppedError(RuntimeError):
    pass


@dataclass
class Submit:
    request: GenerationRequest


@dataclass
class Cancel:
    request_id: int
    reason: FinishReason = FinishReason.CANCELLED
    error: str | None = None
    failure: Failure | None = None  # an ERROR finish's kind (SHED: the memory governor ended it)


class Stop:
    pass


@dataclass
class EndReasoning:
    request_id: int
    done: Future


class EngineControl:
    """The engine's thread-safe side: the inbox, the count of requests it holds, and
    whether it stopped or failed (all changed under `_admission`). The engine sets
    `slots`, `config` and `stats` before calling __init__."""

    slots: SlotTable
    config: EngineConfig
    stats: EngineStats

    def __init__(self, thread_name: str = "mlxcel-engine") -> None:
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._admission = threading.Lock()
        self._outstanding = 0  # submitted and not yet finished
        self._slot_actions_open = 0  # submitted and not yet answered (under _admission)
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self._stopped = False
        self.failure: str | None = None  # why the engine failed, once it has

    def _run(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._thread.start()

    @property
    def outstanding(self) -> int:
        """Requests submitted and not yet finished (queued or in a slot)."""
        return self._outstanding

    @property
    def capacity(self) -> int:
        """The most requests outstanding at once: one a slot, and the queue's cap."""
        return len(self.slots) + self.config.queue_cap

    @property
    def has_room(self) -> bool:
        """Whether a request submitted now would be admitted (not past the queue cap)."""
        return self._outstanding < self.capacity

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self.failure is None

    def submit(self, request: GenerationRequest) -> None:
        """Queue a request, or raise at once: QueueFullError when the queue is at its
        cap, EngineFailedError once the engine has failed, EngineStoppedError while it
        shuts down."""
        with self._admission:
            if self.failure is not None:
                raise EngineFailedError(self.failure)
            if self._stopped:
                raise EngineStoppedError("the engine is shutting down")
            if not self.has_room:
                self.stats.rejected_queue_full += 1
                raise QueueFullError("the prefill queue is full")
            self._outstanding += 1
            # inside the lock: once the engine stops, nothing reaches its inbox unseen
            self._inbox.put(Submit(request))

    def cancel(self, request_id: int, reason: FinishReason = FinishReason.CANCELLED) -> None:
        """End the request wherever it is; `reason` STOP ends it as a finished one (its
        output is complete: the caller has what it asked for)."""
        self._inbox.put(Cancel(request_id, reason))

    def shed(self, request_id: int, message: str) -> None:
        """End the request to free memory (the governor's red band): it finishes with
        an ERROR marked `shed` (the APIs answer server_overloaded_shed, finish_reason
        shed) with `message` as its error, wherever it is."""
        self._inbox.put(Cancel(request_id, FinishReason.ERROR, message, Failure.SHED))

    def slot_action(self, action: SlotAction) -> Future:
        """Queue a slot save, restore or erase (slot_files.py); its `done` future is
        answered once the slot is idle and the action ran."""
        with self._admission:
            if self.failure is not None or self._stopped:
                action.done.set_exception(SlotFileError("the server is shutting down", busy=True))
                return action.done
            if self._slot_actions_open >= SLOT_ACTIONS_MAX:
                action.done.set_exception(SlotFileError(f"{SLOT_ACTIONS_MAX} slot actions are already waiting",
                                                        busy=True))
                return action.done
            self._slot_actions_open += 1
            self._inbox.put(action)
        action.done.add_done_callback(self._slot_action_answered)
        return action.done

    def _slot_action_answered(self, _future: Future) -> None:
        with self._admission:
            self._slot_actions_open -= 1

    def set_lora_scales(self, scales: list[float]) -> Future:
        """Change the server's LoRA scales, those of every request admitted after the
        answer (None) that names none; requests running now keep theirs."""
        change = LoraChange(list(scales), Future())
        with self._admission:
            if self.failure is not None or self._stopped:
                change.done.set_exception(EngineStoppedError("the engine is shutting down"))
                return change.done
            self._inbox.put(change)
        return change.done

    def end_reasoning(self, request_id: int) -> Future:
        """Force the end of the request's reasoning block now (its budget's close marker,
        as when a thinking budget runs out): True when it was reasoning under an armed
        budget, False otherwise (not reasoning, finished, or no budget)."""
        command = EndReasoning(request_id, Future())
        with self._admission:  # once the engine stops, nothing reaches its inbox unseen
            if self.failure is not None or self._stopped:
                command.done.set_result(False)
            else:
                self._inbox.put(command)
        return command.done

    def stop(self, timeout: float = 5.0) -> None:
        with self._admission:
            self._stopped = True
        self._inbox.put(Stop())
        if self._thread.is_alive():
            self._thread.join(timeout)

    # -- for the engine thread ----------------------------------------------------------

    def _close_admission(self, failure: str | None) -> None:
        """Refuse every call from now on (with `failure`, when the engine failed)."""
        with self._admission:
            self._stopped = True
            if failure is not None:
                self.failure = failure

    def _finished_one(self) -> None:
        with self._admission:
            self._outstanding -= 1
