"""Decode cost curves kept on disk between starts."""

from mlxcel.engine.cost_cache import cost_file, load_costs, save_costs


def test_a_saved_curve_reads_back_for_the_same_model_and_settings_only(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"weights")
    path = cost_file(tmp_path / "costs", model, {"most": 52, "threads": 2})
    assert load_costs(path) is None
    save_costs(path, {1: 0.0157, 2: 0.0379, 16: 0.0827})
    assert load_costs(path) == {1: 0.0157, 2: 0.0379, 16: 0.0827}
    assert cost_file(tmp_path / "costs", model, {"most": 52, "threads": 1}) != path
    model.write_bytes(b"other weights")  # a new file under the same name
    assert cost_file(tmp_path / "costs", model, {"most": 52, "threads": 2}) != path


def test_an_unreadable_or_senseless_curve_is_measured_again(tmp_path):
    path = tmp_path / "c.json"
    for text in ("not json", "[1, 2]", '{"2": 0.01}', '{"1": 0}', '{"1": "x"}'):
        path.write_text(text)
        assert load_costs(path) is None


def test_a_curve_measured_on_another_machine_is_not_read_back(tmp_path, monkeypatch):
    """A home shared between hosts (or moved to another): timings and the attention
    choice were measured on one CPU and its weight placement, so another measures again."""
    from mlxcel.engine import cost_cache

    model = tmp_path / "m.gguf"
    model.write_bytes(b"weights")
    here = cost_file(tmp_path / "costs", model, {"threads": 2})
    assert "model name" not in cost_cache.host_fingerprint()  # the value, not the label
    assert "cores" in cost_cache.host_fingerprint()
    monkeypatch.setattr(cost_cache, "host_fingerprint", lambda: "another CPU | 2 cores | AMX_INT8 = 1")
    assert cost_file(tmp_path / "costs", model, {"threads": 2}) != here


def test_a_directory_keeps_the_most_recently_used_files_only(tmp_path):
    """Every model and setting adds a file; past MAX_FILES the least recently used go, a
    file read counts as used, and a temporary file a dead writer left is removed."""
    import os

    from mlxcel.engine import cost_cache

    keep = 8
    for i in range(keep + 4):
        path = tmp_path / f"{i:02d}.json"
        path.write_text("{}")
        os.utime(path, (1_000_000 + i, 1_000_000 + i))  # 00 the oldest
    assert cost_cache.load_json(tmp_path / "01.json") == {}  # read now: the newest
    (tmp_path / "05.999999999.tmp").write_text("{")  # no such process
    (tmp_path / f"06.{os.getpid()}.tmp").write_text("{")  # a save under way
    removed = cost_cache.prune(tmp_path, keep=keep)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert removed == 5
    assert names == sorted(["01.json", *(f"{i:02d}.json" for i in range(5, 12)), f"06.{os.getpid()}.tmp"])


def test_saving_prunes_its_directory(tmp_path, monkeypatch):
    from mlxcel.engine import cost_cache

    monkeypatch.setattr(cost_cache, "MAX_FILES", 3)
    for i in range(6):
        cost_cache.save_costs(tmp_path / f"{i}.json", {1: 0.01 * (i + 1)})
    assert len(list(tmp_path.glob("*.json"))) == 3
    assert cost_cache.load_costs(tmp_path / "5.json") == {1: 0.06}
