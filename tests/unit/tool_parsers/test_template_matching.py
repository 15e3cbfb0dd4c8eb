"""Each format's template sniffing claims its own templates and no other format's."""

from __future__ import annotations

import pytest

from mlxcel.chat.tool_parsers.command_r import CommandRParser
from mlxcel.chat.tool_parsers.function_gemma import FunctionGemmaParser
from mlxcel.chat.tool_parsers.functionary_v3_2 import FunctionaryV32Parser
from mlxcel.chat.tool_parsers.gemma4 import Gemma4Parser
from mlxcel.chat.tool_parsers.glm47 import Glm47Parser
from mlxcel.chat.tool_parsers.granite import GraniteParser
from mlxcel.chat.tool_parsers.longcat import LongCatParser
from mlxcel.chat.tool_parsers.minimax_m2 import MiniMaxM2Parser
from mlxcel.chat.tool_parsers.minimax_m3 import MiniMaxM3Parser

# short excerpts in the shape of each family's chat template
OWN = {
    MiniMaxM2Parser: "{{- '<minimax:tool_call>\\n' -}}<invoke name=\"{{ tc.name }}\"><parameter name=\"{{ k }}\">",
    MiniMaxM3Parser: "{%- set ns = ']<]minimax[>[' -%}{{ ns ~ '<tool_call>' }}{{ ns ~ '<invoke name=\"' ~ name ~ '\">' }}",
    FunctionaryV32Parser: "{{ '>>>all\\n' + message['content'] }}{{ '>>>' + tool_call['function']['name'] + '\\n' }}",
    CommandRParser: "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|>{{ plan }}<|END_THINKING|><|START_ACTION|>[",
    GraniteParser: "<|start_of_role|>assistant<|end_of_role|>{{- '<|tool_call|>[' }}{{ calls | tojson }}]",
    Gemma4Parser: "<|turn>model\n{{- '<|tool_call>call:' + name + '{' -}}{{ args }}{{- '}<tool_call|>' -}}",
    FunctionGemmaParser: "<start_of_turn>model\n<start_function_call>call:{{ name }}{{ '{' }}<escape>{{ v }}<escape>}<end_function_call>",
    Glm47Parser: "<|assistant|>\n<tool_call>{{ tc.name }}<arg_key>{{ k }}</arg_key><arg_value>{{ v }}</arg_value></tool_call>",
    LongCatParser: "<longcat_tool_call>{{ name }}\n<longcat_arg_key>{{ k }}</longcat_arg_key>\n<longcat_arg_value>",
}

FOREIGN = {
    "hermes": '<|im_start|>assistant\n<tool_call>\n{"name": "{{ tc.name }}", "arguments": {{ tc.arguments | tojson }}}\n</tool_call><|im_end|>',
    "qwen3_coder": "<tool_call>\n<function={{ tc.name }}>\n<parameter={{ k }}>\n{{ v }}\n</parameter>\n</function>\n</tool_call>",
    "mistral": "[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS][TOOL_CALLS]{{ name }}[ARGS]{{ args | tojson }}</s>",
    "llama3": '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "{{ tc.name }}", "parameters": {{ tc.arguments | tojson }}}<|eot_id|>',
    "functionary_v3_1": "{{ '<function=' + tc.function.name + '>' + tc.function.arguments + '</function>' }}<|python_tag|>",
    "kimi_k2": "<|tool_calls_section_begin|><|tool_call_begin|>functions.{{ name }}:0<|tool_call_argument_begin|>",
    "harmony": "<|start|>assistant<|channel|>commentary to=functions.{{ name }} <|constrain|>json<|message|>{{ args }}<|call|>",
    "pythonic": "<|tool_call_start|>[{{ name }}({{ args }})]<|tool_call_end|>",
    "chatml": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}",
}


@pytest.mark.parametrize("parser", list(OWN), ids=lambda p: p.name)
def test_claims_only_its_own_template(parser):
    assert parser.matches_template(OWN[parser])
    for other, template in OWN.items():
        if other is not parser:
            assert not parser.matches_template(template), other.name
    for family, template in FOREIGN.items():
        assert not parser.matches_template(template), family
