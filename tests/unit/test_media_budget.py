"""The decoded-media budget: a request that needs more than all of it is a 413, one
that finds the rest held by others a 503, and released shares come back."""

from __future__ import annotations

import asyncio

import pytest

from mlxcel.config import MediaSettings
from mlxcel.media import MediaError, MediaLoader, MediaRef
from mlxcel.media.budget import DecodedBudget
from tests.unit.media_samples import image_bytes


def test_one_request_over_the_whole_budget_is_a_413_and_a_busy_budget_a_503():
    budget = DecodedBudget(1000)
    first, second = budget.lease(), budget.lease()
    first.take(600, "a")
    with pytest.raises(MediaError) as busy:
        second.take(500, "b")
    assert busy.value.status == 503 and busy.value.code == "media_busy"
    with pytest.raises(MediaError) as alone:
        second.take(1001, "c")
    assert alone.value.status == 413
    first.release()
    first.release()  # idempotent
    with pytest.raises(MediaError):  # a part decoding after its request gave up takes nothing
        first.take(1, "late")
    second.take(1000, "d")
    assert budget.used == 1000
    second.release()
    assert budget.used == 0


def test_the_loader_takes_decoded_images_from_the_lease():
    import base64

    loader = MediaLoader(MediaSettings(max_decoded_bytes=64 * 48 * 3 + 10))
    png = base64.b64encode(image_bytes("PNG", size=(64, 48))).decode()
    ref = MediaRef(kind="image", url=f"data:image/png;base64,{png}", where="part")
    try:
        lease = loader.lease()
        asyncio.run(loader.load([ref], 16000, lease))
        assert lease.held == 64 * 48 * 3 == loader.budget.used
        with pytest.raises(MediaError) as caught:  # a second image does not fit beside the first
            asyncio.run(loader.load([ref], 16000))
        assert caught.value.status == 503
        lease.release()
        asyncio.run(loader.load([ref], 16000))  # without a lease: bounded while it runs, then given back
        assert loader.budget.used == 0
        with pytest.raises(MediaError) as caught:  # two at once never fit
            asyncio.run(loader.load([ref, ref], 16000, loader.lease()))
        assert caught.value.status == 413
    finally:
        loader.close()
