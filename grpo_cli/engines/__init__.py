"""Engines: where the arithmetic of a :class:`grpo_cli.core.plan.Plan` runs.

Every engine is one entry of :data:`grpo_cli.core.engine_options.ENGINES` (its name is a
``--backend`` value) and one module under ``grpo_cli/engines/``, imported only when the
engine runs (:func:`get_engine`): this package itself imports nothing heavy.

An engine either annotates an in-memory frame (``io="frame"``: :class:`FrameEngine`) or
reads its inputs and writes its output itself (:class:`FileEngine`): ``io="file"``, one
Parquet file in and one out (logs larger than memory), or ``io="dataset"``, many input
files in and a folder of Parquet part files out (logs spread over files and machines).
Each declares what it cannot do (:meth:`Engine.refusal`); :func:`check` turns that into
the one error every engine gives. The shared policies (:mod:`grpo_cli.core.policies`) and
the collision fallback (:func:`grpo_cli.core.plan.run_with_fallback`) are applied the same
way for every engine.

A new engine: a module here with an ``ENGINE`` object, and one
:class:`grpo_cli.core.engine_options.EngineInfo` line in the registry.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

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
        """``frame`` with the advantage, the plan's key and reward columns and each row's
        group profile (SIZE_KEY, VALID_KEY, CONSTANT_KEY), and CHECK_MAX when the plan's
        keys are hashed; the shared policies applied."""


@dataclass(frozen=True)
class FileJob:
    """What a file engine reads and writes.

    Attributes:
        sources: the input files (one Parquet file for ``io="file"``).
        output: the output file, or for ``io="dataset"`` the output folder.
        plan: the plan (options checked, estimator looked up).
        input_format: the inputs' format (a name in FORMATS), or None: by suffix.
        derived: names of key columns a trainer's dump layout derives from each row
            (:func:`grpo_cli.core.layouts.derived_column`); never written.
        groups: where the per-group table goes (``io="dataset"``: a folder), or None.
        notes: where the engine says what the user should know before the run's end
            (``io="dataset"``: which cluster it runs on), or None: nowhere.
        fatal: where the engine says why it ends the process at once (the Ray engine:
            its cluster lost, or not answering, while Ray holds the main thread; exit 4
            follows), called with the process's standard error back in place; None:
            ``error:`` and ``hint:`` lines with options by keyword.
        response: the column naming each response, whose repeats within a group the
            engine counts (:func:`grpo_cli.core.run_summary.response_id`), or None.
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
        """Raise the one-line error with the install hint when an optional package the
        engine needs is missing."""

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


@runtime_checkable
class Preloading(Protocol):
    """An engine whose optional package takes long to import (torch: seconds)."""

    def start_loading(self) -> None:
        """Start importing it in the background (errors are for its first use to raise)."""


def start_loading(name: str) -> None:
    """Let the engine called ``name`` start importing what it needs while the caller
    reads the input (an engine that needs nothing slow does nothing)."""
    engine = get_engine(name)
    if isinstance(engine, Preloading):
        engine.start_loading()


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
