"""A resumable stream's session (mlxcel/http/stream_sessions.py): bytes kept up to the
cap with the oldest dropped, reads from any held offset live to the end, one session a
conversation, ended sessions forgotten by age and past the count cap."""

import asyncio

import pytest

from mlxcel.http import stream_sessions
from mlxcel.http.stream_sessions import OffsetLost, StreamSession, StreamSessions


def _collect(session, offset):
    async def read():
        return b"".join([chunk async for chunk in session.read_from(offset)])
    return read()


def test_the_oldest_bytes_go_past_the_cap_and_a_read_before_them_is_refused():
    async def scenario():
        session = StreamSession("c", max_bytes=8)
        session.append(b"abcdef")
        session.append(b"ghij")
        session.finish()
        with pytest.raises(OffsetLost):
            await _collect(session, 1)
        return session.dropped, session.total_bytes, await _collect(session, 2), await _collect(session, 7)

    assert asyncio.run(scenario()) == (2, 10, b"cdefghij", b"hij")


def test_a_reader_follows_the_stream_live_to_its_end():
    async def scenario():
        session = StreamSession("c")
        reader = asyncio.ensure_future(_collect(session, 0))
        for part in (b"one ", b"two ", b"three"):
            await asyncio.sleep(0.01)
            session.append(part)
        session.finish()
        session.append(b"too late")  # an ended stream takes nothing more
        return await asyncio.wait_for(reader, 5)

    assert asyncio.run(scenario()) == b"one two three"


def test_one_session_a_conversation_and_lookup_by_id_or_model_variant():
    async def scenario():
        sessions = StreamSessions()
        first = sessions.open("conv")
        second = sessions.open("conv")
        sessions.open("conv::model-a")
        sessions.open("other")
        found = sorted(s.conversation_id for s in sessions.lookup(["conv", "absent"]))
        sessions.cancel("other")
        return first.cancelled, second.cancelled, found, sessions.get("other")

    assert asyncio.run(scenario()) == (True, False, ["conv", "conv::model-a"], None)


def test_ended_sessions_are_forgotten_by_age_and_past_the_count_cap(monkeypatch):
    async def scenario():
        sessions = StreamSessions(max_sessions=3, ttl_s=100)
        clock = [1000.0]
        monkeypatch.setattr(stream_sessions.time, "time", lambda: clock[0])
        old = sessions.open("old")
        old.finish()
        clock[0] += 101
        live = sessions.open("live")
        gone_by_age = sessions.get("old") is None
        for name in ("a", "b"):
            sessions.open(name).finish()
            clock[0] += 1
        sessions.open("c")  # past the cap: the oldest ended one goes, the running one stays
        return gone_by_age, sorted(s.conversation_id for s in sessions.lookup(["live", "a", "b", "c"])), live.done

    assert asyncio.run(scenario()) == (True, ["b", "c", "live"], False)


def test_cancelling_stops_the_generation_at_once_and_only_once():
    async def scenario():
        sessions = StreamSessions()
        stops = []
        first = sessions.open("conv")
        first.on_cancel = lambda: stops.append("first")
        second = sessions.open("conv")  # a new stream of the conversation stops the old one
        second.on_cancel = lambda: stops.append("second")
        sessions.cancel("conv")
        second.cancel()
        sessions.cancel("conv")
        return stops, first.done, second.done

    assert asyncio.run(scenario()) == (["first", "second"], True, True)
