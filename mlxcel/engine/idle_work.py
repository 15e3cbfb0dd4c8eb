"""Work the engine thread does on idle slots, between steps: slot file actions
(slot_files.py; each when its slot is idle) and LoRA scale changes (lora.py; once no
slot is busy, admitting no request meanwhile, then every cached prefix dropped)."""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass

from mlxcel.engine import slot_files
from mlxcel.engine.llama_runtime import LlamaRuntime
from mlxcel.engine.lora import LoraError
from mlxcel.engine.prompt_cache import HostPromptCache
from mlxcel.engine.slot_files import SlotAction, SlotFileError
from mlxcel.engine.slots import SlotTable

log = logging.getLogger("mlxcel.engine")


@dataclass
class LoraChange:
    scales: list[float]
    done: Future  # answered with None once applied


class IdleWork:
    def __init__(self, slots: SlotTable, runtime: LlamaRuntime, n_ctx_slot: int, n_vocab: int,
                 host_cache: HostPromptCache | None) -> None:
        self.slots = slots
        self.runtime = runtime
        self.n_ctx_slot = n_ctx_slot
        self.n_vocab = n_vocab
        self.host_cache = host_cache
        self.slot_actions: list[SlotAction] = []  # waiting for their slot to be idle
        self.lora_changes: list[LoraChange] = []  # waiting for every slot to be idle

    def take(self, command: object) -> bool:
        """Queue an inbox command that is this kind of work (False for any other)."""
        if isinstance(command, SlotAction):
            self.slot_actions.append(command)
        elif isinstance(command, LoraChange):
            self.lora_changes.append(command)
        else:
            return False
        return True

    @property
    def pending(self) -> bool:
        return bool(self.slot_actions or self.lora_changes)

    @property
    def holds_admission(self) -> bool:
        """A LoRA change waits for the running requests alone: no new one is admitted."""
        return bool(self.lora_changes)

    def run_ready(self) -> bool:
        """Do what can be done now; True when anything was done."""
        done = False
        if self.lora_changes and not self.slots.busy():
            self._change_lora()
            done = True
        pending, self.slot_actions = self.slot_actions, []
        for action in pending:
            if not 0 <= action.slot_id < len(self.slots):
                action.done.set_exception(SlotFileError("Invalid slot ID"))
                continue
            slot = self.slots.slots[action.slot_id]
            if slot.request is not None:
                self.slot_actions.append(action)
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

    def _change_lora(self) -> None:
        """The latest change asked for; every slot's sequence and the host cache dropped."""
        changes, self.lora_changes = self.lora_changes, []
        try:
            self.runtime.set_lora_scales(changes[-1].scales)
        except Exception as exc:  # noqa: BLE001 - the change fails, the engine goes on
            for change in changes:
                change.done.set_exception(exc)
            return
        for slot in self.slots:
            self.runtime.seq_clear(slot.id)
            slot.cached_tokens.clear()
            slot.unsaved = False
            slot.last_used = time.monotonic()
        if self.host_cache is not None:
            self.host_cache.reset()
        for change in changes:
            change.done.set_result(None)

    def fail_all(self, message: str) -> None:
        """The engine stops: every waiting action and change fails with `message`."""
        for action in self.slot_actions:
            action.done.set_exception(SlotFileError(message, client_error=False))
        for change in self.lora_changes:
            change.done.set_exception(LoraError(message))
        self.slot_actions, self.lora_changes = [], []
