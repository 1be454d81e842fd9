"""Engines: where the arithmetic of a :class:`grpo_cli.plan.Plan` runs.

Every engine is one entry of :data:`ENGINES` (its name is a ``--backend`` value) and one
module under ``grpo_cli/engines/``, imported only when the engine runs: this package itself
imports nothing heavy, so ``--help`` can list the engines quickly.

An engine either annotates an in-memory frame (``io="frame"``: :class:`FrameEngine`) or
reads its inputs and writes its output itself (:class:`FileEngine`): ``io="file"``, one
Parquet file in and one out (logs larger than memory), or ``io="dataset"``, many input
files in and a folder of Parquet part files out (logs spread over files and machines).
Each declares what it cannot do (:meth:`Engine.refusal`); :func:`check` turns that into
the one error every engine gives. The shared policies (:mod:`grpo_cli.policies`) and the
collision fallback (:func:`grpo_cli.plan.run_with_fallback`) are applied the same way for
every engine.

A new engine: a module with an ``ENGINE`` object, and one :class:`EngineInfo` line here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Final, Protocol

from grpo_cli.errors import Message, OptionRef, OptionsError, Spelling, keyword_spelling, option

if TYPE_CHECKING:
    from pathlib import Path

    import polars as pl

    from grpo_cli.plan import Plan
    from grpo_cli.summary import RunSummary


@dataclass(frozen=True)
class EngineInfo:
    """An engine's entry: its ``--backend`` name, a line for ``--help``, the module that
    implements it, and what it reads and writes (``IO_KINDS``)."""

    name: str
    summary: str
    module: str
    io: str = "frame"

    @property
    def named(self) -> OptionRef:
        """How messages name the engine: ``backend="partitioned"`` (on the command line
        after its alias flag when it has one: ``--low-memory (--backend partitioned)``)."""
        return option("backend", self.name, alias="explained")

    @property
    def reads_files(self) -> bool:
        """Whether it reads its input and writes its output itself."""
        return self.io != "frame"


IO_KINDS: Final = ("frame", "file", "dataset")


ENGINES: Final[dict[str, EngineInfo]] = {
    info.name: info
    for info in (
        EngineInfo(
            "polars",
            "Polars window expressions, in memory or streaming (default)",
            "grpo_cli.engines.polars",
        ),
        EngineInfo(
            "partitioned",
            "logs larger than memory (alias --low-memory): Parquet in, Parquet out, in "
            "bounded memory, partitions spilled beside the output; group-level estimators",
            "grpo_cli.engines.partitioned",
            io="file",
        ),
        EngineInfo(
            "torch",
            "torch segment operations (index_add_, scatter_reduce) on --device; every estimator",
            "grpo_cli.engines.torch",
        ),
        EngineInfo(
            "ray",
            "a Ray cluster (--ray-address; default a private local Ray): many Parquet, "
            "JSONL or CSV files in, a folder of Parquet parts out (-o DIR); shuffled by the "
            "group key, batch statistics merged across the cluster",
            "grpo_cli.engines.ray",
            io="dataset",
        ),
    )
}


BACKENDS: Final[dict[str, str]] = {name: info.summary for name, info in ENGINES.items()}
DEVICES: Final[dict[str, str]] = {
    "auto": "CUDA when torch sees it, else the CPU",
    "cpu": "the CPU",
    "cuda": "an NVIDIA GPU (an error when torch sees none)",
}


@dataclass(frozen=True)
class EngineOptions:
    """Where a computation runs: one frozen, validated dataclass, apart from what it
    computes (:class:`grpo_cli.options.AdvantageOptions`).

    Attributes:
        backend: the engine (a name in :data:`ENGINES`): ``polars`` (default),
            ``partitioned`` (logs larger than memory), ``torch`` (segment sums on
            ``device``) or ``ray`` (a Ray cluster at ``ray_address``).
        device: for torch: ``auto`` (CUDA when available), ``cpu`` or ``cuda``.
        ray_address: for ray: None (a private local Ray), ``auto`` (the cluster this
            machine belongs to), ``HOST:PORT`` or ``ray://HOST:PORT``.
    """

    backend: str = "polars"
    device: str = "auto"
    ray_address: str | None = None

    def __post_init__(self) -> None:
        """Names spelled as the registry does (case and separators ignored); an unknown
        one suggests the closest. ``ray_address`` only with the ray engine."""
        from grpo_cli.names import match_name

        choices: dict[str, tuple[Mapping[str, str], Message]] = {
            "backend": (BACKENDS, option("backend") + " value"),
            "device": (DEVICES, option("device") + " value"),
        }
        for name, (names, what) in choices.items():
            object.__setattr__(self, name, match_name(getattr(self, name), names, what))
        if self.ray_address is not None and self.backend != "ray":
            raise OptionsError(
                option("ray_address") + " is where " + option("backend", "ray") + " runs",
                hint="add " + option("backend", "ray") + ", or drop it",
                value=self.ray_address,
            )

    @classmethod
    def of(cls, given: EngineOptions | Mapping[str, Any] | None) -> EngineOptions:
        """``given`` as EngineOptions (a mapping of its fields; None: the defaults); an
        unknown name raises OptionsError."""
        if isinstance(given, EngineOptions):
            return given
        settings = dict(given or {})
        unknown = sorted(set(settings) - set(ENGINE_SETTINGS))
        if unknown:
            raise OptionsError(
                f"unknown engine setting(s): {', '.join(unknown)}",
                hint=f"valid settings: {', '.join(ENGINE_SETTINGS)}",
            )
        return cls(**settings)


ENGINE_SETTINGS: Final = tuple(f.name for f in fields(EngineOptions))
"""The keywords that choose where a computation runs, not what it computes."""


def split_engine(given: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The keywords of ``given`` split into the estimator's and the engine's
    (:data:`ENGINE_SETTINGS`)."""
    estimator = {k: v for k, v in given.items() if k not in ENGINE_SETTINGS}
    engine = {k: v for k, v in given.items() if k in ENGINE_SETTINGS}
    return estimator, engine


class Engine(Protocol):
    """What every engine declares."""

    @property
    def info(self) -> EngineInfo:
        """The engine's registry entry."""

    def refusal(self, plan: Plan) -> Message | None:
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
        input_format: the inputs' format (parquet, jsonl or csv), or None: by suffix.
        derived: names of key columns a trainer's dump layout derives from each row
            (:func:`grpo_cli.layouts.derived_column`); never written.
        groups: where the per-group table goes (``io="dataset"``: a folder), or None.
        notes: where the engine says what the user should know before the run's end
            (``io="dataset"``: which cluster it runs on), or None: nowhere.
        spell: how the messages the engine prints itself name options (the Ray engine's
            last words when the cluster is lost): Python keywords unless the caller's
            reader is another (the command line: its flags).
    """

    sources: tuple[Path, ...]
    output: Path
    plan: Plan
    input_format: str | None = None
    derived: tuple[str, ...] = ()
    groups: Path | None = None
    notes: Callable[[Message], None] | None = field(default=None, compare=False)
    spell: Spelling = field(default=keyword_spelling, compare=False)


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


def check(engine: Engine, plan: Plan) -> None:
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
