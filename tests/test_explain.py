"""`explain`: the filled-in formulas reproduce the advantages `compute` writes, for every
estimator and policy, and the texts users read."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.cli.params import flag_spelling
from grpo_cli.core.errors import InputError, OptionsError, as_text
from grpo_cli.core.estimators import ESTIMATORS
from grpo_cli.jobs.pipeline import annotate
from grpo_cli.report.explain import explain_one
from tests.conftest import SAMPLE_DIR, SAMPLE_FILES, make_log

# The estimators explain writes out with numbers: every one with groups and one advantage
# per response (the others it refuses).
FILLED = [name for name, e in ESTIMATORS.items() if e.uses_groups and e.unit == "response"]
LESSON = make_log({"g1": [1.0, 0.0, 0.0, 1.0], "g2": [0.0, 0.0, 1.0, 1.0]})


class TestExplain:
    @pytest.mark.usefixtures("width_80")
    def test_lesson_group(self, runner: CliRunner, tmp_path: Path) -> None:
        path = tmp_path / "lesson.csv"
        LESSON.write_csv(path)
        result = runner.invoke(app, ["explain", str(path), "--group", "g1"])
        assert result.exit_code == 0, result.output
        text = result.output
        assert "mean = (1 + 0 + 0 + 1) / 4 = 0.5" in text
        assert "var (ddof=1) =" in text and "= 0.333333" in text
        assert "std = sqrt(var) = 0.57735" in text
        assert "A = (r - mean) / (std + eps)" in text
        assert "(1 - 0.5) / (0.57735 + 1e-08) = 0.866025" in text
        assert "(0 - 0.5) / (0.57735 + 1e-08) = -0.866025" in text

    def test_population_std(self, runner: CliRunner, tmp_path: Path) -> None:
        path = tmp_path / "lesson.csv"
        make_log({"g": [0.0, 1.0, 0.0, 0.0]}).write_csv(path)
        result = runner.invoke(app, ["explain", str(path), "--group", "g", "--ddof", "0"])
        assert result.exit_code == 0, result.output
        assert "var (ddof=0)" in result.output
        assert "1.73205" in result.output  # the lesson's correct response

    def test_unknown_key_lists_some(self, runner: CliRunner) -> None:
        result = runner.invoke(app, ["explain", str(SAMPLE_FILES["csv"]), "--group", "p999"])
        assert result.exit_code == 3
        assert "no group 'p999' in prompt_id" in result.output
        assert "existing keys: p015, p013, p007" in result.output
        assert "Traceback" not in result.output

    def test_composite_key(self) -> None:
        frame = pl.read_parquet(SAMPLE_FILES["parquet"])
        explanation = explain_one(frame, None, {"group_cols": ("step", "prompt_id")}, "1,p015")
        assert explanation.key == {"step": 1, "prompt_id": "p015"}
        # a key led by the step may be named without it, when one step has that prompt
        alone = explain_one(frame, None, {"group_cols": ("step", "prompt_id")}, "p015")
        assert alone.key == {"step": 1, "prompt_id": "p015"}
        with pytest.raises(InputError, match="gives 3 values for 2 key columns"):
            explain_one(frame, None, {"group_cols": ("step", "prompt_id")}, "1,p015,x")

    @pytest.mark.parametrize("estimator", FILLED)
    @pytest.mark.parametrize(
        "policies",
        [
            {},
            {"ddof": 0},
            {"eps_mode": "var"},
            {"eps_mode": "var_floor", "eps": 1e-4},
            {"singleton": "verl"},
            {"clip": (-1.0, 1.0)},
            {"clip": (-0.5, 0.5), "clip_stage": "shaped", "nulls": "zero"},
            {"token_weighted": True, "length_col": "length", "eps_mode": "var"},
            {"batch_col": "step", "group_cols": ("step", "prompt_id"), "singleton": "verl"},
            {"eps_mode": "positive_std", "eps": 1e-6, "reward_clip": (0.0, 0.75)},
            {"whiten": True, "whiten_ddof": 0, "whiten_eps": 1e-5, "whiten_eps_mode": "std"},
            {"whiten": True, "length_col": "length", "token_weighted": True, "batch_col": "step"},
        ],
        ids=[
            "default",
            "ddof0",
            "var",
            "var_floor",
            "verl",
            "clip",
            "shaped",
            "tokens",
            "steps",
            "positive_std_reward_clip",
            "whiten",
            "whiten_tokens",
        ],
    )
    def test_formulas_reproduce_compute(self, estimator: str, policies: dict[str, object]) -> None:
        """For every group of the sample log, each formula's value equals the advantage
        compute writes, unless a stated policy set it."""
        frame = pl.read_parquet(SAMPLE_FILES["parquet"])
        if policies.get("whiten") and ESTIMATORS[estimator].whitens:
            with pytest.raises(OptionsError, match="already whitens over the batch"):
                explain_one(frame, None, {"estimator": estimator, **policies}, "p000")
            return
        checked = 0
        for key in frame["prompt_id"].unique().sort().to_list()[::4]:
            extra = {"length_col": "length"} if estimator == "opo" else {}
            explanation = explain_one(
                frame, None, {"estimator": estimator, **extra, **policies}, key
            )
            assert explanation.n == sum(r.reward is not None for r in explanation.rows)
            for row in explanation.rows:
                if row.policy is None:
                    assert row.value is not None and row.advantage is not None
                    assert row.value == pytest.approx(row.advantage, rel=1e-12, abs=1e-12)
                    checked += 1
                elif str(row.policy).startswith("clipped"):
                    assert row.advantage in policies["clip"]  # type: ignore[operator]
        assert checked > (10 if estimator == "grpo_passk" else 30)

    def test_filled_in_texts(self) -> None:
        """Named values and batch statistics are stated once above the table; each row
        shows the formula with its numbers (rendered from the estimator's function)."""
        log = make_log({"a": [1.0, 0.0, 0.5, 1.0], "b": [0.0, 0.0, 1.0, 0.5]})
        passk = explain_one(log, None, {"estimator": "grpo_passk"}, "b")
        assert passk.formula == "A = (best - second) / (std + eps)"
        assert passk.steps[-3:] == (
            "best = max(r) = 1",
            "n_best = sum([r = best]) = 1",
            "second = max(r if r < best) = 0.5",
        )
        assert [r.formula for r in passk.rows] == [
            "0  (not (r = best and n_best = 1))",
            "0  (not (r = best and n_best = 1))",
            "(1 - 0.5) / (0.478714 + 1e-08)",
            "0  (not (r = best and n_best = 1))",
        ]
        gpg = explain_one(log, None, {"estimator": "gpg"}, "a")
        assert "alpha = n_b / max(nonzero_b, 1) = 8 / 5 = 1.6" in gpg.steps
        assert gpg.rows[0].formula == "1.6 x (1 - 0.625)"
        whitened = explain_one(log, None, {"estimator": "reinforce_pp_baseline"}, "a")
        assert whitened.formula == "x = r - mean; A = (x - mean_b) / (std_b + eps)"
        assert whitened.steps[-1].startswith("over the batch's 8 values of x: n_b = 8,")
        assert whitened.rows[0].formula.startswith("x = 1 - 0.625 = 0.375; (0.375 - 0) / (")
        rloo = explain_one(log, None, {"estimator": "rloo", "eps_mode": "var"}, "a")
        assert rloo.formula == "A = (r - mean) n / (n - 1)"
        assert rloo.rows[1].formula == "(0 - 0.625) x 1.33333"

    def test_each_policy_is_named_once_for_engines_and_explain(self) -> None:
        """The policies name the rules that replace the formula's value; explain states
        the one that decided each row (the first that holds, then the final clip)."""
        from grpo_cli.core.options import AdvantageOptions
        from grpo_cli.core.policies import final_clip, overrides
        from grpo_cli.report.explain_context import context

        options = AdvantageOptions(nulls="zero", singleton="raw", clip=(-1.0, 1.0))
        ctx = context(options, [None, 2.0, 1.0, 3.0], [0, 1, 2, 2])
        rules = overrides(ctx, options, ESTIMATORS["grpo"], singleton=ctx.is_singleton())
        assert [(name, holds.values) for name, holds, _ in rules] == [
            ("nulls", [True, False, False, False]),
            ("singleton", [False, True, False, False]),
        ]
        assert final_clip(options, ESTIMATORS["grpo"]) == (-1.0, 1.0)
        shaped = AdvantageOptions(clip=(-1.0, 1.0), clip_stage="shaped")
        assert final_clip(shaped, ESTIMATORS["reinforce_pp_baseline"]) is None
        log = make_log({"b": [5.0, None], "c": [0.0, 1.0, 9.0]})
        explicit = {"nulls": "zero", "singleton": "raw", "clip": (-1.0, 1.0), "ddof": 0}
        b = explain_one(log, None, explicit, "b")
        assert [(str(r.policy), r.advantage) for r in b.rows] == [
            ('only valid reward of its group: advantage the raw reward (singleton="raw")', 1.0),
            ('null reward: left out of the statistics; advantage 0 (nulls="zero")', 0.0),
        ]
        c = explain_one(log, None, explicit, "c")
        assert [r.policy for r in c.rows] == [None, None, "clipped to [-1, 1]"]
        assert c.rows[2].value == pytest.approx(1.40693, abs=1e-5) and c.rows[2].advantage == 1.0

    def test_policies_are_stated(self) -> None:
        frame = make_log({"one": [0.3], "flat": [0.5, 0.5], "n": [1.0, None, 0.0]})
        one = explain_one(frame, None, {}, "one")
        policy = one.rows[0].policy
        assert str(policy) == 'only valid reward of its group: advantage 0 (singleton="zero")'
        assert as_text(policy or "").render(flag_spelling) == (
            "only valid reward of its group: advantage 0 (--singleton zero)"
        )
        flat = explain_one(frame, None, {}, "flat")
        assert flat.notes and all(
            r.policy == "zero-variance group: advantage exactly 0" for r in flat.rows
        )
        with_null = explain_one(frame, None, {}, "n")
        assert "null reward" in str(with_null.rows[1].policy)
        assert with_null.n == 2 and with_null.mean == 0.5
        assert with_null.std == pytest.approx(math.sqrt(0.5))


def test_explain_annotated_log_shows_the_logged_values(runner: CliRunner, tmp_path: Path) -> None:
    annotated = tmp_path / "annotated.csv"
    logged = LESSON.with_columns(advantage=pl.Series([0.9, -0.9, -0.9, 0.9, 0.0, 0.0, 0.0, 0.0]))
    logged.write_csv(annotated)
    explanation = explain_one(logged, None, {}, "g1")
    assert explanation.logged
    assert [r.logged for r in explanation.rows] == [0.9, -0.9, -0.9, 0.9]
    assert [round(r.advantage or 0, 6) for r in explanation.rows] == [
        0.866025,
        -0.866025,
        -0.866025,
        0.866025,
    ]
    result = runner.invoke(app, ["explain", str(annotated), "--group", "g1"])
    assert result.exit_code == 0, result.output
    assert "logged" in result.output and "0.9" in result.output


class TestOutput:
    """explain's report is its output (stdout); its messages go to stderr, -q silences them."""

    def test_the_report_on_stdout_the_warnings_on_stderr(self, runner: CliRunner) -> None:
        args = ["explain", str(SAMPLE_DIR / "trl_completions"), "--preset", "trl", "--row", "0"]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines()[0] == "group step=10, group_index=0: 4 responses"
        assert "warning" not in result.stdout
        assert result.stderr == (
            "warning: inferred --group-size 4 from runs of equal prompts (TRL num_generations)\n"
        )
        quiet = runner.invoke(app, [*args, "-q"])
        assert (quiet.exit_code, quiet.stderr, quiet.stdout) == (0, "", result.stdout)

    def test_a_one_response_verl_group_uses_mean_0(self, runner: CliRunner, tmp_path: Path) -> None:
        dump = tmp_path / "dump.jsonl"
        pl.read_ndjson(SAMPLE_DIR / "verl_dump" / "1.jsonl").slice(3).write_ndjson(dump)
        args = ["explain", str(dump), "--preset", "verl", "--row", "0"]
        result = runner.invoke(app, args, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert lines[0].endswith(": 1 response")
        assert lines[3:5] == [
            "  n = 1 valid reward",
            "  mean = 0, std = 1 (singleton=verl: verl's one-response group has mean 0 and std 1)",
        ]
        assert "│ (0.709 - 0) / (1 + 1e-06) = 0.708999 │  0.708999 │" in result.stdout


def test_explain_shows_the_reward_clip_and_the_whiten_stage() -> None:
    """The reward clip names the rewards it changed; the whiten stage its batch numbers
    with its own ddof and eps (not the group's)."""
    log = pl.DataFrame({"prompt_id": ["a"] * 4 + ["b"] * 4, "reward": [1.0, 0, 0, 25, 0, 0, 1, 1]})
    options: dict[str, Any] = {
        "reward_clip": (-20.0, 20.0),
        "whiten": True,
        "whiten_ddof": 0,
        "whiten_eps": 1e-5,
        "whiten_eps_mode": "std",
    }
    explained = explain_one(log, None, options, "a")
    assert explained.steps[0] == (
        "the reward r clamped to [-20, 20] before any statistic: r 25 -> 20 (row 3)"
    )
    assert explained.steps[-1].startswith("over the batch's 8 values of x: n_b = 8")
    assert explained.steps[-1].endswith("var_b (ddof=0) = 0.75")
    assert explained.formula == "x = (r - mean) / (std + eps); A = (x - mean_b) / (std_b + eps)"
    assert explained.rows[0].formula.startswith("x = (1 - 5.25) / (9.84463 + 1e-08) = -0.431708")
    assert explained.rows[0].formula.endswith(" / (0.866025 + 1e-05)")
    expected = annotate(log, None, **options).frame["advantage"].to_list()[:4]
    assert [r.value for r in explained.rows] == pytest.approx(expected, rel=1e-12)
    assert [r.advantage for r in explained.rows] == pytest.approx(expected, rel=1e-12)
