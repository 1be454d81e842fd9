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

import errno as _errno
from contextvars import ContextVar

EXIT_OK = 0
EXIT_DIFFERENT = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_OUTPUT = 4
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


# Whether errors are shown to a command-line user (options spelled as flags, ``--eps``) or
# raised to Python code (keyword arguments, ``eps=``): the CLI sets it around every
# command; see grpo_cli.options.python_spelling.
FLAG_SPELLING: ContextVar[bool] = ContextVar("flag_spelling", default=False)


class Terminated(BaseException):
    """Raised by the SIGTERM handler, so that cleanup runs as for Ctrl-C."""


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(text: str) -> str:
    """``text`` on one line, whatever it holds: control and other unprintable characters
    (newlines, NUL, line separators, zero-width marks) written as their Python escapes
    (``a\\nb``), so a column name or value from the input cannot break a message."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _ESCAPES.get(ch) or repr(ch)[1:-1] for ch in text)


class GrpoAdvError(Exception):
    """A failure the user can act on: a one-line message plus a hint.

    ``message`` and ``hint`` are kept on one line (see :func:`one_line`), also when a
    caller appends to them later.
    """

    exit_code: int = EXIT_INTERNAL

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(one_line(message))
        self.message = message
        self.hint = hint

    @property
    def message(self) -> str:
        """The one-line message."""
        return self._message

    @message.setter
    def message(self, value: str) -> None:
        self._message = one_line(value)
        self.args = (self._message,)

    @property
    def hint(self) -> str | None:
        """What to do next, on one line (or None)."""
        return self._hint

    @hint.setter
    def hint(self, value: str | None) -> None:
        self._hint = None if value is None else one_line(value)

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


class ClusterError(OutputError):
    """The cluster that would compute and write the output cannot be reached (exit 4,
    as for an output that cannot be written: nothing was written)."""


DISK_FULL_ERRNOS = frozenset({_errno.ENOSPC, _errno.EDQUOT})
_DISK_FULL_TEXT = ("no space left on device", "os error 28", "disk quota exceeded", "os error 122")


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) says the disk or quota is full:
    ``OSError`` with ENOSPC/EDQUOT, or Polars' and pyarrow's wrapped forms of it
    (``... No space left on device (os error 28)``)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, GrpoAdvError):
            return False  # already told the user what happened
        if isinstance(current, OSError) and current.errno in DISK_FULL_ERRNOS:
            return True
        text = str(current).lower()
        if any(marker in text for marker in _DISK_FULL_TEXT):
            return True
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    return False
