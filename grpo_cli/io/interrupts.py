"""Ctrl-C (SIGINT) and SIGTERM around the moments that decide what a run leaves behind.

Inside :func:`deferred` both signals are only recorded; the code polls :func:`pending`,
and :func:`check` raises the recorded signal at the last moment the run may give up (just
before the final renames). Once :func:`mark_committed` is called (the outputs are in
place), a recorded signal is dropped: the run ends as a success. Handlers are installed
from the main thread only; elsewhere :func:`deferred` changes nothing.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any, Final

SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)

_pending: list[int] = []
_previous: dict[int, Any] = {}
_state = {"depth": 0, "committed": False}


def reset() -> None:
    """Forget a previous command's signals and commit (the CLI calls it per command)."""
    _pending.clear()
    _state["committed"] = False


def _record(signum: int, frame: object) -> None:
    _pending.append(signum)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Record SIGINT and SIGTERM inside the block (re-entrant), and raise a recorded one
    at its end unless committed or an exception is already on its way."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    outermost = _state["depth"] == 0
    if outermost:
        for sig in map(int, SIGNALS):
            if signal.getsignal(sig) is not signal.SIG_IGN:  # an ignored signal stays so
                _previous[sig] = signal.getsignal(sig)
                signal.signal(sig, _record)
    _state["depth"] += 1
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        _state["depth"] -= 1
        if outermost:
            for sig in list(_previous):
                signal.signal(sig, _previous.pop(sig))
            if not failed:
                check()
            _pending.clear()


def pending() -> bool:
    """Whether a signal was recorded and the outputs are not committed."""
    return bool(_pending) and not _state["committed"]


def check() -> None:
    """Raise the first recorded signal as its handler would have (KeyboardInterrupt for
    SIGINT), unless the outputs are committed."""
    if not pending():
        return
    signum = _pending[0]
    _pending.clear()
    handler = _previous.get(signum, signal.getsignal(signum))
    if callable(handler) and handler is not _record:
        deliver: Callable[[int, Any], Any] = handler
        deliver(signum, None)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    signal.signal(signum, signal.SIG_DFL)  # SIGTERM without a handler: end as it would have
    signal.raise_signal(signum)


def mark_committed() -> None:
    """The outputs are in place: a signal from now on cannot undo them."""
    _state["committed"] = True


def committed() -> bool:
    """Whether this command's outputs are in place (:func:`mark_committed`)."""
    return bool(_state["committed"])
