"""The ``grpo-adv`` command line: parse options, call the core, render, map errors to exits.

One module per command (``compute``, ``verify``, ``summarize``, ``plot``, ``explain``,
``presets``: each defines ``<name>_cmd``); ``params`` declares every shared option once,
``outputs`` routes inputs and outputs, ``app`` builds the Typer app, registers the
commands and maps errors to exit codes.

No arithmetic happens here. Polars and Rich are imported inside the commands, so
``grpo-adv --help`` stays fast. A Ctrl-C while the app loads (the console script imports
this package first) prints the one-line message and exits 130, not a traceback.
"""

from __future__ import annotations

import os
import sys

from grpo_cli.core.errors import EXIT_INTERRUPTED  # a small module: no Polars, no typer

try:
    from grpo_cli.cli.app import app, main
except KeyboardInterrupt:
    try:
        sys.stderr.write("error: interrupted; no output was written\n")
        sys.stderr.flush()
    finally:
        os._exit(EXIT_INTERRUPTED)

__all__ = ["app", "main"]
