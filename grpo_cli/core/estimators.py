"""The registry of advantage estimators.

Every estimator is a pure function ``fn(ctx)`` stating its formula once over a
:class:`FormulaContext`, whose few primitives each engine implements (Polars windows, torch
segments, explain's floats). Shared policies live in :mod:`grpo_cli.core.policies`. Batch
statistics are read by name through :meth:`FormulaContext.batch_stat` (``BATCH_STATS``).

Notation: ``r`` the reward, ``g`` the response's group (one prompt), ``b`` its batch (the
whole input, or one value of ``batch_col``), ``n_g`` the number of valid rewards in g.
``norm(x, var)`` divides by the eps-stabilised spread: ``x / (sqrt(var) + eps)`` (eps_mode
``std``), ``x / sqrt(var + eps)`` (``var``), ``x / sqrt(max(var, eps))`` (``var_floor``),
``x / (sqrt(var) + eps)`` only where ``var > 0``, else ``x`` (``positive_std``: NeMo-RL), or
``x`` itself (``center``: centre only).

Polars is imported inside the functions (``--help`` reads the registry without it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, Protocol, Self

from grpo_cli.core.grouping import STAT_COLUMNS, zero_spread

if TYPE_CHECKING:
    import polars as pl


BATCH_STATS: Final = ("mean", "var", "count", "max", "min", "nonzero")
SCOPES: Final = ("group", "batch")
UNITS: Final = ("response", "step")


class BatchStatSource(Protocol):
    """Batch statistics for an engine that sees a log in pieces
    (:mod:`grpo_cli.engines.batch_partials`)."""

    def stat(self, ctx: EstimatorContext, x: pl.Expr, name: str) -> pl.Expr:
        """The batch statistic ``name`` (one of ``BATCH_STATS``) of ``x``, per row."""
        ...


# A per-row column: a Polars expression, or a float64 torch tensor with NaN for null.
Value = Any


class FormulaContext(ABC):
    """What an estimator's formula reads: the statistics, written once over the primitives
    each engine implements (:class:`EstimatorContext`,
    :class:`grpo_cli.engines.torch.TorchContext`).

    A formula combines values with ``+ - * / **``, comparisons, ``& | ~``, ``.sqrt()``,
    ``.clip(lo, hi)`` and the primitives below; null propagates through arithmetic and is
    left out of every statistic.

    Attributes: ``reward`` (Float64, null marks a row left
    out of every statistic), ``ddof``, ``eps`` and ``eps_mode`` (see the module docstring),
    ``singleton_unit`` (a one-reward group has mean 0 and variance 1: verl), ``length``
    (response lengths, or None), ``token_weighted`` (weight batch statistics by
    ``length``), ``baseline`` (a per-row baseline reward, or None), ``shaped_clip`` (bounds
    applied to a value before batch whitening, or None).
    """

    reward: Value
    ddof: int
    eps: float
    eps_mode: str
    singleton_unit: bool
    length: Value | None
    token_weighted: bool
    baseline: Value | None
    shaped_clip: tuple[float, float] | None

    # ---------------------------------------------------------------- engine primitives
    @abstractmethod
    def where(
        self, cond: Value, then: Value | float | None, otherwise: Value | float | None = None
    ) -> Value:
        """``then`` where ``cond`` holds, else ``otherwise`` (a null ``cond`` does not
        hold); None stands for null."""

    @abstractmethod
    def is_null(self, x: Value) -> Value:
        """Whether ``x`` is null, per row."""

    @abstractmethod
    def fill_null(self, x: Value, value: float) -> Value:
        """``x`` with nulls replaced by ``value``."""

    @abstractmethod
    def maximum(self, x: Value, floor: float) -> Value:
        """``max(x, floor)`` per row (``floor`` where ``x`` is null)."""

    @abstractmethod
    def to_float(self, x: Value) -> Value:
        """``x`` as Float64 (a count, a length, a baseline)."""

    @abstractmethod
    def reward_stat(self, name: str) -> Value:
        """The group's ``count`` (valid rewards), ``mean`` or ``var`` (with ``ddof``; null
        when count <= ddof; exactly 0 when every valid reward is equal) of ``reward``."""

    @abstractmethod
    def group_agg(self, x: Value, op: str) -> Value:
        """``sum`` (0 when every value is null), ``count`` (non-null), ``max`` or ``min``
        (null when every value is null) of ``x`` over the row's group."""

    @abstractmethod
    def batch_agg(self, x: Value, op: str) -> Value:
        """``sum``, ``count``, ``max``, ``min`` or ``nonzero`` (values other than 0) of
        ``x`` over the row's batch (nulls left out, as in :meth:`group_agg`)."""

    # ---------------------------------------------------------------- shared rules
    def with_spread(self, ddof: int, eps: float, eps_mode: str) -> Self:
        """The same context with another ``ddof``, ``eps`` and ``eps_mode`` (the whiten
        stage's)."""
        return replace(self, ddof=ddof, eps=eps, eps_mode=eps_mode)  # type: ignore[type-var]

    def named(self, symbol: str, value: Value) -> Value:
        """``value``, named ``symbol`` for ``explain``; unchanged elsewhere."""
        return value

    def zero_if_constant(self, value: Value) -> Value:
        """Exactly 0 in a zero-variance group (:meth:`is_constant`), where rounding could
        leave ``r - mean`` at 1e-17; else ``value``."""
        return self.where(self.is_constant(), 0.0, value)

    # ---------------------------------------------------------------- group statistics
    def count(self) -> Value:
        """``n_g``: valid rewards in the group."""
        return self.reward_stat("count")

    def is_singleton(self) -> Value:
        """The group has exactly one valid reward."""
        return self.count() == 1

    def unless_singleton(self, value: Value, singleton: Callable[[], Value]) -> Value:
        """``value``, but ``singleton()`` in a group with one valid reward (made only where
        an engine cannot rule such groups out)."""
        return self.where(self.is_singleton(), singleton(), value)

    def _unit_for_singletons(self, value: Value, unit: float) -> Value:
        if not self.singleton_unit:
            return value
        return self.where(self.is_singleton(), unit, value)

    def group_mean(self) -> Value:
        """Mean of the group's valid rewards (0 for a singleton under ``singleton_unit``)."""
        return self._unit_for_singletons(self.reward_stat("mean"), 0.0)

    def group_var(self) -> Value:
        """Variance with ``ddof`` (null when n_g <= ddof; 1 for a singleton under
        ``singleton_unit``)."""
        return self._unit_for_singletons(self.reward_stat("var"), 1.0)

    def is_constant(self) -> Value:
        """At least two valid rewards, all equal: the group carries no relative signal
        (:func:`grpo_cli.core.grouping.zero_spread`)."""
        return zero_spread(self.count(), self.reward_stat("var"))

    def norm(self, centered: Value, var: Value) -> Value:
        """``centered`` divided by the eps-stabilised spread of ``var`` (per eps_mode)."""
        if self.eps_mode == "center":
            return centered
        if self.eps_mode == "std":
            return centered / (var.sqrt() + self.eps)
        if self.eps_mode == "positive_std":  # a null var (too few values) divides nothing
            return self.where(
                self.is_null(var) | (var <= 0.0), centered, centered / (var.sqrt() + self.eps)
            )
        if self.eps_mode == "var":
            return centered / (var + self.eps).sqrt()
        return centered / self.maximum(var, self.eps).sqrt()

    # ---------------------------------------------------------------- batch statistics
    def batch_weight(self, x: Value) -> Value:
        """Per row, the weight of ``x`` in batch means and variances: its length when
        token_weighted, else 1; null where ``x`` is null."""
        if self.token_weighted and self.length is not None:
            return self.where(~self.is_null(x), self.to_float(self.length))
        return self.where(~self.is_null(x), 1.0)

    def batch_stat(self, x: Value, name: str) -> Value:
        """A statistic of ``x`` over the row's batch, by name (``BATCH_STATS``), with
        ``w = batch_weight(x)`` and ``W = sum w``:

        - ``mean``: ``sum w x / W``; ``var``: ``sum w (x - mean)^2 / (W - ddof)`` (with
          token weights, ``W`` is the batch's token count);
        - ``count``: non-null values; ``max``, ``min``; ``nonzero``: values other than 0.
        """
        w = self.batch_weight(x)
        if name == "mean":
            return self.batch_agg(x * w, "sum") / self.batch_agg(w, "sum")
        if name == "var":
            return self.batch_agg(w * self.batch_centred(x) ** 2, "sum") / (
                self.batch_agg(w, "sum") - self.ddof
            )
        return self.batch_agg(x, name)

    def batch_centred(self, x: Value) -> Value:
        """``x - mean_b(x)``, as the batch variance and :meth:`batch_zscore` read it."""
        return x - self.batch_stat(x, "mean")

    def batch_zscore(self, x: Value) -> Value:
        """``norm(x - mean_b(x), var_b(x))`` (``x`` clipped to ``shaped_clip`` first, when
        set); exactly 0 in a batch whose values are all equal or number at most ddof."""
        if self.shaped_clip is not None:
            x = x.clip(*self.shaped_clip)
        flat = (self.batch_stat(x, "count") <= self.ddof) | (
            self.batch_stat(x, "max") == self.batch_stat(x, "min")
        )
        whitened = self.norm(self.batch_centred(x), self.batch_stat(x, "var"))
        return self.where(flat, 0.0, whitened)


@dataclass(frozen=True)
class EstimatorContext(FormulaContext):
    """The formula context of the Polars engines: every statistic a window over the group
    or batch key.

    Attributes (beyond :class:`FormulaContext`'s):
        group_keys, batch_keys: the key columns (``batch_keys``: a constant column when
            the input is one batch).
        precomputed: the group count, mean and variance of ``reward`` are already
            columns (:func:`grpo_cli.core.grouping.group_stat_columns`).
        batch_source: where batch statistics come from; None: windows over ``batch_keys``.
    """

    reward: pl.Expr
    group_keys: tuple[str, ...]
    batch_keys: tuple[str, ...]
    ddof: int
    eps: float
    eps_mode: str
    singleton_unit: bool = False
    length: pl.Expr | None = None
    token_weighted: bool = False
    baseline: pl.Expr | None = None
    shaped_clip: tuple[float, float] | None = None
    precomputed: bool = False
    batch_source: BatchStatSource | None = None

    def where(
        self, cond: Value, then: Value | float | None, otherwise: Value | float | None = None
    ) -> pl.Expr:
        import polars as pl

        def lit(value: Value | float | None) -> pl.Expr:
            return value if isinstance(value, pl.Expr) else pl.lit(value, dtype=pl.Float64)

        return pl.when(cond).then(lit(then)).otherwise(lit(otherwise))

    def is_null(self, x: Value) -> pl.Expr:
        return x.is_null()  # type: ignore[no-any-return]

    def fill_null(self, x: Value, value: float) -> pl.Expr:
        return x.fill_null(value)  # type: ignore[no-any-return]

    def maximum(self, x: Value, floor: float) -> pl.Expr:
        import polars as pl

        return pl.max_horizontal(x, pl.lit(floor))

    def to_float(self, x: Value) -> pl.Expr:
        import polars as pl

        return x.cast(pl.Float64)  # type: ignore[no-any-return]

    def reward_stat(self, name: str) -> pl.Expr:
        """A precomputed column, or a window (Polars' variance is exactly 0 on equal
        values)."""
        import polars as pl

        if self.precomputed:
            return pl.col(STAT_COLUMNS[name])
        r = self.reward
        stat = {"count": r.count(), "mean": r.mean(), "var": r.var(ddof=self.ddof)}[name]
        return stat.over(list(self.group_keys))

    def group_agg(self, x: Value, op: str) -> pl.Expr:
        aggregate = {"sum": x.sum(), "count": x.count(), "max": x.max(), "min": x.min()}[op]
        return aggregate.over(list(self.group_keys))  # type: ignore[no-any-return]

    def batch_agg(self, x: Value, op: str) -> pl.Expr:
        aggregate = {
            "sum": x.sum(),
            "count": x.count(),
            "max": x.max(),
            "min": x.min(),
            "nonzero": (x != 0).sum(),
        }[op]
        return aggregate.over(list(self.batch_keys))  # type: ignore[no-any-return]

    def batch_stat(self, x: Value, name: str) -> Value:
        """From ``batch_source`` when set, else windows."""
        if self.batch_source is not None:
            return self.batch_source.stat(self, x, name)
        return super().batch_stat(x, name)


EstimatorFn = Callable[[FormulaContext], Value]


@dataclass(frozen=True)
class Estimator:
    """A registered estimator and every fact the rest of grpo-adv needs about it.

    Attributes:
        name, summary, source: the ``--estimator`` value, its ``--help`` line (the
            formula), the paper or trainer file it reproduces.
        fn: the formula.
        uses_groups: whether it needs a group key (and so the singleton policy applies).
        needs: extra columns it reads: ``length``, ``baseline``, ``step_rewards``.
        whitens: whether it ends with a batch whitening (see ``clip_stage``).
        scope: ``group`` when it reads statistics within one group only (a log can be split
            along groups), ``batch`` when it reads whole-batch statistics.
        unit: ``response`` (one advantage per row) or ``step`` (process supervision).
    """

    name: str
    summary: str
    source: str
    fn: EstimatorFn
    uses_groups: bool = True
    needs: frozenset[str] = frozenset()
    whitens: bool = False
    scope: str = "group"
    unit: str = "response"


ESTIMATORS: Final[dict[str, Estimator]] = {}


def register_estimator(
    name: str, summary: str, source: str, **facts: Any
) -> Callable[[EstimatorFn], EstimatorFn]:
    """Register ``fn`` under ``name`` with its ``facts`` (:class:`Estimator`'s fields)."""

    def decorate(fn: EstimatorFn) -> EstimatorFn:
        est = Estimator(name, summary, source, fn, **facts)
        if est.scope not in SCOPES or est.unit not in UNITS:
            raise ValueError(f"estimator {name!r}: scope {est.scope!r} / unit {est.unit!r}")
        if name in ESTIMATORS:
            raise ValueError(f"estimator {name!r} registered twice")
        ESTIMATORS[name] = est
        return fn

    return decorate


def get_estimator(name: str) -> Estimator:
    """The estimator called ``name`` (case and separators ignored); an unknown name
    suggests the closest and lists the valid ones."""
    from grpo_cli.core.names import match_name

    return ESTIMATORS[match_name(name, ESTIMATORS, "estimator")]


@register_estimator(
    "grpo",
    "group z-score (r - mean_g) / (std_g + eps)",
    "DeepSeekMath (Shao et al. 2024) sec. 4.1.2; TRL grpo_trainer.py; verl core_algos.py "
    "compute_grpo_outcome_advantage; OpenRLHF group_norm",
)
def grpo(ctx: FormulaContext) -> Value:
    """``A = norm(r - mean_g, var_g)``; exactly 0 in a zero-variance group; under
    ``singleton=verl`` a one-response group gets ``r / (1 + eps)``."""
    return ctx.zero_if_constant(ctx.norm(ctx.reward - ctx.group_mean(), ctx.group_var()))


@register_estimator(
    "dr_grpo",
    "r - mean_g (no std)",
    "Dr. GRPO (Liu et al. 2025, 'Understanding R1-Zero-Like Training'); verl grpo with "
    "norm_adv_by_std_in_grpo=False; OpenRLHF dr_grpo; TRL scale_rewards='none'",
)
def dr_grpo(ctx: FormulaContext) -> Value:
    """``A = r - mean_g``: the group baseline without the std division."""
    return ctx.zero_if_constant(ctx.reward - ctx.group_mean())


@register_estimator(
    "batch_std",
    "(r - mean_g) / (std_b + eps): group mean, batch std",
    "TRL grpo_trainer.py scale_rewards='batch' (PPO-Lite)",
    scope="batch",
)
def batch_std(ctx: FormulaContext) -> Value:
    """``A = norm(r - mean_g, var_b(r))``: var_b over all valid rewards of the batch."""
    return ctx.zero_if_constant(
        ctx.norm(ctx.reward - ctx.group_mean(), ctx.batch_stat(ctx.reward, "var"))
    )


@register_estimator(
    "rloo",
    "r - mean of the other responses = n/(n-1) (r - mean_g)",
    "RLOO (Ahmadian et al. 2024); verl compute_rloo_outcome_advantage; OpenRLHF rloo; "
    "TRL rloo_trainer.py",
)
def rloo(ctx: FormulaContext) -> Value:
    """Leave-one-out baseline: ``A_i = r_i - (sum_g - r_i) / (n_g - 1)``, computed as
    ``(r_i - mean_g) * n_g / (n_g - 1)`` (the same number; verl's and SkyRL's form; one
    full-size product fewer) (sums to 0 in a group); a one-response group gets the
    singleton policy's value (verl: the raw reward)."""
    n = ctx.to_float(ctx.count())
    loo = (ctx.reward - ctx.group_mean()) * (n / (n - 1.0))
    return ctx.unless_singleton(ctx.zero_if_constant(loo), lambda: ctx.reward - ctx.group_mean())


@register_estimator(
    "reinforce_pp_baseline",
    "r - mean_g, then whitened over the batch",
    "REINFORCE++-baseline (Hu et al. 2025); verl "
    "compute_reinforce_plus_plus_baseline_outcome_advantage; OpenRLHF reinforce_baseline",
    whitens=True,
    scope="batch",
)
def reinforce_pp_baseline(ctx: FormulaContext) -> Value:
    """``x = r - mean_g``; ``A = norm(x - mean_b(x), var_b(x))`` (length-weighted with
    token_weighted). A zero-variance group has x = 0 exactly before whitening."""
    return ctx.batch_zscore(ctx.named("x", ctx.zero_if_constant(ctx.reward - ctx.group_mean())))


@register_estimator(
    "reinforce_pp",
    "batch z-score of the raw reward",
    "REINFORCE++ (Hu et al. 2025); verl compute_reinforce_plus_plus_outcome_advantage "
    "with gamma = 1",
    uses_groups=False,
    whitens=True,
    scope="batch",
)
def reinforce_pp(ctx: FormulaContext) -> Value:
    """``A = norm(r - mean_b, var_b)``: no group baseline (gamma 1: every token's return
    is r)."""
    return ctx.batch_zscore(ctx.reward)


@register_estimator(
    "opo",
    "r - length-weighted mean_g",
    "OPO (Hao et al. 2025, on-policy RL with optimal baseline); verl compute_opo_outcome_advantage",
    needs=frozenset({"length"}),
)
def opo(ctx: FormulaContext) -> Value:
    """``A = r - sum_g(L r) / sum_g(L)``, L the response length; under ``singleton=verl``
    a one-response group has baseline 0."""
    assert ctx.length is not None
    weight = ctx.where(~ctx.is_null(ctx.reward), ctx.to_float(ctx.length))
    baseline = ctx.group_agg(weight * ctx.reward, "sum") / ctx.group_agg(weight, "sum")
    baseline = ctx.named("baseline", ctx._unit_for_singletons(baseline, 0.0))
    return ctx.zero_if_constant(ctx.reward - baseline)


@register_estimator(
    "gpg",
    "alpha (r - mean_g), alpha = batch size / non-zero rewards in batch",
    "GPG (Chu et al. 2025); verl compute_gpg_outcome_advantage",
    scope="batch",
)
def gpg(ctx: FormulaContext) -> Value:
    """``A = alpha (r - mean_g)`` with ``alpha = B / max(#{r != 0 in b}, 1)``, B the number of
    valid rewards in the batch."""
    r = ctx.reward
    valid = ctx.to_float(ctx.batch_stat(r, "count"))
    alpha = ctx.named("alpha", valid / ctx.maximum(ctx.to_float(ctx.batch_stat(r, "nonzero")), 1.0))
    return alpha * ctx.zero_if_constant(r - ctx.group_mean())


@register_estimator(
    "grpo_passk",
    "only a group's unique best gets norm(max - second max, var_g); others 0",
    "Pass@k training (Chen et al. 2025, arXiv 2508.10751); verl "
    "compute_grpo_passk_outcome_advantage",
)
def grpo_passk(ctx: FormulaContext) -> Value:
    """The response with the group's maximum reward gets ``norm(r_max - r_2nd, var_g)``;
    every other response 0. A tie for the maximum gives 0 to all (r_max = r_2nd)."""
    r = ctx.reward
    best = ctx.named("best", ctx.group_agg(r, "max"))
    n_best = ctx.named("n_best", ctx.group_agg(ctx.where(r == best, 1.0, 0.0), "sum"))
    second = ctx.named("second", ctx.group_agg(ctx.where(r < best, r), "max"))
    gap = ctx.norm(best - second, ctx.group_var())
    return ctx.where((r == best) & (n_best == 1), gap, 0.0)


@register_estimator(
    "remax",
    "r - b, b the reward of a greedy response (--baseline-col)",
    "ReMax (Li et al. 2023); verl compute_remax_outcome_advantage",
    uses_groups=False,
    needs=frozenset({"baseline"}),
)
def remax(ctx: FormulaContext) -> Value:
    """``A = r - b`` with b from ``baseline_col`` (null b gives a null advantage)."""
    assert ctx.baseline is not None
    return ctx.reward - ctx.to_float(ctx.baseline)


@register_estimator(
    "loo_grpo",
    "leave-one-out z-score norm(r - mean_-i, var_-i): mean and std of the other responses",
    "NeMo-RL nemo_rl/algorithms/utils.py calculate_baseline_and_std_per_prompt "
    "(use_leave_one_out_baseline=True, the default)",
)
def loo_grpo(ctx: FormulaContext) -> Value:
    """``A_i = norm(r_i - b_i, s_i^2)``: ``b_i`` the mean of the group's other valid
    rewards, ``s_i^2`` their variance with ``ddof`` (null when n_g - 1 <= ddof: with ddof 1
    a pair is never divided under ``positive_std``; exactly 0 when the others are all
    equal). ``s_i^2`` comes from the group's centred sum of squares ``SS = var_g (n_g -
    ddof)``, never ``E[x^2] - E[x]^2``: ``sum_{j != i} (r_j - b_i)^2 = SS - d_i^2 n_g /
    (n_g - 1)``, ``d_i = r_i - mean_g``. A zero-variance group gives exactly 0; a
    one-response group :func:`grpo`'s value (then the singleton policy)."""
    r, ddof = ctx.reward, ctx.ddof
    n = ctx.to_float(ctx.count())
    loo = r - (ctx.group_agg(r, "sum") - r) / (n - 1.0)
    d = r - ctx.reward_stat("mean")
    others = ctx.maximum(ctx.reward_stat("var") * (n - ddof) - d * d * n / (n - 1.0), 0.0)
    # the others all equal: r is the group's one maximum or minimum, or the group constant
    top, bottom = ctx.group_agg(r, "max"), ctx.group_agg(r, "min")
    at_top = ctx.group_agg(ctx.where(r == top, 1.0, 0.0), "sum")
    at_bottom = ctx.group_agg(ctx.where(r == bottom, 1.0, 0.0), "sum")
    equal = ((r == top) & (at_bottom >= n - 1.0)) | ((r == bottom) & (at_top >= n - 1.0))
    var = ctx.where(n - 1.0 > ddof, ctx.where(equal, 0.0, others / (n - 1.0 - ddof)))
    value = ctx.norm(loo, ctx.named("var_-i", var))
    return ctx.unless_singleton(
        ctx.zero_if_constant(value), lambda: ctx.norm(r - ctx.group_mean(), ctx.group_var())
    )


@register_estimator(
    "maxrl",
    "(r - mean_g) / (mean_g + eps)",
    "MaxRL; SkyRL skyrl/backends/skyrl_train/utils/ppo_utils.py compute_maxrl_advantage",
)
def maxrl(ctx: FormulaContext) -> Value:
    """``A = (r - mean_g) / (mean_g + eps)``: the group mean as the scale (binary rewards:
    the pass rate); exactly 0 in a zero-variance group; a one-response group per the
    singleton policy (SkyRL keeps r: ``singleton=raw``)."""
    mean = ctx.group_mean()
    return ctx.zero_if_constant((ctx.reward - mean) / (mean + ctx.eps))


@register_estimator(
    "maxrl_positive",
    "(r - mean_g) / mean_g where mean_g > 0, else 0 (no eps)",
    "prime-rl orchestrator/algo/max_rl.py",
)
def maxrl_positive(ctx: FormulaContext) -> Value:
    """``A = (r - mean_g) / mean_g`` where ``mean_g > 0``, else 0; exactly 0 in a
    zero-variance group."""
    mean = ctx.group_mean()
    return ctx.zero_if_constant(ctx.where(mean > 0.0, (ctx.reward - mean) / mean, 0.0))


@register_estimator(
    "batch_baseline",
    "r - mean_b: the batch mean as baseline",
    "OpenRLHF 0.11.2 experience_maker.py compute_advantages_and_returns (flash_reinforce)",
    uses_groups=False,
    scope="batch",
)
def batch_baseline(ctx: FormulaContext) -> Value:
    """``A = r - mean_b`` (length-weighted mean with token_weighted); exactly 0 when every
    valid reward of the batch is equal."""
    r = ctx.reward
    flat = ctx.batch_stat(r, "max") == ctx.batch_stat(r, "min")
    return ctx.where(flat, 0.0, r - ctx.batch_stat(r, "mean"))


def gdpo(
    batch: FormulaContext, rewards: Sequence[tuple[FormulaContext, float]], fn: EstimatorFn
) -> Value:
    """GDPO (TRL ``multi_objective_aggregation='normalize_then_sum'``; NeMo-RL, verl): each
    reward k (the ``reward`` of ``rewards[k][0]``, weight ``rewards[k][1]``) is normalised
    in its group by the estimator's formula ``fn`` (TRL: :func:`grpo`, ``z_k = norm(r_k -
    mean_g, var_g)``, null where fewer than two valid values with ddof 1), ``s = sum_k w_k
    z_k`` with nulls as 0 (null when every reward is null), then ``A = norm(s - mean_b(s),
    var_b(s))`` over ``batch``'s batches with ``batch``'s ddof, eps and eps_mode (``z`` and
    ``s`` named for explain)."""
    summed = None
    all_null = None
    for ctx, weight in rewards:
        z = ctx.fill_null(ctx.named("z", fn(ctx)) * weight, 0.0)
        null = ctx.is_null(ctx.reward)
        summed = z if summed is None else summed + z
        all_null = null if all_null is None else all_null & null
    return batch.batch_zscore(batch.named("s", batch.where(all_null, None, summed)))


# Process supervision (DeepSeekMath sec. 4.1.3) runs GRPO's formula on the exploded step
# rewards (one row per step, see :mod:`grpo_cli.core.process_supervision`):
# ``z = norm(s - mean_g(s), var_g(s))`` over all step rewards of all responses of the
# group; a step's advantage is the sum of z over that step and the later steps of the
# same response (the reward-to-go).
register_estimator(
    "process",
    "per step: suffix sum of step rewards z-scored over the whole group",
    "DeepSeekMath (Shao et al. 2024) sec. 4.1.3, process supervision",
    needs=frozenset({"step_rewards"}),
    unit="step",
)(grpo)
