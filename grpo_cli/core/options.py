"""Options of an advantage computation: one frozen, validated dataclass, every policy an
explicit field. Nothing heavy is imported: the CLI builds its help from it."""

from __future__ import annotations

import copy
import math
from dataclasses import InitVar, dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Final

from grpo_cli.core.columns import not_a_reward
from grpo_cli.core.errors import OptionRef, OptionsError, Text, Verbatim, option

if TYPE_CHECKING:
    from grpo_cli.core.estimators import Estimator

SINGLETON_POLICIES: Final[dict[str, str]] = {
    "zero": "advantage 0: one response carries no relative information (default)",
    "raw": "advantage = the raw reward",
    "null": "advantage null, like a null reward",
    "drop": "the row is left out of the output and of every statistic",
    "verl": "the estimator runs with group mean 0 and std 1, as verl does (grpo: r / (1 + eps))",
    "formula": "no special case: the estimator's formula as it stands (null where undefined)",
}
CLIP_STAGES: Final[dict[str, str]] = {
    "advantage": "clip the final advantage (default)",
    "shaped": "clip the value before batch whitening, as OpenRLHF clamps its shaped reward "
    "(the same as advantage without a whitening: a whitening estimator, GDPO or whiten)",
}
NULL_POLICIES: Final[dict[str, str]] = {
    "exclude": "left out of every statistic; advantage null (default)",
    "zero": "left out of every statistic; advantage 0 (TRL >= 1.6: unscorable completions)",
    "fill_zero": "the reward counts as 0 (TRL < 1.6)",
    "error": "refuse the input",
}
EPS_MODES: Final[dict[str, str]] = {
    "std": "divide by (std + eps) (default; TRL, verl grpo, OpenRLHF group_norm)",
    "var": "divide by sqrt(var + eps) (verl batch whitening)",
    "var_floor": "divide by sqrt(max(var, eps)) (OpenRLHF batch whitening)",
    "positive_std": "divide by (std + eps) only where var > 0, else keep the value (NeMo-RL)",
    "center": "centre only, no division (OpenRLHF --no_std_norm; whitening only)",
}
AGGREGATIONS: Final[dict[str, str]] = {
    "sum_then_normalize": "weighted sum of the rewards (nulls count 0), then the estimator "
    "(TRL's default)",
    "normalize_then_sum": "each reward normalised in its group by the estimator, weighted "
    "sum, then a batch z-score (TRL's GDPO)",
}
STATS_COLUMNS: Final = ("group_size", "group_mean", "group_std")
DEFAULT_GROUP_COLS: Final[tuple[str, ...]] = ("prompt_id",)  # the group key unless named


def _as_tuple(value: object) -> tuple[Any, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple):
        return tuple(value)
    raise OptionsError(f"expected a name or a list of names, got {value!r}")


@dataclass(frozen=True)
class AdvantageOptions:
    """How advantages are computed.

    Attributes:
        group_cols: columns whose values together identify a group (one prompt).
        reward_cols: reward column(s); several are combined per ``aggregation``.
        reward_weights: one weight per reward column (default 1 each).
        aggregation: how several rewards combine (see AGGREGATIONS).
        estimator: a name in :data:`grpo_cli.core.estimators.ESTIMATORS`.
        ddof: delta degrees of freedom of every std and variance: 1 = sample (torch's
            default, TRL, verl), 0 = population.
        eps: the stabiliser, placed per ``eps_mode``.
        eps_mode: where eps goes (see EPS_MODES).
        singleton: a group with exactly one valid reward (see SINGLETON_POLICIES).
        nulls: null or NaN rewards (see NULL_POLICIES).
        clip: ``(lo, hi)`` bounds applied to the advantage after the estimator.
        clip_stage: where ``clip`` applies (see CLIP_STAGES).
        reward_clip: ``(lo, hi)``: every valid reward clamped to [lo, hi] before any
            statistic (AReaL); the combined reward (each reward column under
            ``normalize_then_sum``).
        whiten: after the estimator's formula, whiten its value over the batch
            (token-weighted with ``token_weighted``): ``norm(x - mean_b(x), var_b(x))``
            with ``whiten_ddof``, ``whiten_eps`` and ``whiten_eps_mode``; exactly 0 in a
            flat batch. Under ``normalize_then_sum`` these replace the main ones in its
            batch stage.
        whiten_ddof, whiten_eps, whiten_eps_mode: that whitening's ddof, eps and eps_mode
            (see EPS_MODES).
        batch_col: batch statistics are per value of this column (e.g. ``step``); None
            makes the whole input one batch.
        group_size: positional groups: consecutive runs of this many rows (within each
            batch) form a group; replaces group_cols.
        length_col: response lengths in tokens (OPO weights, token-weighted statistics).
        token_weighted: weight batch statistics by ``length_col``.
        baseline_col: a per-row baseline reward (ReMax).
        step_rewards_col: a list column of per-step rewards (process supervision).
        with_stats: also output ``group_size``, ``group_mean`` and ``group_std``.
        advantage_col: name of the output column.
        deterministic: bit-for-bit repeatable results (Polars' in-memory engine, about 2x
            slower on large logs); by default the streaming engine's parallel sums may
            differ in the last bit (about 1e-16 relative) from one run to the next.

        check_roles: (init only) False leaves the checks of the roles the log may fill
            in (group and reward columns, weights per reward) to :meth:`with_roles`.

    Where the computation runs is :class:`grpo_cli.core.engine_options.EngineOptions`.
    """

    group_cols: tuple[str, ...] = DEFAULT_GROUP_COLS
    reward_cols: tuple[str, ...] = ("reward",)
    reward_weights: tuple[float, ...] | None = None
    aggregation: str = "sum_then_normalize"
    estimator: str = "grpo"
    ddof: int = 1
    eps: float = 1e-8
    eps_mode: str = "std"
    singleton: str = "zero"
    nulls: str = "exclude"
    clip: tuple[float, float] | None = None
    clip_stage: str = "advantage"
    reward_clip: tuple[float, float] | None = None
    whiten: bool = False
    whiten_ddof: int = 1
    whiten_eps: float = 1e-8
    whiten_eps_mode: str = "var"
    batch_col: str | None = None
    group_size: int | None = None
    length_col: str | None = None
    token_weighted: bool = False
    baseline_col: str | None = None
    step_rewards_col: str | None = None
    with_stats: bool = False
    advantage_col: str = "advantage"
    deterministic: bool = False
    check_roles: InitVar[bool] = True

    def __post_init__(self, check_roles: bool) -> None:
        self._normalize()
        self._check_numbers()
        self._check_choices()
        if check_roles:
            self._check_roles()

    def _normalize(self) -> None:
        object.__setattr__(self, "group_cols", _as_tuple(self.group_cols))
        object.__setattr__(self, "reward_cols", _as_tuple(self.reward_cols))
        if self.reward_weights is not None:
            weights = tuple(float(w) for w in _as_tuple(self.reward_weights))
            object.__setattr__(self, "reward_weights", weights)
        for bounds in ("clip", "reward_clip"):
            if getattr(self, bounds) is not None:
                object.__setattr__(self, bounds, tuple(float(c) for c in getattr(self, bounds)))

    def with_roles(self, *, check: bool = True, **roles: Any) -> AdvantageOptions:
        """A copy with the roles the log filled in (reward, group, batch and length
        columns, group size). Only the role checks run (the columns, the reward weights per
        column), and only with ``check``: the other values were checked when these options
        were made (``check_roles=False`` leaves the role checks to this call)."""
        new = copy.copy(self)
        for name, value in roles.items():
            object.__setattr__(new, name, value)
        new._normalize()
        if check:
            new._check_roles()
        return new

    def check_estimator_needs(self, estimator: Estimator, *, roles: bool | None = None) -> None:
        """What the chosen ``estimator`` (looked up once: see
        :func:`grpo_cli.core.resolve.make_request`) needs of the other options: its columns
        (``length_col`` for opo...), a length column for ``token_weighted``, a group estimator
        for ``aggregation="normalize_then_sum"``, no ``whiten`` for an estimator that
        whitens (or process supervision), ``eps_mode="center"`` only for one that whitens,
        one reward column for process supervision.
        ``roles=False``: only what needs no log; ``True``: only what the log's roles decide
        (the length and reward columns); None: both."""
        if roles is not False:
            self._check_estimator_roles(estimator)
        if roles is True:
            return
        for need, column, named in (
            ("baseline", self.baseline_col, option("baseline_col")),
            ("step_rewards", self.step_rewards_col, option("step_rewards_col")),
        ):
            if need in estimator.needs and column is None:
                raise _needs(estimator, named)
        if self.aggregation == "normalize_then_sum" and (
            estimator.scope != "group" or estimator.unit != "response"
        ):
            raise OptionsError(
                option("aggregation", "normalize_then_sum")
                + " normalises each reward within its group, which estimator "
                + f"{estimator.name} does not",
                hint="use a group estimator (grpo, loo_grpo, rloo, ...) or "
                + option("aggregation", "sum_then_normalize"),
            )
        if self.whiten and estimator.whitens:
            raise OptionsError(
                f"estimator {estimator.name} already whitens over the batch: "
                + option("whiten")
                + " would whiten twice",
                hint="leave "
                + option("whiten")
                + " out (its whitening takes "
                + option("ddof")
                + ", "
                + option("eps")
                + " and "
                + option("eps_mode")
                + ")",
            )
        if self.whiten and estimator.unit == "step":
            raise OptionsError(
                "estimator process sums z-scores over steps: " + option("whiten") + " has no "
                "response advantage to whiten",
                hint="leave " + option("whiten") + " out",
            )
        if self.eps_mode == "center" and not estimator.whitens:
            raise OptionsError(
                option("eps_mode", "center")
                + f" centres a batch whitening; estimator {estimator.name} does not whiten",
                hint="use it with reinforce_pp(_baseline), or "
                + option("whiten_eps_mode", "center")
                + " with "
                + option("whiten"),
            )

    def _check_estimator_roles(self, estimator: Estimator) -> None:
        if "length" in estimator.needs and self.length_col is None:
            raise _needs(estimator, option("length_col"))
        if self.token_weighted and self.length_col is None:
            raise OptionsError(
                option("token_weighted") + " needs " + option("length_col"),
                hint="name the length column",
            )
        if estimator.unit == "step" and len(self.reward_cols) > 1:
            raise OptionsError(
                "estimator process takes its rewards from " + option("step_rewards_col")
            )

    def _check_roles(self) -> None:
        """The checks of the roles the log may fill in: the group and reward columns, the
        output columns apart from them, one reward weight per reward column."""
        if not self.group_cols and self.group_size is None:
            raise OptionsError(
                "no group column given",
                hint="pass " + option("group_cols", ("COL",)) + " (e.g. prompt_id)",
            )
        if len(set(self.group_cols)) != len(self.group_cols):
            raise OptionsError(
                f"group column repeated: {', '.join(self.group_cols)}",
                hint="give each " + option("group_cols") + " once",
                value=self.group_cols,
            )
        if not self.reward_cols:
            raise OptionsError(
                "no reward column given", hint="pass " + option("reward_cols", ("COL",))
            )
        if len(set(self.reward_cols)) != len(self.reward_cols):
            raise OptionsError(
                f"reward column repeated: {', '.join(self.reward_cols)}",
                hint="give each " + option("reward_cols") + " once",
                value=self.reward_cols,
            )
        both = set(self.reward_cols) & set(self.group_cols)
        if both:
            raise OptionsError(
                f"{sorted(both)[0]!r} is both a reward and a group column",
                hint="check " + option("reward_cols") + " and " + option("group_cols"),
                column=sorted(both)[0],
            )
        added = self.added_columns()
        taken = set(self.reward_cols) | set(self.group_cols)
        clash = set(added) & taken
        if clash or len(set(added)) != len(added):
            raise OptionsError(
                f"output column name clashes with an input role: {', '.join(sorted(clash))}",
                hint="choose another name with " + option("advantage_col"),
                value=self.advantage_col,
            )
        weights = self.reward_weights
        if weights is not None and len(weights) != len(self.reward_cols):
            columns = self.reward_cols
            named = option("reward_cols", columns[: len(weights)], short=True)
            raise OptionsError(
                f"{len(weights)} reward weight(s) for {len(columns)} reward column(s): "
                + ", ".join(columns),
                hint=not_rewards_hint(columns)
                or (
                    "give one weight per reward column, or name the rewards: " + named
                    if len(weights) < len(columns)
                    else "give one weight per "
                    + option("reward_cols")
                    + ", e.g. "
                    + option("reward_weights", (1, 0.5))
                ),
                value=weights,
            )

    def _check_numbers(self) -> None:
        for named, ddof in ((option("ddof"), self.ddof), (option("whiten_ddof"), self.whiten_ddof)):
            if ddof not in (0, 1):
                raise OptionsError(
                    named + f" must be 0 or 1, got {ddof}",
                    hint="1 = sample std (TRL, verl, the lessons), 0 = population std",
                    value=ddof,
                )
        for named, eps in ((option("eps"), self.eps), (option("whiten_eps"), self.whiten_eps)):
            if not (math.isfinite(eps) and eps >= 0):
                raise OptionsError(
                    named + f" must be a finite number >= 0, got {eps}",
                    hint="e.g. " + replace(named, value=Verbatim("1e-8")),
                    value=eps,
                )
        if self.reward_weights is not None and not all(map(math.isfinite, self.reward_weights)):
            raise OptionsError("reward weights must be finite numbers", value=self.reward_weights)
        for named, bounds, example in (
            (option("clip"), self.clip, (-10, 10)),
            (option("reward_clip"), self.reward_clip, (-20, 20)),
        ):
            if bounds is not None and not (len(bounds) == 2 and bounds[0] < bounds[1]):
                raise OptionsError(
                    named + f" needs LO,HI with LO < HI, got {bounds}",
                    hint="e.g. " + replace(named, value=example),
                    value=bounds,
                )
        if self.group_size is not None and self.group_size < 1:
            raise OptionsError(
                option("group_size") + f" must be at least 1, got {self.group_size}",
                hint="the number of responses sampled per prompt (num_generations)",
                value=self.group_size,
            )

    def _check_choices(self) -> None:
        """Every named choice spelled as the registry does (case and separators ignored:
        ``-e RLOO`` is rloo); an unknown one suggests the closest (``unknown eps_mode value
        'x'``)."""
        from grpo_cli.core.estimators import ESTIMATORS
        from grpo_cli.core.names import match_name

        for field, choices, what in (
            ("singleton", SINGLETON_POLICIES, option("singleton") + " value"),
            ("nulls", NULL_POLICIES, option("nulls") + " value"),
            ("eps_mode", EPS_MODES, option("eps_mode") + " value"),
            ("whiten_eps_mode", EPS_MODES, option("whiten_eps_mode") + " value"),
            ("aggregation", AGGREGATIONS, option("aggregation") + " value"),
            ("clip_stage", CLIP_STAGES, option("clip_stage") + " value"),
            ("estimator", ESTIMATORS, "estimator"),
        ):
            object.__setattr__(self, field, match_name(getattr(self, field), choices, what))

    @property
    def weights(self) -> tuple[float, ...]:
        """The reward weights, 1.0 each unless given."""
        return self.reward_weights or tuple(1.0 for _ in self.reward_cols)

    def added_columns(self) -> tuple[str, ...]:
        """The columns the computation appends, in order."""
        return (self.advantage_col, *(STATS_COLUMNS if self.with_stats else ()))

    def with_overrides(self, **overrides: Any) -> AdvantageOptions:
        """A copy with some fields changed (unknown names raise OptionsError);
        ``reward_col="score"`` is ``reward_cols=("score",)``."""
        if "reward_col" in overrides:
            overrides["reward_cols"] = _as_tuple(overrides.pop("reward_col"))
        known = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise OptionsError(
                f"unknown option(s): {', '.join(unknown)}",
                hint=f"valid options: {', '.join(sorted(known))}",
            )
        return replace(self, **overrides)


def _needs(estimator: Estimator, named: OptionRef) -> OptionsError:
    return OptionsError(
        f"estimator {estimator.name} needs " + named,
        hint="name the column with " + replace(named, value="COL"),
    )


def not_rewards_hint(columns: tuple[str, ...]) -> Text | None:
    """For reward ``columns`` of which some are named as no reward (a TRL log's
    ``num_tokens`` or ``seed``, taken as a reward because it is numeric: see
    :func:`grpo_cli.core.columns.not_a_reward`): "num_tokens is not a reward: name the
    rewards with -r accuracy_reward -r format_reward". None when every column may be a reward,
    or none would be left."""
    others = [c for c in columns if not_a_reward(c)]
    rewards = tuple(c for c in columns if c not in others)
    if not others or not rewards:
        return None
    verb = "is not a reward" if len(others) == 1 else "are not rewards"
    return f"{', '.join(others)} {verb}: name the rewards with " + option(
        "reward_cols", rewards, short=True
    )
