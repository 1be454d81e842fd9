"""The ``grpo-adv`` command line: parse options, call the core, render, map errors to exits.

One module per command (``compute``, ``verify``, ``summarize``, ``plot``, ``explain``,
``presets``: each defines ``<name>_cmd``); ``params`` declares every shared option once,
``outputs`` routes inputs and outputs, ``app`` builds the Typer app, registers the
commands and maps errors to exit codes.

No arithmetic happens here. Polars and Rich are imported inside the commands, so
``grpo-adv --help`` stays fast.
"""

from grpo_cli.cli.app import app, main

__all__ = ["app", "main"]
