"""Numbers stay right on hostile values: large offsets, subnormals, huge magnitudes (or a
clear refusal), one enormous group, a sea of one-response groups; all against a float64
two-pass reference."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from grpo_cli import compute_advantages
from grpo_cli.core.errors import InputError
from grpo_cli.core.schema import MAX_ABS_REWARD


def two_pass(
    codes: np.ndarray, rewards: np.ndarray, ddof: int = 1, eps: float = 1e-8
) -> np.ndarray:
    """Vectorised float64 two-pass GRPO: mean first, then centred squares; one-reward
    groups and zero-variance groups give 0."""
    n = np.bincount(codes).astype(np.float64)
    mean = np.bincount(codes, rewards) / n
    centred = rewards - mean[codes]
    with np.errstate(invalid="ignore", divide="ignore"):
        std = np.sqrt(np.bincount(codes, centred * centred) / (n - ddof))
        adv = centred / (std[codes] + eps)
    flat = np.zeros(len(n), dtype=bool)
    order = np.argsort(codes, kind="stable")
    sorted_codes, sorted_r = codes[order], rewards[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_codes)) + 1]
    flat[sorted_codes[starts]] = np.maximum.reduceat(sorted_r, starts) == np.minimum.reduceat(
        sorted_r, starts
    )
    adv[(n[codes] < 2) | flat[codes]] = 0.0
    result: np.ndarray = adv
    return result


def frame_of(codes: np.ndarray, rewards: np.ndarray) -> pl.DataFrame:
    return pl.DataFrame({"prompt_id": codes.astype(str), "reward": rewards})


def check(codes: np.ndarray, rewards: np.ndarray, rtol: float = 1e-9, atol: float = 1e-12) -> None:
    got = compute_advantages(frame_of(codes, rewards))["advantage"].to_numpy()
    np.testing.assert_allclose(got, two_pass(codes, rewards), rtol=rtol, atol=atol)


def test_large_offset_with_small_differences() -> None:
    """Rewards 1e12 + k: the deviations are exact integers, so the exact advantages are those
    of k alone. A float64 group mean near 1e12 is itself rounded (1 ulp = 1.2e-4), so any
    float64 two-pass method is off by up to about 1e-4 (the reference here: 3e-5; grpo-adv,
    summing in another order: 9e-5); grpo-adv stays within that bound."""
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 200, 5_000)
    k = rng.integers(0, 8, 5_000).astype(np.float64)
    exact = two_pass(codes, k)
    got = compute_advantages(frame_of(codes, 1e12 + k))["advantage"].to_numpy()
    reference = two_pass(codes, 1e12 + k)
    np.testing.assert_allclose(got, exact, atol=1.2e-4)
    np.testing.assert_allclose(reference, exact, atol=1.2e-4)
    np.testing.assert_allclose(got, reference, atol=2.4e-4)


def test_subnormal_rewards() -> None:
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 50, 1_000)
    rewards = rng.integers(1, 9, 1_000) * 1e-310  # subnormal float64
    check(codes, rewards, rtol=1e-9, atol=1e-300)


def test_huge_but_safe_magnitudes() -> None:
    rng = np.random.default_rng(2)
    codes = rng.integers(0, 50, 1_000)
    rewards = rng.normal(size=1_000) * 1e100
    check(codes, rewards)


def test_overflowing_magnitudes_are_refused() -> None:
    frame = pl.DataFrame({"prompt_id": ["a", "a"], "reward": [MAX_ABS_REWARD, -1.0]})
    with pytest.raises(InputError, match="magnitude 1e\\+140 or more"):
        compute_advantages(frame)


def test_one_group_of_100k_responses() -> None:
    rng = np.random.default_rng(3)
    rewards = rng.random(100_000)
    codes = np.zeros(100_000, dtype=np.int64)
    check(codes, rewards)
    got = compute_advantages(frame_of(codes, rewards))["advantage"].to_numpy()
    assert abs(got.mean()) < 1e-12 and got.std(ddof=1) == pytest.approx(1.0, rel=1e-6)


def test_100k_groups_of_one() -> None:
    rewards = np.random.default_rng(4).random(100_000)
    codes = np.arange(100_000)
    got = compute_advantages(frame_of(codes, rewards))["advantage"].to_numpy()
    assert (got == 0.0).all()  # --singleton zero: no group, no signal
    raw = compute_advantages(frame_of(codes, rewards), singleton="raw")["advantage"].to_numpy()
    np.testing.assert_array_equal(raw, rewards)


def test_mixed_sizes_against_the_reference() -> None:
    rng = np.random.default_rng(5)
    sizes = rng.integers(1, 65, 3_000)
    codes = rng.permutation(np.repeat(np.arange(len(sizes)), sizes))
    rewards = np.where(
        rng.random(len(codes)) < 0.5, rng.integers(0, 2, len(codes)), rng.random(len(codes))
    )
    check(codes, rewards.astype(np.float64))
