"""Independent re-implementations of the trainers' published advantage code, in plain
Python/numpy loops (no Polars, nothing shared with grpo_cli), used as test oracles.

Each follows the trainer's code path as read in its source (see grpo_cli.core.presets for the
files and versions), generalised to variable group sizes the way the trainer's own
statistics would treat them (TRL: NaN padding with nanmean/nanstd; verl: its dict keyed by
uid; OpenRLHF: its per-group reshape). Computation is float64.

The references of issue 30 (from ``nemo_rl_baseline_and_std`` on) follow each trainer in
float32 instead, op by op, with numpy float32 arrays standing in for the trainer's torch
float32 tensors (torch is an optional dependency; a reduction may differ from torch's by an
ulp, far inside the 2e-6 tolerance). Each names the file, function and commit it was read
from; token-level ones take per-response ``lengths`` and build the trainer's (B, L) mask,
returning the value on a response's tokens (equal within a response). Groups are contiguous
blocks of ``n`` where the trainer reshapes (-1, n), else keyed by ``keys``.
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

NAN = float("nan")


def _groups(keys: Sequence[object]) -> dict[object, list[int]]:
    out: dict[object, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        out[key].append(i)
    return out


def torch_std(values: Sequence[float]) -> float:
    """torch.std default (unbiased); NaN for a single value, as torch gives."""
    n = len(values)
    if n < 2:
        return NAN
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def trl_nanstd(values: Sequence[float]) -> float:
    """trl.trainer.utils.nanstd: ddof 1 over non-NaN values, NaN when fewer than 2: the
    nanmean of the squared deviations (a NaN one, ``inf - inf``, left out) times
    ``count / (count - 1)`` of the non-NaN values."""
    kept = [v for v in values if not math.isnan(v)]
    if len(kept) < 2:
        return NAN
    mean = sum(kept) / len(kept)
    squares = [d for d in ((v - mean) ** 2 for v in kept) if not math.isnan(d)]
    if not squares:
        return NAN
    return math.sqrt(sum(squares) / len(squares) * len(kept) / (len(kept) - 1))


def trl_nanmean(values: Sequence[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else NAN


def _nansum(values: Sequence[float]) -> float:
    """torch.nansum: NaN terms count 0 (``inf + -inf`` is still NaN)."""
    return sum(v for v in values if not math.isnan(v))


def trl_grpo(
    rewards_per_func: np.ndarray,
    keys: Sequence[object],
    weights: Sequence[float] | None = None,
    scale_rewards: str = "group",
    aggregation: str = "sum_then_normalize",
    largest: float = sys.float_info.max,
) -> list[float]:
    """TRL >= 1.6 GRPOTrainer: rewards_per_func (N, K) with NaN for None, infinities
    included (IEEE arithmetic, as torch's); ``largest``: what ``nan_to_num`` makes of an
    infinite advantage (the dtype's largest finite value: TRL's float32 3.4028235e38)."""
    n, k = rewards_per_func.shape
    rows = rewards_per_func.tolist()  # Python floats: IEEE without numpy's warnings
    w = list(weights) if weights is not None else [1.0] * k
    unscorable = [all(math.isnan(x) for x in row) for row in rows]
    groups = _groups(keys)
    if aggregation == "sum_then_normalize":
        r = [
            NAN if unscorable[i] else _nansum([w[j] * x for j, x in enumerate(row)])
            for i, row in enumerate(rows)
        ]
        batch_std = trl_nanstd(r)
        adv = [NAN] * n
        for idx in groups.values():
            values = [r[i] for i in idx]
            mean = trl_nanmean(values)
            std = trl_nanstd(values) if scale_rewards in ("group", "none") else batch_std
            for i in idx:
                a = r[i] - mean
                if scale_rewards != "none":
                    a = a / (std + 1e-4)
                adv[i] = a
    else:
        z = np.full((n, k), NAN)
        for idx in groups.values():
            for j in range(k):
                values = [rows[i][j] for i in idx]
                mean, std = trl_nanmean(values), trl_nanstd(values)
                for i in idx:
                    z[i, j] = (rows[i][j] - mean) / (std + 1e-4)
        s = [
            NAN if unscorable[i] else _nansum([w[j] * x for j, x in enumerate(row)])
            for i, row in enumerate(z)
        ]
        mean_s, std_s = trl_nanmean(s), trl_nanstd(s)
        adv = [(v - mean_s) / (std_s + 1e-4) for v in s]
    # torch.nan_to_num(nan=0.0): infinities become the dtype's largest finite values
    return [0.0 if math.isnan(a) else max(-largest, min(largest, a)) for a in adv]


def verl_group_stats(
    scores: Sequence[float], keys: Sequence[object]
) -> tuple[list[float], list[float]]:
    """verl's id2mean / id2std: singleton mean 0, std 1; else torch.mean, torch.std."""
    mean = [0.0] * len(scores)
    std = [1.0] * len(scores)
    for idx in _groups(keys).values():
        if len(idx) > 1:
            values = [scores[i] for i in idx]
            m, s = sum(values) / len(values), torch_std(values)
            for i in idx:
                mean[i], std[i] = m, s
    return mean, std


def verl_grpo(
    scores: Sequence[float], keys: Sequence[object], norm_by_std: bool = True, epsilon: float = 1e-6
) -> list[float]:
    """verl compute_grpo_outcome_advantage."""
    mean, std = verl_group_stats(scores, keys)
    if norm_by_std:
        return [(s - m) / (d + epsilon) for s, m, d in zip(scores, mean, std, strict=True)]
    return [s - m for s, m in zip(scores, mean, strict=True)]


def verl_rloo(scores: Sequence[float], keys: Sequence[object]) -> list[float]:
    """verl compute_rloo_outcome_advantage: n/(n-1) s - n/(n-1) mean; singletons raw."""
    out = list(scores)
    for idx in _groups(keys).values():
        n = len(idx)
        if n > 1:
            mean = sum(scores[i] for i in idx) / n
            for i in idx:
                out[i] = scores[i] * n / (n - 1) - mean * n / (n - 1)
    return out


def masked_whiten_tokens(
    values: Sequence[float], lengths: Sequence[int], unbiased: bool, floor: bool, eps: float
) -> list[float]:
    """Whiten per-response values tiled over their tokens: verl masked_whiten (unbiased,
    rsqrt(var + eps)) or OpenRLHF's (population var, rsqrt(clamp(var, min=eps)))."""
    tokens = [v for v, length in zip(values, lengths, strict=True) for _ in range(length)]
    n = len(tokens)
    mean = sum(tokens) / n
    var = sum((t - mean) ** 2 for t in tokens) / n
    if unbiased:
        var = var * n / (n - 1)
    denom = math.sqrt(max(var, eps)) if floor else math.sqrt(var + eps)
    return [(v - mean) / denom for v in values]


def verl_reinforce_pp_baseline(
    scores: Sequence[float], keys: Sequence[object], lengths: Sequence[int]
) -> list[float]:
    """verl: s - group mean (singleton mean 0), tiled over tokens, masked_whiten."""
    mean, _ = verl_group_stats(scores, keys)
    centred = [s - m for s, m in zip(scores, mean, strict=True)]
    return masked_whiten_tokens(centred, lengths, unbiased=True, floor=False, eps=1e-8)


def verl_gpg(scores: Sequence[float], keys: Sequence[object]) -> list[float]:
    """verl compute_gpg_outcome_advantage: alpha = bsz / max(count_nonzero, 1)."""
    alpha = len(scores) / max(sum(1 for s in scores if s != 0), 1)
    mean, _ = verl_group_stats(scores, keys)
    return [alpha * (s - m) for s, m in zip(scores, mean, strict=True)]


def verl_grpo_passk(
    scores: Sequence[float], keys: Sequence[object], epsilon: float = 1e-6
) -> list[float]:
    """verl compute_grpo_passk_outcome_advantage (norm_adv_by_std_in_grpo=True)."""
    out = [0.0] * len(scores)
    for idx in _groups(keys).values():
        values = [scores[i] for i in idx]
        if len(values) < 2:
            raise ValueError("Pass@k requires at least 2 samples per group")
        order = sorted(range(len(values)), key=lambda j: -values[j])
        top, second = values[order[0]], values[order[1]]
        if top == second:
            continue
        out[idx[order[0]]] = (top - second) / (torch_std(values) + epsilon)
    return out


def openrlhf(
    rewards: Sequence[float],
    keys: Sequence[object],
    estimator: str,
    lengths: Sequence[int] | None = None,
    clip: float = 10.0,
) -> list[float]:
    """OpenRLHF compute_advantages_and_returns + compute_reward clamp + whitening."""
    shaped = [0.0] * len(rewards)
    for idx in _groups(keys).values():
        values = [rewards[i] for i in idx]
        n = len(values)
        mean = sum(values) / n
        for i in idx:
            r = rewards[i]
            if estimator == "rloo":
                shaped[i] = r - (sum(values) - r) / (n - 1)
            elif estimator in ("reinforce_baseline", "dr_grpo"):
                shaped[i] = r - mean
            elif estimator == "group_norm":
                shaped[i] = (r - mean) / (torch_std(values) + 1e-9)
    clamped = [min(max(s, -clip), clip) for s in shaped]
    if estimator == "reinforce_baseline":
        assert lengths is not None
        return masked_whiten_tokens(clamped, lengths, unbiased=False, floor=True, eps=1e-8)
    return clamped


# --- Issue 30: the other trainers, float32 as they compute ------------------------------

F32 = np.float32


def _f32(values: Sequence[float] | np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=F32)


def _token_mask(lengths: Sequence[int]) -> np.ndarray:
    """The (B, max length) float32 response mask: 1 on a response's tokens, 0 on padding."""
    width = max(lengths)
    return (np.arange(width)[None, :] < np.asarray(lengths)[:, None]).astype(F32)


def _tiled(values: np.ndarray, lengths: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Per-response float32 values broadcast over their tokens (``x.unsqueeze(-1) * mask``),
    and the mask."""
    mask = _token_mask(lengths)
    return values.astype(F32)[:, None] * mask, mask


def _first_token(tokens: np.ndarray) -> list[float]:
    """Each response's value, read at its first token (all its tokens are equal)."""
    return [float(v) for v in tokens[:, 0]]


def _rsqrt(x: np.ndarray | np.floating) -> np.ndarray:
    return (F32(1.0) / np.sqrt(np.asarray(x, dtype=F32))).astype(F32)


def _masked_whiten_f32(tokens: np.ndarray, mask: np.ndarray, mean_eps: float) -> np.ndarray:
    """verl / ROLL / SkyRL ``masked_whiten(values, mask)`` (shift_mean=True): masked mean
    ``sum(v*m) / (sum(m) + mean_eps)`` (verl and ROLL add 1e-8, SkyRL clamps the count at 1:
    pass 0), unbiased ``masked_var`` (the masked mean of the squared deviations times
    ``sum(m) / (sum(m) - 1)``), then ``(v - mean) * rsqrt(var + 1e-8)``."""
    count = mask.sum(dtype=F32)
    mean = (tokens * mask).sum(dtype=F32) / (count + F32(mean_eps))
    centred = tokens - mean
    var = (centred**2 * mask).sum(dtype=F32) / (count + F32(mean_eps))
    if count <= 1:
        raise ValueError("The sum of the mask is one, which can cause a division by zero.")
    var = var * (count / (count - F32(1.0)))
    whitened: np.ndarray = ((tokens - mean) * _rsqrt(var + F32(1e-8))).astype(F32)
    return whitened


# NeMo-RL (NVIDIA-NeMo/RL @ 7ea279abfbeb698b092856d0dab61e7cf39bc909, v0.7.0)


def nemo_rl_baseline_and_std(
    rewards: Sequence[float] | np.ndarray, keys: Sequence[object], leave_one_out: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """NeMo-RL ``nemo_rl/algorithms/utils.py:104-198`` calculate_baseline_and_std_per_prompt,
    every row valid (the estimators pass ``torch.ones_like(rewards)``). Per prompt: at most
    one valid row -> baseline = the reward, std 0; else, with ``M = 1 - eye`` (leave one out)
    or ``ones`` and ``k = count - leave_one_out``, ``b = M @ r / k``, ``sq = M @ r**2 / k``
    and ``std = sqrt((sq - b**2) * (k / (k - 1))).nan_to_num(0)`` in float32: one-pass
    E[x^2]-E[x]^2 (it cancels for close rewards: issue #1518), and a pair under leave one
    out gives 0 * inf = nan -> std 0. (nan_to_num(0) also maps +inf to the float32 max.)"""
    r = _f32(rewards)
    baseline = np.zeros_like(r)
    std = np.zeros_like(r)
    for idx in _groups(keys).values():
        rows = np.asarray(idx)
        size = len(rows)
        if size <= 1:
            baseline[rows] = r[rows]
            continue
        matrix = (
            (F32(1.0) - np.eye(size, dtype=F32)) if leave_one_out else np.ones((size, size), F32)
        )
        num_valid = F32(size) - F32(int(leave_one_out))
        prompt_baseline = (matrix @ r[rows]) / num_valid
        square = (matrix @ np.power(r[rows], F32(2))) / num_valid
        with np.errstate(divide="ignore", invalid="ignore"):
            factor = num_valid / (num_valid - F32(1.0))
            var = (square - np.square(prompt_baseline)) * factor
            std_rows = np.nan_to_num(np.sqrt(var), nan=0.0)
        baseline[rows] = prompt_baseline
        std[rows] = std_rows
    return baseline, std


def _nemo_rl_normalised(
    rewards: Sequence[float], keys: Sequence[object], leave_one_out: bool, normalize: bool
) -> np.ndarray:
    r = _f32(rewards)
    baseline, std = nemo_rl_baseline_and_std(r, keys, leave_one_out=leave_one_out)
    advantages: np.ndarray = r - baseline
    if normalize:
        # "don't sharpen the ones with no variation"
        divided = std > 0
        advantages[divided] = advantages[divided] / (std[divided] + F32(1e-6))
    return advantages


def nemo_rl_grpo(
    rewards: Sequence[float],
    keys: Sequence[object],
    leave_one_out: bool = True,
    normalize_rewards: bool = True,
) -> list[float]:
    """NeMo-RL ``nemo_rl/algorithms/advantage_estimator.py:57-98`` GRPOAdvantageEstimator
    (defaults ``use_leave_one_out_baseline=True``, ``normalize_rewards=True``: preset
    ``nemo-rl``; ``leave_one_out=False``: ``nemo-rl-no-loo``; ``normalize_rewards=False``:
    ``nemo-rl-no-std``). ``A = r - baseline``; where ``std > 0`` only, ``A / (std + 1e-6)``.
    A singleton (baseline = r) and an all-equal group give 0."""
    return [float(a) for a in _nemo_rl_normalised(rewards, keys, leave_one_out, normalize_rewards)]


def nemo_rl_gdpo(
    components: Mapping[str, Sequence[float]],
    keys: Sequence[object],
    weights: Sequence[float] | None = None,
    leave_one_out: bool = True,
    normalize_rewards: bool = True,
) -> list[float]:
    """NeMo-RL ``advantage_estimator.py:101-190`` GDPOAdvantageEstimator. The components are
    taken in **sorted name order** (``utils.py:35-39`` get_gdpo_reward_component_keys sorts
    the ``reward/<name>`` keys) and ``weights`` (default all 1) apply in that sorted order,
    whatever order ``components`` has. Per component the GRPO advantage above (leave one
    out, divided only where std > 0, eps 1e-6); ``A = sum(w_k * A_k)``; then over the batch
    of responses ``(A - A.mean()) / A.std()`` (ddof 1, no eps) if ``A.std() > 0``, else
    ``A - A.mean()`` (a batch of one: std nan, only centred)."""
    names = sorted(components)
    if weights is None:
        weights = [1.0] * len(names)
    if len(weights) != len(names):
        raise ValueError("one weight per component, in sorted name order")
    parts = [
        _nemo_rl_normalised(components[name], keys, leave_one_out, normalize_rewards)
        for name in names
    ]
    advantages = sum(w * part for w, part in zip(weights, parts, strict=True))
    assert isinstance(advantages, np.ndarray) and advantages.dtype == F32
    with np.errstate(divide="ignore", invalid="ignore"):
        adv_std = advantages.std(ddof=1) if len(advantages) > 1 else F32("nan")
    if adv_std > 0:
        advantages = (advantages - advantages.mean()) / adv_std
    else:
        advantages = advantages - advantages.mean()
    return [float(a) for a in advantages]


def nemo_rl_reinforce_pp(
    rewards: Sequence[float],
    keys: Sequence[object],
    lengths: Sequence[int],
    minus_baseline: bool = True,
) -> list[float]:
    """NeMo-RL ``advantage_estimator.py:193-267`` ReinforcePlusPlusAdvantageEstimator, no KL
    in the reward. ``minus_baseline`` (default True): ``r - group mean`` (the non-leave-one-
    out baseline of calculate_baseline_and_std_per_prompt: a singleton's baseline is its own
    reward, so 0). Expanded over the (B, L) mask, then whitened over the batch's tokens:
    ``mean = sum(a*m)/sum(m)``, population ``var = sum((a-mean)^2*m)/sum(m)``,
    ``(a - mean) * rsqrt(clamp(var, min=1e-8))``."""
    r = _f32(rewards)
    if minus_baseline:
        mean, _ = nemo_rl_baseline_and_std(r, keys, leave_one_out=False)
        adv = r - mean
    else:
        adv = r
    tokens, mask = _tiled(adv, lengths)
    adv_mean = (tokens * mask).sum(dtype=F32) / mask.sum(dtype=F32)
    adv_var = (np.power(tokens - adv_mean, F32(2)) * mask).sum(dtype=F32) / mask.sum(dtype=F32)
    adv_rstd = _rsqrt(np.maximum(adv_var, F32(1e-8)))
    return _first_token((tokens - adv_mean) * adv_rstd)


# AReaL (inclusionAI/AReaL @ 4aef98d8d818af55b43621aaadba047ae10f4e77, v1.0.4)


def _areal_mean(x: np.ndarray, mask: np.ndarray | None, leave_one_out: bool) -> np.ndarray:
    """AReaL ``areal/utils/data.py:1498-1553`` Normalization._compute_mean, high precision
    (float64), keepdim over every axis; leave one out: ``(sum - x) / (count - 1)``, zeros
    when count <= 1 (the masked form divides by ``clamp(count - m, 1)`` where m > 0)."""
    x = x.astype(np.float64)
    axes = tuple(range(x.ndim))
    if mask is None:
        factor = np.float64(x.size)
        x_masked = x
        x_sum = x.sum(axis=axes, keepdims=True)
    else:
        mask = mask.astype(np.float64)
        x_masked = x * mask
        factor = mask.sum()
        x_sum = x_masked.sum(axis=axes, keepdims=True)
    if leave_one_out:
        if factor <= 1:
            return np.zeros_like(x_sum)
        if mask is None:
            loo_mean: np.ndarray = (x_sum - x) / (factor - 1)
            return loo_mean
        loo = (x_sum - x_masked) / np.maximum(factor - mask, 1.0)
        return np.where(mask > 0, loo, np.broadcast_to(x_sum / factor, x.shape))
    if factor == 0:
        return np.zeros_like(x_sum)
    mean: np.ndarray = x_sum / factor
    return mean


def _areal_std(
    x: np.ndarray, mask: np.ndarray | None, mean: np.ndarray, unbiased: bool
) -> np.ndarray:
    """AReaL ``data.py:1555-1595`` Normalization._compute_std, float64, around the given
    mean (not necessarily the slice's own); unbiased with count <= 1 (or count 0): 1."""
    x = x.astype(np.float64)
    mean = np.asarray(mean, dtype=np.float64)
    axes = tuple(range(x.ndim))
    if mask is None:
        factor = np.float64(x.size)
        sum_sq = ((x - mean) ** 2).sum(axis=axes, keepdims=True)
    else:
        mask = mask.astype(np.float64)
        factor = mask.sum()
        sum_sq = ((x * mask - mean * mask) ** 2).sum(axis=axes, keepdims=True)
    if unbiased:
        if factor <= 1:
            return np.ones_like(sum_sq)
        unbiased_std: np.ndarray = np.sqrt(sum_sq / (factor - 1))
        return unbiased_std
    if factor == 0:
        return np.ones_like(sum_sq)
    std: np.ndarray = np.sqrt(sum_sq / factor)
    return std


def areal_normalization(
    x: np.ndarray,
    mean_level: str | None,
    std_level: str | None,
    group_size: int = 1,
    mean_leave1out: bool = False,
    std_unbiased: bool = True,
    eps: float = 1e-5,
    loss_mask: np.ndarray | None = None,
) -> np.ndarray:
    """AReaL ``data.py:1378-1496`` Normalization.__call__ (high_precision=True, one process).

    Group level: fixed consecutive slices of ``group_size`` (``range(bs // group_size)``);
    the group statistics (float64) are stored into ``zeros_like(x)``, so into x's float32,
    and rows after the last full slice keep mean 0 and std 0 (-> ``x / eps``). group_size 1:
    the mean is 0 only with mean_leave1out (else the row's own value), the std 1 when
    std_unbiased. Batch level: float64 statistics, so float64 arithmetic. Std level None:
    std 1 and eps 0. Returns ``((x - mean) [* mask] / (std + eps)).float()``."""
    bs = x.shape[0]
    if loss_mask is not None and loss_mask.sum() == 0:
        return x.astype(F32)
    if mean_level == "batch":
        mean = np.broadcast_to(_areal_mean(x, loss_mask, mean_leave1out), x.shape)
    elif mean_level == "group":
        mean = np.zeros_like(x)
        for i in range(bs // group_size):
            s = slice(i * group_size, (i + 1) * group_size)
            m = loss_mask[s] if loss_mask is not None else None
            if group_size == 1 and mean_leave1out:
                group_mean = np.zeros((1, *x.shape[1:]), dtype=np.float64)
            else:
                group_mean = _areal_mean(x[s], m, mean_leave1out)
            mean[s] = np.broadcast_to(group_mean, x[s].shape)
    else:
        mean = np.zeros_like(x)
    x_centred = x - mean
    if loss_mask is not None:
        x_centred = x_centred * loss_mask
    if std_level == "batch":
        std = np.broadcast_to(_areal_std(x, loss_mask, mean, std_unbiased), x.shape)
    elif std_level == "group":
        std = np.zeros_like(x)
        for i in range(bs // group_size):
            s = slice(i * group_size, (i + 1) * group_size)
            m = loss_mask[s] if loss_mask is not None else None
            if group_size == 1 and std_unbiased:
                group_std = np.ones((1, *x.shape[1:]), dtype=np.float64)
            else:
                group_std = _areal_std(x[s], m, mean[s], std_unbiased)
            std[s] = np.broadcast_to(group_std, x[s].shape)
    else:
        std = np.ones_like(x)
        eps = 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        out = x_centred / (std + (F32(eps) if std.dtype == F32 else eps))
    normalised: np.ndarray = out.astype(F32)
    return normalised


AREAL_REWARD_NORM: dict[str, tuple[str | None, bool, str | None] | None] = {
    "grpo": ("group", False, "group"),  # examples/math/gsm8k_grpo.yaml
    "dr_grpo": ("group", False, None),  # gsm8k_drgrpo.yaml
    "rloo": ("group", True, None),  # gsm8k_rloo.yaml (mean_leave1out: true)
    "reinforce": None,  # gsm8k_reinforce.yaml: no reward_norm
}
"""AReaL example configs: reward_norm (mean_level, mean_leave1out, std_level), or None."""


def areal(
    rewards: Sequence[float],
    group_size: int,
    lengths: Sequence[int],
    variant: str = "grpo",
    adv_norm: bool = True,
    reward_bias: float = 0.0,
    reward_scaling: float = 1.0,
    reward_clip: float = 20.0,
    eps: float = 1e-5,
) -> list[float]:
    """AReaL ``areal/trainer/ppo/actor.py:145-249`` PPOActor._compute_advantages, no critic,
    no overlong penalty, kl_ctl 0, discount 1 and gae_lambda 1 (the cli_args defaults), so
    GAE gives every loss-mask token its response's normalised reward. Steps: ``(r +
    reward_bias) * reward_scaling`` (cli defaults 0 and 1; the gsm8k examples use -0.5 and
    10), ``clip(-reward_clip, reward_clip)``, reward_norm per :data:`AREAL_REWARD_NORM`
    (eps 1e-5, std_unbiased), then with ``adv_norm`` batch/batch over the loss-mask tokens
    (ddof 1, ``/(std + 1e-5)``, float64 inside). ``areal-no-adv-norm``: adv_norm False."""
    score = _f32(rewards)
    score = (score + F32(reward_bias)) * F32(reward_scaling)
    score = np.clip(score, F32(-reward_clip), F32(reward_clip))
    levels = AREAL_REWARD_NORM[variant]
    if levels is not None:
        mean_level, leave1out, std_level = levels
        score = areal_normalization(score, mean_level, std_level, group_size, leave1out, True, eps)
    tokens, mask = _tiled(score, lengths)
    if adv_norm:
        tokens = areal_normalization(tokens, "batch", "batch", eps=eps, loss_mask=mask)
    return _first_token(tokens)


# slime (THUDM/slime @ 624b824a898ab0ec1fcb4d373004c7f3852bf515, v0.3.1)


def slime_grpo(
    rewards: Sequence[float],
    n_samples_per_prompt: int,
    rollout_batch_size: int | None = None,
    std_normalization: bool = True,
) -> list[float]:
    """slime ``slime/ray/rollout.py:608-633`` _post_process_rewards for grpo/gspo/cispo:
    float32; ``reshape(-1, n)`` when the sample count is ``n * rollout_batch_size`` (the
    default here), else the whole batch is one group (``view(-1, len)``); ``r - mean``; with
    std normalisation (``--disable-grpo-std-normalization`` off: ``slime-no-std``) the
    centred rewards over ``(std + 1e-6)``, ddof 1. ``utils/arguments.py:1981-1983`` turns
    std normalisation off when n = 1, so a singleton gives 0 (not 0/nan)."""
    r = _f32(rewards)
    if rollout_batch_size is None:
        rollout_batch_size = len(r) // n_samples_per_prompt
    if n_samples_per_prompt == 1:
        std_normalization = False
    if len(r) == n_samples_per_prompt * rollout_batch_size:
        r = r.reshape(-1, n_samples_per_prompt)
    else:
        r = r.reshape(-1, len(r))
    r = r - r.mean(axis=-1, keepdims=True, dtype=F32)
    if std_normalization:
        r = r / (r.std(axis=-1, ddof=1, keepdims=True, dtype=F32) + F32(1e-6))
    return [float(v) for v in r.reshape(-1)]


# SkyRL (NovaSky-AI/SkyRL @ a9564572eb8e91076be43c1bd5e4615e3de17265)
# skyrl/backends/skyrl_train/utils/ppo_utils.py


def skyrl_grpo(
    rewards: Sequence[float],
    keys: Sequence[object],
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
) -> list[float]:
    """SkyRL ``ppo_utils.py:1343-1393`` compute_grpo_outcome_advantage (``skyrl``;
    ``grpo_norm_by_std=False``: ``skyrl-no-std``): groups by uid; a singleton has mean 0 and
    std 1 (so ``r / (1 + 1e-6)``, or ``r`` without std); else torch.mean and torch.std
    (ddof 1) in float32; ``(r - mean) / (std + eps)``."""
    scores = _f32(rewards)
    out = scores.copy()
    for idx in _groups(keys).values():
        if len(idx) == 1:
            mean, std = F32(0.0), F32(1.0)
        else:
            group = scores[idx]
            mean, std = group.mean(dtype=F32), group.std(ddof=1, dtype=F32)
        for i in idx:
            if norm_by_std:
                out[i] = (scores[i] - mean) / (std + F32(epsilon))
            else:
                out[i] = scores[i] - mean
    return [float(v) for v in out]


def skyrl_rloo(rewards: Sequence[float], keys: Sequence[object]) -> list[float]:
    """SkyRL ``ppo_utils.py:1259-1309`` compute_rloo_outcome_advantage:
    ``(r - mean) * n / (n - 1)`` in float32 (``n / (n - 1)`` a Python float); a singleton
    group gives **0** (logged warning), where verl's rloo keeps the score."""
    scores = _f32(rewards)
    out = scores.copy()
    for idx in _groups(keys).values():
        n = len(idx)
        if n > 1:
            mean = scores[idx].mean(dtype=F32)
            for i in idx:
                out[i] = (scores[i] - mean) * F32(n / (n - 1))
        else:
            for i in idx:
                out[i] = 0.0
    return [float(v) for v in out]


def skyrl_maxrl(
    rewards: Sequence[float], keys: Sequence[object], epsilon: float = 1e-6
) -> list[float]:
    """SkyRL ``ppo_utils.py:1396-1428`` compute_maxrl_advantage: for groups larger than one
    ``(r - mean) / (mean + 1e-6)`` (no guard on the mean's sign); a singleton has mean 0 and
    is not divided, so it keeps ``r``."""
    scores = _f32(rewards)
    out = scores.copy()
    for idx in _groups(keys).values():
        mean = scores[idx].mean(dtype=F32) if len(idx) > 1 else F32(0.0)
        for i in idx:
            if len(idx) > 1:
                out[i] = (scores[i] - mean) / (mean + F32(epsilon))
            else:
                out[i] = scores[i] - mean
    return [float(v) for v in out]


def skyrl_reinforce_pp(rewards: Sequence[float], lengths: Sequence[int]) -> list[float]:
    """SkyRL ``ppo_utils.py:1224-1256`` compute_reinforce_plus_plus_outcome_advantage with
    gamma 1 (``config.py:904``): no baseline, the return (the reward on every response token),
    then ``masked_whiten`` (``ppo_utils.py:129-153``: the masked mean divides by
    ``clamp(sum(m), 1)``, ``torch_utils.py:180-184``; unbiased variance;
    ``rsqrt(var + 1e-8)``)."""
    tokens, mask = _tiled(_f32(rewards), lengths)
    return _first_token(_masked_whiten_f32(tokens, mask, mean_eps=0.0) * mask)


# ROLL (alibaba/ROLL @ 8eb27cc2dc34c4d1310b169d9b86d339004d811a, v0.3.0)


def roll_grpo(
    rewards: Sequence[float],
    n_sample: int,
    lengths: Sequence[int] | None = None,
    whiten_advantages: bool = False,
    reward_clip: float | None = None,
) -> list[float]:
    """ROLL ``roll/utils/functionals.py``: reward_postprocess (650-678) forces group/group for
    grpo; reward_norm (564-600) ``reshape(-1, n)``, ``(r - mean) / (torch.std + 1e-6)``
    (ddof 1: **a group of one gives nan**); then the clip when ``reward_clip`` is set (off by
    default, after the normalisation); compute_reinforce_return with gamma 1 (the default,
    ``configs/base_config.py:514``) puts the value on every response token; with
    ``whiten_advantages`` (``roll-whiten``) compute_advantage (1086-1193) applies
    ``masked_whiten`` over the tokens (masked mean over ``sum(m) + 1e-8``, unbiased variance,
    ``rsqrt(var + 1e-8)``), unless the batch has at most one valid token."""
    r = _f32(rewards).reshape(-1, n_sample)
    with np.errstate(divide="ignore", invalid="ignore"):
        std = r.std(axis=-1, ddof=1, keepdims=True, dtype=F32) if n_sample > 1 else F32("nan")
        normalised = ((r - r.mean(axis=-1, keepdims=True, dtype=F32)) / (std + F32(1e-6))).reshape(
            -1
        )
    if reward_clip:
        normalised = np.clip(normalised, F32(-reward_clip), F32(reward_clip))
    if not whiten_advantages:
        return [float(v) for v in normalised]
    assert lengths is not None
    tokens, mask = _tiled(normalised, lengths)
    if mask.sum() > 1:
        tokens = _masked_whiten_f32(tokens, mask, mean_eps=1e-8)
    return _first_token(tokens * mask)


# prime-rl (PrimeIntellect-ai/prime-rl @ 559b44772e471d1538537b8805cc77f3824a5e64)


def prime_rl_grpo(rewards: Sequence[float], keys: Sequence[object]) -> list[float]:
    """prime-rl ``src/prime_rl/orchestrator/algo/grpo.py:25-45`` GRPOAlgorithm.score_group,
    per group (one example's episodes), no length penalty (the default None): float32
    ``rewards - rewards.mean()``. A singleton gives 0."""
    r = _f32(rewards)
    out = np.zeros_like(r)
    for idx in _groups(keys).values():
        group = r[idx]
        out[idx] = group - group.mean(dtype=F32)
    return [float(v) for v in out]


def prime_rl_max_rl(rewards: Sequence[float], keys: Sequence[object]) -> list[float]:
    """prime-rl ``src/prime_rl/orchestrator/algo/max_rl.py:22-28`` MaxRLAlgorithm.score_group:
    float32, ``zeros if mean <= 0 else (r - mean) / mean`` (no eps). A singleton gives 0."""
    r = _f32(rewards)
    out = np.zeros_like(r)
    for idx in _groups(keys).values():
        group = r[idx]
        mean = group.mean(dtype=F32)
        out[idx] = np.zeros_like(group) if mean <= 0 else (group - mean) / mean
    return [float(v) for v in out]


# open-instruct (allenai/open-instruct @ e6c3044aa6201c8bfa4573c1b03142af599e730d)


def open_instruct(
    scores: Sequence[float], num_samples_per_prompt: int, normalization: str = "centered"
) -> list[float]:
    """open-instruct ``open_instruct/data_loader.py:1472-1484`` (advantage_normalization_type
    default "centered", line 421): numpy float64, ``reshape(-1, n)``, group mean and
    ``np.std`` (**ddof 0**) repeated per row; "centered" ``s - mean``; "standard"
    ``(s - mean) / (std + 1e-8)`` (``open-instruct-standard``). A singleton gives 0."""
    s = np.array(list(scores), dtype=np.float64)
    per_prompt = s.reshape(-1, num_samples_per_prompt)
    mean = np.repeat(per_prompt.mean(axis=-1), num_samples_per_prompt, axis=0)
    std = np.repeat(per_prompt.std(axis=-1), num_samples_per_prompt, axis=0)
    if normalization == "standard":
        advantages = (s - mean) / (std + 1e-8)
    elif normalization == "centered":
        advantages = s - mean
    else:
        raise ValueError(f"Invalid advantage normalization type: {normalization}")
    return [float(a) for a in advantages]


# verl (verl-project/verl @ 1dda039b9c6311889a9c9a26040677e1254814f9, core_algos.py equal
# to v0.9.0 and the 0.9.1 wheel per the research notes)


def _key_index(keys: Sequence[object]) -> np.ndarray:
    """A dense group index per row (the order of groups does not change any statistic)."""
    seen: dict[object, int] = {}
    return np.asarray([seen.setdefault(key, len(seen)) for key in keys], dtype=np.int64)


def verl_grpo_f32(
    scores: Sequence[float] | np.ndarray, keys: Sequence[object], epsilon: float = 1e-6
) -> np.ndarray:
    """verl ``verl/trainer/ppo/core_algos.py:267-331`` compute_grpo_outcome_advantage with
    norm_adv_by_std_in_grpo True, float32: singleton mean 0 std 1, else torch.mean and
    torch.std (ddof 1) of the stacked scores; ``(s - mean) / (std + eps)``."""
    s = _f32(scores)
    out = s.copy()
    for idx in _groups(keys).values():
        if len(idx) == 1:
            mean, std = F32(0.0), F32(1.0)
        else:
            mean, std = s[idx].mean(dtype=F32), s[idx].std(ddof=1, dtype=F32)
        for i in idx:
            out[i] = (s[i] - mean) / (std + F32(epsilon))
    return out


def verl_grpo_vectorized(
    scores: Sequence[float], keys: Sequence[object], epsilon: float = 1e-6
) -> list[float]:
    """verl ``core_algos.py:334-358`` compute_grpo_vectorized_outcome_advantage with
    ``verl/utils/groupwise.py:163-222`` group_mean_std(eps=0.0), float32 ``index_add_``:
    ``mean = s1 / clamp(count, 1)``, two-pass ``var = sum((x - mean)^2) / clamp(count - 1,
    1)``, ``std = sqrt(clamp(var, 0))``; singletons mean 0 std 1; then
    ``(s - mean) / (std + 1e-6)`` **always**: ``trainer/ppo/ray_trainer.py:248-279`` (and
    ``v1/utils.py:167-176``) passes norm_adv_by_std_in_grpo only to the ``grpo`` branch, so
    this estimator keeps its default True whatever the config says."""
    s = _f32(scores)
    g = _key_index(keys)
    groups = int(g.max()) + 1
    count = np.zeros(groups, F32)
    np.add.at(count, g, F32(1.0))
    s1 = np.zeros(groups, F32)
    np.add.at(s1, g, s)
    mean = s1 / np.maximum(count, F32(1.0))
    centred = s - mean[g]
    var_num = np.zeros(groups, F32)
    np.add.at(var_num, g, centred * centred)
    var = var_num / np.maximum(count - F32(1.0), F32(1.0))
    std = np.sqrt(np.maximum(var, F32(0.0)))
    single = count <= 1.0
    mean[single] = 0.0
    std[single] = 1.0
    return [float(v) for v in (s - mean[g]) / (std[g] + F32(epsilon))]


def verl_rloo_vectorized(scores: Sequence[float], keys: Sequence[object]) -> list[float]:
    """verl ``core_algos.py:833-868`` compute_rloo_vectorized_outcome_advantage:
    ``((c*s - group sum) / clamp(c - 1, 1)) * (c > 1)`` with ``c`` the group's count
    (bincount, float32): a **singleton gives 0**, where ``rloo`` keeps the score."""
    s = _f32(scores)
    inv = _key_index(keys)
    c = np.bincount(inv)[inv].astype(F32)
    sums = np.zeros(int(inv.max()) + 1, F32)
    np.add.at(sums, inv, s)
    adv = ((c * s - sums[inv]) / np.maximum(c - F32(1.0), F32(1.0))) * (c > 1)
    return [float(v) for v in adv.astype(F32)]


def verl_gdpo(
    components: Mapping[str, Sequence[float]],
    keys: Sequence[object],
    lengths: Sequence[int],
    weights: Sequence[float] | None = None,
    epsilon: float = 1e-6,
) -> list[float]:
    """verl ``core_algos.py:361-468`` compute_gdpo_outcome_advantage. The components in
    ``gdpo_reward_keys`` order (the config's list, **not** sorted: the mapping's order here),
    each cast to float32 and placed at the last valid token, so its score is the value;
    ``weights`` (``gdpo_reward_weights``, default ones) float32 in the same order. Per
    component verl's grpo **always std-normalised** (the dispatcher does not forward
    norm_adv_by_std_in_grpo: see :func:`verl_grpo_vectorized`), ``sum(w_k * A_k)`` over the
    (B, L) mask, then ``masked_whiten(A, mask) * mask`` (``verl/utils/torch_functional.py:
    294-346``: masked mean over ``sum(m) + 1e-8``, unbiased variance over the token count,
    ``rsqrt(var + 1e-8)``)."""
    names = list(components)
    w = _f32(weights if weights is not None else [1.0] * len(names))
    total: np.ndarray | None = None
    mask = _token_mask(lengths)
    for k, name in enumerate(names):
        part, _ = _tiled(verl_grpo_f32(_f32(components[name]), keys, epsilon), lengths)
        total = w[k] * part if total is None else total + w[k] * part
    assert total is not None
    return _first_token(_masked_whiten_f32(total, mask, mean_eps=1e-8) * mask)


# OpenRLHF 0.11.2 (PyPI wheel; the snapshot OpenRLHF/OpenRLHF @ 3c3be623 is v0.11.0, which
# has the same code without flash_reinforce and without the fp32 cast)


def openrlhf_0_11_2(
    rewards: Sequence[float],
    n_samples_per_prompt: int,
    estimator: str,
    lengths: Sequence[int] | None = None,
    clip_range: tuple[float, float] | None = (-10.0, 10.0),
    no_std_norm: bool = False,
) -> list[float]:
    """OpenRLHF 0.11.2 ``openrlhf/trainer/ppo_utils/experience_maker.py:238-325``
    compute_advantages_and_returns, no KL in the reward, gamma 1, no length penalties.
    Rewards cast to float32, in prompt order, ``reshape(-1, n)``: ``rloo`` ``r - (sum - r) /
    (n - 1)``; ``reinforce_baseline`` and ``dr_grpo`` ``r - mean``; ``group_norm``
    ``(r - mean) / (std + 1e-9)`` (ddof 1); ``flash_reinforce`` ``r - rewards.mean()`` over
    the whole batch; ``reinforce`` unchanged. Then ``models/utils.py`` compute_reward clamps
    **the baselined value** to ``--reward.clip_range`` (default (-10, 10)) **before** any
    whitening; the return puts it on every action token; for ``reinforce`` and
    ``reinforce_baseline`` only, token whitening over the batch: ``mean = sum(a*m)/sum(m)``,
    population variance, ``rsqrt(clamp(var, min=1e-8))``, or with ``no_std_norm`` the
    centring only (rstd = 1)."""
    r = _f32(rewards).reshape(-1, n_samples_per_prompt)
    if estimator == "rloo":
        baseline = (r.sum(axis=-1, keepdims=True, dtype=F32) - r) / F32(n_samples_per_prompt - 1)
        r = r - baseline
    elif estimator in ("reinforce_baseline", "dr_grpo"):
        r = r - r.mean(axis=-1, keepdims=True, dtype=F32)
    elif estimator == "group_norm":
        r = (r - r.mean(axis=-1, keepdims=True, dtype=F32)) / (
            r.std(axis=-1, ddof=1, keepdims=True, dtype=F32) + F32(1e-9)
        )
    elif estimator == "flash_reinforce":
        r = r - r.mean(dtype=F32)
    elif estimator != "reinforce":
        raise ValueError(f"Unknown advantage_estimator {estimator}")
    shaped = r.reshape(-1)
    if clip_range:
        shaped = np.clip(shaped, F32(clip_range[0]), F32(clip_range[1]))
    if estimator not in ("reinforce", "reinforce_baseline"):
        return [float(v) for v in shaped]
    assert lengths is not None
    tokens, mask = _tiled(shaped, lengths)
    num_actions = mask.sum(dtype=F32)
    mean = (tokens * mask).sum(dtype=F32) / num_actions
    if not no_std_norm:
        var = (np.power(tokens - mean, F32(2)) * mask).sum(dtype=F32) / num_actions
        rstd = _rsqrt(np.maximum(var, F32(1e-8)))
    else:
        rstd = np.asarray(F32(1.0))
    return _first_token((tokens - mean) * rstd)
