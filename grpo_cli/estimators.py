"""The registry of advantage estimators.

Every estimator is a pure function ``fn(ctx) -> polars.Expr`` that states its formula with
the window helpers of :class:`EstimatorContext` (group and batch statistics over valid
rewards). Policies shared by all estimators (null rewards, one-response groups, clipping)
are applied by :mod:`grpo_cli.policies`, so an estimator states only its formula and its own
edge cases.

Batch statistics (of a value ``x`` over the response's batch) are read through one method,
:meth:`EstimatorContext.batch_stat`, by name (``BATCH_STATS``): by default they are windows
over the batch key; an engine that sees a log in pieces supplies them instead
(:mod:`grpo_cli.batch_stats`: partials per piece, merged, then applied).

Notation: ``r`` the reward, ``g`` the response's group (one prompt), ``b`` its batch (the
whole input, or one value of ``batch_col``), ``n_g`` the number of valid rewards in g.
``norm(x, var)`` divides by the eps-stabilised spread: ``x / (sqrt(var) + eps)`` (eps_mode
``std``), ``x / sqrt(var + eps)`` (``var``) or ``x / sqrt(max(var, eps))`` (``var_floor``).

Polars is imported inside the functions: the CLI reads the registry (names and help) without
paying for the Polars import, which keeps ``grpo-adv --help`` fast.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from grpo_cli import formulas
from grpo_cli.columns import STAT_COUNT, STAT_MEAN, STAT_VAR
from grpo_cli.formulas import ExplainFn

if TYPE_CHECKING:
    import polars as pl


STAT_COLUMNS: Final = {"count": STAT_COUNT, "mean": STAT_MEAN, "var": STAT_VAR}
# The batch statistics of a value x (see EstimatorContext.batch_stat).
BATCH_STATS: Final = ("mean", "var", "count", "max", "min", "nonzero")
SCOPES: Final = ("group", "batch")
UNITS: Final = ("response", "step")


def group_stat_columns(reward: pl.Expr, group_keys: tuple[str, ...], ddof: int) -> list[pl.Expr]:
    """The per-row group statistics of ``reward`` as plain window columns: in one
    ``with_columns`` they share one grouping pass (nested in other expressions, Polars may
    split them over several passes)."""
    keys = list(group_keys)
    return [
        reward.count().over(keys).alias(STAT_COLUMNS["count"]),
        reward.mean().over(keys).alias(STAT_COLUMNS["mean"]),
        reward.var(ddof=ddof).over(keys).alias(STAT_COLUMNS["var"]),
    ]


def zero_spread(valid: pl.Expr, var: pl.Expr) -> pl.Expr:
    """The one zero-spread rule, for every engine, table and figure: at least two valid
    rewards (``valid``) and a variance (``var``, any ddof) of exactly 0, i.e. every valid
    reward equal. Polars' (Welford) variance is exactly 0 on equal values (any values, any
    order; a test checks it); rewards differing by less than about 1e-154 (their squared
    differences underflow) count as equal, as they would for TRL's ``isclose(std, 0)``.
    A group under it gets advantage 0 (never a rounding residue); ``zero_std`` in the
    group table and ``zero_std_groups`` count it."""
    return (valid >= 2) & (var == 0.0)


class BatchStatSource(Protocol):
    """Where an engine that sees a log in pieces takes batch statistics from (see
    :mod:`grpo_cli.batch_stats`)."""

    def stat(self, ctx: EstimatorContext, x: pl.Expr, name: str) -> pl.Expr:
        """The batch statistic ``name`` (one of ``BATCH_STATS``) of ``x``, per row."""
        ...


@dataclass(frozen=True)
class EstimatorContext:
    """Everything an estimator may read, as Polars expressions and parameters.

    Attributes:
        reward: the reward as Float64; null marks a row left out of every statistic.
        group_keys: columns of the group key (for ``.over``).
        batch_keys: columns of the batch key (a constant column when the input is one batch).
        ddof: delta degrees of freedom of every variance.
        eps: the stabiliser; eps_mode: where it goes (see module docstring).
        singleton_unit: a group with one valid reward has mean 0 and variance 1 (verl).
        length: response lengths (token weights), or None.
        token_weighted: weight batch statistics by ``length``.
        baseline: a per-row baseline reward, or None.
        shaped_clip: bounds applied to a value before batch whitening, or None.
        precomputed: the group count, mean and variance of ``reward`` are already
            columns (see :func:`group_stat_columns`): one window pass computes them all.
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

    # ---------------------------------------------------------------- group statistics
    def in_group(self, expr: pl.Expr) -> pl.Expr:
        """``expr`` evaluated over the row's group."""
        return expr.over(list(self.group_keys))

    def in_batch(self, expr: pl.Expr) -> pl.Expr:
        """``expr`` evaluated over the row's batch."""
        return expr.over(list(self.batch_keys))

    def _stat(self, name: str, expr: pl.Expr) -> pl.Expr:
        import polars as pl

        return pl.col(STAT_COLUMNS[name]) if self.precomputed else self.in_group(expr)

    def count(self) -> pl.Expr:
        """``n_g``: valid rewards in the group."""
        return self._stat("count", self.reward.count())

    def is_singleton(self) -> pl.Expr:
        """The group has exactly one valid reward."""
        return self.count() == 1

    def _unit_for_singletons(self, expr: pl.Expr, value: float) -> pl.Expr:
        import polars as pl

        if not self.singleton_unit:
            return expr
        return pl.when(self.is_singleton()).then(pl.lit(value)).otherwise(expr)

    def group_mean(self) -> pl.Expr:
        """Mean of the group's valid rewards (0 for a singleton under ``singleton_unit``)."""
        return self._unit_for_singletons(self._stat("mean", self.reward.mean()), 0.0)

    def group_sum(self) -> pl.Expr:
        """Sum of the group's valid rewards."""
        return self.in_group(self.reward.sum())

    def group_var(self) -> pl.Expr:
        """Variance with ``ddof`` (null when n_g <= ddof; 1 for a singleton under
        ``singleton_unit``)."""
        return self._unit_for_singletons(self._stat("var", self.reward.var(ddof=self.ddof)), 1.0)

    def is_constant(self) -> pl.Expr:
        """At least two valid rewards, all equal: the group carries no relative signal
        (:func:`zero_spread`, on the window variance: spares two window aggregates)."""
        return zero_spread(self.count(), self._stat("var", self.reward.var(ddof=self.ddof)))

    def norm(self, centered: pl.Expr, var: pl.Expr) -> pl.Expr:
        """``centered`` divided by the eps-stabilised spread of ``var`` (per eps_mode)."""
        if self.eps_mode == "std":
            return centered / (var.sqrt() + self.eps)
        if self.eps_mode == "var":
            return centered / (var + self.eps).sqrt()
        import polars as pl

        return centered / pl.max_horizontal(var, pl.lit(self.eps)).sqrt()

    # ---------------------------------------------------------------- batch statistics
    def batch_weight(self, x: pl.Expr) -> pl.Expr:
        """Per row, the weight of ``x`` in batch means and variances: its length when
        token_weighted, else 1; null where ``x`` is null."""
        import polars as pl

        if self.token_weighted and self.length is not None:
            return pl.when(x.is_not_null()).then(self.length.cast(pl.Float64))
        return pl.when(x.is_not_null()).then(pl.lit(1.0))

    def batch_stat(self, x: pl.Expr, name: str) -> pl.Expr:
        """A statistic of ``x`` over the row's batch, by name (``BATCH_STATS``), with
        ``w = batch_weight(x)`` and ``W = sum w``:

        - ``mean``: ``sum w x / W``; ``var``: ``sum w (x - mean)^2 / (W - ddof)`` (with
          token weights, ``W`` is the batch's token count);
        - ``count``: non-null values; ``max``, ``min``; ``nonzero``: values other than 0.

        Every batch statistic an estimator reads goes through here (see the module
        docstring); ``batch_source`` supplies them when set."""
        if self.batch_source is not None:
            return self.batch_source.stat(self, x, name)
        w = self.batch_weight(x)
        if name == "mean":
            return self.in_batch((x * w).sum()) / self.in_batch(w.sum())
        if name == "var":
            mean = self.batch_stat(x, "mean")
            return self.in_batch((w * (x - mean) ** 2).sum()) / (self.in_batch(w.sum()) - self.ddof)
        aggregate = {
            "count": x.count(),
            "max": x.max(),
            "min": x.min(),
            "nonzero": (x != 0).sum(),
        }[name]
        return self.in_batch(aggregate)

    def batch_mean(self, x: pl.Expr) -> pl.Expr:
        """Mean of ``x`` over the batch (length-weighted when token_weighted)."""
        return self.batch_stat(x, "mean")

    def batch_var(self, x: pl.Expr) -> pl.Expr:
        """Variance of ``x`` over the batch with ``ddof``; token-weighted, it is
        ``sum(L (x - m)^2) / (sum(L) - ddof)``, ``sum(L)`` being the token count."""
        return self.batch_stat(x, "var")

    def batch_zscore(self, x: pl.Expr) -> pl.Expr:
        """``norm(x - batch_mean(x), batch_var(x))``: batch whitening (of ``x`` clipped to
        ``shaped_clip`` first, when set).

        A batch whose values are all equal, or with too few values for a variance
        (count <= ddof), gives exactly 0: it carries no relative information.
        """
        import polars as pl

        if self.shaped_clip is not None:
            x = x.clip(*self.shaped_clip)
        flat = (self.batch_stat(x, "count") <= self.ddof) | (
            self.batch_stat(x, "max") == self.batch_stat(x, "min")
        )
        whitened = self.norm(x - self.batch_mean(x), self.batch_var(x))
        return pl.when(flat).then(pl.lit(0.0)).otherwise(whitened)


EstimatorFn = Callable[[EstimatorContext], "pl.Expr"]


@dataclass(frozen=True)
class Estimator:
    """A registered estimator and every fact the rest of grpo-adv needs about it.

    Attributes:
        name: the ``--estimator`` value.
        summary: one line for ``--help``: the formula.
        source: the paper or trainer file it reproduces.
        fn: the formula.
        uses_groups: whether it needs a group key (and so the singleton policy applies).
        needs: extra columns it reads: ``length``, ``baseline``, ``step_rewards``.
        whitens: whether it ends with a batch whitening (see ``clip_stage``).
        scope: ``group`` when every statistic it reads lies within one group (a log can be
            split along groups: partitioned and distributed engines), ``batch`` when it
            reads whole-batch statistics.
        unit: ``response`` (one advantage per row) or ``step`` (one per step reward of a
            list column: process supervision).
        formula: the formula in symbols for ``explain``, ``{spread}`` / ``{batch_spread}``
            standing for the eps placement of the group / batch spread; empty when explain
            does not write it out.
        explain: the formula with a group's numbers filled in (see
            :mod:`grpo_cli.formulas`), or None.
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
    formula: str = ""
    explain: ExplainFn | None = None


ESTIMATORS: Final[dict[str, Estimator]] = {}


def register_estimator(
    name: str,
    summary: str,
    source: str,
    *,
    uses_groups: bool = True,
    needs: frozenset[str] = frozenset(),
    whitens: bool = False,
    scope: str = "group",
    unit: str = "response",
    formula: str = "",
    explain: ExplainFn | None = None,
) -> Callable[[EstimatorFn], EstimatorFn]:
    """Register ``fn`` under ``name`` with its facts (see :class:`Estimator`); ``summary``
    becomes its line in ``--help``. Adding an estimator is one decorated function."""
    if scope not in SCOPES or unit not in UNITS:
        raise ValueError(f"estimator {name!r}: scope {scope!r} / unit {unit!r}")

    def decorate(fn: EstimatorFn) -> EstimatorFn:
        if name in ESTIMATORS:
            raise ValueError(f"estimator {name!r} registered twice")
        ESTIMATORS[name] = Estimator(
            name, summary, source, fn, uses_groups, needs, whitens, scope, unit, formula, explain
        )
        return fn

    return decorate


def get_estimator(name: str) -> Estimator:
    """The estimator called ``name`` (case and separators ignored); an unknown name
    suggests the closest and lists the valid ones."""
    return _lookup(name)


def _lookup(name: str) -> Estimator:
    """The registry lookup itself (:func:`get_estimator`'s one body: the architecture test
    counts calls here, whatever name a caller imported the function under)."""
    from grpo_cli.names import match_name

    return ESTIMATORS[match_name(name, ESTIMATORS, "estimator")]


def _zero_if_constant(ctx: EstimatorContext, expr: pl.Expr) -> pl.Expr:
    """Exactly 0 in a zero-variance group, where rounding could leave ``r - mean`` at 1e-17."""
    import polars as pl

    return pl.when(ctx.is_constant()).then(pl.lit(0.0)).otherwise(expr)


@register_estimator(
    "grpo",
    "group z-score (r - mean_g) / (std_g + eps)",
    "DeepSeekMath (Shao et al. 2024) sec. 4.1.2; TRL grpo_trainer.py; verl core_algos.py "
    "compute_grpo_outcome_advantage; OpenRLHF group_norm",
    formula="A = (r - mean) / {spread}",
    explain=formulas.grpo,
)
def grpo(ctx: EstimatorContext) -> pl.Expr:
    """GRPO outcome advantage: ``A = (r - mean_g) / (std_g + eps)`` (eps_mode std).

    A zero-variance group gives exactly 0. Under ``singleton=verl`` a one-response group
    has mean 0 and std 1: ``A = r / (1 + eps)``.
    """
    return _zero_if_constant(ctx, ctx.norm(ctx.reward - ctx.group_mean(), ctx.group_var()))


@register_estimator(
    "dr_grpo",
    "r - mean_g (no std)",
    "Dr. GRPO (Liu et al. 2025, 'Understanding R1-Zero-Like Training'); verl grpo with "
    "norm_adv_by_std_in_grpo=False; OpenRLHF dr_grpo; TRL scale_rewards='none'",
    formula="A = r - mean",
    explain=formulas.dr_grpo,
)
def dr_grpo(ctx: EstimatorContext) -> pl.Expr:
    """``A = r - mean_g``: the group baseline without the std division. Shift invariant."""
    return _zero_if_constant(ctx, ctx.reward - ctx.group_mean())


@register_estimator(
    "batch_std",
    "(r - mean_g) / (std_b + eps): group mean, batch std",
    "TRL grpo_trainer.py scale_rewards='batch' (PPO-Lite)",
    scope="batch",
    formula="A = (r - mean) / {batch_spread}",
    explain=formulas.batch_std,
)
def batch_std(ctx: EstimatorContext) -> pl.Expr:
    """``A = norm(r - mean_g, var_b(r))``: centred in the group, scaled by the std of all
    valid rewards of the batch."""
    return _zero_if_constant(
        ctx, ctx.norm(ctx.reward - ctx.group_mean(), ctx.batch_var(ctx.reward))
    )


@register_estimator(
    "rloo",
    "r - mean of the other responses = n/(n-1) (r - mean_g)",
    "RLOO (Ahmadian et al. 2024); verl compute_rloo_outcome_advantage; OpenRLHF rloo; "
    "TRL rloo_trainer.py",
    formula="A = r - (sum - r) / (n - 1)",
    explain=formulas.rloo,
)
def rloo(ctx: EstimatorContext) -> pl.Expr:
    """Leave-one-out baseline: ``A_i = r_i - (sum_g - r_i) / (n_g - 1)``.

    Sums to 0 over each group. A one-response group has no other response: its advantage is
    the singleton policy's (verl leaves the raw reward: ``singleton=verl`` or ``raw``).
    """
    import polars as pl

    n = ctx.count().cast(pl.Float64)
    loo = ctx.reward - (ctx.group_sum() - ctx.reward) / (n - 1.0)
    return (
        pl.when(ctx.is_singleton())
        .then(ctx.reward - ctx.group_mean())
        .otherwise(_zero_if_constant(ctx, loo))
    )


@register_estimator(
    "reinforce_pp_baseline",
    "r - mean_g, then whitened over the batch",
    "REINFORCE++-baseline (Hu et al. 2025); verl "
    "compute_reinforce_plus_plus_baseline_outcome_advantage; OpenRLHF reinforce_baseline",
    whitens=True,
    scope="batch",
    formula="x = r - mean; A = (x - mean_b) / {batch_spread}",
    explain=formulas.reinforce_pp_baseline,
)
def reinforce_pp_baseline(ctx: EstimatorContext) -> pl.Expr:
    """``x = r - mean_g``; ``A = norm(x - mean_b(x), var_b(x))`` (length-weighted with
    token_weighted). A zero-variance group has x = 0 exactly before whitening."""
    return ctx.batch_zscore(_zero_if_constant(ctx, ctx.reward - ctx.group_mean()))


@register_estimator(
    "reinforce_pp",
    "batch z-score of the raw reward",
    "REINFORCE++ (Hu et al. 2025); verl compute_reinforce_plus_plus_outcome_advantage "
    "with gamma = 1",
    uses_groups=False,
    whitens=True,
    scope="batch",
)
def reinforce_pp(ctx: EstimatorContext) -> pl.Expr:
    """``A = norm(r - mean_b, var_b)``: no group baseline (the outcome reward on the last
    token with gamma 1 makes every token's return r)."""
    return ctx.batch_zscore(ctx.reward)


@register_estimator(
    "opo",
    "r - length-weighted mean_g",
    "OPO (Hao et al. 2025, on-policy RL with optimal baseline); verl compute_opo_outcome_advantage",
    needs=frozenset({"length"}),
    formula="A = r - sum(L r) / sum(L)",
    explain=formulas.opo,
)
def opo(ctx: EstimatorContext) -> pl.Expr:
    """``A = r - sum_g(L r) / sum_g(L)`` with L the response length (``length_col``).

    Under ``singleton=verl`` a one-response group has baseline 0 (``A = r``).
    """
    import polars as pl

    assert ctx.length is not None
    weight = pl.when(ctx.reward.is_not_null()).then(ctx.length.cast(pl.Float64))
    baseline = ctx.in_group((weight * ctx.reward).sum()) / ctx.in_group(weight.sum())
    baseline = ctx._unit_for_singletons(baseline, 0.0)
    return _zero_if_constant(ctx, ctx.reward - baseline)


@register_estimator(
    "gpg",
    "alpha (r - mean_g), alpha = batch size / non-zero rewards in batch",
    "GPG (Chu et al. 2025); verl compute_gpg_outcome_advantage",
    scope="batch",
    formula="A = alpha (r - mean)",
    explain=formulas.gpg,
)
def gpg(ctx: EstimatorContext) -> pl.Expr:
    """``A = alpha (r - mean_g)`` with ``alpha = B / max(#{r != 0 in b}, 1)``, B the number of
    valid rewards in the batch."""
    import polars as pl

    r = ctx.reward
    valid = ctx.batch_stat(r, "count").cast(pl.Float64)
    nonzero = ctx.batch_stat(r, "nonzero").cast(pl.Float64)
    alpha = valid / pl.max_horizontal(nonzero, pl.lit(1.0))
    return alpha * _zero_if_constant(ctx, r - ctx.group_mean())


@register_estimator(
    "grpo_passk",
    "only a group's unique best gets norm(max - second max, var_g); others 0",
    "Pass@k training (Chen et al. 2025, arXiv 2508.10751); verl "
    "compute_grpo_passk_outcome_advantage",
    formula="A = (best - second best) / {spread} for the unique best, else 0",
    explain=formulas.grpo_passk,
)
def grpo_passk(ctx: EstimatorContext) -> pl.Expr:
    """The response with the group's maximum reward gets ``norm(r_max - r_2nd, var_g)``;
    every other response 0. A tie for the maximum gives 0 to all (r_max = r_2nd)."""
    import polars as pl

    r = ctx.reward
    best = ctx.in_group(r.max())
    n_best = ctx.in_group((r == best).sum())
    second = ctx.in_group(pl.when(r < best).then(r).max())
    gap = ctx.norm(best - second, ctx.group_var())
    return pl.when((r == best) & (n_best == 1)).then(gap).otherwise(pl.lit(0.0))


@register_estimator(
    "remax",
    "r - b, b the reward of a greedy response (--baseline-col)",
    "ReMax (Li et al. 2023); verl compute_remax_outcome_advantage",
    uses_groups=False,
    needs=frozenset({"baseline"}),
)
def remax(ctx: EstimatorContext) -> pl.Expr:
    """``A = r - b`` with b from ``baseline_col`` (null b gives a null advantage)."""
    import polars as pl

    assert ctx.baseline is not None
    return ctx.reward - ctx.baseline.cast(pl.Float64)


# Process supervision (DeepSeekMath sec. 4.1.3) runs GRPO's formula on the exploded step
# rewards (one row per step, see :mod:`grpo_cli.process`): ``z = norm(s - mean_g(s),
# var_g(s))`` over all step rewards of all responses of the group; a step's advantage is the
# sum of z over that step and the later steps of the same response (the reward-to-go).
register_estimator(
    "process",
    "per step: suffix sum of step rewards z-scored over the whole group",
    "DeepSeekMath (Shao et al. 2024) sec. 4.1.3, process supervision",
    needs=frozenset({"step_rewards"}),
    unit="step",
)(grpo)
