"""Batch statistics from partials (no Ray): a log split along groups into pieces, each
piece's batch partials merged, then applied piece by piece, gives the advantages of the
whole log computed at once (what the Ray engine does on a cluster)."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_cli.core import metrics
from grpo_cli.core.estimators import ESTIMATORS
from grpo_cli.core.expressions import with_group_stats
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.core.plan import Plan
from grpo_cli.core.resolve import make_request, resolve
from grpo_cli.engines.batch_partials import (
    applied,
    batch_inputs,
    grouped_partials,
    merged_stats,
    needs_batch_stats,
    with_batch_stats,
)
from grpo_cli.engines.polars import ENGINE as POLARS
from grpo_cli.jobs.pipeline import annotate


def make_log(seed: int, rows: int = 300, prompts: int = 40) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, prompts, rows)
    reward = rng.integers(0, 5, rows) / 4.0
    frame = pl.DataFrame(
        {
            "rid": np.arange(rows),
            "prompt_id": [f"p{p}" for p in prompt],
            "step": prompt % 3,
            "reward": np.where(prompt % 7 == 0, 0.25, reward),
            "format_reward": rng.integers(0, 2, rows).astype(float),
            "length": rng.integers(1, 30, rows),
        }
    )
    return frame.with_columns(
        pl.when(pl.col("rid") % 23 == 4).then(None).otherwise(pl.col("reward")).alias("reward")
    )


def split_by_group(log: pl.DataFrame, key: list[str], pieces: int) -> list[pl.DataFrame]:
    """Pieces in which every group lies whole (as after a shuffle by the group key)."""
    part = pl.struct(key).hash(seed=5) % pieces
    return [
        p.drop("__piece") for _, p in log.with_columns(part.alias("__piece")).group_by("__piece")
    ]


def in_pieces(log: pl.DataFrame, options: AdvantageOptions, pieces: int) -> pl.DataFrame:
    """Pass 1: partials per piece, merged; pass 2: each piece annotated with them."""
    plan = resolve(make_request(options=options), log)
    parts = split_by_group(log, list(options.group_cols), pieces)
    piece_plans = [resolve(make_request(options=options), p) for p in parts]
    partials = [
        grouped_partials(with_group_stats(p, pp).collect(), pp)
        for p, pp in zip(parts, piece_plans, strict=True)
    ]
    stats = merged_stats(partials, plan)
    annotated = []
    for piece in parts:
        piece_plan: Plan = applied(resolve(make_request(options=options), piece))
        full = POLARS.annotate(with_batch_stats(piece, piece_plan, stats), piece_plan)
        annotated.append(full.select("rid", options.advantage_col))
    return pl.concat(annotated).sort("rid")


CASES: list[dict[str, Any]] = [
    {"estimator": "batch_std"},
    {"estimator": "batch_std", "batch_col": "step", "group_cols": ("step", "prompt_id")},
    {"estimator": "reinforce_pp_baseline", "clip": (-0.5, 0.5), "clip_stage": "shaped"},
    {"estimator": "reinforce_pp", "length_col": "length", "token_weighted": True},
    {"estimator": "gpg", "nulls": "zero"},
    {"estimator": "gpg", "batch_col": "step", "group_cols": ("step", "prompt_id"), "ddof": 0},
    {
        "reward_cols": ("reward", "format_reward"),
        "reward_weights": (1.0, 2.0),
        "aggregation": "normalize_then_sum",
    },
    {"estimator": "batch_std", "eps_mode": "var_floor", "singleton": "verl"},
    {"estimator": "batch_baseline", "batch_col": "step", "group_cols": ("step", "prompt_id")},
    # the whiten stage's own ddof (0) beside the group's (1), token-weighted
    {
        "whiten": True,
        "whiten_ddof": 0,
        "whiten_eps": 0.0,
        "length_col": "length",
        "token_weighted": True,
    },
    {
        "estimator": "loo_grpo",
        "eps_mode": "positive_std",
        "whiten": True,
        "whiten_eps_mode": "positive_std",
        "reward_clip": (0.0, 0.75),
    },
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_pieces_give_the_whole_log(case: dict[str, Any]) -> None:
    log = make_log(seed=11)
    options = AdvantageOptions(**case)
    got = in_pieces(log, options, pieces=5)
    expected = annotate(log, **case).frame.sort("rid")
    a, b = got["advantage"], expected["advantage"]
    assert (a.is_null() == b.is_null()).all()
    assert float((a - b).abs().max() or 0.0) <= 1e-12  # type: ignore[arg-type]
    assert a.drop_nulls().abs().max() != 0  # a real signal, not all zeros


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    pieces=st.integers(1, 7),
    case=st.sampled_from(CASES),
)
def test_any_split_along_groups(seed: int, pieces: int, case: dict[str, Any]) -> None:
    log = make_log(seed, rows=120, prompts=25)
    options = AdvantageOptions(**case)
    got = in_pieces(log, options, pieces)["advantage"]
    expected = annotate(log, **case).frame.sort("rid")["advantage"]
    assert (got.is_null() == expected.is_null()).all()
    assert float((got - expected).abs().max() or 0.0) <= 1e-12  # type: ignore[arg-type]


def test_every_batch_level_estimator_asks_for_batch_statistics() -> None:
    """What the registry calls batch-level is what reads batch statistics (and GDPO)."""
    for name, estimator in ESTIMATORS.items():
        if estimator.unit != "response":
            continue
        options = AdvantageOptions(
            estimator=name,
            length_col="length" if "length" in estimator.needs else None,
            baseline_col="baseline" if "baseline" in estimator.needs else None,
        )
        plan = resolve(
            make_request(options=options),
            pl.DataFrame(
                schema={
                    "prompt_id": pl.String,
                    "reward": pl.Float64,
                    "length": pl.Int64,
                    "baseline": pl.Float64,
                }
            ),
        )
        assert needs_batch_stats(plan) == bool(batch_inputs(plan)), name


def test_merged_partials_are_the_single_pass_statistics() -> None:
    """Mean and variance (weighted), count, extrema and non-zero count of x over every
    batch value, from partials of four disjoint sets of rows: Chan's merge."""
    rng = np.random.default_rng(2)
    frame = pl.DataFrame(
        {
            "b": rng.integers(0, 3, 500),
            "x": np.where(rng.random(500) < 0.1, 0.0, rng.normal(3.0, 2.0, 500)),
            "w": rng.integers(1, 9, 500).astype(float),
        }
    )
    inputs = [(pl.col("x"), pl.col("w"))]
    chunks = [frame.slice(i * 125, 125) for i in range(4)]
    parts = [metrics.batch_partials(c, inputs, ["b"]) for c in chunks]
    merged = metrics.merge_batch_partials(parts, ["b"], 1)
    got = (
        metrics.finish_batch_stats(merged, ["b"], 1)
        .with_columns(metrics.batch_var(0, ddof=1).alias("x_var"))
        .sort("b")
    )
    x, w = pl.col("x"), pl.col("w")
    mean = (x * w).sum() / w.sum()
    expected = (
        frame.group_by("b")
        .agg(
            mean.alias("mean"),
            ((w * (x - mean) ** 2).sum() / (w.sum() - 1)).alias("var"),
            x.count().alias("count"),
            x.max().alias("max"),
            x.min().alias("min"),
            (x != 0).sum().alias("nonzero"),
        )
        .sort("b")
    )
    for name in ("mean", "var", "max", "min"):
        column = next(c for c in got.columns if c.endswith(f"_{name}"))
        assert got[column].to_list() == pytest.approx(expected[name].to_list(), rel=1e-13)
    for name in ("count", "nonzero"):
        column = next(c for c in got.columns if c.endswith(f"_{name}"))
        assert got[column].to_list() == expected[name].to_list()
