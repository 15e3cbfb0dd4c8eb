"""The text-to-speech flags: --tts-model takes a path (a voice directory or file) or a
catalog name; the audio queue depth and timeout are bounded."""

from __future__ import annotations

import pytest

from mlxcel.cli.serve_args import parse_serve_args
from mlxcel.cli.usage import UsageError


def test_tts_flags(tmp_path):
    config = parse_serve_args(["--tts-model", str(tmp_path), "--audio-queue-depth", "2",
                               "--audio-request-timeout-secs", "7.5"])
    assert (config.tts_model, config.audio_queue_depth, config.audio_request_timeout_secs) == (str(tmp_path), 2, 7.5)
    defaults = parse_serve_args([])
    assert (defaults.tts_model, defaults.audio_queue_depth, defaults.audio_request_timeout_secs) == (None, 8, 300.0)


@pytest.mark.parametrize("args", [["--tts-model", "/no/such/voice"], ["--audio-queue-depth", "0"],
                                  ["--audio-request-timeout-secs", "nan"], ["--audio-request-timeout-secs", "0"]])
def test_tts_flags_refused(args):
    with pytest.raises(UsageError):
        parse_serve_args(args)
