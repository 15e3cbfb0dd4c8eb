"""MediaLoader: the media parts of one request, fetched and decoded concurrently in
worker threads (never on the event loop), each bounded in bytes and time and the
whole load by `load_timeout_s`; the first failure cancels the rest."""

from __future__ import annotations

import asyncio
import logging
import math
import os
from concurrent.futures import ThreadPoolExecutor

from mlxcel.config import MediaSettings
from mlxcel.media.audio import decode_audio
from mlxcel.media.budget import BudgetLease, DecodedBudget
from mlxcel.media.fetch import FetchGuard, FetchPolicy, Resolver, default_resolver, fetch
from mlxcel.media.images import decode_image
from mlxcel.media.local import open_regular, read_file, resolve
from mlxcel.media.private_file import private_file
from mlxcel.media.sources import Inline, Local, Remote, Source, classify, decode_inline
from mlxcel.media.types import KINDS, Decoded, DecodedVideo, MediaError, MediaRef
from mlxcel.media.video import decode_video

log = logging.getLogger(__name__)

COMBINED_VIDEO_AUDIO = "Combined video and audio inputs are not supported"


def check_combination(refs: list[MediaRef]) -> None:
    """The spec's 400 for a request carrying both video and audio."""
    kinds = {ref.kind for ref in refs}
    if "video" in kinds and "audio" in kinds:
        raise MediaError(COMBINED_VIDEO_AUDIO, "unsupported_media_combination")


class MediaLoader:
    def __init__(self, settings: MediaSettings, resolver: Resolver | None = None):
        self.settings = settings
        self._policy = FetchPolicy(settings.allow_private_urls, settings.max_redirects, settings.fetch_timeout_s,
                                   resolver or default_resolver)
        self._executor = ThreadPoolExecutor(max_workers=max(2, min(settings.max_items, 8)),
                                            thread_name_prefix="mlxcel-media")
        self.budget = DecodedBudget(settings.max_decoded_bytes)

    def lease(self) -> BudgetLease:
        """A request's share of the decoded-media budget: pass it to `load`, release it
        once the decoded media are no longer needed."""
        return self.budget.lease()

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def load(self, refs: list[MediaRef], audio_sample_rate: int, lease: BudgetLease | None = None
                   ) -> list[Decoded]:
        """Each ref decoded, in order; a MediaError naming the part that failed. What is
        decoded is taken from `lease`, which the caller releases; without one, the budget
        bounds this load only while it runs."""
        if lease is None:
            lease = self.budget.lease()
            try:
                return await self.load(refs, audio_sample_rate, lease)
            finally:
                lease.release()
        if not refs:
            return []
        self._check(refs)
        loop = asyncio.get_running_loop()
        guards = [FetchGuard() for _ in refs]
        futures = [loop.run_in_executor(self._executor, self._load_one, ref, guard, audio_sample_rate, lease)
                   for ref, guard in zip(refs, guards)]
        for future in futures:  # a part still running when the load gives up must not log its outcome
            future.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            done, pending = await asyncio.wait(futures, timeout=self.settings.load_timeout_s,
                                               return_when=asyncio.FIRST_EXCEPTION)
        except asyncio.CancelledError:
            _trip(guards)
            raise
        if pending:
            _trip(guards)
        for future in futures:
            if future in done and future.exception() is not None:
                raise future.exception()
        if pending:
            raise MediaError(f"loading the request's media took longer than {self.settings.load_timeout_s:g} s",
                             "media_timeout")
        return [future.result() for future in futures]

    def _check(self, refs: list[MediaRef]) -> None:
        if len(refs) > self.settings.max_items:
            raise MediaError(f"{len(refs)} media parts in one request, more than the limit of "
                             f"{self.settings.max_items}", "too_many_media")
        for ref in refs:
            if ref.kind not in KINDS:
                raise MediaError(f"{ref.where}: unknown media kind {ref.kind!r}", "invalid_media")
            if ref.fps is not None and not (math.isfinite(ref.fps) and 0 < ref.fps <= 1000):
                raise MediaError(f"{ref.where}: fps must be a positive number", "invalid_media")
        check_combination(refs)

    def _load_one(self, ref: MediaRef, guard: FetchGuard, audio_sample_rate: int, lease: BudgetLease) -> Decoded:
        try:
            source = classify(ref.url, ref.where)
            if ref.kind == "video":
                return self._video(ref, source, guard, lease)
            data = self._bytes(ref, source, guard)
            if ref.kind == "image":
                return decode_image(data, self.settings.max_pixels, ref.where, reserve=lease.take)
            audio = decode_audio(data, audio_sample_rate, self.settings.max_audio_seconds, ref.where,
                                 stop=lambda: guard.tripped)
            lease.take(audio.samples.nbytes, ref.where)  # bounded by --media-max-audio-seconds while decoding
            return audio
        except MediaError:
            raise
        except Exception as exc:  # noqa: BLE001 - a malformed file no decoder foresaw is still the client's
            log.warning("media %s: %s: %s", ref.where, type(exc).__name__, exc)
            raise MediaError(f"{ref.where}: the {ref.kind} could not be read ({type(exc).__name__})",
                             "invalid_media") from None

    def _bytes(self, ref: MediaRef, source: Source, guard: FetchGuard) -> bytes:
        cap = self.settings.max_bytes
        if isinstance(source, Inline):
            return decode_inline(source, cap, ref.where)
        if isinstance(source, Local):
            real = resolve(source.path, self.settings.media_paths, ref.where, "--media-path")
            return read_file(real, cap, ref.where)
        body = bytearray()
        fetch(source.url, cap, self._policy, guard, body.extend, ref.where)
        return bytes(body)

    def _video(self, ref: MediaRef, source: Source, guard: FetchGuard, lease: BudgetLease) -> DecodedVideo:
        settings = self.settings
        cap = settings.max_video_bytes

        def decode(video) -> DecodedVideo:
            return decode_video(video, ref.fps or settings.video_fps, settings.video_max_frames,
                                settings.max_pixels, ref.where, stop=lambda: guard.tripped, reserve=lease.take)

        if isinstance(source, Local):
            real = resolve(source.path, settings.video_dirs, ref.where, "MLXCEL_VIDEO_DIR_ALLOWLIST")
            with os.fdopen(open_regular(real, cap, ref.where), "rb") as file:
                return decode(file)
        with private_file(settings.temp_dir) as (file, path):
            if isinstance(source, Inline):
                file.write(decode_inline(source, cap, ref.where))
            else:
                assert isinstance(source, Remote)
                fetch(source.url, cap, self._policy, guard, file.write, ref.where)
            file.flush()
            return decode(path)


def _trip(guards: list[FetchGuard]) -> None:
    for guard in guards:
        guard.trip()
