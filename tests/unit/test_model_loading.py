"""What SleepingModel (turn/worker_sleep.py) does for every model beside the chat model
(embedding, rerank, speech-to-text, text-to-speech) while it loads: the load runs on a
thread of its own, a failure is recorded, logged and ends the server in one line, and
requests are told the model is loading or has failed. A stand-in host: the contract,
not llama.cpp."""

from __future__ import annotations

import threading

import pytest

from mlxcel.turn.errors import EngineUnavailable, ServerBusy
from mlxcel.turn.worker_sleep import SleepingModel, SleepingWorker


class Host(SleepingModel):
    noun, loader = "test", "test"

    def __init__(self, fail: Exception | None = None) -> None:
        self.model_id = "m"
        self.ready, self.error = False, None
        self.fail = fail
        self.go = threading.Event()
        self.thread_name = ""
        self._init_sleep()

    def _load(self) -> None:
        self.thread_name = threading.current_thread().name
        self.go.wait(10)
        if self.fail is not None:
            raise self.fail
        self.ready = True


def test_a_load_runs_on_its_own_named_thread_and_requests_wait_for_it():
    failures: list[str] = []
    host = Host()
    thread = host.start_loading(failures.append)
    with pytest.raises(ServerBusy):  # loading
        host._check_ready()
    host.go.set()
    thread.join(10)
    assert host.thread_name == "mlxcel-test-loader" and thread.daemon
    host._check_ready()  # ready: nothing raised
    assert failures == [] and host.error is None


@pytest.mark.parametrize("exc, reason", [(RuntimeError("no such file"), "no such file"),
                                         (MemoryError(), "MemoryError")])
def test_a_failed_load_is_kept_and_ends_the_server_in_one_line(exc, reason, caplog):
    failures: list[str] = []
    host = Host(fail=exc)
    host.go.set()
    host.start_loading(failures.append).join(10)
    assert failures == [f"could not load the test model: {reason}"]
    assert host.error == reason and not host.ready
    with pytest.raises(EngineUnavailable, match=reason):
        host._check_ready()
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [failures[0]]


def test_a_worker_loads_again_on_the_calling_thread_with_the_same_report():
    class Worker(SleepingWorker, Host):
        pass

    failures: list[str] = []
    worker = Worker(fail=OSError("gone"))
    worker.go.set()
    worker._on_failure = failures.append
    worker._reload()  # a wake: on this thread
    assert worker.thread_name == threading.current_thread().name
    assert failures == ["could not load the test model: gone"]
