"""What a chat template does, found by rendering probe conversations (test helpers)."""

from __future__ import annotations

from mlxcel.chat.template import ChatTemplate, TemplateError

PROBE_USER = [{"role": "user", "content": "Hello"}]
PROBE_TOOL_NAME = "mlxcel_probe_tool"
PROBE_TOOLS = [{"type": "function", "function": {"name": PROBE_TOOL_NAME, "description": "probe",
                                                 "parameters": {"type": "object", "properties": {}}}}]


def _probe(template: ChatTemplate, **kwargs) -> str | None:
    try:
        return template.render(PROBE_USER, add_generation_prompt=True, **kwargs)
    except TemplateError:
        return None


def ends_inside_think(prompt: str, open_marker: str = "<think>") -> bool:
    """Whether a rendered prompt ends with the opening marker and at most a newline after it."""
    tail = prompt[:-1] if prompt.endswith("\n") else prompt
    return tail.endswith(open_marker)


def opens_reasoning(template: ChatTemplate) -> bool:
    """The generation prompt for a plain user turn leaves a reasoning block open."""
    prompt = _probe(template)
    return prompt is not None and ends_inside_think(prompt, template.reasoning_markers.open)


def supports_tools(template: ChatTemplate) -> bool:
    """Declared tools show up in the rendered prompt."""
    prompt = _probe(template, tools=PROBE_TOOLS)
    return prompt is not None and PROBE_TOOL_NAME in prompt
