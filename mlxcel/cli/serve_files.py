"""The files and directories a serve command line names, checked at start: models,
adapters, control vectors, key files, templates, and the folders it writes to (made if
missing), so a missing or unwritable path fails the start in one line."""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

from mlxcel.cli.usage import UsageError
from mlxcel.engine.control_vectors import ControlVectors
from mlxcel.models.catalog import CATALOG


def prompts_dir(text: str | None) -> str | None:
    """--log-prompts-dir: made now, so a path that cannot be a directory fails the start in one line."""
    if not text:
        return None
    path = Path(text).expanduser().resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--log-prompts-dir: cannot make {path}: {exc.strerror or exc}") from None
    return str(path)


def _scaled_files(flag: str, plain: list[str] | None, scaled: list[str] | None) -> list[tuple[str, float]]:
    """FNAME[,...] at scale 1 and FNAME:SCALE[,...], in order, each file checked to exist."""
    files = [(part.strip(), 1.0) for value in plain or () for part in value.split(",") if part.strip()]
    for value in scaled or ():
        for part in (p.strip() for p in value.split(",") if p.strip()):
            path, sep, scale = part.rpartition(":")
            try:
                number = float(scale)
            except ValueError:
                number = math.nan
            if not sep or not path or not math.isfinite(number):
                raise UsageError(f"{flag}-scaled {part}: the format is FNAME:SCALE with a finite scale")
            files.append((path, number))
    for path, _ in files:
        if not Path(path).expanduser().is_file():
            raise UsageError(f"{flag} {path}: no such file")
    return [(str(Path(path).expanduser().resolve()), scale) for path, scale in files]


def control_vectors(args: argparse.Namespace) -> ControlVectors:
    files = _scaled_files("--control-vector", args.control_vector, args.control_vector_scaled)
    start, end = args.control_vector_layer_range or (0, 0)
    if args.control_vector_layer_range is not None and not 0 < start <= end:
        raise UsageError(f"--control-vector-layer-range {start} {end}: 1 <= START <= END")
    return ControlVectors(tuple(files), start, end)


def lora_adapters(args: argparse.Namespace) -> tuple[tuple[str, float], ...]:
    """(path, scale) of each --lora (scale 1) and --lora-scaled FNAME:SCALE, in order;
    every scale 0 with --lora-init-without-apply (POST /lora-adapters sets them)."""
    adapters = _scaled_files("--lora", args.lora, args.lora_scaled)
    if args.lora_init_without_apply:
        adapters = [(path, 0.0) for path, _ in adapters]
    return tuple(adapters)


def static_path(text: str | None) -> str | None:
    if text is None:
        return None
    path = Path(text).expanduser().resolve()
    if not path.is_dir():
        raise UsageError(f"--path {text}: no such directory")
    return str(path)


JSON_FILE_MAX_BYTES = 1 << 20  # --webui-config's and the MCP servers' JSON


def _json_text(flag: str, path: str) -> str:
    try:
        with open(Path(path).expanduser(), "rb") as handle:
            return handle.read(JSON_FILE_MAX_BYTES + 1).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{flag}: cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None


def _json_value(flag: str, text: str):
    """`text` as JSON, strictly (no NaN or Infinity), at most JSON_FILE_MAX_BYTES."""
    if len(text.encode("utf-8", "surrogatepass")) > JSON_FILE_MAX_BYTES:
        raise UsageError(f"{flag}: over {JSON_FILE_MAX_BYTES} bytes")

    def no_constant(name: str):
        raise ValueError(f"{name} is not JSON")

    def finite(number: str) -> float:  # 1e999 would be read as infinity, which JSON cannot carry back out
        value = float(number)
        if not math.isfinite(value):
            raise ValueError(f"{number} is out of a double's range")
        return value

    try:
        return json.loads(text, parse_constant=no_constant, parse_float=finite)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{flag}: not valid JSON: {exc}") from None


def ui_settings(text: str | None, file: str | None) -> dict:
    """--webui-config JSON or --webui-config-file PATH: the web UI's default settings, a JSON
    object (llama-server's `ui_settings` in /props)."""
    if text is not None and file is not None:
        raise UsageError("--webui-config and --webui-config-file: give one of them")
    if text is None and file is None:
        return {}
    flag = "--webui-config" if text is not None else "--webui-config-file"
    settings = _json_value(flag, text if text is not None else _json_text(flag, file))
    if not isinstance(settings, dict):
        raise UsageError(f"{flag}: the settings must be a JSON object of setting names and values")
    return settings


def mcp_servers(file: str | None, text: str | None) -> tuple:
    """--mcp-servers-config PATH and --mcp-servers-json JSON: their servers, the file's
    first; a name both define is kept once (the first), with a warning."""
    from mlxcel.toolbox.mcp_config import log, parse_mcp_servers

    found = []
    for flag, value in (("--mcp-servers-config", file), ("--mcp-servers-json", text)):
        if value is None:
            continue
        data = _json_value(flag, _json_text(flag, value) if flag == "--mcp-servers-config" else value)
        try:
            found += parse_mcp_servers(data, flag)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    servers, names = [], set()
    for server in found:
        if server.name in names:
            log.warning("MCP config: server name %r is defined twice, keeping the first", server.name)
            continue
        names.add(server.name)
        servers.append(server)
    return tuple(servers)


def slot_save_path(text: str | None) -> str | None:
    """The slot files' directory, made if missing; a start that cannot write there fails."""
    if text is None:
        return None
    if not text.strip():
        raise UsageError("--slot-save-path: the path is empty")
    path = Path(text).expanduser().resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--slot-save-path: cannot create {path}: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"--slot-save-path: {path} is not a writable directory")
    return str(path)


def read_api_keys(args: argparse.Namespace) -> list[str]:
    """The configured keys; a key setting that yields no key fails the start (fail
    closed: an empty --api-key must not silently open the server)."""
    keys: list[str] = []
    if args.api_key is not None:
        keys = [k.strip() for k in args.api_key.split(",") if k.strip()]
        if not keys:
            raise UsageError("--api-key: the key is empty (omit --api-key to serve without keys)")
    if args.api_key_file:
        try:
            lines = Path(args.api_key_file).read_text(encoding="utf-8-sig").splitlines()  # a BOM is not a key's
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise UsageError(f"--api-key-file: cannot read {args.api_key_file}: {reason}") from None
        file_keys = [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
        if not file_keys:
            raise UsageError(f"--api-key-file: {args.api_key_file} holds no key")
        keys += file_keys
    return keys


def check_model(model: str, flag: str = "--model") -> None:
    if model in CATALOG:
        return
    path = Path(model).expanduser()
    if not path.exists() or path.is_dir():
        raise UsageError(f"{flag}: {model} is neither a file nor a catalog name ({', '.join(CATALOG)})")


def check_audio_model(model: str, flag: str) -> None:
    kind = flag[2:5]
    if model in CATALOG:
        if CATALOG[model].kind != kind:
            names = ", ".join(n for n, e in CATALOG.items() if e.kind == kind)
            raise UsageError(f"{flag}: {model} is a {CATALOG[model].kind} model, not an {kind} model ({names})")
        return
    if not Path(model).expanduser().exists():
        names = ", ".join(n for n, e in CATALOG.items() if e.kind == kind)
        raise UsageError(f"{flag}: {model} is neither a folder, a file nor a catalog name ({names})")


def chat_template_setting(args: argparse.Namespace) -> str | None:
    """--chat-template-file or --chat-template: the one given last on the command line
    wins, as in llama-server (both set its one template); the file's from variables."""
    if args.chat_template_file and not Path(args.chat_template_file).is_file():
        raise UsageError(f"--chat-template-file: no such file: {args.chat_template_file}")
    if args.chat_template and getattr(args, "last_template_flag", None) == "--chat-template":
        return args.chat_template
    return args.chat_template_file or args.chat_template
