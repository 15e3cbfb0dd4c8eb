"""Slot save / restore / erase (--slot-save-path, POST /slots/{id}?action=): a slot's
tokens and KV state to a file and back, in llama-server's layout (each server restores
the other's files); hostile names and files fail alone; a busy slot's action waits."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.reference_server import BUILD_HINT, ReferenceServer, reference_binary, same_attention
from tests.server_process import ServerProcess

PROMPT = ("Here is a list of the planets of the solar system in order from the sun: Mercury, Venus, Earth, Mars, "
          "Jupiter, Saturn, Uranus and Neptune. The largest of them is")


@pytest.fixture(scope="module")
def saver(tmp_path_factory):
    folder = tmp_path_factory.mktemp("slots") / "made-by-the-server"
    proc = ServerProcess("-c", "2048", "-np", "2", "--slot-save-path", str(folder))
    try:
        proc.folder = folder
        yield proc.wait_ready()
    finally:
        proc.stop()


def _complete(client: httpx.Client, slot: int, n_predict: int = 8) -> dict:
    answer = client.post("/completion", json={"prompt": PROMPT, "n_predict": n_predict, "temperature": 0,
                                              "id_slot": slot, "cache_prompt": True})
    assert answer.status_code == 200, answer.text
    return answer.json()


def _action(client: httpx.Client, slot, action: str, filename: str | None = None, **kwargs) -> httpx.Response:
    body = {"filename": filename} if filename is not None else kwargs.pop("json", None)
    return client.post(f"/slots/{slot}?action={action}", json=body, **kwargs)


def test_save_erase_restore_into_another_slot(saver):
    with saver.client() as client:
        first = _complete(client, 0)
        saved = _action(client, 0, "save", "planets.bin").json()
        erased = _action(client, 0, "erase").json()
        after_erase = {slot["id"]: slot["n_cached"] for slot in client.get("/slots").json()}
        restored = _action(client, 1, "restore", "planets.bin").json()
        again = _complete(client, 1)
    assert saved["id_slot"] == 0 and saved["filename"] == "planets.bin" and saved["timings"]["save_ms"] >= 0
    assert first["tokens_evaluated"] <= saved["n_saved"] <= first["tokens_evaluated"] + first["tokens_predicted"]
    assert (saver.folder / "planets.bin").stat().st_size == saved["n_written"] > 0
    assert erased == {"id_slot": 0, "n_erased": saved["n_saved"]} and after_erase[0] == 0
    assert restored["id_slot"] == 1 and restored["n_restored"] == saved["n_saved"] and restored["n_read"] > 0
    assert again["content"] == first["content"]  # greedy from the restored state
    assert again["timings"]["cache_n"] >= first["tokens_evaluated"] - 1  # the prompt came from the file


@pytest.mark.parametrize("name", ["../escape.bin", "a/b.bin", "", ".", "dots..bin", "trailing.", " lead", "nul\x00",
                                  "pipe|.bin", "x" * 256, "\ud800.bin"])
def test_hostile_file_names_are_refused_before_any_work(saver, name):
    with saver.client() as client:
        answer = client.post("/slots/0?action=save", content=httpx.Request(
            "POST", "http://x", json={"filename": name}).content if "\ud800" not in name else
            b'{"filename": "\\ud800.bin"}', headers={"content-type": "application/json"})
    assert answer.status_code == 400 and answer.json()["error"]["message"] == "Invalid filename"
    assert not (saver.folder.parent / "escape.bin").exists()


def test_bad_actions_ids_bodies_and_files_fail_alone(saver):
    (saver.folder / "junk.bin").write_bytes(b"\x00" * 64 + b"not a slot file" * 100)
    (saver.folder / "short.bin").write_bytes(b"GGSQ")
    with saver.client() as client:
        cases = {
            "action": client.post("/slots/0?action=launch", json={"filename": "a.bin"}),
            "no action": client.post("/slots/0", json={"filename": "a.bin"}),
            "id": _action(client, "zero", "save", "a.bin"),
            "other script's digit": _action(client, "\u0660", "erase"),  # Arabic-Indic zero, which int() reads
            "range": _action(client, 7, "erase"),
            "negative": _action(client, -1, "erase"),
            "no filename": _action(client, 0, "save", json={}),
            "not a string": _action(client, 0, "save", json={"filename": 3}),
            "not json": client.post("/slots/0?action=save", content=b"{oops"),
            "missing file": _action(client, 0, "restore", "never-saved.bin"),
            "junk file": _action(client, 0, "restore", "junk.bin"),
            "short file": _action(client, 1, "restore", "short.bin"),
        }
        slots_after_junk = client.get("/slots").json()
        _complete(client, 0, n_predict=2)  # still serving (it asserts a 200)
        slots = client.get("/slots").json()
    for name, answer in cases.items():
        assert answer.status_code == 400, (name, answer.text)
        assert answer.json()["error"]["type"] == "invalid_request_error", name
    assert cases["junk file"].json()["error"]["message"].startswith("Unable to restore slot")
    assert slots_after_junk[0]["n_cached"] == 0  # the failed restore left the slot empty
    assert [slot["id"] for slot in slots] == [0, 1]


def test_an_action_on_a_busy_slot_waits_for_its_request(saver):
    with saver.client() as client:
        _action(client, 0, "erase")
        results: dict = {}

        def generate():
            with saver.client() as other:
                results["answer"] = other.post("/completion", json={
                    "prompt": PROMPT, "n_predict": 48, "temperature": 0, "id_slot": 0, "ignore_eos": True}).json()

        worker = threading.Thread(target=generate)
        worker.start()
        deadline = time.monotonic() + 30
        while not any(s["is_processing"] for s in client.get("/slots").json()) and time.monotonic() < deadline:
            time.sleep(0.01)
        saved = _action(client, 0, "save", "busy.bin").json()  # sent while the slot generates
        worker.join(60)
    # saved once the request had ended: every generated token's state is in the file (a save
    # taken at once would hold the prompt and the few tokens generated so far)
    assert results["answer"]["tokens_predicted"] == 48
    assert saved["n_saved"] >= results["answer"]["tokens_evaluated"] + 47


def test_a_full_action_queue_is_a_busy_503_not_a_500(saver):
    """SLOT_ACTIONS_MAX actions waiting on a busy slot: one more is the spec's 503
    server_busy for a full queue, a retry, not a 500 internal error."""
    from mlxcel.engine.engine_control import SLOT_ACTIONS_MAX

    extra = 3
    answers: list[httpx.Response] = []
    clients = [saver.client(timeout=120) for _ in range(SLOT_ACTIONS_MAX + extra)]
    with saver.client() as generator:
        with generator.stream("POST", "/completion", json={"prompt": PROMPT, "n_predict": 900, "id_slot": 0,
                                                           "ignore_eos": True, "stream": True}) as stream:
            lines = stream.iter_lines()  # held: a dropped iterator would close the stream
            next(lines)  # slot 0 generates
            workers = [threading.Thread(target=lambda other=other: answers.append(
                other.post("/slots/0?action=erase"))) for other in clients]
            for worker in workers:
                worker.start()
            deadline = time.monotonic() + 30
            while len(answers) < extra and time.monotonic() < deadline:
                time.sleep(0.02)
            refused = list(answers)
        for worker in workers:  # the stream closed: its request ends and the waiting actions run
            worker.join(60)
    for other in clients:
        other.close()
    assert len(refused) == extra and sorted(a.status_code for a in answers) == [200] * SLOT_ACTIONS_MAX + [503] * extra
    for answer in refused:
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["type"] == "server_busy"
        assert "already waiting" in answer.json()["error"]["message"]


def test_a_file_named_as_the_save_s_temporary_file_is_kept(saver):
    """A save writes a temporary file beside its target, then renames it: a client's name
    never is that temporary name, which the save deletes afterwards."""
    name = f".slot0.{saver.process.pid}.partial"  # the temporary file's name before this was fixed
    with saver.client() as client:
        _complete(client, 0)
        saved = _action(client, 0, "save", name)
        restored = _action(client, 1, "restore", name)
    assert saved.status_code == 200, saved.text
    assert (saver.folder / name).stat().st_size == saved.json()["n_written"] > 0
    assert restored.status_code == 200 and restored.json()["n_restored"] == saved.json()["n_saved"]
    assert not [p.name for p in saver.folder.iterdir() if "..partial" in p.name]  # no temporary file left


def test_without_the_flag_the_action_is_not_supported(http):
    answer = http.post("/slots/0?action=save", json={"filename": "a.bin"})
    assert answer.status_code == 501 and "--slot-save-path" in answer.json()["error"]["message"]


def test_each_server_restores_the_others_files(saver):
    binary = reference_binary()
    if binary is None:
        pytest.skip(f"the reference llama-server is not built: {BUILD_HINT}")
    theirs = ReferenceServer(binary, "SmolLM2-135M-Instruct.Q4_1.gguf", "-c", "2048", "-np", "2",
                             "--slot-save-path", str(saver.folder) + "/", *same_attention(saver))
    try:
        theirs.wait_ready()
        with saver.client() as ours_client, theirs.client() as their_client:
            _action(ours_client, 0, "erase")
            ours_first = _complete(ours_client, 0)
            _action(ours_client, 0, "save", "from-mlxcel.bin").raise_for_status()
            their_restore = _action(their_client, 1, "restore", "from-mlxcel.bin")
            their_after = _complete(their_client, 1)
            _action(their_client, 0, "save", "from-llama-server.bin").raise_for_status()  # slot 0 is empty there
            _complete(their_client, 0)
            their_saved = _action(their_client, 0, "save", "from-llama-server.bin").json()
            _action(ours_client, 1, "erase")
            our_restore = _action(ours_client, 1, "restore", "from-llama-server.bin")
            ours_after = _complete(ours_client, 1)
    finally:
        theirs.stop()
    assert their_restore.status_code == 200, their_restore.text
    assert their_after["timings"]["cache_n"] >= ours_first["tokens_evaluated"] - 1
    assert their_after["content"] == ours_first["content"]
    assert our_restore.status_code == 200, our_restore.text
    assert our_restore.json()["n_restored"] == their_saved["n_saved"]
    assert ours_after["timings"]["cache_n"] >= ours_first["tokens_evaluated"] - 1
    assert ours_after["content"] == ours_first["content"]
    assert Path(saver.folder / "from-mlxcel.bin").is_file()
