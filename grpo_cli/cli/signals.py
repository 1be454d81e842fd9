"""How a grpo-adv process answers SIGINT and SIGTERM, whatever it inherited (a script's
background job starts with SIGINT ignored):

- while the app loads (nothing written yet): ``error: interrupted; no output was written``
  (``terminated``) and exit 130 (143) at once (:func:`end_at_once`); launched as
  ``grpo-adv`` or ``python -m grpo_cli``, the signal waits, blocked, until the app's
  handlers are in place (:mod:`grpo_cli.__main__`), then ends the process the same way;
- while a command runs: the first signal raises KeyboardInterrupt or
  :class:`grpo_cli.core.errors.Terminated` where the command is, so that it unwinds (see
  :mod:`grpo_cli.io.interrupts`); later ones are ignored. Met in Polars' Python code (raised
  in a callback of its Rust engine it would become a panic and a misleading read error), the
  signal is delivered again a few milliseconds later, until it meets code of ours;
- once the command's exit is decided: ignored.

No Polars, no typer: :mod:`grpo_cli.cli` loads it first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from types import FrameType
from typing import Final, NoReturn

from grpo_cli.core.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated
from grpo_cli.io.interrupts import SIGNALS

EXIT_CODES: Final = {signal.SIGINT: EXIT_INTERRUPTED, signal.SIGTERM: EXIT_TERMINATED}
_LOADING: Final = "loading"
_RUNNING: Final = "running"
_DECIDED: Final = "decided"
_stage = {"now": _LOADING}
_raised: dict[str, int | None] = {"signum": None}
_POLARS_DIR: Final = f"{os.sep}polars{os.sep}"
_REDELIVERY_S: Final = 0.005


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


def _inside_polars(frame: FrameType | None) -> bool:
    """Whether Python code of the Polars package is on the stack (a wrapper, or a callback
    made from its Rust engine: both end in a Polars frame)."""
    while frame is not None:
        if _POLARS_DIR in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def _deliver_again(signum: int) -> None:
    """Send ``signum`` to this process again in a few milliseconds (from a timer thread;
    the handler runs in the main thread at its next Python instruction)."""
    timer = threading.Timer(_REDELIVERY_S, os.kill, (os.getpid(), signum))
    timer.daemon = True
    timer.start()


def on_signal(signum: int, frame: FrameType | None) -> None:
    """The handler of both signals in a grpo-adv process (see the module docstring)."""
    if _stage["now"] == _LOADING:
        end_at_once(signum)
    if _stage["now"] == _DECIDED:
        return
    if _inside_polars(frame):
        _deliver_again(signum)
        return
    _stage["now"] = _DECIDED
    _raised["signum"] = signum
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated()


def command_started() -> None:
    """A command runs from now: a signal unwinds it."""
    _stage["now"] = _RUNNING
    _raised["signum"] = None


def raised_signal() -> int | None:
    """The signal :func:`on_signal` raised in this command, if any: whatever exception the
    command ended with was its consequence."""
    return _raised["signum"]


def exit_decided() -> None:
    """The command's exit is decided: signals are ignored from now."""
    _stage["now"] = _DECIDED
