"""The --config loader: the shipped example, gmlx's keys, the mlxcel extensions, and
one-line errors naming the file and the key for every bad or unsupported value."""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import pytest

from mlxcel.fleet.config_file import load_fleet_config
from mlxcel.fleet.config_values import CACHE_TYPES
from mlxcel.fleet.entries import LoadSettings
from mlxcel.fleet.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mlxcel.yaml"
SMOL = "smollm2-135m-instruct"
QWEN = "qwen2.5-coder-0.5b-instruct"


def _write(tmp_path: Path, text: str, name: str = "mlxcel.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _load(tmp_path: Path, text: str):
    return load_fleet_config(_write(tmp_path, text))


def _error(tmp_path: Path, text: str) -> str:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_fleet_config(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message


def test_the_shipped_example_loads() -> None:
    config = load_fleet_config(EXAMPLE)
    assert list(config.models) == [SMOL, QWEN, "gemma-3-270m"]
    assert config.aliases == {"coder": f"{QWEN}@coding", "reviewer": f"{QWEN}@review", "small": SMOL,
                              "tiny": "gemma-3-270m@creative"}
    assert config.default_model == SMOL
    assert config.preload == (QWEN,)
    assert config.budget_bytes == 2 * 10**9 and config.max_models == 2
    assert config.embeddings == "all-minilm-l6-v2"
    assert config.rules == (("gemma-*", "brief"),)
    assert config.profiles["review"].extends == "coding"
    assert config.cache_enabled is True and config.ttl_s == 900
    smol = config.models[SMOL]
    assert smol.path == SMOL and smol.pin and smol.load == LoadSettings(ctx_size=4096, parallel=4)
    assert config.models["gemma-3-270m"].ttl_s == 300
    assert config.models["gemma-3-270m"].overrides.sampling == {"seed": 1234}


def test_paths_resolve_under_model_dirs_then_the_config_folder(tmp_path: Path, monkeypatch) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "a.gguf").write_bytes(b"x")
    (tmp_path / "b.gguf").write_bytes(b"x")
    monkeypatch.setenv("MLXCEL_TEST_DIR", str(models))
    config = _load(tmp_path, f"""
        server: {{model_dirs: ["$MLXCEL_TEST_DIR"]}}
        models:
          a: {{path: a.gguf}}
          b: {{path: b.gguf}}
          c: {{path: {models / 'a.gguf'}}}
          d: {{path: "$MLXCEL_TEST_DIR/a.gguf"}}
    """)
    assert config.model_dirs == (models,)
    assert config.models["a"].path == str(models / "a.gguf")
    assert config.models["b"].path == str(tmp_path / "b.gguf")
    assert config.models["c"].path == config.models["d"].path == str(models / "a.gguf")


def test_a_missing_file_drops_its_entry_and_its_aliases(tmp_path: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="mlxcel.fleet"):
        config = _load(tmp_path, f"""
            models:
              smol: {{path: {SMOL}}}
              gone: {{path: nowhere.gguf}}
            aliases: {{old: gone, s: smol}}
            server: {{defaults: {{preload: [gone, smol]}}}}
        """)
    assert list(config.models) == ["smol"] and config.aliases == {"s": "smol"}
    assert config.preload == ("smol",)
    assert "models.gone.path" in caplog.text and "nowhere.gguf is missing" in caplog.text


def test_a_missing_default_model_fails(tmp_path: Path) -> None:
    message = _error(tmp_path, f"""
        models:
          smol: {{path: {SMOL}}}
          gone: {{path: nowhere.gguf}}
        server: {{defaults: {{model: gone}}}}
    """)
    assert "`server.defaults.model`" in message and "missing" in message


def test_load_keys_resolve_from_profile_overrides_and_model(tmp_path: Path) -> None:
    (tmp_path / "t.jinja").write_text("{{ messages }}")
    config = _load(tmp_path, f"""
        profiles:
          base: {{load: {{max_kv_size: 2048, kv_bits: 8, flash_attn: on}}}}
          long: {{extends: base, load: {{max_kv_size: 8192}}, chat_template: t.jinja}}
        rules: [{{match: "r*", profile: base}}]
        models:
          a: {{path: {SMOL}, profile: long}}
          b: {{path: {SMOL}, profile: long, overrides: {{load: {{cache_type_v: f16, parallel: 2}}}}, ctx_size: 512}}
          r1: {{path: {SMOL}, parallel: 3}}
          c: {{path: {SMOL}}}
    """)
    a = config.models["a"]
    assert a.load == LoadSettings(ctx_size=8192, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn="on")
    assert a.chat_template == "{{ messages }}"
    assert config.models["b"].load == LoadSettings(ctx_size=512, parallel=2, cache_type_k="q8_0",
                                                   cache_type_v="f16", flash_attn="on")
    assert config.models["r1"].load == LoadSettings(ctx_size=2048, parallel=3, cache_type_k="q8_0",
                                                    cache_type_v="q8_0", flash_attn="on")
    assert config.models["c"].load == LoadSettings() and config.models["c"].chat_template is None
    assert a.load_key() != config.models["c"].load_key()


def test_gmlx_spellings_and_values(tmp_path: Path) -> None:
    config = _load(tmp_path, f"""
        profiles:
          p:
            sampling: {{temp: 0.3, stop: "END", max_tokens: 64, enable_thinking: false}}
            thinking: off
          coding: {{extends: coding, sampling: {{top_k: 5}}}}
        models:
          a: {{path: {SMOL}, profile: "@creative", ttl_s: null}}
        server:
          defaults: {{preload: all, ttl_s: null}}
          family_defaults: true
    """)
    p = config.profiles["p"]
    assert p.sampling == {"temperature": 0.3, "stop": ["END"], "max_tokens": 64, "enable_thinking": False}
    assert p.thinking == "off"
    assert config.models["a"].profile == "creative" and config.models["a"].ttl_s == 0.0
    assert config.preload == ("a",) and config.ttl_s is None


def test_soft_keys_only_warn(tmp_path: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="mlxcel.fleet"):
        config = _load(tmp_path, f"""
            profiles:
              p:
                sampling: {{temperatur: 0.5, thinking_start_token: "<t>"}}
                load: {{kv_group_size: 64, shiny: 1}}
                cache: {{enabled: true}}
            models: {{a: {{path: {SMOL}}}}}
            server: {{cache: {{enabled: false, disk: true}}, menubar: true}}
            theme: dark
            talk: {{voice: af_heart}}
        """)
    assert config.profiles["p"].sampling == {} and config.cache_enabled is False
    for key in ("profiles.p.sampling.temperatur", "did you mean `temperature`?", "profiles.p.load.kv_group_size",
                "profiles.p.load.shiny", "profiles.p.cache.enabled", "server.cache.disk", "`theme`", "`talk`",
                "thinking_start_token", "server.menubar"):
        assert key in caplog.text


ERRORS = [
    # (file body, key path, reason)
    ("models: {smol: {path: SMOL, pinned: true}}", "models.smol.pinned", "did you mean `pin`?"),
    ("modles: {}\nmodels: {a: {path: SMOL}}", "modles", "did you mean `models`?"),
    ("models: {a: {path: SMOL}}\nsrever: {}", "srever", "did you mean `server`?"),
    ("models: {a: {path: SMOL, adapter: [7]}}", "models.a.adapter[0]", "string"),
    ("models: {a: {path: SMOL, stream: experts}}", "models.a.stream", "not supported by mlxcel"),
    ("models: {a: {path: SMOL, moe_experts: 4}}", "models.a.moe_experts", "not supported by mlxcel"),
    ("models: {a: {path: SMOL, native_mtp: true}}", "models.a.native_mtp", "not supported by mlxcel"),
    ("models: {a: {path: SMOL, speculative: true}}", "models.a.speculative", "needs `draft_gguf`"),
    ("models: {a: {path: SMOL}}\ndiscover: [{dir: null}]", "discover", "not supported by mlxcel"),
    ("models: {a: {path: SMOL}}\nserver: {hf_cache: true}", "server.hf_cache", "not supported by mlxcel"),
    ("models: {a: {path: SMOL}}\nserver: {systemone: {canvas: 64}}", "server.systemone", "not supported"),
    ("models: {a: {path: SMOL}}\nserver: {assistants: {}}", "server.assistants", "not supported by mlxcel"),
    ("models: {a: {path: SMOL}}\nserver: {stt: piper-joe}", "server.stt", "not an stt model"),
    ("models: {a: {path: SMOL}}\nserver: {tts: whisper-base}", "server.tts", "not a tts model"),
    ("models: {a: {path: whisper-base}}", "models.a.path", "name it under server.stt"),
    ("models: {a: {path: SMOL}}\nserver: {prot: 80}", "server.prot", "did you mean `port`?"),
    ("models: {a: {path: SMOL}}\nserver: {port: 70000}", "server.port", "from 1 to 65535"),
    ("models: {a: {path: SMOL}}\nserver: {port: '8080'}", "server.port", "must be an integer"),
    ("models: {a: {path: SMOL}}\nserver: {budget_gb: 0}", "server.budget_gb", "above 0"),
    ("models: {a: {path: SMOL}}\nserver: {budget_gb: -2}", "server.budget_gb", "above 0"),
    ("models: {a: {path: SMOL}}\nserver: {max_models: 0}", "server.max_models", "at least 1"),
    ("models: {a: {path: SMOL}}\nserver: {no_auth: yes please}", "server.no_auth", "true or false"),
    ("models: {a: {path: SMOL}}\nserver: {defaults: {ttl_s: -1}}", "server.defaults.ttl_s", "at least 0"),
    ("models: {a: {path: SMOL}}\nserver: {defaults: {modle: a}}", "server.defaults.modle", "did you mean"),
    ("models: {a: {path: SMOL}}\nserver: {defaults: {model: b}}", "server.defaults.model", "unknown model `b`"),
    ("models: {a: {path: SMOL}}\nserver: {defaults: {preload: [b]}}", "server.defaults.preload[0]",
     "unknown model `b`"),
    ("models: {a: {path: SMOL}}\nserver: {defaults: {profile: nope}}", "server.defaults.profile", "unknown profile"),
    ("models: {a: {path: SMOL}}\nserver: {embeddings: SMOL}", "server.embeddings", "not an embedding model"),
    ("models: {a: {path: all-minilm-l6-v2}}", "models.a.path", "is an embedding model"),
    ("models: {a: {path: SMOL, ttl_s: -5}}", "models.a.ttl_s", "at least 0"),
    ("models: {a: {path: SMOL, family: mistral}}", "models.a.family", "must be one of"),
    ("models: {a: {path: SMOL, parallel: 0}}", "models.a.parallel", "from 1 to 256"),
    ("models: {a: {profile: coding}}", "models.a.path", "non-empty string"),
    ("models: {a: }", "models.a", "needs at least `path`"),
    ("models: {a@b: {path: SMOL}}", "models.a@b", "cannot contain `@`"),
    ("models: {a: {path: SMOL, profile: nope}}", "models.a.profile", "unknown profile `nope`; valid profiles: "),
    ("models: {a: {path: SMOL, profiles: {nope: {}}}}", "models.a.profiles.nope", "unknown profile"),
    ("models: {a: {path: SMOL, profiles: {coding: {extends: creative}}}}", "models.a.profiles.coding.extends",
     "not allowed here"),
    ("models: {a: {path: SMOL, overrides: {sampling: {top_p: 2}}}}", "models.a.overrides.sampling.top_p",
     "less than or equal to 1"),
    ("models: {}", "models", "declares no model"),
    ("models: []", "models", "must be a mapping"),
    ("- a\n- b", "", "must be a mapping"),
    ("models: {a: {path: SMOL}\n", "", "not valid YAML at line"),
    ("models: {a: {path: SMOL}}\n---\nmodels: {}", "", "not valid YAML"),
    ("models:\n  a: {path: SMOL, pin: true, pin: false}", "models.a.pin", "duplicate key (line 2)"),
    ("models: {a: {path: SMOL}}\nmodels: {b: {path: SMOL}}", "models", "duplicate key (line 2)"),
    ("models: {a: {path: SMOL}}\nrules:\n  - {match: a, match: b, profile: coding}", "rules[0].match",
     "duplicate key"),
    ("1: x\nmodels: {a: {path: SMOL}}", "1", "keys must be strings"),
    ("models: {a: {path: SMOL}}\naliases: {b@x: a}", "aliases.b@x", "cannot contain `@`"),
    ("models: {a: {path: SMOL}}\naliases: {a: a}", "aliases.a", "cannot be a model id"),
    ("models: {a: {path: SMOL}}\naliases: {b: c}", "aliases.b", "unknown model `c`"),
    ("models: {a: {path: SMOL}}\naliases: {b: a@nope}", "aliases.b", "unknown profile `nope`"),
    ("models: {a: {path: SMOL}}\nrules: {match: a}", "rules", "must be a list"),
    ("models: {a: {path: SMOL}}\nrules: [{profile: coding}]", "rules[0].match", "non-empty string"),
    ("models: {a: {path: SMOL}}\nrules: [{match: a, profile: nope}]", "rules[0].profile", "unknown profile"),
    ("models: {a: {path: SMOL}}\nrules: [{match: a, profile: coding, when: x}]", "rules[0].when", "unknown key"),
    ("models: {a: {path: SMOL}}\nprofiles: {p: {extends: nope}}", "profiles.p.extends", "unknown profile"),
    ("models: {a: {path: SMOL}}\nprofiles: {p: {extends: q}, q: {extends: p}}", "profiles.p.extends", "cycle: p -> q -> p"),
    ("models: {a: {path: SMOL}}\nprofiles: {p: {extends: p}}", "profiles.p.extends", "cycle"),
    ("models: {a: {path: SMOL}}\nprofiles: {p: {sampling: {temperature: -1}}}", "profiles.p.sampling.temperature",
     "greater than or equal to 0"),
    ("models: {a: {path: SMOL}}\nprofiles: {p: {sampling: {max_tokens: 0}}}", "profiles.p.sampling.max_tokens",
     "at least 1"),
    ("models: {a: {path: SMOL}}\nprofiles: {p: {sampling: {seed: null}}}", "profiles.p.sampling.seed",
     "must have a value"),
    ("models: {a: {path: SMOL}}\nprofiles: {p: {load: {kv_bits: 6}}}", "profiles.p.load.kv_bits", "must be 8 or 4"),
    ("models: {a: {path: SMOL}}\nprofiles: {p: {load: {kv_bits: 8, kv_quant_scheme: kvarn}}}",
     "profiles.p.load.kv_quant_scheme", "not supported by mlxcel: kvarn"),
    ("models: {a: {path: SMOL}}\nprofiles: {p: {load: {kv_bits: 8, cache_type_k: q4_0}}}", "profiles.p.load.kv_bits",
     "not both"),
    ("models: {a: {path: SMOL}}\nprofiles: {p: {load: {cache_type_k: q3}}}", "profiles.p.load.cache_type_k",
     "must be one of"),
    ("models: {a: {path: SMOL}}\nprofiles: {p: {load: {flash_attn: maybe}}}", "profiles.p.load.flash_attn",
     "must be one of on, off, auto"),
    ("models: {a: {path: SMOL}}\nprofiles: {p: {load: {max_kv_size: 10, ctx_size: 20}}}", "profiles.p.load.ctx_size",
     "disagrees"),
    ("models: {a: {path: SMOL}}\nprofiles: {p: {thinking: maybe}}", "profiles.p.thinking", "on, off, adaptive"),
    ("models: {a: {path: SMOL}}\nprofiles: {p: {system: [a]}}", "profiles.p.system", "must be a string"),
    ("models: {a: {path: SMOL}}\nprofiles: {p: {sytem: hi}}", "profiles.p.sytem", "did you mean `system`?"),
    ("models: {a: {path: SMOL}}\nprofiles: {p: {chat_template: nope.jinja}}", "profiles.p.chat_template",
     "cannot read the template file"),
    ("models: {a: {path: SMOL}}\nprofiles: {p: {chat_template_kwargs: [1]}}", "profiles.p.chat_template_kwargs",
     "must be a mapping"),
    ("models: {a: {path: SMOL}}\nprofiles: {p: {chat_template_kwargs: {add_generation_prompt: false}}}",
     "profiles.p.chat_template_kwargs", "cannot set 'add_generation_prompt'"),
    ("models: {a: {path: SMOL, profile: coding}}\nserver: {family_defaults: false}", "models.a.profile",
     "unknown profile `coding`"),
]


@pytest.mark.parametrize("body, key, reason", ERRORS, ids=[e[1] or e[2] for e in ERRORS])
def test_errors_name_the_file_the_key_and_the_reason(tmp_path: Path, body: str, key: str, reason: str) -> None:
    message = _error(tmp_path, body.replace("SMOL", SMOL))
    if key:
        assert f"`{key}`" in message
    assert reason in message


def test_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the file"):
        load_fleet_config(tmp_path / "absent.yaml")


def test_every_model_missing_fails(tmp_path: Path) -> None:
    assert "every entry's file is missing" in _error(tmp_path, "models: {a: {path: gone.gguf}}")


def test_the_cache_types_are_llama_cpps() -> None:
    from mlxcel.engine.llama_runtime import CACHE_TYPES as RUNTIME_TYPES

    assert set(CACHE_TYPES) == set(RUNTIME_TYPES)


def test_yaml_anchors_and_merge_keys(tmp_path: Path) -> None:
    config = _load(tmp_path, f"""
        models:
          a: &common {{path: {SMOL}, ctx_size: 1024}}
          b: {{<<: *common, ctx_size: 2048}}
          c: *common
    """)
    assert [config.models[m].load.ctx_size for m in "abc"] == [1024, 2048, 1024]


def test_the_speech_roles_take_a_catalog_name_or_a_folder(tmp_path: Path) -> None:
    voice = tmp_path / "voices" / "joe"
    voice.mkdir(parents=True)
    config = _load(tmp_path, f"models: {{a: {{path: {SMOL}}}}}\nserver: {{stt: whisper-tiny.en, tts: voices/joe}}")
    assert config.stt == "whisper-tiny.en" and config.tts == str(voice.resolve())
    assert _load(tmp_path, f"models: {{a: {{path: {SMOL}}}}}\nserver: {{stt: true}}").stt == "whisper-tiny.en"


def test_the_speech_roles_reach_the_server_settings_unless_a_flag_set_them(tmp_path: Path) -> None:
    from mlxcel.cli.fleet_args import fleet_settings
    from mlxcel.config import ServerConfig

    path = _write(tmp_path, f"models: {{a: {{path: {SMOL}}}}}\nserver: {{stt: whisper-base, tts: piper-joe}}")
    config, _ = fleet_settings(ServerConfig(model=SMOL, config_file=str(path)))
    assert (config.stt_model, config.tts_model) == ("whisper-base", "piper-joe")
    config, _ = fleet_settings(ServerConfig(model=SMOL, config_file=str(path), stt_model="whisper-tiny.en"))
    assert config.stt_model == "whisper-tiny.en"


def test_mmproj_names_a_projector_beside_the_model(tmp_path, caplog):
    (tmp_path / "proj.gguf").write_bytes(b"GGUF")
    config = _load(tmp_path, f"models: {{a: {{path: {SMOL}, mmproj: proj.gguf}}, b: {{path: {SMOL}}}}}")
    assert config.models["a"].mmproj == str((tmp_path / "proj.gguf").resolve())
    assert config.models["b"].mmproj is None
    assert config.models["a"].load_key() != config.models["b"].load_key()
    from mlxcel.config import ServerConfig
    from mlxcel.fleet.residency import host_config
    assert host_config(ServerConfig(model=SMOL), config.models["a"]).mmproj == config.models["a"].mmproj
    missing = _load(tmp_path, f"models: {{a: {{path: {SMOL}, mmproj: nowhere.gguf}}, b: {{path: {SMOL}}}}}")
    assert list(missing.models) == ["b"] and "models.a.mmproj" in caplog.text


def test_adapter_names_lora_adapters_of_the_model(tmp_path, caplog):
    from mlxcel.config import ServerConfig
    from mlxcel.fleet.residency import host_config
    for name in ("one.gguf", "two.gguf"):
        (tmp_path / name).write_bytes(b"GGUF")
    config = _load(tmp_path, f"models: {{a: {{path: {SMOL}, adapter: one.gguf}}, b: {{path: {SMOL}, "
                             f"adapter: [one.gguf, two.gguf]}}, c: {{path: {SMOL}}}}}")
    one, two = (str((tmp_path / name).resolve()) for name in ("one.gguf", "two.gguf"))
    assert (config.models["a"].adapters, config.models["b"].adapters, config.models["c"].adapters) == \
        ((one,), (one, two), ())
    assert len({config.models[m].load_key() for m in "abc"}) == 3
    assert host_config(ServerConfig(model=SMOL), config.models["b"]).lora == ((one, 1.0), (two, 1.0))
    assert host_config(ServerConfig(model=SMOL), config.models["c"]).lora == ()
    missing = _load(tmp_path, f"models: {{a: {{path: {SMOL}, adapter: [one.gguf, gone.gguf]}}, b: {{path: {SMOL}}}}}")
    assert list(missing.models) == ["b"] and "models.a.adapter" in caplog.text and "gone.gguf" in caplog.text
