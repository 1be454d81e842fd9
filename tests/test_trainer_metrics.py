"""The trainers' metrics in summarize: zero-variance groups split into solved and failed,
per reward function and length, under verl's names; the inferred group size said."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from grpo_cli.cli import app


def test_zero_variance_groups_split_into_solved_and_failed(tmp_path: Path) -> None:
    """Binary rewards: all-1 groups are too easy, all-0 groups too hard (per step too)."""
    source = tmp_path / "bin.csv"
    pl.DataFrame(
        {
            "step": [1] * 9 + [2] * 4,
            "prompt_id": list("aaabbbccc") + list("ddee"),
            "reward": [1.0, 1, 1, 0, 0, 0, 1, 0, 1, 1, 1, 1, 1],
        }
    ).write_csv(source)
    overall = CliRunner().invoke(
        app,
        [
            "summarize",
            str(source),
            "-o",
            "-",
            "--level",
            "overall",
            "-q",
            "--output-format",
            "jsonl",
        ],
    )
    figures = json.loads(overall.stdout)
    assert (figures["zero_std_groups"], figures["zero_std_solved"], figures["zero_std_failed"]) == (
        4,
        3,
        1,
    )
    steps = CliRunner().invoke(app, ["summarize", str(source), "-o", "-", "-q"])
    table = pl.read_csv(steps.stdout.encode())
    assert table.select("step", "zero_std_solved", "zero_std_failed").rows() == [
        (1, 1, 1),
        (2, 2, 0),
    ]


def test_trainer_metrics_per_reward_function_and_length(tmp_path: Path) -> None:
    """TRL's rewards/<func>/mean and /std, completion lengths and the length-advantage
    correlation, checked against numpy."""
    log = pl.DataFrame(
        {
            "step": [1, 1, 1, 1, 2, 2, 2, 2],
            "prompt_id": ["a", "a", "b", "b", "c", "c", "d", "d"],
            "accuracy": [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0],
            "format": [0.5, 0.5, 1.0, 0.0, 1.0, 0.5, 0.5, 0.0],
            "length": [10, 30, 20, 40, 50, 10, 30, 20],
        }
    )
    source = tmp_path / "log.parquet"
    log.write_parquet(source)
    annotated = tmp_path / "adv.parquet"
    args = ["compute", str(source), "-r", "accuracy", "-r", "format", "-o", str(annotated), "-q"]
    assert CliRunner().invoke(app, args).exit_code == 0
    result = CliRunner().invoke(
        app,
        ["summarize", str(annotated), "-r", "accuracy", "-r", "format", "-o", "-", "-q",
         "--level", "overall", "--output-format", "jsonl"],
    )  # fmt: skip
    figures = json.loads(result.stdout)
    assert figures["rewards/accuracy/mean"] == pytest.approx(0.5)
    assert figures["rewards/format/std"] == pytest.approx(np.std(log["format"].to_numpy(), ddof=1))
    assert figures["completions/mean_length"] == pytest.approx(210 / 8)
    assert (figures["completions/min_length"], figures["completions/max_length"]) == (10, 50)
    adv = pl.read_parquet(annotated)["advantage"].to_numpy()
    expected = np.corrcoef(log["length"].to_numpy(), adv)[0, 1]
    assert figures["length_advantage_corr"] == pytest.approx(expected, rel=1e-12)


def test_summarize_says_it_inferred_the_group_size() -> None:
    args = ["summarize", "sample_data/trl_completions", "--preset", "trl"]
    result = CliRunner().invoke(app, [*args, "--reward-weights", "1,0.5"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == (
        "warning: inferred --group-size 4 from runs of equal prompts (TRL num_generations)"
    )


def test_verl_presets_show_verls_names(tmp_path: Path) -> None:
    annotated = tmp_path / "v.parquet"
    args = ["compute", "sample_data/verl_dump", "--preset", "verl", "--replace", "-q"]
    assert CliRunner().invoke(app, [*args, "-o", str(annotated)]).exit_code == 0
    base = ["summarize", str(annotated), "-o", "-", "-q", "--level", "overall"]
    verl = json.loads(
        CliRunner().invoke(app, [*base, "--preset", "verl", "--output-format", "jsonl"]).stdout
    )
    plain_args = [*base, "-r", "score", "-g", "uid", "--output-format", "jsonl"]
    plain = json.loads(CliRunner().invoke(app, plain_args).stdout)
    assert verl["critic/score/mean"] == pytest.approx(plain["reward"], rel=1e-12)
    assert verl["critic/advantages/max"] == pytest.approx(plain["advantage_max"], rel=1e-12)
    assert "reward" not in verl and "critic/score/mean" not in plain
