"""Progress of a run: the engines say which pass runs (:func:`stage`) and how many rows it
has done (:func:`advance`, or :func:`counted` on a streaming query); whoever runs the job
installs a display for the run (:func:`reporting`): the command line's Rich display, the
``--low-memory`` worker's pipe to the command (so an engine function that runs in the
worker calls :func:`stage` and :func:`advance` and needs no other wiring). Without one,
nothing is shown or kept. Rows a second and the time left are :class:`Pace`'s.

One run at a time in a process: the display is module state, not a context variable,
because Polars calls :func:`counted`'s function from its own threads.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import polars as pl

ROWS = "rows"  # the unit of the engines' stages


class Progress(Protocol):
    """A progress display: one line per stage (reading, computing, writing)."""

    def add(self, description: str, total: int | None, unit: str | None = None) -> Any:
        """A new line of the display, counting ``unit`` (None: steps of work) up to
        ``total`` (None: unknown); its handle. The line before it is finished."""

    def advance(self, task: Any, steps: int = 1) -> None:
        """``steps`` more done on ``task``."""


class NoProgress:
    """Nothing shown, nothing kept."""

    def add(self, description: str, total: int | None, unit: str | None = None) -> None:
        return None

    def advance(self, task: Any, steps: int = 1) -> None:
        return None


@dataclass
class _Current:
    display: Progress
    task: Any = None
    started: bool = False  # a stage began (its handle may be None)


_current = _Current(NoProgress())
_lock = threading.Lock()


@contextlib.contextmanager
def reporting(display: Progress) -> Iterator[None]:
    """``display`` shows the stages reported in this process until the block ends."""
    global _current
    before, _current = _current, _Current(display)
    try:
        yield
    finally:
        _current = before


def stage(description: str, rows: int | None) -> None:
    """A new pass of ``rows`` rows (None: unknown) starts: a new line on the display."""
    current = _current
    with _lock:
        current.task = current.display.add(description, rows, ROWS)
        current.started = True


def advance(rows: int) -> None:
    """``rows`` more rows done in the current pass (from any thread)."""
    current = _current
    with _lock:
        if current.started:
            current.display.advance(current.task, rows)


def counted(frame: pl.LazyFrame) -> pl.LazyFrame:
    """``frame`` unchanged, each batch's rows counted (:func:`advance`) as a streaming
    query reads it: a function on its first column, which Polars calls once a batch
    (about 100,000 rows; no cost measured on 20M rows)."""
    import polars as pl

    name, dtype = next(iter(frame.collect_schema().items()))

    def count(batch: pl.Series) -> pl.Series:
        advance(len(batch))
        return batch

    return frame.with_columns(
        pl.col(name).map_batches(count, return_dtype=dtype, is_elementwise=True)
    )


@dataclass(frozen=True)
class Pace:
    """How fast a pass goes: ``done`` of ``total`` rows (None: unknown) in ``seconds``.

    ``rate`` = done / seconds (rows a second, the mean since the pass started; None before
    any row or time); ``left`` = (total - done) / rate, the seconds left at that rate
    (None without a rate or a total; 0 once done reaches the total)."""

    done: float
    total: float | None
    seconds: float

    @property
    def rate(self) -> float | None:
        return self.done / self.seconds if self.done > 0 and self.seconds > 0 else None

    @property
    def left(self) -> float | None:
        rate = self.rate
        if self.total is None or rate is None:
            return None
        return max(self.total - self.done, 0) / rate
