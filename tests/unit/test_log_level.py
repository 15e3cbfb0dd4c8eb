"""-lv/--log-verbosity as a logging level (observability/log_setup.py)."""

from __future__ import annotations

import logging

import pytest

from mlxcel.observability.log_setup import log_level


@pytest.mark.parametrize("verbosity, verbose, level", [
    (None, False, logging.INFO), (None, True, logging.DEBUG), (0, False, logging.ERROR), (1, True, logging.ERROR),
    (2, False, logging.WARNING), (3, True, logging.INFO), (4, False, logging.DEBUG), (9, False, logging.DEBUG),
])
def test_log_verbosity_as_a_logging_level(verbosity, verbose, level):
    assert log_level(verbosity, verbose) == level
