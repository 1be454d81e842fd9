"""The optional torch engine (``--backend torch``): the same contract as the Polars engine.

Polars finds the groups (dense integer codes of the group key, and of the batch key) and
prepares the reward (aggregation, null policy); torch then evaluates the estimator's own
formula (``plan.estimator.fn``, or GDPO's) on the chosen device, in float64, through
:class:`TorchContext`: the formula context (:class:`grpo_cli.core.estimators.FormulaContext`)
implemented with segment operations (``index_add_``, ``scatter_reduce``) over the codes,
NaN standing for null:

    n_g = sum_g 1[valid], mean_g = sum_g r / n_g, var_g = sum_g (r - mean_g)^2 / (n_g - ddof)

(``var_g`` exactly 0 when the group's valid rewards are all equal, as Polars' is). So every
estimator and policy runs here; the shared policies are applied afterwards, as for every
engine (:mod:`grpo_cli.core.policies`). Process supervision runs its formula here over the
steps that Polars explodes from the list column (:func:`step_scores`). torch is imported
here only, and only when this engine runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Final

import polars as pl

from grpo_cli.core.columns import CONSTANT_KEY, REWARD_KEY, SIZE_KEY, STEP_Z, VALID_KEY
from grpo_cli.core.columns import TORCH_RAW as RAW
from grpo_cli.core.engine_options import DEVICES, ENGINES, EngineInfo
from grpo_cli.core.errors import Message, OptionsError, option
from grpo_cli.core.estimators import FormulaContext, Value, gdpo
from grpo_cli.core.grouping import stats_columns
from grpo_cli.core.plan import Plan, collision_columns
from grpo_cli.core.policies import apply_policies
from grpo_cli.core.rewards import reward_expr

INSTALL_HINT: Final = "pip install 'grpo-adv[torch]'"


def import_torch() -> Any:
    """torch, or an OptionsError saying how to install it."""
    try:
        import torch
    except ImportError:
        raise OptionsError(
            option("backend", "torch") + " needs PyTorch, which is not installed",
            hint=INSTALL_HINT,
        ) from None
    return torch


def resolve_device(torch: Any, device: str) -> Any:
    """``auto``: CUDA when available, else the CPU; ``cuda`` without CUDA is an error."""
    if device not in DEVICES:
        raise OptionsError(
            "unknown " + option("device") + f" {device!r}",
            hint="choose auto, cpu or cuda",
            value=device,
        )
    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise OptionsError(
                option("device", "cuda") + ": torch sees no CUDA device",
                hint="use "
                + option("device", "cpu")
                + ", or a machine with an NVIDIA GPU and a CUDA build of torch",
            )
        return torch.device("cuda")
    return torch.device("cpu")


@dataclass(frozen=True)
class TorchEngine:
    """``--backend torch``: every estimator and policy, on the CPU or a CUDA device."""

    info: EngineInfo

    def refusal(self, plan: Plan) -> Message | None:
        """Nothing: every estimator's formula and every policy runs on torch."""
        return None

    def annotate(self, frame: pl.DataFrame, plan: Plan) -> pl.DataFrame:
        """Polars prepares keys and rewards; torch does the arithmetic; Polars applies the
        policies (see :class:`grpo_cli.engines.FrameEngine`)."""
        from grpo_cli.core.expressions import collect, prepare

        options = plan.options
        if plan.estimator.unit == "step":
            from grpo_cli.core.process_supervision import process_advantages

            return collect(process_advantages(prepare(frame, plan), plan, step_scores))
        # The collision check column comes from Polars, as on every engine.
        lazy = prepare(frame, plan).with_columns(collision_columns(plan.keys))
        prepared = collect(lazy, deterministic=True)
        full = prepared.hstack(torch_columns(prepared, plan))
        advantage = apply_policies(
            pl.col(RAW), plan, reward=pl.col(REWARD_KEY), singleton=pl.col(VALID_KEY) == 1
        )
        full = full.with_columns(advantage.alias(options.advantage_col)).drop(RAW)
        if options.with_stats:
            full = full.with_columns(
                stats_columns(plan.keys.group, options.ddof, precomputed=False)
            )
        return full


ENGINE = TorchEngine(ENGINES["torch"])


def dense_codes(frame: pl.DataFrame, columns: tuple[str, ...]) -> pl.Series:
    """0..k-1 codes of the key ``columns``: equal keys, equal codes (exact: the plan's key
    is already one 64-bit hash column unless it is the exact fallback)."""
    key = pl.col(columns[0]) if len(columns) == 1 else pl.struct(list(columns))
    return frame.select((key.rank("dense") - 1).cast(pl.Int64)).to_series()


def torch_columns(frame: pl.DataFrame, plan: Plan) -> pl.DataFrame:
    """The formula's value (RAW, before the policies) and the per-row group profile
    (SIZE_KEY, VALID_KEY, CONSTANT_KEY), computed with torch. ``frame`` holds the prepared
    reward (REWARD_KEY), the key columns and the columns the estimator reads."""
    torch = import_torch()
    ctx = torch_context(torch, frame, plan, resolve_device(torch, plan.engine.device))
    out = formula_columns(ctx, frame, plan)
    columns = {name: tensor.cpu().numpy() for name, tensor in out.items()}
    return pl.DataFrame(columns).with_columns(pl.col(RAW).fill_nan(None))


def step_scores(steps: pl.LazyFrame, plan: Plan) -> pl.LazyFrame:
    """Process supervision's step z-scores (see
    :data:`grpo_cli.core.process_supervision.StepScores`): the formula over the exploded
    steps, with torch."""
    from grpo_cli.core.expressions import collect

    frame = collect(steps, deterministic=True)
    torch = import_torch()
    ctx = torch_context(torch, frame, plan, resolve_device(torch, plan.engine.device))
    z = torch.broadcast_to(plan.estimator.fn(ctx), ctx.reward.shape).cpu().numpy()
    return frame.with_columns(pl.Series(STEP_Z, z).fill_nan(None)).lazy()


def torch_context(torch: Any, frame: pl.DataFrame, plan: Plan, device: Any) -> TorchContext:
    """The formula context of ``plan`` over the prepared ``frame``, its columns copied to
    ``device`` (see :func:`torch_columns`)."""
    options, keys = plan.options, plan.keys

    def codes(columns: tuple[str, ...]) -> Any:
        return torch.as_tensor(dense_codes(frame, columns).to_numpy(writable=True), device=device)

    def count(columns: tuple[str, ...]) -> int:  # the number of distinct keys, on the host
        return frame.select(pl.struct(list(columns)).n_unique()).item() if frame.height else 0

    def column(name: str | None) -> Any:  # absent from process supervision's steps
        if name is None or name not in frame.columns:
            return None
        return float_column(torch, frame, pl.col(name), device)

    return TorchContext(
        torch=torch,
        group=codes(keys.group),
        groups=count(keys.group),
        batch=codes(keys.batch),
        batches=count(keys.batch),
        reward=column(REWARD_KEY),
        ddof=options.ddof,
        eps=options.eps,
        eps_mode=options.eps_mode,
        singleton_unit=options.singleton == "verl",
        length=column(options.length_col),
        token_weighted=options.token_weighted,
        baseline=column(options.baseline_col),
        shaped_clip=options.clip if options.clip_stage == "shaped" else None,
    )


def float_column(torch: Any, frame: pl.DataFrame, expr: pl.Expr, device: Any) -> Any:
    """``expr`` over ``frame`` as a float64 tensor on ``device``, null as NaN."""
    values = frame.select(expr.cast(pl.Float64)).to_series().to_numpy(writable=True)
    return torch.as_tensor(values, dtype=torch.float64, device=device)


def formula_columns(ctx: TorchContext, frame: pl.DataFrame, plan: Plan) -> dict[str, Any]:
    """The tensors of :func:`torch_columns`: the estimator's formula (GDPO's with
    ``aggregation=normalize_then_sum``, each reward column's context sharing the codes) and
    the group profile."""
    torch, options = ctx.torch, plan.options
    if options.aggregation == "normalize_then_sum":
        rewards = [
            (
                ctx.with_reward(
                    float_column(torch, frame, reward_expr(c, options.nulls), ctx.device)
                ),
                w,
            )
            for c, w in zip(options.reward_cols, options.weights, strict=True)
        ]
        raw = gdpo(ctx, rewards)
    else:
        raw = plan.estimator.fn(ctx)
    return {
        RAW: torch.broadcast_to(raw, ctx.reward.shape),
        SIZE_KEY: ctx.group_agg(torch.ones_like(ctx.reward), "count").to(torch.int64),
        VALID_KEY: ctx.count().to(torch.int64),
        CONSTANT_KEY: ctx.is_constant(),
    }


@dataclass(frozen=True)
class TorchContext(FormulaContext):
    """The formula context (:class:`grpo_cli.core.estimators.FormulaContext`) on torch: every
    value a float64 tensor (one entry per row, NaN for null), every statistic a segment
    reduction over dense codes (``group``, ``batch``: int64 tensors, 0..k-1, with k
    ``groups``, ``batches``) gathered back to the rows."""

    torch: Any
    group: Any
    groups: int
    batch: Any
    batches: int
    reward: Any
    ddof: int
    eps: float
    eps_mode: str
    singleton_unit: bool = False
    length: Any = None
    token_weighted: bool = False
    baseline: Any = None
    shaped_clip: tuple[float, float] | None = None

    @property
    def device(self) -> Any:
        """Where the tensors live."""
        return self.reward.device

    def with_reward(self, reward: Any) -> TorchContext:
        """The same context over another reward (GDPO's reward columns)."""
        return replace(self, reward=reward)

    def _tensor(self, value: Value | float | None) -> Any:
        if isinstance(value, self.torch.Tensor):
            return value
        scalar = float("nan") if value is None else value
        # a fill on the device (torch.tensor would copy from the host, a sync on CUDA)
        return self.torch.full((), scalar, dtype=self.torch.float64, device=self.device)

    def where(
        self, cond: Value, then: Value | float | None, otherwise: Value | float | None = None
    ) -> Any:
        """See :meth:`FormulaContext.where` (a NaN comparison is false, as a null one)."""
        return self.torch.where(cond, self._tensor(then), self._tensor(otherwise))

    def is_null(self, x: Value) -> Any:
        """See :meth:`FormulaContext.is_null`."""
        return self.torch.isnan(x)

    def fill_null(self, x: Value, value: float) -> Any:
        """See :meth:`FormulaContext.fill_null`."""
        return self.where(self.torch.isnan(x), value, x)

    def maximum(self, x: Value, floor: float) -> Any:
        """See :meth:`FormulaContext.maximum`."""
        return self.where(self.torch.isnan(x), floor, self.torch.clamp(x, min=floor))

    def to_float(self, x: Value) -> Any:
        """See :meth:`FormulaContext.to_float`."""
        return x.to(self.torch.float64)

    @cached_property
    def _reward_stats(self) -> dict[str, Any]:
        torch, r = self.torch, self.reward
        n = self.group_agg(r, "count")
        mean = self.group_agg(r, "sum") / n
        centred = self.fill_null(r - mean, 0.0)
        var = self.group_agg(centred * centred, "sum") / (n - self.ddof)
        equal = self.group_agg(r, "max") == self._segment(self.group, self.groups, r, "min")
        var = torch.where(n > self.ddof, torch.where(equal, 0.0, var), float("nan"))
        return {"count": n, "mean": mean, "var": var}

    def reward_stat(self, name: str) -> Any:
        """See :meth:`FormulaContext.reward_stat` (computed once per context)."""
        return self._reward_stats[name]

    def group_agg(self, x: Value, op: str) -> Any:
        """See :meth:`FormulaContext.group_agg`."""
        return self._segment(self.group, self.groups, x, op)

    def batch_agg(self, x: Value, op: str) -> Any:
        """See :meth:`FormulaContext.batch_agg`."""
        return self._segment(self.batch, self.batches, x, op)

    def _segment(self, codes: Any, size: int, x: Value, op: str) -> Any:
        """The reduction ``op`` of ``x`` per code (NaN left out), gathered to the rows."""
        torch = self.torch
        x = self.to_float(x)
        valid = ~torch.isnan(x)
        count = torch.zeros(size, dtype=torch.float64, device=x.device).index_add_(
            0, codes, valid.to(torch.float64)
        )
        if op == "count":
            return count[codes]
        if op in ("sum", "nonzero"):
            values = torch.where(valid, x, 0.0) if op == "sum" else (valid & (x != 0)).double()
            sums = torch.zeros(size, dtype=torch.float64, device=x.device)
            return sums.index_add_(0, codes, values)[codes]
        fill = -torch.inf if op == "max" else torch.inf
        start = torch.full((size,), fill, dtype=torch.float64, device=x.device)
        reduced = start.scatter_reduce(
            0, codes, torch.where(valid, x, fill), "amax" if op == "max" else "amin"
        )
        return torch.where(count > 0, reduced, float("nan"))[codes]
