"""Slot save, restore and erase (llama-server's --slot-save-path and its
`POST /slots/{id}?action=`): a slot's tokens and KV state written to a file and read
back, in llama-server's own layout, so either server restores the other's files.

The actions run on the engine thread between steps, on an idle slot: an action on a
busy slot waits until its request ends, as llama-server defers it."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

import llama_cpp

from mlxcel.engine.llama_runtime import LlamaRuntime
from mlxcel.engine.media_span import is_stand_in
from mlxcel.engine.slots import Slot

# llama-server's server-tokens layout, as llama.cpp's sequence file stores it among
# the tokens: LLAMA_TOKEN_NULL, the layout's version, the token count and the tokens,
# then the count of media chunks (none here). A file whose first token is not the
# marker holds a plain token list (older llama-server versions). A slot that held media
# is saved with its positions' stand-in ids (media_span.py), so a restore followed by
# the same media reuses that memory, as the prompt cache does.
PACKED_MARKER = -1
PACKED_VERSION = 1
DISK_RESERVE = 256 * 2**20  # a save never leaves its filesystem with less free


class SlotFileError(Exception):
    """An action that failed; `client_error` when the request caused it (a bad id, a
    file that is not a slot file), `busy` when the server had no room for it now (too
    many actions waiting, the server stopping): a 503 to retry, not a 500."""

    def __init__(self, message: str, client_error: bool = True, busy: bool = False) -> None:
        super().__init__(message)
        self.client_error = client_error and not busy
        self.busy = busy


@dataclass
class SlotAction:
    kind: str  # save | restore | erase
    slot_id: int
    path: str = ""  # the file (save and restore)
    done: Future = field(default_factory=Future)  # SlotActionResult, or a SlotFileError


@dataclass(frozen=True)
class SlotActionResult:
    n_tokens: int  # saved, restored or erased
    n_bytes: int = 0  # written or read
    ms: float = 0.0


def run(action: SlotAction, slot: Slot, runtime: LlamaRuntime, n_ctx_slot: int, n_vocab: int) -> SlotActionResult:
    """Do the action on an idle slot: its record of tokens follows its sequence."""
    if action.kind == "save":
        return save(runtime, slot.id, list(slot.cached_tokens), action.path)
    if action.kind == "restore":
        slot.cached_tokens.clear()
        slot.unsaved = False
        tokens, result = restore(runtime, slot.id, action.path, n_ctx_slot, n_vocab)
        slot.cached_tokens = tokens
        slot.lora = tuple(adapter.scale for adapter in runtime.loras)  # a file does not say: the server's
        slot.unsaved = bool(tokens)  # the host cache may take it while idle
        slot.last_used = time.monotonic()
        return result
    if action.kind == "erase":
        n_erased = len(slot.cached_tokens)
        runtime.seq_clear(slot.id)
        slot.cached_tokens.clear()
        slot.unsaved = False
        return SlotActionResult(n_erased)
    raise SlotFileError("Invalid action")


def pack(tokens: list[int]) -> list[int]:
    return [PACKED_MARKER, PACKED_VERSION, len(tokens), *tokens, 0]


def unpack(packed: list[int]) -> list[int]:
    if not packed or packed[0] != PACKED_MARKER:
        return list(packed)
    if len(packed) < 4 or packed[1] != PACKED_VERSION:
        raise SlotFileError("Unsupported server tokens state version")
    n = packed[2]
    if n < 0 or 3 + n + 1 > len(packed):
        raise SlotFileError("Unexpected end of server tokens state")
    if packed[3 + n] != 0:
        raise SlotFileError("Cannot restore media tokens without an mmproj")
    return list(packed[3 : 3 + n])


def save(runtime: LlamaRuntime, slot_id: int, tokens: list[int], path: str) -> SlotActionResult:
    """Write the file whole or not at all: into a temporary file beside it, renamed over
    `path` once complete, so a failed save (a full disk) leaves no truncated file and an
    earlier file of that name intact. A save that would leave its filesystem with less
    than DISK_RESERVE free is refused before anything is written."""
    started = time.perf_counter()
    packed = pack(tokens)
    needed = llama_cpp.llama_state_seq_get_size(runtime.ctx, slot_id) + 4 * len(packed) + 64
    directory = os.path.dirname(path) or "."
    free = shutil.disk_usage(directory).free
    if free - needed < DISK_RESERVE:
        raise SlotFileError(f"Unable to save slot: the file needs {needed / 2**20:.1f} MiB and its disk has "
                            f"{free / 2**20:.0f} MiB free ({DISK_RESERVE // 2**20} MiB are kept free)",
                            client_error=False)
    # short, so a long name still fits; with `..`, a name valid_filename refuses, so never a
    # client's file (a save to the temporary name itself would be deleted once renamed)
    partial = os.path.join(directory, f".slot{slot_id}.{os.getpid()}..partial")
    array = (llama_cpp.llama_token * len(packed))(*packed)
    try:
        written = llama_cpp.llama_state_seq_save_file(runtime.ctx, partial.encode(), slot_id, array, len(packed))
        if written == 0:
            raise SlotFileError("Unable to save slot", client_error=False)
        os.replace(partial, path)
    except OSError as exc:
        raise SlotFileError(f"Unable to save slot: {exc.strerror or exc}", client_error=False) from None
    finally:
        with contextlib.suppress(OSError):  # gone once renamed
            os.unlink(partial)
    return SlotActionResult(len(tokens), written, (time.perf_counter() - started) * 1e3)


def restore(runtime: LlamaRuntime, slot_id: int, path: str, n_ctx_slot: int,
            n_vocab: int) -> tuple[list[int], SlotActionResult]:
    """The slot's sequence is cleared first; on any failure it is left empty."""
    started = time.perf_counter()
    runtime.seq_clear(slot_id)
    try:
        count = ctypes.c_size_t(0)
        read = llama_cpp.llama_state_seq_load_file(runtime.ctx, path.encode(), slot_id, None, 0, ctypes.byref(count))
        if read:
            tokens_out = (llama_cpp.llama_token * max(1, count.value))()
            read = llama_cpp.llama_state_seq_load_file(runtime.ctx, path.encode(), slot_id, tokens_out,
                                                       len(tokens_out), ctypes.byref(count))
        if not read:
            raise SlotFileError("No available space in KV cache or invalid slot save file")
        tokens = unpack(list(tokens_out[: count.value]))
        if len(tokens) > n_ctx_slot:
            raise SlotFileError("Restored prompt does not fit in the slot context")
        if any(not (0 <= token < n_vocab or is_stand_in(token)) for token in tokens):
            raise SlotFileError("Invalid tokens in slot save file")
    except SlotFileError as exc:
        runtime.seq_clear(slot_id)
        raise SlotFileError(f"Unable to restore slot: {exc}") from None
    return tokens, SlotActionResult(len(tokens), read, (time.perf_counter() - started) * 1e3)


def valid_filename(name: str) -> bool:
    """llama-server's rule for a slot file's name: one plain file name, no path, no
    control or reserved characters, no `..`, no leading or trailing space or trailing dot."""
    if not name or len(name.encode("utf-8", "surrogatepass")) > 255:
        return False
    for char in name:
        c = ord(char)
        if (c <= 0x1F or c == 0x7F or 0x80 <= c <= 0x9F or c in (0xFF0E, 0x2215, 0x2216, 0xFFFD, 0xFEFF)
                or 0xD800 <= c <= 0xDFFF or char in ':*?"<>|/\\'):
            return False
    return not (name[0] == " " or name[-1] in " ." or ".." in name or name == ".")
