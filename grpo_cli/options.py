"""Options of an advantage computation: one frozen, validated dataclass.

This module imports nothing heavy, so the CLI can build its help from it quickly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any, Final

from grpo_cli.errors import OptionsError

SINGLETON_POLICIES: Final[dict[str, str]] = {
    "zero": "advantage 0: one response carries no relative information (default)",
    "raw": "advantage = the raw reward (about what verl gives: mean 0, std 1)",
    "null": "advantage null: left out, like a null reward",
}
STATS_COLUMNS: Final = ("group_size", "group_mean", "group_std")


@dataclass(frozen=True)
class AdvantageOptions:
    """How advantages are computed.

    Attributes:
        group_cols: columns whose values together identify a group (one prompt).
        reward_col: the numeric reward column (booleans count as 0/1).
        estimator: a name in :data:`grpo_cli.estimators.ESTIMATORS`.
        ddof: delta degrees of freedom of the group std: 1 = sample std (torch's default,
            TRL, verl), 0 = population std.
        eps: added to the std before dividing: ``(r - mean) / (std + eps)``.
        singleton: what a group with exactly one valid reward gets (see SINGLETON_POLICIES).
        with_stats: also output ``group_size``, ``group_mean`` and ``group_std``.
        advantage_col: name of the output column.
    """

    group_cols: tuple[str, ...] = ("prompt_id",)
    reward_col: str = "reward"
    estimator: str = "grpo"
    ddof: int = 1
    eps: float = 1e-8
    singleton: str = "zero"
    with_stats: bool = False
    advantage_col: str = "advantage"

    def __post_init__(self) -> None:
        given: object = self.group_cols  # a single name is accepted too
        group_cols = (given,) if isinstance(given, str) else tuple(self.group_cols)
        object.__setattr__(self, "group_cols", group_cols)
        if not self.group_cols:
            raise OptionsError(
                "no group column given", hint="pass --group-col COL (e.g. prompt_id)"
            )
        if len(set(self.group_cols)) != len(self.group_cols):
            raise OptionsError(
                f"group column repeated: {', '.join(self.group_cols)}",
                hint="give each --group-col once",
            )
        if self.reward_col in self.group_cols:
            raise OptionsError(
                f"{self.reward_col!r} is both the reward and a group column",
                hint="check --reward-col and --group-col",
            )
        if self.ddof not in (0, 1):
            raise OptionsError(
                f"--ddof must be 0 or 1, got {self.ddof}",
                hint="1 = sample std (TRL, verl, the lessons), 0 = population std",
            )
        if not (math.isfinite(self.eps) and self.eps >= 0):
            raise OptionsError(
                f"--eps must be a finite number >= 0, got {self.eps}", hint="e.g. --eps 1e-8"
            )
        if self.singleton not in SINGLETON_POLICIES:
            raise OptionsError(
                f"unknown --singleton policy {self.singleton!r}",
                hint=f"choose one of: {', '.join(SINGLETON_POLICIES)}",
            )
        from grpo_cli.estimators import get_estimator

        get_estimator(self.estimator)
        added = self.added_columns()
        clash = set(added) & ({self.reward_col} | set(self.group_cols))
        if clash or len(set(added)) != len(added):
            raise OptionsError(
                f"output column name clashes with an input role: {', '.join(sorted(clash))}",
                hint="choose another name with --advantage-col",
            )

    def added_columns(self) -> tuple[str, ...]:
        """The columns the computation appends, in order."""
        return (self.advantage_col, *(STATS_COLUMNS if self.with_stats else ()))

    def with_overrides(self, **overrides: Any) -> AdvantageOptions:
        """A copy with some fields changed (unknown names raise OptionsError)."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise OptionsError(
                f"unknown option(s): {', '.join(unknown)}",
                hint=f"valid options: {', '.join(sorted(known))}",
            )
        return replace(self, **overrides)
