"""TRL completions logs without ``--group-size``: num_generations inferred from the runs of
consecutive rows with the same prompt within a step (grpo_cli.core.layouts.infer_group_size)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.cli.params import flag_spelling, parse_group_size
from grpo_cli.core.errors import InputError, OptionsError, as_text
from grpo_cli.core.layouts import PromptRun, infer_group_size, prompt_runs
from grpo_cli.core.resolve import make_request, resolve
from grpo_cli.jobs.pipeline import annotate
from grpo_cli.report.verify import verify_advantages
from tests.conftest import SAMPLE_DIR, cli_error, cli_text, load_script

TRL_DIR = SAMPLE_DIR / "trl_completions"
INFERRED_4 = "inferred --group-size 4 from runs of equal prompts (TRL num_generations)"
HINT = "pass --group-size G with your GRPOConfig num_generations (TRL's default is 8)"


def sample_log() -> pl.DataFrame:
    return pl.concat([pl.read_parquet(path) for path in sorted(TRL_DIR.iterdir())])


def dump_group_size() -> int:
    """The num_generations ``make_trainer_dumps.py`` made the TRL dump with."""
    source = inspect.getsource(load_script("make_trainer_dumps").make_trl)
    found = re.search(r"g, prompts = (\d+), (\d+)", source)
    assert found is not None
    return int(found.group(1))


def runs_log(runs: list[tuple[int, str, int]]) -> pl.DataFrame:
    """A TRL-like log: for each (step, prompt, length) that many consecutive rows."""
    steps, prompts = [], []
    for step, prompt, length in runs:
        steps += [step] * length
        prompts += [prompt] * length
    n = len(steps)
    return pl.DataFrame(
        {
            "step": steps,
            "prompt": prompts,
            "completion": [f"c{i}" for i in range(n)],
            "accuracy_reward": [float(i % 3) for i in range(n)],
        }
    )


class TestInference:
    def test_the_sample_dump_gives_its_num_generations(self) -> None:
        g, warning = infer_group_size(sample_log(), "step")
        assert g == dump_group_size() == 4
        assert as_text(warning).render(flag_spelling) == INFERRED_4
        assert str(warning) == INFERRED_4.replace("--group-size 4", "group_size=4")

    def test_runs_stop_at_step_boundaries(self) -> None:
        frame = runs_log([(1, "a", 4), (1, "b", 4), (2, "b", 4), (2, "c", 4)])
        assert prompt_runs(frame, "step") == [
            PromptRun(1, 0, 4),
            PromptRun(1, 4, 4),
            PromptRun(2, 8, 4),
            PromptRun(2, 12, 4),
        ]
        assert infer_group_size(frame, "step")[0] == 4
        # without the step, b's two runs are one of 8: the gcd still gives 4
        g, warning = infer_group_size(frame, None)
        assert (g, as_text(warning).render(flag_spelling)) == (
            4,
            "inferred --group-size 4 from runs of equal prompts (TRL num_generations); runs "
            "of 4, 8 rows: the same prompt sampled again in a row",
        )

    def test_the_same_prompt_twice_in_a_row_is_two_groups(self) -> None:
        frame = runs_log([(1, "a", 4), (1, "b", 8), (1, "c", 4), (2, "d", 12)])
        g, warning = infer_group_size(frame, "step")
        assert g == 4
        assert str(warning).endswith(
            "; runs of 4, 8, 12 rows: the same prompt sampled again in a row"
        )
        inferred = annotate(frame, "trl")
        assert inferred.options.group_size == 4
        assert inferred.groups.height == 7  # 1 + 2 + 1 + 3 runs of 4 rows
        given = annotate(frame, "trl", group_size=4)
        assert inferred.frame.equals(given.frame)

    def test_a_broken_run_is_named(self) -> None:
        frame = runs_log([(1, "a", 4), (1, "b", 4), (1, "c", 3), (1, "d", 4), (2, "e", 5)])
        with pytest.raises(InputError) as info:
            infer_group_size(frame, "step")
        assert cli_error(info.value)[0] == (
            "cannot infer --group-size: the run of equal 'prompt' at step 1, row 8 has 3 rows, "
            "not a multiple of 4 (the other runs)"
        )
        assert cli_error(info.value)[1] == HINT

    def test_runs_of_4_and_6_are_not_groups_of_2(self) -> None:
        frame = runs_log([(1, "a", 4), (1, "b", 6), (1, "c", 4)])
        with pytest.raises(InputError) as info:
            infer_group_size(frame, "step")
        assert cli_error(info.value)[0] == (
            "cannot infer --group-size: the run of equal 'prompt' at step 1, row 4 has 6 rows, "
            "not a multiple of 4 (the other runs)"
        )

    def test_every_prompt_alone(self) -> None:
        frame = runs_log([(1, "a", 1), (1, "b", 1), (1, "c", 1)])
        with pytest.raises(InputError) as info:
            infer_group_size(frame, "step")
        assert cli_error(info.value)[0] == (
            "cannot infer --group-size: each of the 3 runs of equal 'prompt' holds one row"
        )

    def test_an_empty_log_needs_the_group_size(self) -> None:
        with pytest.raises(OptionsError) as info:
            infer_group_size(runs_log([]), "step")
        assert cli_error(info.value)[1] == HINT

    def test_a_given_group_size_is_not_inferred(self) -> None:
        frame = runs_log([(1, "a", 4), (1, "b", 3)])
        resolved = resolve(make_request("trl", {"group_size": 7}), frame)
        assert (resolved.options.group_size, resolved.notes) == (7, ())
        inferred = resolve(make_request("trl"), runs_log([(1, "a", 2), (1, "b", 2)]))
        assert (inferred.options.group_size, tuple(map(cli_text, inferred.notes))) == (
            2,
            ("inferred --group-size 2 from runs of equal prompts (TRL num_generations)",),
        )

    def test_group_size_auto_parses_to_not_given(self) -> None:
        assert parse_group_size("auto") is None
        assert parse_group_size("AUTO") is None
        assert parse_group_size("8") == 8


class TestVerifyAndCompute:
    def test_verify_the_sample_dump_without_the_group_size(self) -> None:
        report = verify_advantages(sample_log(), "trl", reward_weights=(1.0, 0.5))
        assert report.agree
        assert report.options.group_size == 4
        assert (report.rows, report.groups) == (64, 16)
        assert tuple(map(cli_text, report.warnings)) == (INFERRED_4,)
        assert report.hints == ()
        assert report.differing is not None and report.differing.height == 0

    def test_compute_warns_that_it_inferred(self) -> None:
        result = annotate(sample_log().drop("advantage"), "trl", reward_weights=(1.0, 0.5))
        assert cli_text(result.warnings[0]) == INFERRED_4
        diff = (result.frame["advantage"] - sample_log()["advantage"]).abs().max()
        assert isinstance(diff, float) and diff < 1e-6  # TRL's float32

    def test_explain_warns_that_it_inferred(self, runner: CliRunner) -> None:
        args = ["explain", str(TRL_DIR), "--preset", "trl", "--reward-weights", "1,0.5"]
        result = runner.invoke(app, [*args, "--row", "5"])
        assert result.exit_code == 0, result.stderr
        assert result.stderr == f"warning: {INFERRED_4}\n"  # the report is on stdout
        first = result.stdout.splitlines()[0]
        assert first.startswith("group step=") and first.endswith(": 4 responses")
        given = runner.invoke(app, [*args, "--row", "5", "--group-size", "4"])
        assert given.exit_code == 0, given.stderr
        assert given.stderr == ""
        assert given.stdout.splitlines()[1:] == result.stdout.splitlines()[1:]

    def test_cli_names_the_broken_run(self, runner: CliRunner, tmp_path: Path) -> None:
        path = tmp_path / "completions_00001.parquet"
        runs_log([(1, "a", 4), (1, "b", 4), (1, "c", 3), (1, "d", 4)]).with_columns(
            advantage=pl.lit(0.0)
        ).write_parquet(path)
        result = runner.invoke(app, ["verify", str(path), "--preset", "trl"])
        assert (result.exit_code, result.stderr) == (
            3,
            "error: cannot infer --group-size: the run of equal 'prompt' at step 1, row 8 has "
            "3 rows, not a multiple of 4 (the other runs)\n"
            f"hint: {HINT}\n",
        )
        given = runner.invoke(app, ["verify", str(path), "--preset", "trl", "--group-size", "5"])
        assert given.exit_code == 1, given.stderr  # grouped as told (3 runs of 5 rows)
