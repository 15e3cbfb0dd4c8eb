"""Work the engine thread does on idle slots, between steps: slot file actions
(slot_files.py), each once its slot is idle."""

from __future__ import annotations

import logging

from mlxcel.engine import slot_files
from mlxcel.engine.llama_runtime import LlamaRuntime
from mlxcel.engine.slot_files import SlotAction, SlotFileError
from mlxcel.engine.slots import SlotTable

log = logging.getLogger("mlxcel.engine")


class IdleWork:
    def __init__(self, slots: SlotTable, runtime: LlamaRuntime, n_ctx_slot: int, n_vocab: int) -> None:
        self.slots = slots
        self.runtime = runtime
        self.n_ctx_slot = n_ctx_slot
        self.n_vocab = n_vocab
        self.slot_actions: list[SlotAction] = []  # waiting for their slot to be idle

    def take(self, command: object) -> bool:
        """Queue an inbox command that is this kind of work (False for any other)."""
        if isinstance(command, SlotAction):
            self.slot_actions.append(command)
            return True
        return False

    @property
    def pending(self) -> bool:
        return bool(self.slot_actions)

    def run_ready(self) -> bool:
        """Do what can be done now; True when anything was done."""
        done = False
        pending, self.slot_actions = self.slot_actions, []
        for action in pending:
            if action.done.cancelled():  # its caller went away (a shutdown cancels what waits): not run
                continue
            if not 0 <= action.slot_id < len(self.slots):
                if action.done.set_running_or_notify_cancel():
                    action.done.set_exception(SlotFileError("Invalid slot ID"))
                continue
            slot = self.slots.slots[action.slot_id]
            if slot.request is not None:
                self.slot_actions.append(action)
                continue
            if not action.done.set_running_or_notify_cancel():  # from here on, no cancel: it runs and is answered
                continue
            try:
                action.done.set_result(slot_files.run(action, slot, self.runtime, self.n_ctx_slot, self.n_vocab))
            except SlotFileError as exc:
                action.done.set_exception(exc)
            except Exception as exc:  # noqa: BLE001 - the action fails, the engine goes on
                log.exception("slot %d: %s failed", slot.id, action.kind)
                action.done.set_exception(SlotFileError(f"internal error: {type(exc).__name__}", client_error=False))
            done = True
        return done

    def fail_all(self, message: str) -> None:
        """The engine stops: every waiting action fails with `message`."""
        for action in self.slot_actions:
            if not action.done.cancelled():
                action.done.set_exception(SlotFileError(message, client_error=False))
        self.slot_actions = []
