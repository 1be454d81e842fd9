"""The registry of advantage estimators.

Every estimator is a pure function ``fn(stats, params) -> polars.Expr`` over per-group
statistics given as window expressions (see :class:`GroupStats`). Policies shared by all
estimators (null rewards, one-response groups) are applied by :mod:`grpo_cli.compute`, so an
estimator only states its formula and its own edge cases.

Polars is imported inside the functions: the CLI reads the registry (names and help) without
paying for the Polars import, which keeps ``grpo-adv --help`` fast.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from grpo_cli.errors import OptionsError

if TYPE_CHECKING:
    import polars as pl


@dataclass(frozen=True)
class GroupStats:
    """Per-row window expressions over the row's group (valid rewards only).

    Attributes:
        reward: the reward as Float64, NaN turned into null.
        count: number of non-null rewards in the group.
        mean: group mean of the non-null rewards.
        std: group std with the chosen ddof (null when count <= ddof).
        is_constant: True when every non-null reward of the group is equal (max == min).
    """

    reward: pl.Expr
    count: pl.Expr
    mean: pl.Expr
    std: pl.Expr
    is_constant: pl.Expr


@dataclass(frozen=True)
class EstimatorParams:
    """Numeric parameters an estimator may read."""

    ddof: int
    eps: float


EstimatorFn = Callable[[GroupStats, EstimatorParams], "pl.Expr"]


@dataclass(frozen=True)
class Estimator:
    """A registered estimator: its name, one-line help and function."""

    name: str
    summary: str
    fn: EstimatorFn


ESTIMATORS: Final[dict[str, Estimator]] = {}


def register_estimator(name: str, summary: str) -> Callable[[EstimatorFn], EstimatorFn]:
    """Register ``fn`` under ``name``; ``summary`` becomes its line in ``--help``."""

    def decorate(fn: EstimatorFn) -> EstimatorFn:
        if name in ESTIMATORS:
            raise ValueError(f"estimator {name!r} registered twice")
        ESTIMATORS[name] = Estimator(name=name, summary=summary, fn=fn)
        return fn

    return decorate


def get_estimator(name: str) -> Estimator:
    """The estimator called ``name``; an unknown name lists the valid ones."""
    try:
        return ESTIMATORS[name]
    except KeyError:
        raise OptionsError(
            f"unknown estimator {name!r}",
            hint=f"choose one of: {', '.join(ESTIMATORS)}",
        ) from None


@register_estimator("grpo", "group z-score (r - mean_g) / (std_g + eps), DeepSeekMath GRPO")
def grpo(stats: GroupStats, params: EstimatorParams) -> pl.Expr:
    """GRPO outcome advantage (Shao et al. 2024, DeepSeekMath, sec. 4.1.2).

    ``A_i = (r_i - mean_g) / (std_g + eps)`` with ``std_g`` using ``params.ddof`` and eps
    added to the std, not the variance.

    Edge cases: a zero-variance group (all rewards equal) gives exactly 0, also where
    floating-point rounding would leave ``r - mean`` at 1e-17. Groups of one valid reward
    are handled by the caller's singleton policy.
    """
    import polars as pl

    zscore = (stats.reward - stats.mean) / (stats.std + params.eps)
    return pl.when(stats.is_constant).then(pl.lit(0.0)).otherwise(zscore)
