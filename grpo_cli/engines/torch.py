"""The optional torch engine (``--backend torch``): the same contract as the Polars engine.

Polars finds the groups (dense integer codes of the group key, and of the batch key) and
prepares the reward (aggregation, null policy); torch then does the segment arithmetic on
the chosen device with ``index_add_`` / ``scatter_reduce``, in float64:

    n_g = sum_g 1[valid], mean_g = sum_g r / n_g, var_g = sum_g (r - mean_g)^2 / (n_g - ddof)

and the formula of SUPPORTED estimators (the engine refuses the others); the shared policies
are applied afterwards, as for every engine (:mod:`grpo_cli.policies`). torch is imported
here only, and only when this engine runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import polars as pl

from grpo_cli.columns import CONSTANT_KEY, REWARD_KEY, SIZE_KEY, VALID_KEY
from grpo_cli.columns import TORCH_RAW as RAW
from grpo_cli.engines import ENGINES, EngineInfo
from grpo_cli.errors import OptionsError
from grpo_cli.options import DEVICES, AdvantageOptions
from grpo_cli.plan import Keys, Plan, collision_columns, estimator_context
from grpo_cli.policies import apply_policies

SUPPORTED: Final = ("grpo", "dr_grpo", "rloo", "batch_std")
INSTALL_HINT: Final = "pip install 'grpo-adv[torch]'"


def import_torch() -> Any:
    """torch, or an OptionsError saying how to install it."""
    try:
        import torch
    except ImportError:
        raise OptionsError(
            "--backend torch needs PyTorch, which is not installed", hint=INSTALL_HINT
        ) from None
    return torch


def resolve_device(torch: Any, device: str) -> Any:
    """``auto``: CUDA when available, else the CPU; ``cuda`` without CUDA is an error."""
    if device not in DEVICES:
        raise OptionsError(f"unknown --device {device!r}", hint="choose auto, cpu or cuda")
    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise OptionsError(
                "--device cuda: torch sees no CUDA device",
                hint="use --device cpu, or a machine with an NVIDIA GPU and a CUDA build of torch",
            )
        return torch.device("cuda")
    return torch.device("cpu")


@dataclass(frozen=True)
class TorchEngine:
    """``--backend torch``: SUPPORTED estimators, on the CPU or a CUDA device."""

    info: EngineInfo

    def refusal(self, plan: Plan) -> str | None:
        """Estimators outside SUPPORTED, GDPO and token-weighted statistics."""
        options = plan.options
        if options.estimator not in SUPPORTED:
            return f"estimator {options.estimator} (it computes {', '.join(SUPPORTED)})"
        if options.aggregation != "sum_then_normalize":
            return "--aggregation normalize_then_sum"
        if options.token_weighted:
            return "--token-weighted"
        return None

    def annotate(self, frame: pl.DataFrame, plan: Plan) -> pl.DataFrame:
        """Polars prepares keys and rewards; torch does the arithmetic; Polars applies the
        policies (see :class:`grpo_cli.engines.FrameEngine`)."""
        from grpo_cli.engines.polars import collect, prepare

        options = plan.options
        # The collision check column comes from Polars, as on every engine.
        lazy = prepare(frame, plan).with_columns(collision_columns(plan.keys))
        prepared = collect(lazy, deterministic=True)
        full = prepared.hstack(torch_columns(prepared, options, plan.keys))
        ctx = estimator_context(plan)
        advantage = apply_policies(
            pl.col(RAW), plan, reward=pl.col(REWARD_KEY), singleton=pl.col(VALID_KEY) == 1
        )
        full = full.with_columns(advantage.alias(options.advantage_col)).drop(RAW)
        if options.with_stats:
            full = full.with_columns(
                pl.col(SIZE_KEY).alias("group_size"),
                ctx.in_group(ctx.reward.mean()).alias("group_mean"),
                ctx.in_group(ctx.reward.std(ddof=options.ddof)).alias("group_std"),
            )
        return full


ENGINE = TorchEngine(ENGINES["torch"])


def dense_codes(frame: pl.DataFrame, columns: tuple[str, ...]) -> pl.Series:
    """0..k-1 codes of the key ``columns``: equal keys, equal codes (exact: the plan's key
    is already one 64-bit hash column unless it is the exact fallback)."""
    key = pl.col(columns[0]) if len(columns) == 1 else pl.struct(list(columns))
    return frame.select((key.rank("dense") - 1).cast(pl.Int64)).to_series()


def torch_columns(frame: pl.DataFrame, options: AdvantageOptions, keys: Keys) -> pl.DataFrame:
    """The formula's value (RAW, before the policies) and the per-row group profile,
    computed with torch. ``frame`` holds the prepared reward (REWARD_KEY) and the key
    columns."""
    torch = import_torch()
    device = resolve_device(torch, options.device)
    reward = frame[REWARD_KEY].to_numpy(writable=True)  # nulls become NaN
    r = torch.as_tensor(reward, dtype=torch.float64, device=device)
    group = _codes(torch, frame, keys.group, device)
    batch = _codes(torch, frame, keys.batch, device)
    out = segment_advantages(torch, r, group, batch, options)
    return pl.DataFrame(
        {
            RAW: out["advantage"].cpu().numpy(),
            SIZE_KEY: out["size"].cpu().numpy(),
            VALID_KEY: out["valid"].cpu().numpy(),
            CONSTANT_KEY: out["constant"].cpu().numpy(),
        }
    ).with_columns(pl.col(RAW).fill_nan(None))


def _codes(torch: Any, frame: pl.DataFrame, columns: tuple[str, ...], device: Any) -> Any:
    return torch.as_tensor(dense_codes(frame, columns).to_numpy(writable=True), device=device)


def segment_advantages(
    torch: Any, r: Any, group: Any, batch: Any, options: AdvantageOptions
) -> dict[str, Any]:
    """The torch kernel: per-row formula value (before the policies) and group profile
    from codes (see module doc)."""
    valid = ~torch.isnan(r)
    r0 = torch.where(valid, r, torch.zeros_like(r))
    groups = int(group.max().item()) + 1 if group.numel() else 0
    zeros = torch.zeros(groups, dtype=torch.float64, device=r.device)

    def gsum(values: Any) -> Any:
        return zeros.clone().index_add_(0, group, values)

    n = gsum(valid.to(torch.float64))
    size = gsum(torch.ones_like(r))
    mean = gsum(r0) / n
    centred = torch.where(valid, r - mean[group], torch.zeros_like(r))
    var = gsum(centred * centred) / (n - options.ddof)
    big = torch.full_like(zeros, float("inf"))
    hi = (-big).scatter_reduce(0, group, torch.where(valid, r, -torch.inf), "amax")
    lo = big.scatter_reduce(0, group, torch.where(valid, r, torch.inf), "amin")
    count = n[group]
    constant = (count >= 2) & (hi[group] == lo[group])
    singleton = count == 1
    g_mean, g_var = mean[group], var[group]
    if options.singleton == "verl":
        g_mean = torch.where(singleton, torch.zeros_like(g_mean), g_mean)
        g_var = torch.where(singleton, torch.ones_like(g_var), g_var)
    centred_r = r - g_mean
    if options.estimator == "grpo":
        value = _norm(torch, centred_r, g_var, options)
    elif options.estimator == "dr_grpo":
        value = centred_r
    elif options.estimator == "rloo":
        loo = r - (gsum(r0)[group] - r) / (count - 1)
        value = torch.where(singleton, centred_r, loo)
    else:  # batch_std: group mean, batch std of the raw rewards
        value = _norm(torch, centred_r, _batch_var(torch, r, valid, batch, options), options)
    value = torch.where(constant, torch.zeros_like(value), value)
    return {
        "advantage": value,
        "size": size[group].to(torch.int64),
        "valid": count.to(torch.int64),
        "constant": constant,
    }


def _batch_var(torch: Any, r: Any, valid: Any, batch: Any, options: AdvantageOptions) -> Any:
    batches = int(batch.max().item()) + 1 if batch.numel() else 0
    zeros = torch.zeros(batches, dtype=torch.float64, device=r.device)
    r0 = torch.where(valid, r, torch.zeros_like(r))
    n = zeros.clone().index_add_(0, batch, valid.to(torch.float64))
    mean = zeros.clone().index_add_(0, batch, r0) / n
    centred = torch.where(valid, r - mean[batch], torch.zeros_like(r))
    return (zeros.clone().index_add_(0, batch, centred * centred) / (n - options.ddof))[batch]


def _norm(torch: Any, centred: Any, var: Any, options: AdvantageOptions) -> Any:
    if options.eps_mode == "std":
        return centred / (torch.sqrt(var) + options.eps)
    if options.eps_mode == "var":
        return centred / torch.sqrt(var + options.eps)
    return centred / torch.sqrt(torch.clamp(var, min=options.eps))
