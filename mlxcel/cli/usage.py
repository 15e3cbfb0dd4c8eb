"""The error every command-line module ends a bad start with: one line, no usage dump."""

from __future__ import annotations

import argparse


class UsageError(Exception):
    """A bad command line or environment value; printed as one line."""


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print the whole usage first
        raise UsageError(message)
