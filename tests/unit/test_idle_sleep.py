"""IdleSleep's policy (server/idle_sleep.py) with a stand-in host: when a model may
sleep, and that requests arriving while it falls asleep or wakes wait for one wake."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

from mlxcel.server.idle_sleep import IdleSleep, SleepPlan


class Host:
    """The Sleeper protocol; sleep() and wake() block until `gate` opens."""

    model_id = "m"

    def __init__(self) -> None:
        self.asleep: dict = {}
        self.ready, self.sleeping, self.outstanding = True, False, 0
        self.gate = threading.Event()
        self.gate.set()
        self.calls: list[str] = []

    def mark_sleeping(self) -> None:
        self.sleeping, self.ready = True, False

    def sleep(self) -> None:
        self.gate.wait(10)
        self.calls.append("sleep")

    def wake(self) -> bool:
        self.gate.wait(10)
        self.calls.append("wake")
        self.sleeping, self.ready = False, True
        return True


def _sleeper(host: Host, held=lambda: False) -> IdleSleep:
    return IdleSleep(host, 5, describe=lambda: {"props": {"n": 1}}, held=held)


def test_the_idle_time_counts_from_when_the_host_is_ready():
    """A load slower than the idle time: the host does not sleep the moment it is ready."""
    async def main():
        host = Host()
        host.ready = False  # loading
        sleeper = _sleeper(host)
        start = sleeper.last_request
        assert not await sleeper.sleep_if_idle(start + 30)  # still loading, 30 s after the start
        host.ready = True
        assert not await sleeper.sleep_if_idle(start + 30.5)
        assert not await sleeper.sleep_if_idle(start + 34.9)
        assert await sleeper.sleep_if_idle(start + 35)

    asyncio.run(main())


def test_it_sleeps_only_when_ready_idle_long_enough_and_unheld():
    async def main():
        host = Host()
        sleeper = _sleeper(host)
        start = sleeper.last_request
        assert not await sleeper.sleep_if_idle(start + 4.9)  # not idle long enough
        host.outstanding = 1  # the engine holds a request (a detached stream)
        assert not await sleeper.sleep_if_idle(start + 6)
        host.outstanding = 0
        held = [True]
        sleeper._held = lambda: held[0]  # a background response runs
        assert not await sleeper.sleep_if_idle(start + 6)
        held[0] = False
        await sleeper.opened()  # an open request
        assert not await sleeper.sleep_if_idle(sleeper.last_request + 6)
        sleeper.closed()
        assert await sleeper.sleep_if_idle(sleeper.last_request + 6)
        assert host.asleep == {"props": {"n": 1}} and host.calls == ["sleep"]
        assert not await sleeper.sleep_if_idle(sleeper.last_request + 60)  # asleep already
        return host

    asyncio.run(main())


def test_requests_arriving_while_it_falls_asleep_wait_for_one_wake():
    async def main():
        host = Host()
        sleeper = _sleeper(host)
        host.gate.clear()  # the sleep takes a while
        falling = asyncio.create_task(sleeper.sleep_if_idle(sleeper.last_request + 6))
        await asyncio.sleep(0.05)
        assert host.sleeping and host.calls == []
        arrivals = [asyncio.create_task(sleeper.opened()) for _ in range(4)]
        await asyncio.sleep(0.05)
        assert not any(a.done() for a in arrivals)  # they wait behind the sleep
        host.gate.set()
        await asyncio.wait_for(asyncio.gather(falling, *arrivals), 5)
        assert falling.result() is True
        assert host.calls == ["sleep", "wake"] and host.ready and sleeper.open_requests == 4
        for _ in arrivals:
            sleeper.closed()
        assert sleeper.open_requests == 0 and sleeper.wakes == 1

    asyncio.run(main())


def test_a_request_that_opens_first_keeps_it_awake():
    """The recheck under the lock: a request counted before the sleep's turn stops it."""
    async def main():
        host = Host()
        sleeper = _sleeper(host)
        now = time.monotonic() + 6
        await sleeper._lock.acquire()  # a wake in progress elsewhere holds the turn
        falling = asyncio.create_task(sleeper.sleep_if_idle(now))
        await asyncio.sleep(0.01)
        sleeper.open_requests += 1  # a request opens meanwhile
        sleeper._lock.release()
        assert await falling is False and host.calls == [] and not host.sleeping

    asyncio.run(main())


def test_a_waiter_that_leaves_during_the_wake_leaves_it_whole():
    """A client that goes away while the model wakes: the wake goes on holding the turn,
    and the next request waits for it rather than meeting a half-loaded model."""
    async def main():
        host = Host()
        sleeper = _sleeper(host)
        assert await sleeper.sleep_if_idle(sleeper.last_request + 6)
        host.gate.clear()  # the wake takes a while
        first = asyncio.create_task(sleeper.opened())
        await asyncio.sleep(0.05)
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first
        sleeper.closed()  # the middleware's finally
        second = asyncio.create_task(sleeper.opened())
        await asyncio.sleep(0.05)
        assert not second.done()
        host.gate.set()
        await asyncio.wait_for(second, 5)
        assert host.calls == ["sleep", "wake"] and host.ready and sleeper.open_requests == 1

    asyncio.run(main())


def test_the_flag_is_parsed_not_skipped_as_tuning():
    from mlxcel.cli.serve_args import split_llama_server_flags

    kept, ignored = split_llama_server_flags(["--sleep-idle-seconds", "30", "--poll", "50"])
    assert kept == ["--sleep-idle-seconds", "30"] and ignored == ["--poll"]


def test_which_requests_need_the_model_and_which_model():
    """Describing reads (Vertex AI's health route among them), unknown paths and wrong
    methods wake nothing; a route that serves the model does, and a route of a model
    served beside it (an embedding model) wakes that model alone."""
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from mlxcel.server.idle_sleep import IdleSleepMiddleware, SleepPlan

    def answer(request):
        return PlainTextResponse("")

    routes = [Route(path, answer, methods=["GET"]) for path in ("/props", "/ping", "/slots/{id}")]
    routes += [Route(path, answer, methods=["POST"]) for path in ("/v1/chat/completions", "/v1/embeddings")]
    main, embedding = _sleeper(Host()), _sleeper(Host())
    plan = SleepPlan(main, {"/v1/embeddings": embedding})
    middleware = IdleSleepMiddleware(None, plan, lambda: routes, describing=frozenset({"/ping"}))

    def sleeper(method: str, path: str):
        return middleware._sleeper_for({"type": "http", "method": method, "path": path, "root_path": ""})

    assert sleeper("POST", "/v1/chat/completions") is main and sleeper("GET", "/slots/3") is main
    assert sleeper("POST", "/v1/embeddings") is embedding
    assert not any(sleeper(m, p) for m, p in [("GET", "/props"), ("HEAD", "/props/"), ("GET", "/ping"),
                                              ("GET", "/no/such/route"), ("GET", "/v1/chat/completions"),
                                              ("GET", "/v1/embeddings"), ("GET", "/health"), ("GET", "/")])
    assert plan.sleepers == [main, embedding]


def test_each_sleeper_of_a_plan_keeps_its_own_clock():
    """An embedding request opens the embedding model's sleeper only: the chat model
    goes on idling and sleeps on time while the embedding model is kept awake."""
    async def main():
        chat, embedding = Host(), Host()
        plan = SleepPlan(_sleeper(chat), {"/v1/embeddings": _sleeper(embedding)})
        start = plan.main.last_request
        beside = plan.for_path("/v1/embeddings")
        beside.last_request = start
        await beside.opened()
        assert plan.main.open_requests == 0 and beside.open_requests == 1
        assert await plan.main.sleep_if_idle(start + 6)
        assert not await beside.sleep_if_idle(start + 6)  # its request is open
        beside.closed()
        assert await beside.sleep_if_idle(beside.last_request + 6)
        return chat.calls, embedding.calls

    assert asyncio.run(main()) == (["sleep"], ["sleep"])


def test_a_plan_without_a_main_model_counts_only_the_routes_beside():
    """Router mode: the fleet wakes its own models, so a chat request opens no sleeper here."""
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from mlxcel.server.idle_sleep import IdleSleepMiddleware

    routes = [Route(path, lambda r: PlainTextResponse(""), methods=["POST"])
              for path in ("/v1/chat/completions", "/v1/embeddings")]
    embedding = _sleeper(Host())
    plan = SleepPlan(None, {"/v1/embeddings": embedding})
    middleware = IdleSleepMiddleware(None, plan, lambda: routes)

    def sleeper(path: str):
        return middleware._sleeper_for({"type": "http", "method": "POST", "path": path, "root_path": ""})

    assert sleeper("/v1/chat/completions") is None and sleeper("/v1/embeddings") is embedding
    assert plan.sleepers == [embedding]


def test_an_encoder_models_counters_go_on_across_a_sleep():
    """/metrics' mlxcel_embedding_* counters: a sleep releases the engine that held them."""
    from mlxcel.engine.embedding_engine import EmbeddingStats
    from mlxcel.turn.embedding_host import EmbeddingHost

    class _StoppedEngine:
        alive = False
        queue_depth = 0

        def __init__(self, stats: EmbeddingStats) -> None:
            self.stats = stats

        def stop(self) -> None:
            pass

    host = EmbeddingHost(None, "m", "m")  # type: ignore[arg-type]
    host.engine = _StoppedEngine(EmbeddingStats(1, 2, 30, 4))  # type: ignore[assignment]
    host._release()
    assert host.engine is None and host.stats == EmbeddingStats(1, 2, 30, 4)
    host.engine = _StoppedEngine(EmbeddingStats(1, 1, 10, 1))  # type: ignore[assignment]
    assert host.stats == EmbeddingStats(2, 3, 40, 5)
