"""The ``grpo-adv`` command line: parse options, call the core, render, map errors to exits.

One module per command (each defines ``<name>_cmd``); ``params`` declares every shared
option once, ``app`` builds the Typer app and maps errors to exit codes (``main``).

No arithmetic happens here; Polars and Rich are imported inside the commands. While the app
loads, SIGINT and SIGTERM end the process at once with their one line
(:func:`grpo_cli.cli.signals.end_at_once`); the handlers they replaced are put back once it
has loaded, so importing this package changes nothing.
"""

from __future__ import annotations

import contextlib
import signal
from typing import Any

from grpo_cli.cli.signals import end_at_once  # no Polars, no typer
from grpo_cli.io.interrupts import SIGNALS

_replaced: dict[signal.Signals, Any] = {}
with contextlib.suppress(ValueError):  # only the main thread sets handlers
    for _sig in SIGNALS:
        _replaced[_sig] = signal.signal(_sig, end_at_once)
try:
    from grpo_cli.cli.app import app, main
except KeyboardInterrupt:  # not from a signal (end_at_once ends the process)
    end_at_once(signal.SIGINT)
finally:
    for _sig, _handler in _replaced.items():
        if _handler is not None:  # None: set outside Python, not ours to put back
            signal.signal(_sig, _handler)

__all__ = ["app", "main"]
