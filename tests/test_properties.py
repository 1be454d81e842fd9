"""Hypothesis properties of the GRPO advantage, and agreement with a numpy reference."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_cli import compute_advantages

SETTINGS = settings(max_examples=60, deadline=None)


@st.composite
def reward_logs(draw: st.DrawFn, allow_null: bool = True) -> pl.DataFrame:
    """Random logs: 1-12 groups of 1-20 responses, small integer-valued or float rewards,
    optional nulls, rows in random order."""
    n_groups = draw(st.integers(1, 12))
    sizes = draw(st.lists(st.integers(1, 20), min_size=n_groups, max_size=n_groups))
    reward = st.one_of(st.integers(0, 5).map(float), st.floats(-100, 100, allow_nan=False))
    if allow_null:
        reward = st.one_of(reward, st.none()) if draw(st.booleans()) else reward
    keys: list[str] = []
    rewards: list[float | None] = []
    for g, size in enumerate(sizes):
        keys += [f"g{g}"] * size
        rewards += draw(st.lists(reward, min_size=size, max_size=size))
    order = draw(st.permutations(range(len(keys))))
    return pl.DataFrame(
        {"prompt_id": [keys[i] for i in order], "reward": [rewards[i] for i in order]},
        schema={"prompt_id": pl.String, "reward": pl.Float64},
    )


def numpy_reference(frame: pl.DataFrame, ddof: int, eps: float) -> list[float | None]:
    """Two-pass float64 reference, one group at a time (zero mode: singletons give 0)."""
    keys = frame["prompt_id"].to_list()
    rewards = frame["reward"].to_list()
    out: list[float | None] = [None] * len(keys)
    for key in set(keys):
        idx = [i for i, k in enumerate(keys) if k == key and rewards[i] is not None]
        values = np.array([rewards[i] for i in idx], dtype=np.float64)
        if len(values) == 0:
            continue
        if len(values) == 1:
            out[idx[0]] = 0.0
            continue
        mean = values.sum() / len(values)
        std = math.sqrt(((values - mean) ** 2).sum() / (len(values) - ddof))
        for i, v in zip(idx, values, strict=True):
            out[i] = 0.0 if values.max() == values.min() else (v - mean) / (std + eps)
    return out


@SETTINGS
@given(log=reward_logs(), ddof=st.sampled_from([0, 1]))
def test_matches_numpy_two_pass_reference(log: pl.DataFrame, ddof: int) -> None:
    got = compute_advantages(log, ddof=ddof)["advantage"].to_list()
    expected = numpy_reference(log, ddof, 1e-8)
    assert [g is None for g in got] == [e is None for e in expected]
    for g, e in zip(got, expected, strict=True):
        if g is not None and e is not None:
            assert math.isclose(g, e, rel_tol=1e-9, abs_tol=1e-9)


@SETTINGS
@given(log=reward_logs(), ddof=st.sampled_from([0, 1]))
def test_per_group_mean_of_advantages_is_zero(log: pl.DataFrame, ddof: int) -> None:
    got = compute_advantages(log, ddof=ddof)
    means = got.group_by("prompt_id").agg(pl.col("advantage").mean(), n=pl.col("advantage").count())
    for mean, n in means.select("advantage", "n").iter_rows():
        if n:
            assert abs(mean) < 1e-9


@SETTINGS
@given(log=reward_logs(), seed=st.integers(0, 2**32 - 1))
def test_shuffling_rows_permutes_the_output_alike(log: pl.DataFrame, seed: int) -> None:
    order = np.random.default_rng(seed).permutation(log.height)
    direct = compute_advantages(log)["advantage"].to_numpy()[order]
    shuffled = compute_advantages(log[order])["advantage"].to_numpy()
    # Summing in another order moves r - mean by a few ulps of r; divided by (std + eps)
    # with eps = 1e-8, that bounds the change: the problem's own conditioning.
    largest = float(log["reward"].abs().max() or 0.0)  # type: ignore[arg-type]
    atol = 1e-12 + 8 * np.finfo(np.float64).eps * largest / 1e-8
    np.testing.assert_allclose(shuffled, direct, rtol=1e-12, atol=atol, equal_nan=True)


@SETTINGS
@given(
    log=reward_logs(allow_null=False),
    scale=st.floats(0.5, 100),
    shift=st.floats(-1000, 1000),
)
def test_positive_affine_maps_leave_advantages_unchanged_up_to_eps(
    log: pl.DataFrame, scale: float, shift: float
) -> None:
    # Integer-valued rewards keep every non-constant group's std >= ~0.2, so eps = 1e-8
    # moves a z-score (|z| <= sqrt(n)) by at most ~1e-6.
    log = log.with_columns(pl.col("reward").round(0))
    base = compute_advantages(log)["advantage"].to_numpy()
    moved = compute_advantages(log.with_columns(pl.col("reward") * scale + shift))
    np.testing.assert_allclose(moved["advantage"].to_numpy(), base, atol=1e-6)
    exact = compute_advantages(log, eps=0.0)["advantage"].to_numpy()
    moved_exact = compute_advantages(log.with_columns(pl.col("reward") * scale + shift), eps=0.0)[
        "advantage"
    ].to_numpy()
    np.testing.assert_allclose(moved_exact, exact, atol=1e-9)


def test_large_offsets_keep_precision() -> None:
    log = pl.DataFrame({"prompt_id": ["g"] * 3, "reward": [1e12 + 1, 1e12 + 2, 1e12 + 3]})
    got = compute_advantages(log, eps=0.0)["advantage"].to_list()
    assert got == [-1.0, 0.0, 1.0]


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(
        st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False), min_size=1, max_size=30
    ),
    sizes=st.lists(st.integers(2, 64), min_size=30, max_size=30),
    seed=st.integers(0, 1000),
)
def test_equal_rewards_have_exactly_zero_variance(
    values: list[float], sizes: list[int], seed: int
) -> None:
    """Zero-variance groups are found by ``var == 0``: Polars' variance must be exactly 0
    on equal values in any order, with either engine (or constant groups would get
    advantages of 1e-9 instead of 0)."""
    keys = np.repeat(np.arange(len(values)), sizes[: len(values)])
    rewards = np.repeat(values, sizes[: len(values)])
    order = np.random.default_rng(seed).permutation(len(keys))
    log = pl.DataFrame({"prompt_id": keys[order].astype(str), "reward": rewards[order]})
    for deterministic in (True, False):
        got = compute_advantages(log, deterministic=deterministic, with_stats=True)
        assert (got["advantage"] == 0.0).all()
        assert (got["group_std"] == 0.0).all()
