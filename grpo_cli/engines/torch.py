"""The optional torch engine (``--backend torch``): the same contract as the Polars engine.

Polars hashes the group key and prepares the reward, row-wise; only the columns the formula
reads cross to the device, where ``torch.unique`` codes the keys (:func:`key_codes`) and
the estimator's formula runs in float64 through :class:`TorchContext`, with segment
operations over the codes, NaN standing for null:

    n_g = sum_g 1[valid], mean_g = sum_g r / n_g, var_g = sum_g (r - mean_g)^2 / (n_g - ddof)

(``var_g`` exactly 0 when the group's valid rewards are all equal, as Polars' is). Polars
then applies the shared policies. torch is imported in a background thread while the log
is read (:func:`start_import`).
"""

from __future__ import annotations

import contextlib
import math
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Final

import polars as pl

from grpo_cli.core.columns import (
    BATCH_KEY,
    CHECK_MAX,
    CONSTANT_KEY,
    REWARD_KEY,
    SIZE_KEY,
    STEP_Z,
    VALID_KEY,
)
from grpo_cli.core.columns import TORCH_RAW as RAW
from grpo_cli.core.engine_options import ENGINES, EngineInfo
from grpo_cli.core.errors import (
    MemoryShortError,
    Message,
    OptionsError,
    first_line,
    install_command,
    is_out_of_memory,
    option,
)
from grpo_cli.core.estimators import FormulaContext, Value
from grpo_cli.core.grouping import stats_columns, zero_spread
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.core.plan import Plan, collision_columns
from grpo_cli.core.policies import apply_policies, formula
from grpo_cli.core.rewards import reward_parts

if TYPE_CHECKING:
    from grpo_cli.core.resolve import Request

INSTALL_HINT: Final = install_command("torch")


_IMPORT: dict[str, threading.Thread] = {}  # the background import, once started


def start_import() -> None:
    """Start importing torch in a background thread, once per process (errors are
    :func:`import_torch`'s to report). Not a daemon: an early exit waits for the import
    rather than stop it half-way."""
    if "torch" in _IMPORT:
        return

    def load() -> None:
        with contextlib.suppress(Exception):
            import torch  # noqa: F401

    thread = threading.Thread(target=load, name="grpo-import-torch")
    _IMPORT["torch"] = thread
    thread.start()


def import_torch() -> Any:
    """torch (joining the background import when :func:`start_import` started one), or an
    OptionsError saying how to install it."""
    started = _IMPORT.get("torch")
    if started is not None:
        started.join()
    try:
        import torch
    except Exception as exc:  # not there, or broken: a CUDA library missing (OSError), ...
        if isinstance(exc, ImportError) and (
            exc.name == "torch" or "No module named 'torch'" in str(exc)
        ):
            raise OptionsError(
                option("backend", "torch") + " needs PyTorch, which is not installed",
                hint="install it with: " + INSTALL_HINT,
            ) from None
        raise OptionsError(
            option("backend", "torch") + " needs PyTorch, which failed to load: "
            f"{type(exc).__name__}: {first_line(str(exc))}",
            hint="reinstall it with: " + INSTALL_HINT + "; or leave " + option("backend") + " out "
            "(the Polars engine)",
        ) from None
    return torch


def resolve_device(torch: Any, device: str) -> Any:
    """``auto``: CUDA when available, else the CPU; ``cuda`` without CUDA is an error."""
    available = torch.cuda.is_available()
    if device == "cuda" and not available:
        raise OptionsError(
            option("device", "cuda") + ": torch sees no CUDA device",
            hint="use "
            + option("device", "cpu")
            + ", or a machine with an NVIDIA GPU and a CUDA build of torch",
        )
    return torch.device("cuda" if device != "cpu" and available else "cpu")


@dataclass(frozen=True)
class TorchEngine:
    """``--backend torch``: every estimator and policy, on the CPU or a CUDA device."""

    info: EngineInfo

    def refusal(self, plan: Plan | Request) -> Message | None:
        """Nothing: every estimator and policy runs on torch."""
        return None

    def start_loading(self) -> None:
        """See :func:`start_import`."""
        start_import()

    def annotate(self, frame: pl.DataFrame, plan: Plan) -> pl.DataFrame:
        """Polars prepares (row-wise: streaming is exact), torch computes
        (:func:`torch_columns`), Polars applies the policies."""
        from grpo_cli.core.expressions import collect, prepare

        options = plan.options
        if plan.estimator.unit == "step":
            from grpo_cli.core.process_supervision import process_advantages

            return collect(process_advantages(prepare(frame, plan), plan, step_scores))
        prepared = collect(prepare(frame, plan), deterministic=False)
        full = prepared.hstack(torch_columns(prepared, plan))
        advantage = apply_policies(
            pl.col(RAW).fill_nan(None),
            plan,
            reward=pl.col(REWARD_KEY),
            singleton=pl.col(VALID_KEY) == 1,
        )
        full = full.with_columns(advantage.alias(options.advantage_col)).drop(RAW)
        if options.with_stats:
            full = full.with_columns(
                stats_columns(plan.keys.group, options.ddof, precomputed=False)
            )
        return full


ENGINE = TorchEngine(ENGINES["torch"])


def dense_codes(frame: pl.DataFrame, columns: tuple[str, ...]) -> pl.Series:
    """0..k-1 codes of the key ``columns`` by Polars (a sort): for keys that are not one
    integer column (see :func:`key_codes`)."""
    key = pl.col(columns[0]) if len(columns) == 1 else pl.struct(list(columns))
    return frame.select((key.rank("dense") - 1).cast(pl.Int64)).to_series()


def torch_columns(frame: pl.DataFrame, plan: Plan) -> pl.DataFrame:
    """The formula's value (RAW, before the policies; NaN for null), the per-row group
    profile (SIZE_KEY, VALID_KEY, CONSTANT_KEY) and, when the plan's key is hashed,
    CHECK_MAX, computed with torch over ``frame`` (the prepared reward, the key columns and
    the columns the estimator reads)."""
    with on_device(frame, plan) as ctx:
        return host_columns(ctx, frame, plan)


@contextlib.contextmanager
def on_device(frame: pl.DataFrame, plan: Plan) -> Iterator[TorchContext]:
    """The formula context of ``plan`` over ``frame`` on the plan's device; an allocation
    that fails there (CUDA's ``OutOfMemoryError``, the CPU allocator's ``RuntimeError``) as a
    :class:`MemoryShortError` saying what to do (the tensors freed by then)."""
    torch = import_torch()
    device = resolve_device(torch, plan.engine.device)
    rows = frame.height
    try:
        yield torch_context(torch, frame, plan, device)
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        if device.type == "cuda":
            hint = (
                "compute on the host: " + option("device", "cpu") + ", or the Polars engine "
                "(leave " + option("backend") + " out)"
            )
        else:
            hint = "compute with " + option("backend", "partitioned", alias="alone")
        raise MemoryShortError(
            f"the torch engine's device ({device}) ran out of memory on {rows:,} rows",
            hint=hint,
        ) from None


def step_scores(steps: pl.LazyFrame, plan: Plan) -> pl.LazyFrame:
    """Process supervision's step z-scores
    (:data:`grpo_cli.core.process_supervision.StepScores`) over the exploded steps."""
    from grpo_cli.core.expressions import collect

    frame = collect(steps, deterministic=True)
    with on_device(frame, plan) as ctx:
        z = ctx.torch.broadcast_to(plan.estimator.fn(ctx), ctx.reward.shape).cpu().numpy()
    return frame.with_columns(pl.Series(STEP_Z, z).fill_nan(None)).lazy()


def torch_context(torch: Any, frame: pl.DataFrame, plan: Plan, device: Any) -> TorchContext:
    """The formula context of ``plan`` over the prepared ``frame``: the keys coded and the
    columns the formula reads copied on ``device``."""
    options, keys = plan.options, plan.keys

    def column(name: str | None) -> Any:  # absent from process supervision's steps
        if name is None or name not in frame.columns:
            return None
        return float_column(torch, frame, pl.col(name), device)

    group, groups = key_codes(torch, frame, keys.group, device)
    batch, batches = None, 1  # one constant batch: no codes to find
    if keys.batch != (BATCH_KEY,):
        batch, batches = key_codes(torch, frame, keys.batch, device)
    return TorchContext(
        torch=torch,
        group=group,
        groups=groups,
        batch=batch,
        batches=batches,
        reward=column(REWARD_KEY),
        length=column(options.length_col),
        baseline=column(options.baseline_col),
        **context_settings(options),
    )


def context_settings(options: AdvantageOptions) -> dict[str, Any]:
    """What a :class:`TorchContext` takes from the options (engine and tensor API alike)."""
    return {
        "ddof": options.ddof,
        "eps": options.eps,
        "eps_mode": options.eps_mode,
        "singleton_unit": options.singleton == "verl",
        "token_weighted": options.token_weighted,
        "shaped_clip": options.clip if options.clip_stage == "shaped" else None,
    }


def key_codes(
    torch: Any, frame: pl.DataFrame, columns: tuple[str, ...], device: Any
) -> tuple[Any, int]:
    """0..k-1 codes of the key ``columns`` as an int64 tensor on ``device``, and k. One
    integer column without nulls (:func:`key_tensor`) is coded there by ``torch.unique``;
    any other key by Polars (:func:`dense_codes`)."""
    key = key_tensor(torch, frame, columns, device)
    if key is None:
        codes = to_device(torch, dense_codes(frame, columns).to_numpy(), device)
        return codes, int(codes.max()) + 1 if frame.height else 0
    uniques, codes = torch.unique(key, return_inverse=True)
    return codes, int(uniques.numel())


INT64_COMPATIBLE: Final = frozenset(
    {pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64}
)


def key_tensor(torch: Any, frame: pl.DataFrame, columns: tuple[str, ...], device: Any) -> Any:
    """The key ``columns`` as one int64 tensor on ``device`` when they are one integer
    column without nulls (UInt64 reinterpreted bit for bit), else None."""
    if len(columns) != 1:
        return None
    series = frame.get_column(columns[0])
    if series.dtype not in INT64_COMPATIBLE or series.null_count():
        return None  # 128-bit integers too: coded by Polars
    if series.dtype == pl.UInt64:
        values = series.to_numpy().view("int64")
    else:
        values = series.cast(pl.Int64).to_numpy()
    return to_device(torch, values, device)


def to_device(torch: Any, values: Any, device: Any) -> Any:
    """The NumPy array ``values`` as a tensor on ``device`` (shared on the CPU, even when
    read-only: input tensors are never written)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        tensor = torch.from_numpy(values)
    return tensor.to(device)


def float_column(torch: Any, frame: pl.DataFrame, expr: pl.Expr, device: Any) -> Any:
    """``expr`` over ``frame`` as a float64 tensor on ``device``, null as NaN."""
    values = frame.select(expr.cast(pl.Float64)).to_series().to_numpy()
    return to_device(torch, values, device)


def host_columns(ctx: TorchContext, frame: pl.DataFrame, plan: Plan) -> pl.DataFrame:
    """The columns of :func:`torch_columns`, computed on the device and copied to the host.
    CHECK_MAX is the second hash itself when no two keys share a group hash
    (:func:`hash_collides`), else Polars' window
    (:func:`grpo_cli.core.plan.collision_columns`)."""
    torch, options = ctx.torch, plan.options
    raw = formula(
        ctx,
        options,
        plan.estimator,
        lambda: [
            ctx.with_reward(float_column(torch, frame, reward, ctx.device))
            for reward in reward_parts(options)
        ],
    )
    valid = ctx.count().to(torch.int64)
    sizes = valid  # every reward valid: the group's rows are its valid rewards
    if plan.has_nulls:
        sizes = torch.bincount(ctx.group, minlength=ctx.groups).index_select(0, ctx.group)
    out = {
        RAW: torch.broadcast_to(raw, ctx.reward.shape),
        SIZE_KEY: sizes,
        CONSTANT_KEY: ctx.is_constant(),
        VALID_KEY: valid if plan.has_nulls else None,  # else SIZE_KEY's, not copied again
    }
    host = pl.DataFrame({k: v.cpu().numpy() for k, v in out.items() if v is not None})
    if not plan.has_nulls:
        host = host.with_columns(pl.col(SIZE_KEY).alias(VALID_KEY))
    if plan.keys.check is not None:
        check = key_tensor(torch, frame, (plan.keys.check,), ctx.device)
        if bool(hash_collides(ctx, check)):
            check_max = frame.select(collision_columns(plan.keys)).to_series()
        else:
            check_max = frame.get_column(plan.keys.check).alias(CHECK_MAX)
        host = host.with_columns(check_max)
    return host


def hash_collides(ctx: TorchContext, check: Any) -> Any:
    """Whether two keys share a group hash: their second hashes (``check``) differ within
    a group (:func:`grpo_cli.core.plan.hash_collision` over the device's codes)."""
    torch = ctx.torch
    start = torch.full((ctx.groups,), torch.iinfo(torch.int64).min, device=check.device)
    largest = start.scatter_reduce(0, ctx.group, check, "amax")
    return (largest.index_select(0, ctx.group) != check).any()


@dataclass(frozen=True)
class TorchContext(FormulaContext):
    """The formula context on torch: every value a float64 tensor (NaN for null), every
    statistic a segment reduction over dense codes (``group``, ``batch``: 0..k-1, k
    ``groups``, ``batches``) gathered back to the rows; ``batch`` None: one batch, its
    statistics reductions of the whole tensor. On the CPU (host syncs there are free),
    rewards known finite (:attr:`finite`) skip what cannot change a number: the NaN
    handling, the infinity check, the equality check where the variance rules it out, and
    the rules (``constant``, ``singleton``) that hold in no group."""

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
        """The same context over another reward."""
        return replace(self, reward=reward)

    def _tensor(self, value: Value | float | None) -> Any:
        if isinstance(value, self.torch.Tensor):
            return value
        scalar = float("nan") if value is None else value
        return self.torch.full((), scalar, dtype=self.torch.float64, device=self.device)

    def where(
        self, cond: Value, then: Value | float | None, otherwise: Value | float | None = None
    ) -> Any:
        """``torch.where``; on the CPU a ``cond`` of one value (one element, or one broadcast:
        every stride 0) picks its side whole when that side has the result's shape and dtype
        (no pass over the rows; the side itself is returned, never the reward: the caller's
        tensor)."""
        torch, yes, no = self.torch, self._tensor(then), self._tensor(otherwise)
        one = self._one_value(cond)
        if one is not None:
            picked = yes if one else no
            whole = all(_covers(picked.shape, side.shape) for side in (cond, yes, no))
            same = whole and picked.dtype == torch.result_type(yes, no)
            if same and picked is not self.reward:
                return picked
        return torch.where(cond, yes, no)

    def _one_value(self, cond: Any) -> bool | None:
        """On the CPU, the value of a ``cond`` of one value (one element, or one broadcast:
        every stride 0); else None."""
        one = cond.numel() == 1 or (cond.numel() > 1 and not any(cond.stride()))
        return bool(cond[(0,) * cond.dim()]) if one and cond.device.type == "cpu" else None

    def is_null(self, x: Value) -> Any:
        """``isnan``; the reward's, when it is :attr:`finite`, one False broadcast."""
        if x is self.reward and self.finite:
            return self._nowhere()
        return self.torch.isnan(x)

    def fill_null(self, x: Value, value: float) -> Any:
        """``nan_to_num`` keeping infinities (vectorised, where ``torch.where`` is not)."""
        inf = self.torch.inf
        return self.torch.nan_to_num(x, nan=value, posinf=inf, neginf=-inf)

    def maximum(self, x: Value, floor: float) -> Any:
        return self.fill_null(self.torch.clamp(x, min=floor), floor)

    def to_float(self, x: Value) -> Any:
        return x.to(self.torch.float64)

    @cached_property
    def _sums(self) -> Any:
        """The group sums of the reward: NaN or infinite where a reward is (:attr:`finite`
        reads them); elsewhere ``nansum``'s, bit for bit (the same additions: torch sums
        both by one kernel, ``index_add_`` with the NaN zeroed first)."""
        return self._per_group(self.reward, "sum")

    @cached_property
    def finite(self) -> bool:
        """Whether every reward is known valid and finite: on the CPU (a host sync there is
        free), the group sums add up to a finite number (a NaN or an infinity makes its
        group's sum NaN or infinite; sums that overflow only take the general way); never
        on an accelerator."""
        cpu = self.device.type == "cpu" and self.reward.numel() > 0
        return cpu and math.isfinite(float(self._sums.sum()))

    @cached_property
    def _reward_stats(self) -> dict[str, Any]:
        """Per group: ``count``, ``mean``, ``var``, ``constant``
        (:func:`grpo_cli.core.grouping.zero_spread`) and ``singleton`` (one valid reward).
        Rewards known :attr:`finite` have no NaN to leave out, and their groups are compared
        (all equal: var exactly 0) only where the variance allows it: n equal values x leave
        ``|r - mean| <= n u |x|`` (u = 2^-53, any summation order), so a variance above
        ``n / (n - ddof) (4 n u |mean|)^2 + 2^-1000`` (a margin of 16, and the subnormals')
        proves its group unequal."""
        torch, r = self.torch, self.reward
        if self.finite:
            n = self._counts()
            mean = self._sums / n
            self._reward_rows["mean"] = self._group_rows(mean)
            var = self._squares(self._reward_rows["mean"]) / (n - self.ddof)
            bound = (4 * 2.0**-53 * n * mean.abs()).square_().mul_(n / (n - self.ddof))
            if bool((var <= bound.add_(2.0**-1000)).any()):
                var = torch.where(self._all_equal(n), 0.0, var)
            var = torch.where(n > self.ddof, var, float("nan"))
            constant = zero_spread(n, var)
            stats = {"count": n, "mean": mean, "var": var, "constant": constant}
            return {**stats, "singleton": n == 1}
        n = self._per_group(torch.isnan(r).logical_not_(), "sum")
        mean = self._per_group(r, "nansum") / n
        self._reward_rows["mean"] = self._group_rows(mean)
        # in place on the temporary (a fresh tensor of N rows costs more than the arithmetic)
        centred = (r - self._reward_rows["mean"]).nan_to_num_(0.0, torch.inf, -torch.inf)
        var = self._per_group(centred.mul_(centred), "sum") / (n - self.ddof)
        var = torch.where(n > self.ddof, torch.where(self._all_equal(n), 0.0, var), float("nan"))
        constant = zero_spread(n, var)
        return {"count": n, "mean": mean, "var": var, "constant": constant, "singleton": n == 1}

    def _counts(self) -> Any:
        """The rows of each group (its valid rewards when :attr:`finite`)."""
        counts = self.torch.bincount(self.group, minlength=self.groups)
        return counts.to(self.torch.float64)

    def _squares(self, mean: Any) -> Any:
        """``sum_g (r - mean_g)^2`` of finite rewards (``mean``: the group means' rows), in
        place on the temporary (a fresh tensor of N rows costs more than the arithmetic)."""
        centred = self.reward - mean
        return self._per_group(centred.mul_(centred), "sum")

    def _all_equal(self, n: Any) -> Any:
        """Per group, whether its ``n`` valid rewards are all equal: all at the maximum."""
        r = self.reward
        top = self._group_rows(self._per_group(self.fill_null(r, -self.torch.inf), "max"))
        return self._per_group(r == top, "sum") == n

    @cached_property
    def _reward_rows(self) -> dict[str, Any]:
        return {}  # the rows of _reward_stats, gathered once each

    def reward_stat(self, name: str) -> Any:
        """The statistic's rows; on the CPU a rule (``constant``, ``singleton``) that holds
        in no group is one False broadcast to the rows (:meth:`where` skips it)."""
        rule = name in ("constant", "singleton") and self.device.type == "cpu"
        if rule and not bool(self._reward_stats[name].any()):
            return self._nowhere()
        stats = self._reward_stats  # fills the mean's rows
        if name not in self._reward_rows:
            self._reward_rows[name] = self._group_rows(stats[name])
        return self._reward_rows[name]

    def is_constant(self) -> Any:
        return self.reward_stat("constant")

    def is_singleton(self) -> Any:
        return self.reward_stat("singleton")

    def unless_singleton(self, value: Value, singleton: Callable[[], Value]) -> Value:
        """:meth:`FormulaContext.unless_singleton`; ``value`` itself, ``singleton()`` not
        made, where no group is one (:meth:`reward_stat`)."""
        holds = self.is_singleton()
        if self._one_value(holds) is False:
            return value
        return self.where(holds, singleton(), value)

    def _nowhere(self) -> Any:
        """False on every row: one value broadcast (no memory, no pass)."""
        false = self.torch.zeros((), dtype=self.torch.bool, device=self.device)
        return false.expand(self.reward.shape)

    def group_agg(self, x: Value, op: str) -> Any:
        if op == "sum" and x is self.reward and self.finite:
            return self._group_rows(self._sums)
        return self._group_rows(self._nan_reduce(self._per_group, x, op))

    def batch_stat(self, x: Value, name: str) -> Value:
        """:meth:`FormulaContext.batch_stat`; without token weights a weight is 1 (NaN for
        null), so ``sum w x`` is ``sum x`` and ``sum w`` the count, exactly: two passes
        fewer, and no ``where``."""
        if self.token_weighted and self.length is not None:
            return super().batch_stat(x, name)
        if name == "mean":
            key = ("batch_mean", id(x), name)
            if key not in self._reduced:
                self._reduced[key] = (x, self.batch_agg(x, "sum") / self.batch_agg(x, "count"))
            return self._reduced[key][1]
        if name == "var":  # ** 2 is torch's pow: slower
            held = self._reduced.get(("batch_centred", id(x), ""))
            if held is None:  # read by nothing else: squared in place
                centred = super().batch_centred(x)
                squares = centred.mul_(centred)
            else:
                # One batch on the CPU: sum x^2 with no temporary, kept when finite (a NaN
                # to leave out, or an overflow, takes the general way).
                if self.batch is None and self.device.type == "cpu":
                    flat = held[1].reshape(-1)
                    total = self.torch.dot(flat, flat).reshape(1)
                    if math.isfinite(float(total)):
                        return total / (self.batch_agg(x, "count") - self.ddof)
                squares = held[1] * held[1]
            return self.batch_agg(squares, "sum") / (self.batch_agg(x, "count") - self.ddof)
        return self.batch_agg(x, name)

    def batch_centred(self, x: Value) -> Any:
        """:meth:`FormulaContext.batch_centred`, made once per value (:meth:`batch_zscore`
        reads it, then the variance)."""
        key = ("batch_centred", id(x), "")
        if key not in self._reduced:
            self._reduced[key] = (x, super().batch_centred(x))
        return self._reduced[key][1]

    def batch_agg(self, x: Value, op: str) -> Any:
        return self._batch_rows(self._nan_reduce(self._per_batch, x, op))

    def _per_group(self, x: Any, op: str) -> Any:
        """The reduction ``op`` (:data:`REDUCE`) of ``x`` per group, one value a group."""
        return segment_reduce(self.torch, self.group, self.groups, x, op)

    def _group_rows(self, per_group: Any) -> Any:
        """One value a group (:meth:`_per_group`) gathered to the group's rows."""
        return per_group.index_select(0, self.group)

    def _per_batch(self, x: Any, op: str) -> Any:
        """:meth:`_per_group` per batch (``batch`` None: of the whole tensor, shape (1,))."""
        if self.batch is not None:
            return segment_reduce(self.torch, self.batch, self.batches, x, op)
        if not x.shape[0]:  # no rows: the start values (0, -inf, inf)
            return segment_reduce(self.torch, x.long(), 1, x, op)
        return REDUCE[op](self.torch, x, 0)

    def _batch_rows(self, per_batch: Any) -> Any:
        return per_batch if self.batch is None else per_batch.index_select(0, self.batch)

    def _nan_reduce(self, per: Callable[[Any, str], Any], x: Value, op: str) -> Any:
        """The reduction ``op`` of ``x`` by ``per`` with NaN left out: ``sum`` (0 when all
        are NaN), ``nonzero``, ``count``, ``max`` or ``min`` (NaN when all are NaN)."""
        torch, y = self.torch, self.to_float(x)
        if op == "sum":
            return per(y, "nansum")
        key = (per.__name__, id(x), op)  # x held below: its id is not reused meanwhile
        if key not in self._reduced:
            valid = ~torch.isnan(y)
            if op == "nonzero":
                reduced = per(valid & (y != 0), "sum")
            elif op == "count":
                reduced = per(valid, "sum")
            else:
                extreme = per(self.fill_null(y, -torch.inf if op == "max" else torch.inf), op)
                count = self._nan_reduce(per, x, "count")
                reduced = torch.where(count > 0, extreme, float("nan"))
            self._reduced[key] = (x, reduced)
        return self._reduced[key][1]

    @cached_property
    def _reduced(self) -> dict[tuple[str, int, str], tuple[Any, Any]]:
        """:meth:`_nan_reduce`'s counts and extrema (and batch means, centred values, finite
        sums), once each a context (:meth:`batch_zscore` asks for a count five times)."""
        return {}


@dataclass(frozen=True)
class FixedGroupContext(TorchContext):
    """:class:`TorchContext` over groups of ``size`` consecutive rows (``group``, ``groups``
    unused) whose per-row values (``reward``, ``length``, ``baseline`` and what a formula
    makes of them) are ``(N / size, size)`` views of the rows: a group's statistic is a
    reduction along dim 1, one value a group, ``(N / size, 1)``, which broadcasts over the
    view (never expanded to the rows); a batch's one value ``(1,)``, or gathered to the view
    by ``batch``'s codes. No sort, no scatter; the caller takes the rows back with
    ``reshape(-1)``.

    On the CPU, rewards known finite (:attr:`finite`) skip what cannot change a number: the
    NaN and singleton rules (a group of G >= 2 finite rewards is no singleton), the
    infinity check, the variance where only the mean is read, the zero-variance rule where
    no group can have one (:attr:`_may_be_constant`); a value whose sum over the one batch
    is finite, the NaN handling of its batch statistics (:meth:`batch_agg`)."""

    size: int = 1

    @cached_property
    def _mean(self) -> Any:
        """The group means of finite rewards: the sums over G."""
        return self._sums / float(self.size)

    @cached_property
    def _may_be_constant(self) -> bool:
        """Whether a group of finite rewards may have a variance of exactly 0: not when the
        first two rewards of every group differ by more than 2^-500 (one of them is then
        more than 2^-501 from any mean, and its square, 2^-1002 at least, keeps the
        variance above 0: :attr:`_reward_stats`). One pass over two columns, not the
        variance's."""
        if self.size < 2:
            return True
        gap = (self.reward[:, 0] - self.reward[:, 1]).abs_()
        return not bool((gap > 2.0**-500).all())

    def _counts(self) -> Any:
        return self.torch.full_like(self._sums, float(self.size))

    def _squares(self, mean: Any) -> Any:
        """:meth:`TorchContext._squares` by blocks of groups: the squares in one small
        buffer."""
        torch, view, g = self.torch, self.reward, self.size
        total = torch.empty_like(mean)
        step = max(1, 2**16 // g)
        squares = torch.empty((min(step, mean.shape[0]), g), dtype=torch.float64)
        for start in range(0, mean.shape[0], step):
            rows = slice(start, start + step)
            block = torch.sub(view[rows], mean[rows], out=squares[: view[rows].shape[0]])
            torch.sum(block.mul_(block), 1, keepdim=True, dtype=torch.float64, out=total[rows])
        return total

    def _all_equal(self, n: Any) -> Any:
        """Per group, whether its maximum is its minimum (every reward valid: NaN makes
        them unequal, where :meth:`TorchContext._all_equal` leaves NaN out)."""
        if not self.finite:
            return super()._all_equal(n)
        return self.reward.amax(1, keepdim=True) == self.reward.amin(1, keepdim=True)

    def reward_stat(self, name: str) -> Any:
        """:meth:`TorchContext.reward_stat`; of finite rewards the count is G (0-dim: it
        broadcasts), the mean the sums over G (no variance); on the CPU a rule
        (``constant``, ``singleton``) that holds in no group is one False broadcast to the
        view (:meth:`where` skips it), known without the statistics where it can be."""
        if self.finite:
            if name == "count":  # one value: n - 1 is computed once
                return self.torch.full((), float(self.size), dtype=self.torch.float64)
            if name == "mean":
                return self._mean
            if (name == "singleton" and self.size > 1) or (
                name == "constant" and not self._may_be_constant
            ):
                return self._nowhere()
        return super().reward_stat(name)

    def batch_agg(self, x: Value, op: str) -> Any:
        """:meth:`TorchContext.batch_agg`; one batch on the CPU, of a value whose sum is
        finite (no NaN, no infinity; :meth:`_finite_sum`): the sum is that sum (``nansum``'s,
        bit for bit), the count the rows, the maximum and minimum plain reductions."""
        total = None
        if op in ("sum", "count", "max", "min") and self.batch is None:
            total = self._finite_sum(x)
        if total is None:
            return super().batch_agg(x, op)
        if op == "sum":
            return total
        if op == "count":
            return self.torch.full_like(total, float(self.reward.numel()))
        return REDUCE[op](self.torch, self._flat(x), 0)  # aminmax along a dim: 10x slower

    def _finite_sum(self, x: Value) -> Any:
        """The sum of ``x`` over the rows, on the CPU, when it is finite; else None (once
        per value: kept with the other reductions)."""
        key = ("finite_sum", id(x), "sum")  # x held below: its id is not reused meanwhile
        if key not in self._reduced:
            total = None
            if self.device.type == "cpu" and self.reward.numel():
                total = REDUCE["sum"](self.torch, self._flat(x), 0)
                total = total if math.isfinite(float(total)) else None
            self._reduced[key] = (x, total)
        return self._reduced[key][1]

    def _flat(self, x: Value) -> Any:
        """``x`` (a view, or one value a group or batch) as float64 rows."""
        return self.torch.broadcast_to(self.to_float(x), self.reward.shape).reshape(-1)

    def _per_group(self, x: Any, op: str) -> Any:
        return REDUCE[op](self.torch, self.torch.broadcast_to(x, self.reward.shape), 1)

    def _group_rows(self, per_group: Any) -> Any:
        return per_group

    def _per_batch(self, x: Any, op: str) -> Any:
        return super()._per_batch(self.torch.broadcast_to(x, self.reward.shape).reshape(-1), op)

    def _batch_rows(self, per_batch: Any) -> Any:
        if self.batch is None:
            return per_batch
        return per_batch.index_select(0, self.batch).view(self.reward.shape)


def _covers(shape: tuple[int, ...], other: tuple[int, ...]) -> bool:
    """Whether broadcasting ``other`` against ``shape`` leaves ``shape``: what
    ``torch.broadcast_shapes`` says, without its 10-odd microseconds a call."""
    pairs = zip(shape[::-1], other[::-1], strict=False)
    return len(other) <= len(shape) and all(o in (1, s) for s, o in pairs)


# Reductions along a dim, kept (size 1), in float64: ``sum`` (of floats or bools), ``nansum``
# (NaN counting 0), ``max``, ``min`` (NaN propagates).
REDUCE: Final[dict[str, Callable[[Any, Any, int], Any]]] = {
    "sum": lambda torch, x, dim: x.sum(dim, keepdim=True, dtype=torch.float64),
    "nansum": lambda torch, x, dim: torch.nansum(x, dim, keepdim=True),
    "max": lambda torch, x, dim: x.amax(dim, keepdim=True),
    "min": lambda torch, x, dim: x.amin(dim, keepdim=True),
}


def segment_reduce(torch: Any, codes: Any, size: int, x: Any, op: str) -> Any:
    """The reduction ``op`` (:data:`REDUCE`) of ``x`` per code (0..``size``-1): ``size``
    values (a code without rows: 0, -inf or inf)."""
    if op == "nansum":
        x = torch.nan_to_num(x, nan=0.0, posinf=torch.inf, neginf=-torch.inf)
    if op in ("sum", "nansum"):
        sums = torch.zeros(size, dtype=torch.float64, device=x.device)
        return sums.index_add_(0, codes, x.to(torch.float64))
    fill = -torch.inf if op == "max" else torch.inf
    start = torch.full((size,), fill, dtype=torch.float64, device=x.device)
    return start.scatter_reduce(0, codes, x, "amax" if op == "max" else "amin")
