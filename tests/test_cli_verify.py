"""`verify`, `presets` and trainer dump layouts, from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.core.errors import Message, OptionsError
from grpo_cli.core.layouts import apply_layout
from grpo_cli.core.presets import PRESETS
from grpo_cli.jobs.pipeline import annotate
from grpo_cli.report.verify import verify_advantages
from tests.conftest import SAMPLE_DIR, cli_error, cli_text, load_script, token_dump

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
