"""Addressing (id, alias, id@profile, the `profile` field, the default) and the
profile layers a request's defaults come from, per model family."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mlxcel.fleet.addressing import address, available, listing
from mlxcel.fleet.config_file import load_fleet_config
from mlxcel.fleet.entries import FleetConfig, ModelEntry
from mlxcel.fleet.errors import ModelNotFound, ModelRequired, UnknownProfile
from mlxcel.fleet.intents import INTENTS, family_from_metadata, intent_values
from mlxcel.fleet.profiles import resolve_defaults

SMOL = "smollm2-135m-instruct"
QWEN = "qwen2.5-coder-0.5b-instruct"
FAMILIES = {"smol": "smollm", "qwen": "qwen2.5", "think": "qwen3", "oss": "gpt-oss", "gem": "gemma"}


def family_of(entry: ModelEntry) -> str | None:
    return entry.family or FAMILIES.get(entry.id)


def _config(tmp_path: Path, text: str) -> FleetConfig:
    path = tmp_path / "mlxcel.yaml"
    path.write_text(textwrap.dedent(text))
    return load_fleet_config(path)


@pytest.fixture
def config(tmp_path: Path) -> FleetConfig:
    return _config(tmp_path, f"""
        profiles:
          terse: {{system: "Be terse.", sampling: {{max_tokens: 64, temperature: 0.5}}}}
          review: {{extends: coding, system: "Review.", sampling: {{top_k: 7}}}}
          creative: {{sampling: {{temperature: 1.7}}}}   # replaces the intent of that name
          coding-plus: {{extends: coding, sampling: {{seed: 3}}}}
        rules:
          - {{match: "q*", profile: terse}}
        models:
          smol: {{path: {SMOL}}}
          qwen: {{path: {QWEN}, profile: review}}
          think: {{path: {QWEN}, family: qwen3}}
          oss: {{path: {QWEN}, family: gpt-oss}}
          gem: {{path: {QWEN}, family: gemma, profiles: {{coding: {{sampling: {{min_p: 0.2}}}}}},
                overrides: {{sampling: {{top_p: 0.5}}}}}}
        aliases:
          coder: qwen@coding
          s: smol
        server:
          defaults: {{model: s}}
    """)


def test_an_id_gets_its_own_profile_over_the_rule(config: FleetConfig) -> None:
    got = address(config, "qwen", None, family_of)
    assert (got.entry.id, got.profile, got.name) == ("qwen", "review", "qwen")
    # rule `terse` below, then review = qwen2.5's @coding + its own keys
    assert got.defaults.sampling == {"max_tokens": 64, "temperature": 0.3, "top_p": 0.8, "top_k": 7,
                                     "repetition_penalty": 1.05}
    assert got.defaults.system == "Review."


def test_a_plain_request_gets_no_family_values(config: FleetConfig) -> None:
    got = address(config, "smol", None, family_of)
    assert got.profile is None and got.defaults.sampling == {} and got.defaults.system is None


def test_id_at_intent_resolves_per_family(config: FleetConfig) -> None:
    assert address(config, "smol@coding", None, family_of).defaults.sampling == {"temperature": 0.2, "top_p": 0.9}
    gem = address(config, "gem@coding", None, family_of)
    # gemma's @coding, then the per-model change of @coding, then the overrides
    assert gem.defaults.sampling == {"temperature": 0.3, "top_p": 0.5, "top_k": 64, "min_p": 0.2}
    assert address(config, "gem@instruct", None, family_of).defaults.sampling == {"temperature": 1.0, "top_p": 0.5,
                                                                                   "top_k": 64}


def test_at_name_replaces_the_model_profile(config: FleetConfig) -> None:
    got = address(config, "qwen@instruct", None, family_of)
    assert got.profile == "instruct" and got.defaults.system == "Be terse."  # review's is gone, the rule's stays
    assert got.defaults.sampling["temperature"] == 0.7  # qwen2.5's base over the rule's 0.5


def test_a_user_profile_with_an_intent_name_replaces_it(config: FleetConfig) -> None:
    assert address(config, "smol@creative", None, family_of).defaults.sampling == {"temperature": 1.7}


def test_an_alias_carries_its_profile_and_the_body_field_wins(config: FleetConfig) -> None:
    got = address(config, "coder", None, family_of)
    assert (got.entry.id, got.profile, got.name) == ("qwen", "coding", "coder")
    assert address(config, "coder", "terse", family_of).profile == "terse"
    assert address(config, "coder@instruct", None, family_of).profile == "instruct"
    assert address(config, "qwen@instruct", "coding-plus", family_of).profile == "coding-plus"


def test_the_split_is_on_the_last_at_and_only_for_known_profiles(config: FleetConfig) -> None:
    with pytest.raises(ModelNotFound) as info:
        address(config, "qwen@nope", None, family_of)
    assert info.value.extra["available_models"] == ["coder", "gem", "oss", "qwen", "s", "smol", "think"]
    with pytest.raises(ModelNotFound):
        address(config, "qwen@x@coding", None, family_of)
    with pytest.raises(ModelNotFound):
        address(config, "@coding", None, family_of)


def test_unknown_id_and_unknown_profile(config: FleetConfig) -> None:
    with pytest.raises(ModelNotFound) as missing:
        address(config, "gpt-4o", None, family_of)
    assert missing.value.code == "model_not_found" and "gpt-4o" in str(missing.value)
    with pytest.raises(UnknownProfile) as bad:
        address(config, "qwen", "nope", family_of)
    assert bad.value.code == "unknown_profile"
    assert bad.value.extra["valid_profiles"] == sorted({"terse", "review", "creative", "coding-plus", *INTENTS})


def test_empty_model_goes_to_the_default_then_the_sole_model(config: FleetConfig, tmp_path: Path) -> None:
    got = address(config, "", None, family_of)
    assert (got.entry.id, got.name) == ("smol", "s")
    assert address(config, None, "coding", family_of).profile == "coding"
    sole = _config(tmp_path, f"models: {{only: {{path: {SMOL}}}}}")
    assert address(sole, None, None, family_of).entry.id == "only"
    two = _config(tmp_path, f"models: {{a: {{path: {SMOL}}}, b: {{path: {SMOL}}}}}")
    with pytest.raises(ModelRequired) as info:
        address(two, "", None, family_of)
    assert info.value.extra["available_models"] == ["a", "b"]


def test_thinking_and_effort_map_to_the_family_template_variable(config: FleetConfig, tmp_path: Path) -> None:
    assert address(config, "think@instruct", None, family_of).defaults.chat_template_kwargs == {
        "enable_thinking": False}
    assert address(config, "oss@reasoning-high", None, family_of).defaults.chat_template_kwargs == {
        "reasoning_effort": "high"}
    assert address(config, "oss@reasoning-xhigh", None, family_of).defaults.chat_template_kwargs == {}
    kw = _config(tmp_path, f"""
        profiles:
          p: {{thinking: on, reasoning_effort: low, chat_template_kwargs: {{enable_thinking: false, x: 1}}}}
          q: {{sampling: {{enable_thinking: true}}}}
        models: {{think: {{path: {SMOL}, family: qwen3}}, gem: {{path: {SMOL}, family: gemma}}}}
    """)
    # the profile's own chat_template_kwargs win over its thinking switch
    assert address(kw, "think@p", None, family_of).defaults.chat_template_kwargs == {
        "enable_thinking": False, "reasoning_effort": "low", "x": 1}
    assert address(kw, "think@q", None, family_of).defaults.chat_template_kwargs == {"enable_thinking": True}
    assert address(kw, "think@q", None, family_of).defaults.sampling == {}
    assert address(kw, "gem@q", None, family_of).defaults.chat_template_kwargs == {}  # gemma has no switch


def test_server_default_profile_is_the_lowest_layer(tmp_path: Path) -> None:
    config = _config(tmp_path, f"""
        profiles:
          low: {{sampling: {{temperature: 0.1, top_k: 1, seed: 1}}}}
          mid: {{sampling: {{top_k: 2, seed: 2}}}}
          top: {{sampling: {{seed: 3}}}}
        rules: [{{match: "*", profile: mid}}]
        models: {{a: {{path: {SMOL}, profile: top}}, b: {{path: {SMOL}}}}}
        server: {{defaults: {{profile: low}}}}
    """)
    assert address(config, "a", None, family_of).defaults.sampling == {"temperature": 0.1, "top_k": 2, "seed": 3}
    b = address(config, "b", None, family_of)
    assert b.profile == "mid" and b.defaults.sampling == {"temperature": 0.1, "top_k": 2, "seed": 2}


def test_extends_chains_and_a_changed_intent(tmp_path: Path) -> None:
    config = _config(tmp_path, f"""
        profiles:
          coding: {{extends: coding, sampling: {{top_k: 9}}}}
          a: {{extends: b, sampling: {{seed: 1}}, system: A}}
          b: {{extends: "@coding", system: B}}
        models: {{q: {{path: {QWEN}}}}}
    """)
    entry = config.models["q"]
    got = resolve_defaults(config, entry, "a", "qwen2.5")
    assert got.sampling == {"temperature": 0.3, "top_p": 0.8, "top_k": 9, "repetition_penalty": 1.05, "seed": 1}
    assert got.system == "A"


def test_family_defaults_off_removes_the_intents(tmp_path: Path) -> None:
    config = _config(tmp_path, f"""
        models: {{q: {{path: {QWEN}}}}}
        server: {{family_defaults: false}}
    """)
    with pytest.raises(ModelNotFound):
        address(config, "q@coding", None, family_of)
    with pytest.raises(UnknownProfile) as info:
        address(config, "q", "coding", family_of)
    assert info.value.extra["valid_profiles"] == []


def test_listing_rows(config: FleetConfig) -> None:
    rows = {row["id"]: row for row in listing(config)}
    assert list(rows) == ["smol", "qwen", "think", "oss", "gem", "coder", "s"]
    assert rows["qwen"]["profile"] == "review" and "alias_of" not in rows["qwen"]
    assert rows["coder"] == {"id": "coder", "object": "model", "owned_by": "mlxcel", "alias_of": "qwen",
                             "profile": "coding", "default": False}
    assert rows["s"]["default"] and not rows["smol"]["default"]
    assert available(config) == sorted(rows)


def test_families_from_the_gguf_header() -> None:
    assert family_from_metadata({"general.architecture": "llama", "general.name": "SmolLM2 135M"}) == "smollm"
    assert family_from_metadata({"general.architecture": "llama"}) == "llama"
    assert family_from_metadata({"general.architecture": "qwen2"}) == "qwen2.5"
    assert family_from_metadata({"general.architecture": "gemma3"}) == "gemma"
    assert family_from_metadata({"general.architecture": "mamba"}) == "default"
    assert family_from_metadata({}) == "default"
    assert intent_values("coding", "unknown-family").sampling == {"temperature": 0.3, "top_p": 0.95}
    assert intent_values("reasoning-max", "gemma").sampling == {"temperature": 1.0, "top_p": 0.95, "top_k": 64}


def test_a_model_name_that_is_not_a_string(config: FleetConfig) -> None:
    with pytest.raises(ModelNotFound):
        address(config, 5, None, family_of)  # type: ignore[arg-type]
    with pytest.raises(UnknownProfile):
        address(config, "smol", 5, family_of)  # type: ignore[arg-type]


def test_family_of_reads_the_gguf_header_once(tmp_path: Path) -> None:
    from mlxcel.fleet import model_files
    from mlxcel.models.catalog import CATALOG
    from mlxcel.models.pull import pull
    from mlxcel.models.store import model_path

    for name in (SMOL, QWEN, "gemma-3-270m"):
        if not model_path(CATALOG[name]).is_file():
            pull(name, progress=False, log=lambda _msg: None)
    config = _config(tmp_path, f"""
        models:
          smol: {{path: {SMOL}}}
          qwen: {{path: {QWEN}}}
          gem: {{path: gemma-3-270m}}
          forced: {{path: {QWEN}, family: gemma}}
    """)
    got = {model_id: model_files.family_of(entry) for model_id, entry in config.models.items()}
    assert got == {"smol": "smollm", "qwen": "qwen2.5", "gem": "gemma", "forced": "gemma"}
    model_files.family_of(config.models["qwen"])
    assert model_files._read.cache_info().hits >= 1
    assert model_files.metadata(str(tmp_path / "absent.gguf")) is None
    (tmp_path / "bad.gguf").write_bytes(b"not a gguf at all, not at all")
    entry = ModelEntry(id="bad", path=str(tmp_path / "bad.gguf"))
    assert model_files.family_of(entry) == "default"
