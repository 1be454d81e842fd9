"""The one exception hierarchy of grpo-adv.

The core raises these and never prints; the CLI catches :class:`GrpoAdvError`, prints
``error: <message>`` and ``hint: <hint>`` on stderr and exits with :attr:`exit_code`.

Exit codes (also in the README):

====  ===============================================================
0     success
1     ``verify``: the logged advantages differ from the recomputed ones
2     usage error: an option value or combination that cannot work
3     input error: the input is missing, unreadable or not a reward log
4     output error: the output exists (without ``--force``), is the input,
      or cannot be written
70    internal error (a bug: please report it)
130   interrupted (Ctrl-C); no output file is left behind
143   terminated (SIGTERM); no output file is left behind
====  ===============================================================
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_DIFFERENT = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_OUTPUT = 4
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


class Terminated(BaseException):
    """Raised by the SIGTERM handler, so that cleanup runs as for Ctrl-C."""


class GrpoAdvError(Exception):
    """A failure the user can act on: a one-line message plus a hint."""

    exit_code: int = EXIT_INTERNAL

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class OptionsError(GrpoAdvError):
    """An option value or combination that cannot work (exit 2)."""

    exit_code = EXIT_USAGE


class InputError(GrpoAdvError):
    """The input is missing, unreadable, malformed or lacks what is needed (exit 3)."""

    exit_code = EXIT_INPUT


class OutputError(GrpoAdvError):
    """The output cannot or must not be written (exit 4)."""

    exit_code = EXIT_OUTPUT
