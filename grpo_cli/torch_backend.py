"""The optional torch path (``--backend torch``): the same contract as the Polars path.

Polars finds the groups (dense integer codes of the group key, and of the batch key) and
prepares the reward (aggregation, null policy); torch then does the segment arithmetic on
the chosen device with ``index_add_`` / ``scatter_reduce``, in float64:

    n_g = sum_g 1[valid], mean_g = sum_g r / n_g, var_g = sum_g (r - mean_g)^2 / (n_g - ddof)

Supported estimators: SUPPORTED (others raise a clear error). torch is imported here only,
and only when this path runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import polars as pl

from grpo_cli.errors import OptionsError
from grpo_cli.options import DEVICES

if TYPE_CHECKING:
    from grpo_cli.compute import Keys
    from grpo_cli.options import AdvantageOptions

SUPPORTED: Final = ("grpo", "dr_grpo", "rloo", "batch_std")
INSTALL_HINT: Final = (
    "pip install 'grpo-adv[torch]' (on this project's machines: pip install torch==2.13.0)"
)


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


def check_supported(options: AdvantageOptions) -> None:
    """Raise for options the torch path does not implement."""
    if options.estimator not in SUPPORTED:
        raise OptionsError(
            f"estimator {options.estimator} is not supported on torch",
            hint=f"torch supports {', '.join(SUPPORTED)}; use --backend polars for the others",
        )
    if options.aggregation != "sum_then_normalize":
        raise OptionsError(
            "--aggregation normalize_then_sum is not supported on torch",
            hint="use --backend polars",
        )
    if options.token_weighted:
        raise OptionsError(
            "--token-weighted is not supported on torch", hint="use --backend polars"
        )


def dense_codes(frame: pl.DataFrame, columns: tuple[str, ...], *, exact: bool = False) -> pl.Series:
    """0..k-1 codes of the key ``columns`` (equal keys, equal codes).

    Unless ``exact``, text and composite keys are ranked through a 64-bit hash (ranking the
    strings themselves is several times slower); :func:`codes_collide` checks the result.
    """
    key = pl.col(columns[0]) if len(columns) == 1 else pl.struct(list(columns))
    if not exact and not (len(columns) == 1 and frame.schema[columns[0]].is_integer()):
        key = key.hash(seed=0)
    return frame.select((key.rank("dense") - 1).cast(pl.Int64)).to_series()


def codes_collide(torch: Any, frame: pl.DataFrame, columns: tuple[str, ...], codes: Any) -> bool:
    """Whether two different keys got one code: a second, independent hash then differs
    within the code (checked on the device with scatter amin / amax)."""
    key = pl.col(columns[0]) if len(columns) == 1 else pl.struct(list(columns))
    second = frame.select(key.hash(seed=1)).to_series().to_numpy(writable=True).view("int64")
    check = torch.as_tensor(second, device=codes.device)
    size = int(codes.max().item()) + 1 if codes.numel() else 0
    lo = torch.full((size,), torch.iinfo(torch.int64).max, device=codes.device)
    hi = torch.full((size,), torch.iinfo(torch.int64).min, device=codes.device)
    lo = lo.scatter_reduce(0, codes, check, "amin")
    hi = hi.scatter_reduce(0, codes, check, "amax")
    return bool((lo != hi).any().item())


def torch_columns(frame: pl.DataFrame, options: AdvantageOptions, keys: Keys) -> pl.DataFrame:
    """The advantage and the per-row group profile, computed with torch.

    ``frame`` holds the prepared reward (``compute.REWARD_KEY``) and the key columns.
    """
    from grpo_cli.compute import CONSTANT_KEY, REWARD_KEY, SIZE_KEY, VALID_KEY

    torch = import_torch()
    device = resolve_device(torch, options.device)
    reward = frame[REWARD_KEY].to_numpy(writable=True)  # nulls become NaN
    r = torch.as_tensor(reward, dtype=torch.float64, device=device)
    group = _codes(torch, frame, keys.group, device)
    batch = _codes(torch, frame, keys.batch, device)
    out = segment_advantages(torch, r, group, batch, options)
    return pl.DataFrame(
        {
            options.advantage_col: out["advantage"].cpu().numpy(),
            SIZE_KEY: out["size"].cpu().numpy(),
            VALID_KEY: out["valid"].cpu().numpy(),
            CONSTANT_KEY: out["constant"].cpu().numpy(),
        }
    ).with_columns(pl.col(options.advantage_col).fill_nan(None))


def _codes(torch: Any, frame: pl.DataFrame, columns: tuple[str, ...], device: Any) -> Any:
    codes = torch.as_tensor(dense_codes(frame, columns).to_numpy(writable=True), device=device)
    if codes_collide(torch, frame, columns, codes):
        exact = dense_codes(frame, columns, exact=True).to_numpy(writable=True)
        codes = torch.as_tensor(exact, device=device)
    return codes


def segment_advantages(
    torch: Any, r: Any, group: Any, batch: Any, options: AdvantageOptions
) -> dict[str, Any]:
    """The torch kernel: per-row advantage and group profile from codes (see module doc)."""
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
    if options.singleton in ("zero", "raw", "null"):
        fill = {"zero": torch.zeros_like(r), "raw": r, "null": torch.full_like(r, float("nan"))}
        value = torch.where(singleton, fill[options.singleton], value)
    null_value = 0.0 if options.nulls == "zero" else float("nan")
    value = torch.where(valid, value, torch.full_like(r, null_value))
    if options.clip is not None:
        value = value.clamp(options.clip[0], options.clip[1])
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
