"""How a grpo-adv process answers SIGINT and SIGTERM, whatever it inherited (a script's
background job starts with SIGINT ignored; whoever signals grpo-adv means it):

- **While the app loads and parses its options** (nothing written yet): the one line,
  ``error: interrupted; no output was written`` (``terminated`` for SIGTERM), and exit
  130 (143) at once (:func:`end_at_once`).
- **While a command runs**: the first signal raises KeyboardInterrupt (SIGINT) or
  :class:`grpo_cli.core.errors.Terminated` (SIGTERM) where the command is, so that it
  unwinds (temporary files removed, no partial output; see
  :mod:`grpo_cli.io.interrupts` for the moments that defer it) and says so in the same
  line; later signals are ignored.
- **Once the command's exit is decided** (it returned, or its error is being said):
  ignored.

No Polars, no typer: the console script loads it first (:mod:`grpo_cli.cli`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Final, NoReturn

from grpo_cli.core.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated
from grpo_cli.io.interrupts import SIGNALS

EXIT_CODES: Final = {signal.SIGINT: EXIT_INTERRUPTED, signal.SIGTERM: EXIT_TERMINATED}
_LOADING: Final = "loading"
_RUNNING: Final = "running"
_DECIDED: Final = "decided"
_stage = {"now": _LOADING}


def stopped_line(signum: int, *, complete: bool = False) -> str:
    """What a signal that stopped a run says after ``error:`` (``complete``: after
    ``warning:``, the outputs were in place already)."""
    word = "interrupted" if signum == signal.SIGINT else "terminated"
    if complete:
        return f"{word} after the output was written (it is complete)"
    return f"{word}; no output was written"


def end_at_once(signum: int, frame: object = None) -> NoReturn:
    """The line of :func:`stopped_line` on stderr and the end of the process with its
    exit code (:data:`EXIT_CODES`), at once, later signals ignored. Only for moments with
    nothing to undo."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"error: {stopped_line(signum)}\n")
        sys.stderr.flush()
    os._exit(EXIT_CODES[signal.Signals(signum)])


def on_signal(signum: int, frame: object) -> None:
    """The handler of both signals in a grpo-adv process (see the module docstring)."""
    if _stage["now"] == _LOADING:
        end_at_once(signum)
    if _stage["now"] == _DECIDED:
        return
    _stage["now"] = _DECIDED
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated()


def command_started() -> None:
    """A command runs from now: a signal unwinds it."""
    _stage["now"] = _RUNNING


def exit_decided() -> None:
    """The command's exit is decided: signals are ignored from now."""
    _stage["now"] = _DECIDED
