"""--models-preset: llama-server's INI presets read into the fleet (no model loaded)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxcel.cli.serve_args import parse_serve_args
from mlxcel.cli.usage import UsageError
from mlxcel.fleet.errors import ConfigError
from mlxcel.fleet.models_preset import models_preset_fleet

SMOL = Path.home() / ".cache" / "mlxcel" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _preset(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "models.ini"
    path.write_text(text)
    return path


def test_sections_keys_forms_and_precedence(tmp_path, caplog):
    path = _preset(tmp_path, f"""version = 1
; a comment
[*]
c = 4096
temp = 0.5
ngl = 99
poll = 50

[small]
model = {SMOL}
np = 2
LLAMA_ARG_TOP_K = 7
load-on-startup = true

[other]
m = {SMOL}
ctx-size = 1024
temp = 0
""")
    fleet = models_preset_fleet(path, None, 3, True, set(), is_tuning=lambda flag: flag == "--poll")
    small, other = fleet.models["small"], fleet.models["other"]
    assert (small.path, small.load.ctx_size, small.load.parallel) == (str(SMOL), 4096, 2)
    assert small.overrides.sampling == {"temperature": 0.5, "top_k": 7}
    assert other.load.ctx_size == 1024 and other.overrides.sampling == {"temperature": 0.0}  # a section wins
    assert fleet.preload == ("small",) and fleet.max_models == 3 and not fleet.ttl_s
    assert "ngl, poll" in caplog.text  # tuning keys: named, run as the command line sets them
    given = models_preset_fleet(path, None, 3, True, {"-c", "--temp"}, lambda flag: True)  # the command line wins
    assert given.models["small"].load.ctx_size is None and given.models["small"].overrides.sampling == {"top_k": 7}
    assert fleet.reread().models.keys() == fleet.models.keys()


def test_a_models_dir_model_takes_its_sections_options(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "smol.gguf").symlink_to(SMOL)
    path = _preset(tmp_path, "[smol]\nc = 2048\n")
    fleet = models_preset_fleet(path, str(folder), 4, True, set())
    assert fleet.models["smol"].path == str(folder / "smol.gguf") and fleet.models["smol"].load.ctx_size == 2048


@pytest.mark.parametrize("text, message", [
    ("[a]\nc = 512\n", "names no model"),
    (f"[a]\nmodel = {SMOL}\ngrammar = root ::= \"x\"\n", "[a] grammar: not supported in a preset"),
    (f"[a]\nmodel = {SMOL}\nc = many\n", "[a] c: invalid literal"),
    (f"[a]\nmodel = {SMOL}\nload-on-startup = maybe\n", "expected true or false"),
    (f"[a]\nmodel = {SMOL}\nchat-template-kwargs = {{\"a\": NaN}}\n", "NaN is not JSON"),  # was taken
    (f"[a]\nmodel = {SMOL}\nchat-template-kwargs = [1]\n", "must be a JSON object"),
    ("[a]\nmodel = x\n[a]\nc = 1\n", "not a valid INI file"),
    ("version = 1\n", "no model section"),
    (f"[a]\nmodel = {SMOL}\nnp = -1\n", "[a] np: -1 (llama-server's auto: 4 slots sharing one KV pool) is not served"),
])
def test_what_cannot_be_served_stops_the_start_in_one_line(tmp_path, text, message):
    with pytest.raises(ConfigError, match=r"--models-preset .*" + __import__("re").escape(message)):
        models_preset_fleet(_preset(tmp_path, text), None, 4, True, set())


def test_the_flag_is_router_mode(tmp_path):
    path = _preset(tmp_path, f"[a]\nmodel = {SMOL}\n")
    config = parse_serve_args(["--models-preset", str(path), "-c", "512"])
    assert config.models_preset == str(path) and "-c" in config.explicit_flags
    with pytest.raises(UsageError, match="drop -m"):
        parse_serve_args(["--models-preset", str(path), "-m", str(SMOL)])
    with pytest.raises(UsageError, match="use one"):
        parse_serve_args(["--models-preset", str(path), "--config", str(path)])


def test_llama_servers_variable_names_are_preset_keys(tmp_path):
    """LLAMA_ARG_TEMPERATURE and LLAMA_ARG_SPEC_DRAFT_MODEL are llama-server's names for
    --temp and -md (a preset that used them failed the start as 'not supported')."""
    path = _preset(tmp_path, f"[a]\nmodel = {SMOL}\nLLAMA_ARG_TEMPERATURE = 0.25\nLLAMA_ARG_SPEC_DRAFT_MODEL = {SMOL}\n"
                             f"[b]\nmodel = {SMOL}\nspec-draft-model = {SMOL}\n")
    fleet = models_preset_fleet(path, None, 4, True, set())
    assert fleet.models["a"].overrides.sampling == {"temperature": 0.25}
    assert fleet.models["a"].draft == str(SMOL) and fleet.models["b"].draft == str(SMOL)


def test_a_context_llama_cpp_cannot_hold_is_refused(tmp_path):
    """c = 4294975488 was taken, and llama.cpp's 32-bit n_ctx wrapped it to 8192."""
    with pytest.raises(ConfigError, match="ctx_size`: must be from 0 to 2147483647"):
        models_preset_fleet(_preset(tmp_path, f"[a]\nmodel = {SMOL}\nc = 4294975488\n"), None, 4, True, set())
