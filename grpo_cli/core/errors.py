"""The one exception hierarchy of grpo-adv.

The core raises these and never prints; the CLI catches :class:`GrpoAdvError`, prints
``error: <message>`` and ``hint: <hint>`` on stderr and exits with :attr:`exit_code` (the
EXIT_* codes below, tabled in the README's "Exit codes").

Messages name options by their Python keyword (:class:`OptionRef`), never by a flag:
``str(error)`` speaks Python (``e.g. eps=1e-8``); the CLI renders the same error with its
flags (``--eps``) through :meth:`GrpoAdvError.render`.
"""

from __future__ import annotations

import errno as _errno
from collections.abc import Callable, Iterable
from dataclasses import KW_ONLY, dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Final, Literal

if TYPE_CHECKING:
    from pathlib import Path

EXIT_OK = 0  # success
EXIT_DIFFERENT = 1  # verify: the logged advantages differ from the recomputed ones
EXIT_USAGE = 2  # an option value or combination that cannot work
EXIT_INPUT = 3  # the input is missing, unreadable or not a reward log
EXIT_OUTPUT = 4  # the output exists (without force), is the input, or cannot be written
EXIT_MEMORY = 5  # the host or the torch device cannot hold the run; nothing was written
EXIT_INTERNAL = 70  # a bug
EXIT_INTERRUPTED = 130  # Ctrl-C; no output file is left behind
EXIT_KILLED = 137  # the private Ray's head died while it started: its watcher's SIGKILL
EXIT_TERMINATED = 143  # SIGTERM; no output file is left behind


@dataclass(frozen=True)
class Verbatim:
    """Text an option reference shows as it is in every spelling: a placeholder (``COL``,
    ``N``) or a number written as a user types it (``1e-8``)."""

    text: str


class _NoValue(Enum):
    """No value shown with an option (one object, also once unpickled)."""

    NO_VALUE = 0


_NO_VALUE: Final = _NoValue.NO_VALUE
AliasForm = Literal["", "alone", "explained"]


@dataclass(frozen=True)
class OptionRef:
    """An option named in a message.

    Attributes:
        keyword: the library's keyword argument (``eps``, ``group_cols``, ``force``).
        value: shown with the option (an example or the value in effect): a string, a
            number, a bool (``force=True``: the bare flag), a tuple, or :class:`Verbatim`
            text; absent: the option alone.
        short: the command line's short flag (``-o``) is shown where it has one.
        alias: the command line's alias flag for this option and value (``--low-memory``
            for ``backend="partitioned"``): ``"alone"`` or ``"explained"``
            (``--low-memory (--backend partitioned)``); Python shows the keyword.
    """

    keyword: str
    value: object = _NO_VALUE
    _: KW_ONLY
    short: bool = False
    alias: AliasForm = ""

    @property
    def has_value(self) -> bool:
        """Whether a value is shown with the option."""
        return self.value is not _NO_VALUE

    def __add__(self, other: str | OptionRef | Text) -> Text:
        return Text((self,)) + other

    def __radd__(self, other: str) -> Text:
        return Text((other, self))


option = OptionRef
"""``"e.g. " + option("eps", Verbatim("1e-8"))`` reads ``e.g. eps=1e-8`` in Python and
``e.g. --eps 1e-8`` on the command line."""


Spelling = Callable[[OptionRef], str]
"""How a reader names an option: the Python keyword (:func:`keyword_spelling`) or the
command line's flag (:func:`grpo_cli.cli.params.flag_spelling`)."""


def python_value(value: object) -> str:
    """``value`` as Python source: strings in double quotes, tuples in parentheses
    (``("COL",)``, ``(-10, 10)``), :class:`Verbatim` text as it is."""
    if isinstance(value, Verbatim):
        return value.text
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        items = ", ".join(python_value(v) for v in value)
        return f"({items},)" if len(value) == 1 else f"({items})"
    return repr(value)


def keyword_spelling(ref: OptionRef) -> str:
    """The option as a keyword argument: ``eps``, ``eps=1e-8``, ``force=True``,
    ``group_cols=("COL",)``, ``estimator="grpo"``."""
    if not ref.has_value:
        return ref.keyword
    return f"{ref.keyword}={python_value(ref.value)}"


@dataclass(frozen=True)
class Text:
    """A message built with ``+`` from strings and the options it names, rendered in the
    reader's :data:`Spelling`; ``str(text)`` is the Python spelling."""

    parts: tuple[str | OptionRef, ...] = ()

    def __add__(self, other: str | OptionRef | Text) -> Text:
        more = other.parts if isinstance(other, Text) else (other,)
        return Text(self.parts + more)

    def __radd__(self, other: str) -> Text:
        return Text((other, *self.parts))

    def render(self, spell: Spelling) -> str:
        """The text with each option named as ``spell`` names it."""
        return "".join(p if isinstance(p, str) else spell(p) for p in self.parts)

    @property
    def options(self) -> tuple[OptionRef, ...]:
        """The options named, in order."""
        return tuple(p for p in self.parts if isinstance(p, OptionRef))

    def __str__(self) -> str:
        return self.render(keyword_spelling)


Message = str | OptionRef | Text
"""A message or hint: plain text, or a :class:`Text` (or one :class:`OptionRef`) that
names options."""


def as_text(message: Message) -> Text:
    """``message`` as a :class:`Text`."""
    if isinstance(message, Text):
        return message
    return Text((message,))


def join(separator: str, items: Iterable[str | OptionRef | Text]) -> Text:
    """``separator.join(items)`` for messages that name options."""
    joined = Text()
    for i, item in enumerate(items):
        joined = joined + item if i == 0 else joined + separator + item
    return joined


class GrpoAdvWarning(UserWarning):
    """What the Python API warns about (a grouping that is probably wrong); silence it
    with ``warnings.filterwarnings("ignore", category=GrpoAdvWarning)``."""


class Terminated(BaseException):
    """Raised by the SIGTERM handler, so that cleanup runs as for Ctrl-C."""


def one_line(text: str) -> str:
    """``text`` on one line: unprintable characters (newlines, NUL, line separators)
    written as their Python escapes (``a\\nb``), so no input value breaks a message."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


class GrpoAdvError(Exception):
    """A failure the user can act on: a one-line message plus a hint, and what it is about.

    Attributes:
        text, hint_text: the message and the hint (or None) as :class:`Text`, options by
            keyword; either may be replaced or extended (``error.text += more``).
        value: the offending value, when one option's value is the problem (else None).
        column: the input column concerned, when one is (else None).
        path: the file concerned, when one is (else None).

    ``message`` and ``hint`` (and ``str(error)``) are the Python spelling, each on one
    line (see :func:`one_line`); :meth:`render` spells them for another reader.
    """

    exit_code: int = EXIT_INTERNAL

    def __init__(
        self,
        message: Message,
        hint: Message | None = None,
        *,
        value: Any = None,
        column: str | None = None,
        path: str | Path | None = None,
    ) -> None:
        self.hint_text = None if hint is None else as_text(hint)
        self.text = as_text(message)
        self.value = value
        self.column = column
        self.path = None if path is None else str(path)

    @property
    def text(self) -> Text:
        """The message, options by keyword (set: also the exception's ``args``)."""
        return self._text

    @text.setter
    def text(self, value: Text) -> None:
        self._text = value
        super().__init__(self.message)

    @property
    def message(self) -> str:
        """The one-line message, options spelled as Python keywords."""
        return self.render(keyword_spelling)[0]

    @property
    def hint(self) -> str | None:
        """What to do next, on one line (or None), options spelled as Python keywords."""
        return self.render(keyword_spelling)[1]

    @property
    def options(self) -> tuple[str, ...]:
        """The keywords of the options the message and hint name, each once, in order."""
        named = self.text.options + (self.hint_text.options if self.hint_text else ())
        return tuple(dict.fromkeys(ref.keyword for ref in named))

    def render(self, spell: Spelling) -> tuple[str, str | None]:
        """The message and the hint (or None), each on one line, options spelled by
        ``spell``."""
        hint = None if self.hint_text is None else one_line(self.hint_text.render(spell))
        return one_line(self.text.render(spell)), hint

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


class MemoryShortError(GrpoAdvError):
    """The host, or the torch engine's device, cannot hold what the run needs (exit 5)."""

    exit_code = EXIT_MEMORY


class ClusterError(OutputError):
    """The cluster that would compute and write the output cannot be reached (exit 4)."""


def install_command(extra: str) -> str:
    """The command that adds the optional dependencies ``extra`` (``ray``, ``torch``,
    ``plot``): grpo-adv is installed again from its checkout (on no package registry)."""
    return f".venv/bin/pip install -e '.[{extra}]' (in the grpo-adv checkout)"


def first_line(text: str, default: str = "") -> str:
    """The first line of an exception's text (``default`` when it has none)."""
    stripped = text.strip()
    return stripped.splitlines()[0] if stripped else default


_OUT_OF_MEMORY_TEXT = ("can't allocate memory", "cannot allocate memory", "out of memory")


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says an allocation failed: ``MemoryError`` (pyarrow's included),
    torch's ``OutOfMemoryError`` or its CPU allocator's ``RuntimeError``. (Polars aborts
    the process when it runs out.)"""
    if isinstance(exc, GrpoAdvError):
        return False
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(m in text for m in _OUT_OF_MEMORY_TEXT)


DISK_FULL_ERRNOS = frozenset({_errno.ENOSPC, _errno.EDQUOT})
_DISK_FULL_TEXT = ("no space left on device", "os error 28", "disk quota exceeded", "os error 122")


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) says the disk or quota is full:
    ENOSPC/EDQUOT, also as Polars' and pyarrow's text (``os error 28``)."""
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
