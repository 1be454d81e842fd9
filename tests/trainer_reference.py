"""Independent re-implementations of the trainers' published advantage code, in plain
Python/numpy loops (no Polars, nothing shared with grpo_cli), used as test oracles.

Each follows the trainer's code path as read in its source (see grpo_cli.core.presets for the
files and versions), generalised to variable group sizes the way the trainer's own
statistics would treat them (TRL: NaN padding with nanmean/nanstd; verl: its dict keyed by
uid; OpenRLHF: its per-group reshape). Computation is float64.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

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
    """trl.trainer.utils.nanstd: ddof 1 over non-NaN values, NaN when fewer than 2."""
    kept = [v for v in values if not math.isnan(v)]
    if len(kept) < 2:
        return NAN
    mean = sum(kept) / len(kept)
    var = sum((v - mean) ** 2 for v in kept) / len(kept) * len(kept) / (len(kept) - 1)
    return math.sqrt(var)


def trl_nanmean(values: Sequence[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else NAN


def trl_grpo(
    rewards_per_func: np.ndarray,
    keys: Sequence[object],
    weights: Sequence[float] | None = None,
    scale_rewards: str = "group",
    aggregation: str = "sum_then_normalize",
) -> list[float]:
    """TRL >= 1.6 GRPOTrainer: rewards_per_func (N, K) with NaN for None."""
    n, k = rewards_per_func.shape
    w = list(weights) if weights is not None else [1.0] * k
    unscorable = [all(math.isnan(x) for x in row) for row in rewards_per_func]
    groups = _groups(keys)
    if aggregation == "sum_then_normalize":
        r = [
            NAN if unscorable[i] else sum(w[j] * x for j, x in enumerate(row) if not math.isnan(x))
            for i, row in enumerate(rewards_per_func)
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
                values = [rewards_per_func[i, j] for i in idx]
                mean, std = trl_nanmean(values), trl_nanstd(values)
                for i in idx:
                    z[i, j] = (rewards_per_func[i, j] - mean) / (std + 1e-4)
        s = [
            NAN if unscorable[i] else sum(w[j] * x for j, x in enumerate(row) if not math.isnan(x))
            for i, row in enumerate(z)
        ]
        mean_s, std_s = trl_nanmean(s), trl_nanstd(s)
        adv = [(v - mean_s) / (std_s + 1e-4) for v in s]
    return [0.0 if math.isnan(a) else a for a in adv]  # torch.nan_to_num(nan=0.0)


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
