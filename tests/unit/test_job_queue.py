"""The audio workers' job queue: depth, places given back by clients that left, the
worker's take/done, close and reopen."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from mlxcel.speech.job_queue import JobQueue
from mlxcel.turn.errors import ServerBusy


@dataclass
class Job:
    name: str
    cancelled: threading.Event = field(default_factory=threading.Event)


def test_depth_jobs_wait_beside_the_running_one_and_the_next_is_a_503_to_retry():
    jobs = JobQueue(2, "speech")
    first, second, third = Job("a"), Job("b"), Job("c")
    jobs.put(first)
    assert jobs.take() is first and jobs.outstanding == 1
    jobs.put(second)
    jobs.put(third)
    with pytest.raises(ServerBusy) as refused:
        jobs.put(Job("d"))
    assert refused.value.code == "audio_queue_full" and refused.value.extra == {"retry_after": 1}
    assert "the speech queue is full (2 requests waiting, --audio-queue-depth)" in str(refused.value)
    with pytest.raises(ServerBusy):
        jobs.check_room()
    assert (jobs.waiting, jobs.outstanding) == (2, 3)
    jobs.done()
    assert jobs.take() is second  # in order


def test_a_waiting_job_whose_client_left_frees_its_place_and_is_never_taken():
    jobs = JobQueue(1, "speech-to-text")
    left, kept = Job("left"), Job("kept")
    jobs.put(left)
    left.cancelled.set()
    assert jobs.waiting == 0 and jobs.outstanding == 0
    jobs.check_room()
    jobs.put(kept)
    assert jobs.take() is kept


def test_take_skips_a_job_cancelled_after_it_was_counted():
    jobs = JobQueue(3, "speech")
    gone, next_one = Job("gone"), Job("next")
    jobs.put(gone)
    jobs.put(next_one)
    gone.cancelled.set()
    assert jobs.take() is next_one


def test_close_wakes_a_waiting_worker_hands_back_the_waiting_jobs_and_refuses_new_ones():
    jobs = JobQueue(4, "speech-to-text")
    taken: list = []
    worker = threading.Thread(target=lambda: taken.append(jobs.take()))
    worker.start()
    running = Job("running")
    jobs.put(running)
    worker.join(5)
    assert taken == [running]
    waiting = Job("waiting")
    jobs.put(waiting)
    worker = threading.Thread(target=lambda: taken.append(jobs.take()))
    assert jobs.close(cancel_running=True) == [waiting]
    assert waiting.cancelled.is_set() and running.cancelled.is_set()
    worker.start()
    worker.join(5)
    assert taken == [running, None] and not worker.is_alive()
    with pytest.raises(ServerBusy, match="the speech-to-text worker is shutting down"):
        jobs.put(Job("late"))
    jobs.reopen()
    jobs.put(Job("after"))
    assert jobs.take().name == "after"


def test_close_leaves_the_running_job_alone_unless_asked():
    jobs = JobQueue(1, "speech")
    running = Job("running")
    jobs.put(running)
    assert jobs.take() is running
    assert jobs.close() == [] and not running.cancelled.is_set()
