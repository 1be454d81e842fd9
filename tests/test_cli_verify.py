"""`verify`, `presets` and trainer dump layouts, from the command line."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.core.errors import Message, OptionsError
from grpo_cli.core.layouts import apply_layout
from grpo_cli.core.presets import PRESETS
from grpo_cli.jobs.pipeline import annotate
from grpo_cli.report.verify import beyond_float32, verify_advantages
from tests.conftest import (
    SAMPLE_DIR,
    annotated_log,
    cli_error,
    cli_text,
    load_script,
    token_dump,
    with_damaged_column,
)

TRL_DIR = SAMPLE_DIR / "trl_completions"
VERL_DIR = SAMPLE_DIR / "verl_dump"
OPENRLHF_LOG = SAMPLE_DIR / "openrlhf_log.jsonl"


def test_dump_script_regenerates_the_committed_dumps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = load_script("make_trainer_dumps")
    monkeypatch.setattr(module, "HERE", tmp_path)
    module.main()
    for committed in [*TRL_DIR.iterdir(), *VERL_DIR.iterdir(), OPENRLHF_LOG]:
        relative = committed.relative_to(SAMPLE_DIR)
        fresh = tmp_path / relative
        if committed.suffix == ".parquet":
            assert pl.read_parquet(fresh).equals(pl.read_parquet(committed))
        else:
            assert fresh.read_text() == committed.read_text()


class TestVerify:
    def test_trl_dump_agrees_with_trl(self, runner: CliRunner) -> None:
        args = [
            "verify",
            str(TRL_DIR),
            "--preset",
            "trl",
            "--group-size",
            "4",
            "--reward-weights",
            "1,0.5",
        ]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.stderr
        assert "vs trl: agree (tolerance 1e-05)" in result.stderr
        assert "rows compared         │ 64" in result.stderr
        assert "groups over tolerance │ 0 of 16" in result.stderr

    def test_trl_dump_differs_from_trl_batch(self, runner: CliRunner) -> None:
        args = [
            "verify",
            str(TRL_DIR),
            "--preset",
            "trl-batch",
            "--group-size",
            "4",
            "--reward-weights",
            "1,0.5",
        ]
        result = runner.invoke(app, args)
        assert result.exit_code == 1
        assert "vs trl-batch: differ" in result.stderr
        assert "worst groups" in result.stderr

    @pytest.mark.usefixtures("width_80")
    def test_trl_dump_agrees_without_the_group_size(self, runner: CliRunner) -> None:
        for given in ([], ["--group-size", "auto"]):
            args = ["verify", str(TRL_DIR), "--preset", "trl", "--reward-weights", "1,0.5"]
            result = runner.invoke(app, [*args, *given])
            assert result.exit_code == 0, result.stderr
            assert result.stderr.startswith(
                "warning: inferred --group-size 4 from runs of equal prompts (TRL "
                "num_generations)\n"
            )
            assert "groups by runs of 4 rows" in result.stderr
            assert "groups over tolerance │ 0 of 16" in result.stderr
            assert "hint:" not in result.stderr

    def test_a_bad_group_size_value_is_a_usage_error(self, runner: CliRunner) -> None:
        result = runner.invoke(
            app, ["verify", str(TRL_DIR), "--preset", "trl", "--group-size", "x"]
        )
        assert result.exit_code == 2
        assert result.stderr.startswith(
            "error: invalid value for '--group-size': expected a whole number or auto\n"
        )

    def test_wrong_weights_hint_at_reward_weights(self, runner: CliRunner) -> None:
        result = runner.invoke(app, ["verify", str(TRL_DIR), "--preset", "trl"])
        assert result.exit_code == 1
        # one group (step 20's run 1: one reward constant) agrees whatever the weights
        assert "rows over tolerance   │ 60" in result.stderr
        assert result.stderr.endswith(
            "hint: 60 of 64 rows differ and 2 reward columns are summed (accuracy_reward, "
            "format_reward; weights 1, 1): give the trainer's weights with --reward-weights "
            "W1,W2 (TRL: GRPOConfig reward_weights)\n"
        )

    @pytest.mark.usefixtures("width_80")
    def test_worst_groups_are_named_by_their_prompt(self, runner: CliRunner) -> None:
        result = runner.invoke(app, ["verify", str(TRL_DIR), "--preset", "trl"])
        assert "│   10 │           6 │ Question 1-6: what is 6 + 1? │    4 │" in result.stderr
        log = pl.read_parquet(TRL_DIR).with_columns(pl.concat_str([pl.col("prompt")] * 3))
        worst = verify_advantages(log, "trl", top=2).worst
        assert worst.columns == ["step", "group_index", "prompt", "size", "max_abs_diff"]
        assert worst["prompt"].to_list() == [
            "Question 1-6: what is 6 + 1?Question 1-6…",
            "Question 2-4: what is 4 + 2?Question 2-4…",
        ]

    def test_a_wrong_group_size_is_diagnosed(self, runner: CliRunner) -> None:
        args = ["verify", str(TRL_DIR), "--preset", "trl", "--reward-weights", "1,0.5"]
        result = runner.invoke(app, [*args, "--group-size", "8"])
        assert result.exit_code == 1
        assert "rows over tolerance   │ 64" in result.stderr
        hints = [line for line in result.stderr.splitlines() if line.startswith("hint:")]
        assert hints == [
            "hint: prompt runs have length 4, not --group-size 8: pass --group-size 4 (your "
            "num_generations), or leave it out to infer it"
        ]

    def test_diff_out_writes_the_differing_rows(self, runner: CliRunner, tmp_path: Path) -> None:
        out = tmp_path / "diff.csv"
        args = ["verify", str(TRL_DIR), "--preset", "trl", "--diff-out", str(out), "-q"]
        result = runner.invoke(app, args)
        assert (result.exit_code, result.stderr) == (1, "")
        diff = pl.read_csv(out)
        assert diff.columns == [
            "row",
            "step",
            "group_index",
            "prompt",
            "logged",
            "recomputed",
            "difference",
        ]
        assert diff.height == 60
        log = pl.concat([pl.read_parquet(p) for p in sorted(TRL_DIR.iterdir())])
        expected = annotate(log.drop("advantage"), "trl").frame["advantage"]
        # rows 36-39 (step 20's run 1) agree whatever the weights: one reward is constant
        assert sorted(set(range(64)) - set(diff["row"])) == [36, 37, 38, 39]
        for row in diff.iter_rows(named=True):
            i = row["row"]
            assert row["prompt"] == log["prompt"][i]
            assert (row["step"], row["group_index"]) == (log["step"][i], (i % 32) // 4)
            assert row["logged"] == pytest.approx(log["advantage"][i], abs=1e-12)
            assert row["recomputed"] == pytest.approx(expected[i], abs=1e-12)
            assert row["difference"] == pytest.approx(row["logged"] - row["recomputed"])
            assert abs(row["difference"]) > 1e-5
        again = runner.invoke(app, args)
        assert again.exit_code == 4
        assert "exists" in again.stderr
        forced = runner.invoke(app, [*args, "--force"])
        assert (forced.exit_code, forced.stderr) == (1, "")

    def test_diff_out_with_an_unknown_suffix_names_the_suffixes_only(
        self, runner: CliRunner, tmp_path: Path
    ) -> None:
        out = tmp_path / "diff.txt"
        result = runner.invoke(app, ["verify", str(TRL_DIR), "--diff-out", str(out)])
        assert result.exit_code == 2
        assert result.stderr.splitlines() == [  # verify has no --output-format to suggest
            f"error: cannot tell the table format of {out}",
            "hint: end the file name with .parquet, .csv, .jsonl, .json, .arrow or .md",
        ]
        assert not out.exists()

    def test_diff_out_of_an_agreeing_log_is_empty(self, runner: CliRunner, tmp_path: Path) -> None:
        out = tmp_path / "diff.parquet"
        args = ["verify", str(TRL_DIR), "--preset", "trl", "--reward-weights", "1,0.5"]
        result = runner.invoke(app, [*args, "--diff-out", str(out)])
        assert result.exit_code == 0, result.stderr
        assert f"0 differing row(s) written to {out}" in result.stderr
        assert pl.read_parquet(out).height == 0

    def test_verl_dump_agrees_with_verl_to_float32(self, runner: CliRunner) -> None:
        result = runner.invoke(app, ["verify", str(VERL_DIR), "--preset", "verl"])
        assert result.exit_code == 0, result.stderr
        assert "groups over tolerance │ 0 of 18" in result.stderr
        strict = runner.invoke(
            app, ["verify", str(VERL_DIR), "--preset", "verl", "--tol", "1e-12", "-q"]
        )
        assert (strict.exit_code, strict.stderr) == (1, "")

    def test_openrlhf_user_log_agrees_with_group_norm(self, runner: CliRunner) -> None:
        args = ["verify", str(OPENRLHF_LOG), "--preset", "openrlhf-group-norm", "-g", "prompt"]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.stderr
        assert "groups over tolerance │ 0 of 5" in result.stderr
        rloo = runner.invoke(app, [*args[:3], "openrlhf-rloo", "-g", "prompt", "-q"])
        assert rloo.exit_code == 1

    def test_a_glob_reads_the_files_as_one_log(self, runner: CliRunner) -> None:
        result = runner.invoke(app, ["verify", str(VERL_DIR / "*.jsonl"), "--preset", "verl"])
        assert result.exit_code == 0, result.stderr
        assert "3 files" in result.stderr

    def test_two_nulls_agree_and_a_null_against_a_number_does_not(self) -> None:
        # group a agrees; b's null reward leaves its advantage null (logged null: agrees,
        # logged 0.3: differs by inf); c's logged NaN is a null against the recomputed 0
        frame = pl.DataFrame(
            {
                "prompt_id": ["a", "a", "b", "b", "b", "c", "c"],
                "reward": [1.0, 0.0, 1.0, 0.0, None, 0.5, 0.5],
                "advantage": [0.70710678, -0.70710678, 0.70710678, -0.70710678, None, 0.0, 0.0],
            }
        )
        agreeing = verify_advantages(frame, nulls="exclude")
        assert (agreeing.rows, agreeing.rows_over) == (7, 0)
        assert agreeing.max_abs_diff < 1e-7  # the null pair counts as 0
        logged = frame["advantage"].scatter([4, 5], [0.3, float("nan")])
        report = verify_advantages(frame.with_columns(logged), nulls="exclude")
        assert (report.rows_over, report.groups_over, report.max_abs_diff) == (2, 2, float("inf"))
        assert report.differing["row"].to_list() == [4, 5]
        assert report.differing["recomputed"].to_list() == [None, 0.0]

    def test_missing_advantage_column(
        self, runner: CliRunner, sample_copy: dict[str, Path]
    ) -> None:
        result = runner.invoke(app, ["verify", str(sample_copy["parquet"])])
        assert result.exit_code == 3
        assert result.stderr.startswith("error: advantage column 'advantage' not found;")

    def test_verify_what_compute_wrote(
        self, runner: CliRunner, sample_copy: dict[str, Path]
    ) -> None:
        out = sample_copy["parquet"].with_name("out.parquet")
        done = runner.invoke(
            app,
            [
                "compute",
                "--deterministic",
                str(sample_copy["parquet"]),
                "--preset",
                "openrlhf-group-norm",
                "-o",
                str(out),
                "-q",
            ],
        )
        assert done.exit_code == 0
        same = runner.invoke(
            app,
            [
                "verify",
                str(out),
                "--preset",
                "openrlhf-group-norm",
                "--tol",
                "0",
                "--deterministic",
            ],
        )
        assert same.exit_code == 0, same.stderr
        assert "max |difference|      │ 0" in same.stderr
        other = runner.invoke(app, ["verify", str(out), "--preset", "trl", "-q"])
        assert other.exit_code == 1


class TestLayouts:
    def test_verl_uid_groups_drop_session_and_index(self) -> None:
        frame = pl.DataFrame(
            {
                "input": ["q"] * 4,
                "score": [1.0, 0.0, 1.0, 1.0],
                "step": [1] * 4,
                "uid": ["u-1_0_0", "u-1_0_1", "x_y_0_0", "x_y_0_1"],
            }
        )
        result = annotate(frame, "verl")
        assert result.options.group_cols == ("step", "__grpo_uid_group")  # within the batch
        assert result.options.reward_cols == ("score",)
        assert result.options.batch_col == "step"
        assert result.groups["group"].to_list() == ["u-1", "x_y"]
        assert result.frame.columns == ["input", "score", "step", "uid", "advantage"]

    def test_legacy_verl_dump_groups_by_step_and_input(self) -> None:
        frame = pl.DataFrame(
            {"input": ["q1", "q1", "q2", "q1"], "score": [1.0, 0.0, 1.0, 1.0], "step": [1, 1, 1, 2]}
        )
        result = annotate(frame, "verl")
        assert result.options.group_cols == ("step", "input")
        # (1, q1) has two responses; (1, q2) and (2, q1) are singletons (verl: r / (1 + 1e-6)).
        assert result.frame["advantage"].to_list() == pytest.approx(
            [0.5 / (0.5**0.5 + 1e-6), -0.5 / (0.5**0.5 + 1e-6), 1 / (1 + 1e-6), 1 / (1 + 1e-6)]
        )

    def test_trl_layout_infers_the_group_size(self) -> None:
        frame = pl.read_parquet(next(TRL_DIR.iterdir())).drop("advantage")
        warnings: list[Message] = []
        _, fields, _ = apply_layout(frame, "trl", {}, explicit=set(), warnings=warnings)
        assert fields["group_size"] == 4  # make_trainer_dumps.py: num_generations=4
        assert [cli_text(warning) for warning in warnings] == [
            "inferred --group-size 4 from runs of equal prompts (TRL num_generations)"
        ]

    def test_an_empty_trl_log_needs_the_group_size(self) -> None:
        frame = pl.read_parquet(next(TRL_DIR.iterdir())).drop("advantage").head(0)
        with pytest.raises(OptionsError) as info:
            apply_layout(frame, "trl", {}, explicit=set())
        assert cli_error(info.value)[1] == (
            "pass --group-size G with your GRPOConfig num_generations (TRL's default is 8)"
        )

    def test_trl_layout_takes_numeric_columns_as_rewards(self) -> None:
        frame = pl.read_parquet(next(TRL_DIR.iterdir())).drop("advantage")
        _, fields, _ = apply_layout(frame, "trl", {"group_size": 4}, explicit={"group_size"})
        assert fields["reward_cols"] == ("accuracy_reward", "format_reward")
        assert fields["batch_col"] == "step"

    def test_explicit_options_beat_the_layout(self) -> None:
        frame = pl.DataFrame(
            {"input": ["q"] * 2, "score": [1.0, 0.0], "mine": [0.0, 1.0], "step": [1, 1]}
        )
        result = annotate(frame, "verl", reward_cols=("mine",), group_cols=("input",))
        assert result.options.reward_cols == ("mine",)
        assert result.frame["advantage"].to_list() == pytest.approx(
            [-0.5 / (0.5**0.5 + 1e-6), 0.5 / (0.5**0.5 + 1e-6)]
        )


class TestPresetsCommand:
    def test_table_lists_every_preset(self, runner: CliRunner) -> None:
        result = runner.invoke(app, ["presets"])
        assert result.exit_code == 0
        for name in PRESETS:
            assert name in result.stdout

    def test_markdown_is_the_readme_table(self, runner: CliRunner) -> None:
        result = runner.invoke(app, ["presets", "--format", "markdown"])
        assert result.exit_code == 0
        assert result.stdout.startswith("| trainer | preset | version | setting | estimator |")
        readme = (SAMPLE_DIR.parent / "README.md").read_text()
        assert result.stdout in readme


class TestComputeWithPresets:
    def test_preset_and_override(self, runner: CliRunner, sample_copy: dict[str, Path]) -> None:
        args = [
            "compute",
            str(sample_copy["jsonl"]),
            "--preset",
            "verl",
            "--eps",
            "0.5",
            "-o",
            "-",
            "-q",
        ]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.stderr
        rows = [json.loads(line) for line in result.stdout.splitlines()]
        expected = annotate(pl.read_ndjson(sample_copy["jsonl"]), "verl", eps=0.5).frame
        got = pl.Series([r["advantage"] for r in rows], dtype=pl.Float64)
        assert got.is_null().to_list() == expected["advantage"].is_null().to_list()
        assert (got - expected["advantage"]).abs().max() <= 1e-12  # type: ignore[operator]

    def test_fixed_group_trainers_warn_about_variable_groups(
        self, runner: CliRunner, sample_copy: dict[str, Path]
    ) -> None:
        result = runner.invoke(app, ["compute", str(sample_copy["parquet"]), "--preset", "trl"])
        assert result.exit_code == 0
        assert result.stderr.startswith(
            "warning: TRL samples groups of one fixed size; this log's groups hold 1 to 16 "
            "responses: grpo-adv extends the trainer's NaN-aware statistics to them\n"
        )
        verl = runner.invoke(
            app, ["compute", str(sample_copy["parquet"]), "--preset", "verl", "-f"]
        )
        assert "fixed size" not in verl.stderr

    @pytest.mark.usefixtures("width_80")
    def test_summary_names_the_preset_and_batch(
        self, runner: CliRunner, sample_copy: dict[str, Path]
    ) -> None:
        args = [
            "compute",
            str(sample_copy["parquet"]),
            "--preset",
            "openrlhf-reinforce-baseline",
            "--length-col",
            "length",
            "--batch-col",
            "step",
        ]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.stderr
        assert "│ preset                        │ openrlhf-reinforce-baseline" in result.stderr
        assert "│ batches                       │ 4 (by step)" in result.stderr

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (
                ["--clip", "10"],
                "error: --clip needs 2 comma-separated numbers, got '10'\n"
                "hint: e.g. --clip -10,10\n",
            ),
            (
                ["--clip", "a,b"],
                "error: --clip needs comma-separated numbers, got 'a,b'\n"
                "hint: e.g. --clip -10,10\n",
            ),
            (
                ["--reward-weights", "1,2"],
                "error: 2 reward weight(s) for 1 reward column(s): reward\n"
                "hint: give one weight per --reward-col, e.g. --reward-weights 1,0.5\n",
            ),
            (
                ["--preset", "ppo"],
                "error: unknown preset 'ppo'\nhint: choose one of: "
                + ", ".join(PRESETS)
                + " (grpo-adv presets shows them)\n",
            ),
        ],
    )
    def test_option_errors(
        self, runner: CliRunner, sample_copy: dict[str, Path], args: list[str], message: str
    ) -> None:
        result = runner.invoke(app, ["compute", str(sample_copy["csv"]), "-o", "-", *args])
        assert (result.exit_code, result.stderr) == (2, message)
        assert result.stdout == ""

    def test_clip_accepts_a_negative_first_value(
        self, runner: CliRunner, sample_copy: dict[str, Path]
    ) -> None:
        args = ["compute", str(sample_copy["csv"]), "-o", "-", "-q", "--clip", "-0.5,0.5"]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.stderr
        values = [
            float(line.rsplit(",", 1)[1])
            for line in result.stdout.splitlines()[1:]
            if not line.endswith(",")
        ]
        assert max(values) == 0.5 and min(values) == -0.5


class TestVerifyWithoutAdvantages:
    def test_a_verl_dump_without_advantages_is_not_told_to_use_its_score(
        self, tmp_path: Path
    ) -> None:
        source = tmp_path / "dump.jsonl"
        pl.read_ndjson("sample_data/verl_dump/1.jsonl").drop("advantage").write_ndjson(source)
        result = CliRunner().invoke(app, ["verify", str(source), "--preset", "verl"])
        assert result.exit_code == 3
        assert result.output.splitlines()[-1] == (
            "hint: this log holds no advantages to check: grpo-adv compute writes them"
        )

    def test_a_float_column_that_is_no_input_is_suggested(self, tmp_path: Path) -> None:
        source = tmp_path / "log.csv"
        log = pl.read_csv("sample_data/rewards.csv").with_columns(adv_logged=pl.col("reward"))
        log.write_csv(source)
        result = CliRunner().invoke(app, ["verify", str(source)])
        assert result.exit_code == 3
        assert result.output.splitlines()[-1] == (
            "hint: name the logged advantage column with --advantage-col, e.g. --advantage-col "
            "adv_logged"
        )


def test_verify_says_how_many_rows_it_counted_twice(runner: CliRunner, tmp_path: Path) -> None:
    """A verl dump with its step-1 file read twice: each uid (``{uuid}_{session}_{index}``,
    one response) twice in its group. Uids that name the prompt, as verl's batch holds
    them, are no repeat."""
    files = sorted(VERL_DIR.glob("*.jsonl"))
    twice = tmp_path / "twice.jsonl"
    twice.write_text("".join(p.read_text() for p in [*files, files[0]]))
    result = runner.invoke(app, ["verify", str(twice), "--preset", "verl"])
    assert result.exit_code == 1
    first = "6720cfef-42b4-f91e-f326-15b7f933ba25"
    assert [
        line
        for line in result.stderr.splitlines()
        if line.startswith("warning:") and "repeat" in line
    ] == [
        f"warning: 24 rows repeat a uid within their group (e.g. uid='{first}_0_0' in the "
        f"group step=1, group='{first}'): duplicated rows count twice in the group's mean "
        "and std"
    ]
    plain = tmp_path / "plain.jsonl"
    log = pl.concat([pl.read_ndjson(p) for p in files])
    log.with_columns(pl.col("uid").str.replace(r"_\d+_\d+$", "")).write_ndjson(plain)
    result = runner.invoke(app, ["verify", str(plain), "--preset", "verl"])
    assert result.exit_code == 0, result.stderr
    assert "repeat" not in result.stderr


class TestTokenLevelAdvantages:
    """verl's advantage tensor (a list per response, one value per token) is read as one
    advantage per response."""

    NOTE = (
        "warning: input row 2's tokens differ in advantages (-0.255586 to 0.5): "
        "token-level advantages (verl's gae or optimal_token_baseline, reinforce_plus_plus "
        "with gamma < 1, or KL in the reward under reinforce_plus_plus or remax) cannot be "
        "compared per response; they are read as null"
    )

    @pytest.mark.parametrize("named", [[], ["--advantage-col", "advantages"]])
    def test_a_verl_token_tensor_agrees_with_verl(
        self, runner: CliRunner, tmp_path: Path, named: list[str]
    ) -> None:
        dump = token_dump(tmp_path / "dump")
        result = runner.invoke(app, ["verify", str(dump), "--preset", "verl", *named])
        assert result.exit_code == 0, result.output
        assert "rows compared         │ 72" in result.stderr
        assert "groups over tolerance │ 0 of 18" in result.stderr

    def test_a_list_advantage_column_without_preset(
        self, runner: CliRunner, tmp_path: Path
    ) -> None:
        dump = token_dump(tmp_path / "dump", column="advantage")
        args = ["verify", str(dump), "-r", "score", "-g", "step", "-g", "input", "--eps", "1e-6"]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "agree (tolerance 1e-05)" in result.stderr

    def test_tokens_that_differ_are_named(self, runner: CliRunner, tmp_path: Path) -> None:
        dump = token_dump(tmp_path / "dump", differ=2)
        result = runner.invoke(app, ["verify", str(dump), "--preset", "verl"])
        assert result.exit_code == 1, result.output
        assert result.stderr.splitlines()[0] == self.NOTE
        assert "rows over tolerance   │ 1" in result.stderr


def verify_lines(runner: CliRunner, *args: str) -> tuple[int, list[str]]:
    """``grpo-adv verify ARGS``: the exit code and the lines on stderr outside tables."""
    result = runner.invoke(app, ["verify", *args])
    drawn = "│┌└┏┡┃"
    return result.exit_code, [
        line for line in result.stderr.splitlines() if not line or line[0] not in drawn
    ]


VERL_FILES = "3 files (sample_data/verl_dump/1.jsonl ... sample_data/verl_dump/3.jsonl)"
TRL_FILES = (
    "2 files (sample_data/trl_completions/completions_00010.parquet ... "
    "sample_data/trl_completions/completions_00020.parquet)"
)
TRL_GROUP_SIZE = "warning: inferred --group-size 4 from runs of equal prompts (TRL num_generations)"


class TestVerifyNamesTheTrainer:
    """Without --preset (and without an option a preset sets), or with --preset auto,
    verify tries every preset the log has the inputs of and names those that match."""

    @pytest.mark.parametrize("auto", [[], ["--preset", "auto"]])
    def test_a_verl_dump_names_every_preset_that_matches(
        self, runner: CliRunner, auto: list[str]
    ) -> None:
        # the closest first (eps 1e-6 as logged: verl, then NeMo-RL without its leave-one-
        # out, slime, SkyRL, ROLL in table order); seed's eps 1e-8 and OpenRLHF's
        # 1e-9 move these advantages by less than --tol; token-weighted presets need a
        # length column, TRL's GDPO several rewards: not tried
        code, lines = verify_lines(runner, "sample_data/verl_dump", *auto)
        assert code == 0
        assert lines == [
            f"{VERL_FILES} vs verl: agree (tolerance 1e-05)",
            "the logged advantages match --preset verl, --preset nemo-rl-no-loo, --preset "
            "slime, --preset skyrl, --preset roll, --preset seed, --preset "
            "openrlhf-group-norm: identical on this log",
        ]

    def test_a_trl_dump_with_its_weights_is_trl(self, runner: CliRunner) -> None:
        # --reward-weights says where the log's numbers are, not how they are computed
        code, lines = verify_lines(
            runner, "sample_data/trl_completions", "--reward-weights", "1,0.5"
        )
        assert code == 0
        assert lines == [
            TRL_GROUP_SIZE,
            f"{TRL_FILES} vs trl: agree (tolerance 1e-05)",
            "the logged advantages match --preset trl",
        ]

    def test_no_preset_matching_names_the_closest(self, runner: CliRunner) -> None:
        code, lines = verify_lines(runner, "sample_data/trl_completions")
        assert code == 1
        assert lines[:3] == [
            TRL_GROUP_SIZE,
            f"{TRL_FILES} vs trl: differ (tolerance 1e-05)",
            "no preset reproduces the logged advantages; the closest is --preset trl: max "
            "|difference| 0.387, 60 of 64 rows (94%) over tolerance",
        ]
        assert lines[-1].startswith("hint: 60 of 64 rows differ and 2 reward columns are summed")

    def test_a_token_weighted_preset_is_tried_where_the_log_has_lengths(
        self, runner: CliRunner, tmp_path: Path
    ) -> None:
        log = pl.read_parquet(SAMPLE_DIR / "rewards.parquet")
        written = annotate(log, "openrlhf-reinforce-baseline", batch_col="step").frame
        source = tmp_path / "whitened.parquet"
        written.write_parquet(source)
        code, lines = verify_lines(runner, str(source), "--batch-col", "step")
        assert code == 0
        assert lines == [
            "warning: using the length column 'length' (--length-col names another)",
            f"{source} vs openrlhf-reinforce-baseline: agree (tolerance 1e-05)",
            "the logged advantages match --preset openrlhf-reinforce-baseline",
        ]
        written.drop("length").write_parquet(source)
        code, lines = verify_lines(runner, str(source), "--batch-col", "step", "-q")
        assert (code, lines) == (1, [])

    def test_an_option_a_preset_sets_keeps_the_given_options(self, runner: CliRunner) -> None:
        args = ["sample_data/openrlhf_log.jsonl", "-g", "prompt", "--eps", "1e-9"]
        code, lines = verify_lines(runner, *args)
        assert (code, lines) == (
            0,
            ["sample_data/openrlhf_log.jsonl vs the given options: agree (tolerance 1e-05)"],
        )

    def test_a_matching_preset_says_nothing_more(self, runner: CliRunner) -> None:
        args = ["sample_data/openrlhf_log.jsonl", "-g", "prompt", "--preset", "openrlhf-group-norm"]
        code, lines = verify_lines(runner, *args)
        assert (code, lines) == (
            0,
            ["sample_data/openrlhf_log.jsonl vs openrlhf-group-norm: agree (tolerance 1e-05)"],
        )

    def test_a_wrong_preset_names_those_that_match(self, runner: CliRunner) -> None:
        # verl-rloo's own trainer first (verl), then every other preset in table order
        code, lines = verify_lines(runner, "sample_data/verl_dump", "--preset", "verl-rloo")
        assert code == 1
        assert lines[0] == f"{VERL_FILES} vs verl-rloo: differ (tolerance 1e-05)"
        assert lines[-1] == (
            "hint: the logged advantages match --preset verl, --preset seed, --preset "
            "openrlhf-group-norm, --preset nemo-rl-no-loo, --preset slime, --preset skyrl, "
            "--preset roll: identical on this log"
        )


def grpo_float32(rewards: Sequence[float], groups: Sequence[str], eps: float) -> list[float]:
    """TRL's and verl's grpo as the trainers run it, in float32 (numpy standing in for
    torch): ``(r - r.mean()) / (r.std(ddof=1) + eps)`` per group of float32 rewards."""
    scores = np.asarray(rewards, dtype=np.float32)
    advantages = np.zeros_like(scores)
    for group in dict.fromkeys(groups):
        rows = [i for i, g in enumerate(groups) if g == group]
        x = scores[rows]
        advantages[rows] = (x - x.mean()) / (x.std(ddof=1) + np.float32(eps))
    return [float(a) for a in advantages]


class TestFloat32Honesty:
    SPREAD = (0.3, 1.1, 0.7, 1.9, 1.3, 0.4, 2.2, 0.9)  # not dyadic: float32 rounds them
    GROUPS = ("a",) * 4 + ("b",) * 4

    def float32_log(self, path: Path, base: float, eps: float) -> Path:
        """A log a float32 trainer wrote: its float32 rewards and advantages."""
        rewards = [float(np.float32(base + s)) for s in self.SPREAD]
        advantages = grpo_float32(rewards, self.GROUPS, eps)
        frame = {"prompt_id": list(self.GROUPS), "reward": rewards, "advantage": advantages}
        pl.DataFrame(frame).write_csv(path)
        return path

    @pytest.mark.parametrize(("preset", "eps"), [("verl", 1e-6), ("trl", 1e-4)])
    def test_rewards_near_1e6_are_beyond_float32_not_differing(
        self, runner: CliRunner, tmp_path: Path, preset: str, eps: float
    ) -> None:
        log = self.float32_log(tmp_path / "log.csv", 1e6, eps)
        code, lines = verify_lines(runner, str(log), "--preset", preset)
        assert code == 0
        assert lines == [
            "warning: 1 group(s) beyond float32, their 4 row(s) over tolerance not counted: "
            "rewards up to 1e+06 leave float32 a resolution of 2^-23 x 1e+06 = 0.12, which the "
            "formula's gain makes more than --tol 1e-05 (their largest difference: 0.0866)",
            f"{log} vs {preset}: agree (tolerance 1e-05)",
        ]

    def test_the_same_numbers_in_a_normal_range_still_differ(
        self, runner: CliRunner, tmp_path: Path
    ) -> None:
        log = self.float32_log(tmp_path / "log.csv", 0.0, 1e-6)
        code, lines = verify_lines(runner, str(log), "--preset", "verl")
        assert (code, lines) == (0, [f"{log} vs verl: agree (tolerance 1e-05)"])
        frame = pl.read_csv(log)
        frame.with_columns(frame["advantage"].scatter(5, frame["advantage"][5] + 0.01)).write_csv(
            log
        )
        result = runner.invoke(app, ["verify", str(log), "--preset", "verl"])
        assert result.exit_code == 1
        assert "rows over tolerance   │ 1" in result.stderr
        assert "float32" not in result.stderr

    def test_the_criterion_on_hand_built_groups(self) -> None:
        """``2^-23 max|r_g| * max|A_g| / max|r_g - mean_g| > max(tol, 1e-5) max(1, max|A_g|)``:
        0/1 rewards (grpo, eps 1e-6): 2^-23 * 1.732 = 2.1e-7, within float32; 1e6 + 0/1:
        2^-23 * 1e6 * 1.732 = 0.21; 0.5 + 0/1e-7: 2^-23 * 0.5 * 0.0473 / 5e-8 = 0.056; a
        group of equal rewards: never."""
        std, near = 0.5773502691896258, 5.773502691896258e-8
        binary = [x / (std + 1e-6) for x in (0.5, -0.5, -0.5, 0.5)]
        tiny = [x / (near + 1e-6) for x in (-5e-8, 5e-8, -5e-8, 5e-8)]
        frame = pl.DataFrame(
            {
                "g": [g for g in "abcd" for _ in range(4)],
                "r": [1.0, 0.0, 0.0, 1.0]
                + [1e6 + r for r in (1, 0, 0, 1)]
                + [0.5 + r for r in (0, 1e-7, 0, 1e-7)]
                + [1e6] * 4,
                "a": [*binary, *binary, *tiny, *[0.0] * 4],
            }
        )

        def beyond(tol: float) -> list[bool]:
            groups = frame.group_by("g", maintain_order=True)
            return groups.agg(beyond_float32("r", "a", tol))["beyond_float32"].to_list()

        assert beyond(1e-5) == [False, True, True, False]
        assert beyond(0.1) == [False, True, False, False]  # 0.056 < 0.1
        assert beyond(1e-12) == [False, True, True, False]  # 1e-5 at least: 2.1e-7 is float32's own

    def test_tol_is_relative_past_one(self) -> None:
        # dr_grpo on [0, 10]: advantages -5, 5; within 1e-5 * 5 of 5 agrees
        frame = pl.DataFrame({"prompt_id": ["p", "p"], "reward": [0.0, 10.0]})
        for logged, rows_over in ((5 + 4e-5, 0), (5 + 6e-5, 1)):
            log = frame.with_columns(advantage=pl.Series([-5.0, logged]))
            report = verify_advantages(log, estimator="dr_grpo")
            assert report.rows_over == rows_over
            assert report.max_abs_diff == pytest.approx(logged - 5)
        small = pl.DataFrame({"prompt_id": ["p", "p"], "reward": [0.0, 1.0]})
        near_zero = small.with_columns(advantage=pl.Series([-0.5, 0.5 + 2e-5]))
        assert verify_advantages(near_zero, estimator="dr_grpo").rows_over == 1  # |A| < 1


class TestBigLogsInPieces:
    """A Parquet log over PIECE_ROWS rows is verified in pieces of whole groups, reading
    only the columns the recomputation needs: the report of the log loaded whole."""

    def test_pieces_give_the_in_memory_report(
        self, runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from grpo_cli.report import pieces
        from grpo_cli.report.verify import run_verify

        frame = annotated_log(4000)
        off = pl.int_range(pl.len()).is_in([5, 700, 701, 3999])  # 4 rows of 3 or 4 groups
        frame = frame.with_columns(
            pl.when(off)
            .then(pl.col("advantage") + 0.25 * pl.int_range(pl.len()) / 4000)
            .otherwise("advantage")
        )
        path = with_damaged_column(frame, tmp_path / "log.parquet")
        expected = verify_advantages(frame, estimator="grpo", top=3)
        monkeypatch.setattr(pieces, "PIECE_ROWS", 900)
        report = run_verify([path], options={"estimator": "grpo"}, top=3).report
        assert (
            (report.rows, report.groups)
            == (expected.rows, expected.groups)
            == (4000, frame["prompt_id"].n_unique())
        )
        assert (report.rows_over, report.groups_over) == (expected.rows_over, expected.groups_over)
        assert report.max_abs_diff == pytest.approx(expected.max_abs_diff, rel=1e-12)
        assert report.differing["row"].to_list() == [5, 700, 701, 3999]
        numbers = ["logged", "recomputed", "difference"]
        assert report.differing.drop(numbers).equals(expected.differing.drop(numbers))
        for column in numbers:
            got, want = report.differing[column].to_numpy(), expected.differing[column].to_numpy()
            assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
        got_worst, want_worst = report.worst.sort("prompt_id"), expected.worst.sort("prompt_id")
        assert got_worst.columns == want_worst.columns
        for column in got_worst.columns:  # floats to 1e-12: parallel sums' last bit varies
            if got_worst[column].dtype.is_float():
                assert got_worst[column].to_numpy() == pytest.approx(
                    want_worst[column].to_numpy(), rel=1e-12, abs=1e-12
                )
            else:
                assert got_worst[column].to_list() == want_worst[column].to_list(), column

    def test_the_command_reads_only_the_columns_it_needs(
        self, runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from grpo_cli.report import pieces

        path = with_damaged_column(annotated_log(2000), tmp_path / "log.parquet")
        args = ["verify", str(path), "--estimator", "grpo"]
        whole = runner.invoke(app, args)  # one piece: read whole, the damaged column too
        assert whole.exit_code == 3 and "cannot read" in whole.output
        monkeypatch.setattr(pieces, "PIECE_ROWS", 500)
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "rows compared" in result.output and "2,000" in result.output

    def test_auto_compares_presets_on_a_sample_and_checks_the_whole_log(
        self, runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With no preset, a big log is not read whole: the presets are compared on the
        first piece (whole steps), the closest checks every row, and the line says so."""
        from grpo_cli.report import pieces
        from grpo_cli.report.verify import run_verify

        frame = annotated_log(4000)
        path = with_damaged_column(frame, tmp_path / "log.parquet")  # read whole: fails
        expected = verify_advantages(frame, "auto")
        monkeypatch.setattr(pieces, "PIECE_ROWS", 900)
        report = run_verify([path]).report
        assert report.preset == expected.preset == "seed"
        assert (report.rows, report.groups, report.rows_over) == (4000, expected.groups, 0)
        found = str(report.found)
        assert "match preset=seed, preset=openrlhf-group-norm" in found  # --preset on the CLI
        sample = int(found.split("on a sample of ")[1].split(" rows")[0].replace(",", ""))
        assert 0 < sample < 4000 and "whole steps" in found
        assert found.endswith("the whole log checked with preset=seed)")

        damaged = frame.with_columns(  # 3 rows off: the closest on the sample, over all rows
            pl.when(pl.int_range(pl.len()).is_in([5, 2000, 3999]))
            .then(pl.col("advantage") + 0.5)
            .otherwise("advantage")
        )
        path = with_damaged_column(damaged, tmp_path / "damaged.parquet")
        report = run_verify([path]).report
        whole = verify_advantages(damaged, "auto")  # two presets identical on this log: the
        closest = {"seed", "openrlhf-group-norm"}  # closest by their differences' last bit
        assert {report.preset, whole.preset} <= closest
        assert report.rows_over == 3
        assert report.max_abs_diff == pytest.approx(whole.max_abs_diff)
        assert report.differing["row"].to_list() == [5, 2000, 3999]
        found = str(report.found)
        assert found.startswith("no preset reproduces the logged advantages; the closest on a")
        assert (
            f"is preset={report.preset}: on the whole log, max |difference| 0.5, 3 of 4,000 rows"
            in found
        )
        assert "18 preset(s) whose batch is the whole log" in found

        result = runner.invoke(app, ["verify", str(path)])
        assert result.exit_code == 1, result.output
        assert "no preset reproduces" in result.output
        assert f"is --preset {report.preset}: on the whole log" in " ".join(result.output.split())

    def test_a_batch_formula_whose_batch_is_the_step_goes_by_pieces(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """TRL's scale_rewards="batch" with --batch-col step: each piece holds whole steps,
        so the batch statistics are the whole log's; auto names the preset too."""
        from grpo_cli.report import pieces
        from grpo_cli.report.verify import run_verify

        inputs = annotated_log(4000).drop("advantage")
        frame = annotate(inputs, "trl-batch", batch_col="step").frame
        path = with_damaged_column(frame, tmp_path / "log.parquet")
        monkeypatch.setattr(pieces, "PIECE_ROWS", 900)
        given = run_verify([path], preset="trl-batch", options={"batch_col": "step"}).report
        assert (given.rows, given.rows_over) == (4000, 0)
        assert given.max_abs_diff < 1e-12  # parallel sums: the last bit may differ
        auto = run_verify([path], options={"batch_col": "step"}).report
        assert auto.preset == "trl-batch" and auto.rows_over == 0
        assert str(auto.found).startswith("the logged advantages match preset=trl-batch (")
        off = frame.with_columns(advantage=pl.col("advantage") * 1.01)  # every row off by 1%
        path = with_damaged_column(off, tmp_path / "off.parquet")
        report = run_verify([path], preset="trl-batch", options={"batch_col": "step"}).report
        assert report.rows_over == verify_advantages(off, "trl-batch", batch_col="step").rows_over
        assert report.rows_over > 3000
