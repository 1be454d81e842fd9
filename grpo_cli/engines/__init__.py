"""Engines: where the arithmetic of a :class:`grpo_cli.core.plan.Plan` runs.

Every engine is one :data:`grpo_cli.core.engine_options.ENGINES` entry and one module here
with an ``ENGINE`` object, imported only when it runs (:func:`get_engine`). It annotates an
in-memory frame (:class:`FrameEngine`) or reads and writes files itself
(:class:`FileEngine`: ``io="file"``, one Parquet file in and out; ``io="dataset"``, many
files in and a folder of part files out), and declares what it cannot do
(:meth:`Engine.refusal`, turned into one error by :func:`check`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from grpo_cli.core.engine_options import ENGINES, EngineInfo
from grpo_cli.core.errors import GrpoAdvError, Message, OptionsError, option

if TYPE_CHECKING:
    from pathlib import Path

    import polars as pl

    from grpo_cli.core.plan import Plan
    from grpo_cli.core.resolve import Request
    from grpo_cli.core.run_summary import RunSummary


class Engine(Protocol):
    """What every engine declares."""

    @property
    def info(self) -> EngineInfo:
        """The engine's registry entry."""

    def refusal(self, plan: Plan | Request) -> Message | None:
        """What of ``plan`` this engine cannot compute exactly (a phrase completing
        "--backend NAME does not support ..."), or None."""


class FrameEngine(Engine, Protocol):
    """An engine that annotates an in-memory frame."""

    def annotate(self, frame: pl.DataFrame, plan: Plan) -> pl.DataFrame:
        """``frame`` with the advantage (policies applied), the plan's key and reward
        columns, each row's group profile (SIZE_KEY, VALID_KEY, CONSTANT_KEY), and
        CHECK_MAX when the keys are hashed."""


@dataclass(frozen=True)
class FileJob:
    """What a file engine reads and writes.

    Attributes:
        sources, output: the input files (one Parquet file for ``io="file"``); the output
            file (``io="dataset"``: folder).
        plan: the plan.
        input_format: the inputs' format (a name in FORMATS), or None: by suffix.
        derived: key columns a trainer's dump layout derives
            (:func:`grpo_cli.core.layouts.derived_column`); never written.
        groups: where the per-group table goes (``io="dataset"``: a folder), or None.
        notes: where the engine tells the user things before the run's end, or None.
        fatal: where the engine says why it ends the process at once (the Ray engine's
            lost cluster; exit 4 follows), with standard error back in place; None:
            ``error:`` and ``hint:`` lines.
        response: the response id column whose repeats the engine counts, or None.
    """

    sources: tuple[Path, ...]
    output: Path
    plan: Plan
    input_format: str | None = None
    derived: tuple[str, ...] = ()
    groups: Path | None = None
    notes: Callable[[Message], None] | None = field(default=None, compare=False)
    fatal: Callable[[GrpoAdvError], None] | None = field(default=None, compare=False)
    response: str | None = None


class FileEngine(Engine, Protocol):
    """An engine that reads its input and writes its output itself."""

    def require(self) -> None:
        """Raise the install hint's error when an optional package is missing."""

    def annotate_files(self, job: FileJob) -> RunSummary:
        """Annotate ``job.sources`` into ``job.output``; the run's figures."""


def get_engine(name: str) -> Engine:
    """The engine called ``name`` (its module imported now); an unknown name lists them."""
    info = ENGINES.get(name)
    if info is None:
        raise OptionsError(
            "unknown " + option("backend") + f" value {name!r}",
            hint=f"choose one of: {', '.join(ENGINES)}",
            value=name,
        )
    engine: Engine = importlib.import_module(info.module).ENGINE
    return engine


def start_loading(name: str) -> None:
    """Let the engine called ``name`` start importing a slow optional package (torch)
    while the caller reads the input, if it has a ``start_loading`` method."""
    load = getattr(get_engine(name), "start_loading", None)
    if load is not None:
        load()


def check(engine: Engine, plan: Plan | Request) -> None:
    """Refuse, with one error for every engine, what ``engine`` cannot compute; the hint
    names the engines that can."""
    reason = engine.refusal(plan)
    if reason is None:
        return
    able = [
        name
        for name in ENGINES
        if name != engine.info.name
        # a frame's caller cannot switch to a file engine; a file engine's CLI user can
        and (engine.info.reads_files or not ENGINES[name].reads_files)
        and get_engine(name).refusal(plan) is None
    ]
    others = "".join(f" or {name}" for name in able[1:])
    raise OptionsError(
        engine.info.named + " does not support " + reason,
        hint="use " + option("backend", able[0]) + others if able else None,
    )
