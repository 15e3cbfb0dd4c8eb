"""What a chat template can render, found by rendering probe conversations: the
`chat_template_caps` that llama-server's /props reports, under its names."""

from __future__ import annotations

from typing import Any

from mlxcel.chat.template import ChatTemplate, TemplateTimeout

MARK = "MLXCEL_PROBE_MARKER"
_USER = {"role": "user", "content": "hello"}
_TOOL = {"type": "function", "function": {"name": f"{MARK}_tool", "description": "probe",
                                          "parameters": {"type": "object", "properties": {}}}}


CAP_NAMES = ("supports_string_content", "supports_typed_content", "supports_tools", "supports_tool_calls",
             "supports_parallel_tool_calls", "supports_system_role", "supports_preserve_reasoning",
             "supports_reasoning_effort", "supports_object_arguments")


def _call(name: str, arguments: Any) -> dict:
    return {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}


def _renders(template: ChatTemplate, marker: str, messages: list[dict], **kwargs: Any) -> bool:
    try:
        return marker in template.render(messages, add_generation_prompt=False, **kwargs)
    except TemplateTimeout:
        raise
    except Exception:  # noqa: BLE001 - a template that cannot render a probe lacks the capability
        return False


def _calls(*calls: dict) -> list[dict]:
    return [_USER, {"role": "assistant", "content": "", "tool_calls": list(calls)}]


def probe_caps(template: ChatTemplate) -> dict[str, bool]:
    """The caps; none for a template that runs out of time on a probe (it would on each of
    them, for `RENDER_SECONDS` each)."""
    try:
        return _probe_caps(template)
    except TemplateTimeout:
        return dict.fromkeys(CAP_NAMES, False)


def _probe_caps(template: ChatTemplate) -> dict[str, bool]:
    string_args = _renders(template, f"{MARK}_arg", _calls(_call("probe_fn", f'{{"{MARK}_arg": 1}}')))
    object_args = _renders(template, f"{MARK}_arg", _calls(_call("probe_fn", {f"{MARK}_arg": 1})))
    calls = _renders(template, f"{MARK}_fn", _calls(_call(f"{MARK}_fn", "{}"))) or _renders(
        template, f"{MARK}_fn", _calls(_call(f"{MARK}_fn", {})))
    typed = _renders(template, MARK, [{"role": "user", "content": [{"type": "text", "text": MARK}]}])
    return {
        "supports_string_content": _renders(template, MARK, [{"role": "user", "content": MARK}]),
        "supports_typed_content": typed,
        "supports_tools": _renders(template, f"{MARK}_tool", [_USER], tools=[_TOOL]),
        "supports_tool_calls": calls,
        "supports_parallel_tool_calls": calls and _renders(
            template, f"{MARK}_second", _calls(_call("probe_fn", {}), _call(f"{MARK}_second", {}))),
        "supports_system_role": _renders(template, MARK, [{"role": "system", "content": MARK}, _USER]),
        "supports_preserve_reasoning": _renders(template, MARK, [
            _USER, {"role": "assistant", "content": "ok", "reasoning_content": MARK}, _USER]),
        "supports_reasoning_effort": "reasoning_effort" in template.source,
        "supports_object_arguments": object_args and not string_args,
    }


