"""Where a computation runs: the engines' registry (:data:`ENGINES`) and
:class:`EngineOptions` (backend, device, Ray address). Data only: the engines are in
:mod:`grpo_cli.engines`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Final

from grpo_cli.core.errors import (
    Message,
    OptionRef,
    OptionsError,
    Verbatim,
    option,
)


@dataclass(frozen=True)
class EngineInfo:
    """An engine's entry: its ``--backend`` name, a line for ``--help``, the module that
    implements it, and what it reads and writes: ``frame``, ``file`` or ``dataset``."""

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
    computes (:class:`grpo_cli.core.options.AdvantageOptions`).

    Attributes:
        backend: the engine (a name in :data:`ENGINES`): ``polars`` (default),
            ``partitioned`` (logs larger than memory), ``torch`` (segment sums on
            ``device``) or ``ray`` (a Ray cluster at ``ray_address``).
        device: for torch: ``auto`` (CUDA when available), ``cpu`` or ``cuda``.
        ray_address: for ray: None (a private local Ray), ``auto`` (the cluster this
            machine belongs to) or ``HOST:PORT`` (its head's GCS address). Not
            ``ray://HOST:PORT`` (Ray Client): the output folder is made, checked and
            renamed into place by grpo-adv where it runs, so that machine must see the
            files the cluster's workers write: it must be a machine of the cluster.
    """

    backend: str = "polars"
    device: str = "auto"
    ray_address: str | None = None

    def __post_init__(self) -> None:
        """Names spelled as the registry does (case and separators ignored); an unknown
        one suggests the closest. ``ray_address`` only with the ray engine."""
        from grpo_cli.core.names import match_name

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
        if self.ray_address is not None and self.ray_address.startswith("ray://"):
            raise OptionsError(
                option("ray_address", Verbatim(self.ray_address))
                + ": Ray Client (ray://) is not supported",
                hint="run grpo-adv on a machine of the cluster, with "
                + option("ray_address", Verbatim("auto"))
                + " or "
                + option("ray_address", Verbatim("HOST:PORT"))
                + " (the head's GCS address): the output folder is made and renamed "
                "where grpo-adv runs, so it must see the files the workers write",
                value=self.ray_address,
            )

    @classmethod
    def of(cls, given: EngineOptions | Mapping[str, Any] | None, **more: Any) -> EngineOptions:
        """``given`` (a mapping of its fields; None: the defaults) with the settings
        ``more`` over it, as EngineOptions; an unknown name raises OptionsError."""
        if isinstance(given, EngineOptions):
            given = {f.name: getattr(given, f.name) for f in fields(given)}
        settings = {**(given or {}), **more}
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
