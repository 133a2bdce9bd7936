"""How the CLI was invoked: hints and help name the command as it was run (seeds/001)."""

from __future__ import annotations

_PROG = "akka-optimize"


def set_prog(prog: str) -> None:
    """Record the command prefix, ``akka-optimize`` or ``akka optimize``."""
    global _PROG
    _PROG = prog


def prog() -> str:
    """The command prefix to show in hints, such as ``akka optimize``."""
    return _PROG


class CliError(Exception):
    """A failure the CLI prints as one message (no traceback) before exiting ``exit_code``."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
