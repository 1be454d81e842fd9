"""Daily polish: shell completion, the version flag, whole command summaries in the main
help, recomputing over a dump's own advantage column (--replace), and pipes both ways."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from grpo_cli import __version__
from grpo_cli.cli import app
from grpo_cli.core.presets import PRESETS

GRPO_ADV = str(Path(sys.executable).with_name("grpo-adv"))


def complete(line: str) -> list[str]:
    """What bash completion offers for the last word of ``line``."""
    words = line.split(" ")
    env = {
        **os.environ,
        "_GRPO_ADV_COMPLETE": "complete_bash",
        "COMP_WORDS": line,
        "COMP_CWORD": str(len(words) - 1),
    }
    done = subprocess.run([GRPO_ADV], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


class TestCompletion:
    def test_preset_names(self) -> None:
        assert complete("grpo-adv compute log.parquet --preset trl") == [
            "trl", "trl-batch", "trl-none", "trl-gdpo",
        ]  # fmt: skip

    def test_estimator_backend_and_format_names(self) -> None:
        assert complete("grpo-adv compute x -e rl") == ["rloo"]
        assert complete("grpo-adv verify x --backend p") == ["polars", "partitioned"]
        assert complete("grpo-adv compute x --format j") == ["jsonl", "json"]
        assert complete("grpo-adv compute x --singleton v") == ["verl"]

    def test_commands_and_scripts(self) -> None:
        assert complete("grpo-adv ex") == ["explain"]
        for spelling in ("source_bash", "bash_source"):  # Typer's and Click's
            env = {**os.environ, "_GRPO_ADV_COMPLETE": spelling}
            done = subprocess.run([GRPO_ADV], capture_output=True, text=True, env=env, timeout=60)
            assert "complete -o default -F _grpo_adv_completion grpo-adv" in done.stdout
        shown = CliRunner().invoke(app, ["--help"])
        assert "--install-completion" in shown.output and "--show-completion" in shown.output


def test_version_short_flag() -> None:
    result = CliRunner().invoke(app, ["-V"])
    assert result.exit_code == 0
    assert result.output == f"grpo-adv {__version__}\n"


def test_main_help_keeps_whole_summaries() -> None:
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    commands = result.output.split("Commands:")[1]
    assert "..." not in commands
    assert "Recompute advantages and compare them with a logged advantage column." in (
        " ".join(commands.split())
    )


class TestReplace:
    LOG = pl.DataFrame(
        {
            "prompt_id": ["a", "a", "b", "b"],
            "advantage": [9.0, 9.0, 9.0, 9.0],  # the dump's own, to be recomputed
            "reward": [1.0, 0.0, 0.5, 0.5],
        }
    )

    def test_refused_with_a_hint_that_names_replace(self, tmp_path: Path) -> None:
        source = tmp_path / "dump.parquet"
        self.LOG.write_parquet(source)
        result = CliRunner().invoke(app, ["compute", str(source), "-o", str(tmp_path / "o.csv")])
        assert result.exit_code == 3
        assert "hint: pass --replace to overwrite it" in result.output
        assert not (tmp_path / "o.csv").exists()

    def test_recomputes_in_place(self, tmp_path: Path) -> None:
        source, out = tmp_path / "dump.parquet", tmp_path / "o.parquet"
        self.LOG.write_parquet(source)
        result = CliRunner().invoke(app, ["compute", str(source), "-o", str(out), "--replace"])
        assert result.exit_code == 0, result.output
        written = pl.read_parquet(out)
        assert written.columns == ["prompt_id", "advantage", "reward"]
        a = 0.5 / (np.sqrt(0.5) + 1e-8)
        assert written["advantage"].to_list() == pytest.approx([a, -a, 0.0, 0.0], abs=1e-12)

    def test_file_engines_refuse_it(self, tmp_path: Path) -> None:
        source = tmp_path / "dump.parquet"
        self.LOG.write_parquet(source)
        result = CliRunner().invoke(
            app, ["compute", str(source), "--low-memory", "--replace", "-o", str(tmp_path / "o")]
        )
        assert result.exit_code == 2
        assert "--replace works with the in-memory engines" in result.output


class TestPipes:
    def test_no_input_reads_a_piped_stdin(self) -> None:
        log = "\n".join(json.dumps({"prompt_id": "a", "reward": r}) for r in (1.0, 0.0, 0.5))
        result = CliRunner().invoke(app, ["compute", "-q"], input=log + "\n")
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in result.stdout.splitlines()]
        assert [row["advantage"] for row in rows] == pytest.approx([1.0, -1.0, 0.0], abs=1e-7)

    def test_no_input_at_a_terminal_is_a_usage_error(self) -> None:
        code = (
            "import sys; sys.stdin.isatty = lambda: True\n"
            "from grpo_cli.cli import main\n"
            "sys.argv = ['grpo-adv', 'summarize']\n"
            "main()\n"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert done.returncode == 2
        assert done.stderr.splitlines()[0] == "error: no INPUT given"

    @pytest.mark.parametrize(
        ("fmt", "first"),
        [
            (None, "step,responses,groups"),
            ("md", "| step | responses | groups"),
            ("jsonl", '{"step":1,"responses":145'),
        ],
    )
    def test_summarize_table_to_stdout(self, fmt: str | None, first: str) -> None:
        args = ["summarize", "sample_data/rewards.parquet", "-o", "-", "-q"]
        result = CliRunner().invoke(app, args + (["--output-format", fmt] if fmt else []))
        assert result.exit_code == 0, result.output
        assert result.stdout.startswith(first)
        assert len(result.stdout.splitlines()) >= 3

    def test_compute_summary_to_stdout(self, tmp_path: Path) -> None:
        out = tmp_path / "o.parquet"
        args = ["compute", "sample_data/rewards.parquet", "-o", str(out), "--summary", "-", "-q"]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        table = pl.read_csv(result.stdout.encode())
        assert table.columns[:3] == ["step", "prompt_id", "size"]
        assert table["size"].sum() == pl.read_parquet(out).height
        both = CliRunner().invoke(app, [*args[:2], "-o", "-", "--summary", "-"])
        assert both.exit_code == 2
        assert "both go to standard output" in both.output

    @pytest.mark.parametrize("fmt", ["jsonl", "json", "md"])
    def test_compute_summary_format(self, tmp_path: Path, fmt: str) -> None:
        out = tmp_path / "o.parquet"
        args = ["compute", "sample_data/rewards.parquet", "-o", str(out), "-q"]
        result = CliRunner().invoke(app, [*args, "--summary", "-", "--summary-format", fmt])
        assert result.exit_code == 0, result.output
        groups = pl.read_parquet(out).group_by("prompt_id").len()
        if fmt == "md":
            lines = result.stdout.splitlines()
            assert lines[0].startswith("| step | prompt_id") and set(lines[1]) <= {
                "|",
                "-",
                ":",
                " ",
            }
            assert len(lines) == 2 + groups.height
            return
        records = (
            [json.loads(line) for line in result.stdout.splitlines()]
            if fmt == "jsonl"
            else json.loads(result.stdout)
        )
        sizes = {r["prompt_id"]: r["size"] for r in records}
        assert sizes == dict(groups.iter_rows())
        # a file in the asked format, whatever its suffix says
        table = tmp_path / "groups.txt"
        named = CliRunner().invoke(
            app, [*args, "--force", "--summary", str(table), "--summary-format", fmt]
        )
        assert named.exit_code == 0, named.output
        assert table.read_text() == result.stdout

    def test_summary_format_needs_summary(self, tmp_path: Path) -> None:
        args = ["compute", "sample_data/rewards.csv", "-o", str(tmp_path / "o.csv")]
        result = CliRunner().invoke(app, [*args, "--summary-format", "md"])
        assert result.exit_code == 2
        assert "--summary-format" in result.output and "--summary PATH" in result.output
        assert not (tmp_path / "o.csv").exists()

    def test_out_dir_is_created(self, tmp_path: Path) -> None:
        target = tmp_path / "new" / "folder"
        args = ["compute", "sample_data/rewards.csv", "--out-dir", str(target), "-q"]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert [p.name for p in target.iterdir()] == ["rewards.adv.csv"]

    def test_presets_as_json(self) -> None:
        result = CliRunner().invoke(app, ["presets", "--format", "json"])
        assert result.exit_code == 0
        presets = json.loads(result.stdout)
        by_name = {p["preset"]: p for p in presets}
        assert by_name["trl"]["eps"] == "0.0001 (std)" and by_name["verl"]["layout"] == "verl"
        assert len(presets) == len(by_name) >= 15


class TestOneErrorStyle:
    @pytest.mark.parametrize(
        ("args", "lines"),
        [
            (
                ["compute", "x.csv", "--estimater", "rloo"],
                [
                    "error: no such option: --estimater",
                    "hint: did you mean --estimator? (grpo-adv compute -h lists them)",
                ],
            ),
            (
                ["compute", "x.csv", "--eps", "abc"],
                [
                    "error: invalid value for '--eps': expected a number",
                    "hint: see grpo-adv compute -h",
                ],
            ),
            (
                ["compute", "x.csv", "--ddof", "1.5"],
                [
                    "error: invalid value for '--ddof': expected a whole number",
                    "hint: see grpo-adv compute -h",
                ],
            ),
            (
                ["computee"],
                [
                    "error: no such command 'computee'. Did you mean 'compute', 'compare'?",
                    "hint: see grpo-adv -h",
                ],
            ),
            (
                ["compute", "x.csv", "--preset", "verl_rlooo"],
                [
                    "error: unknown preset 'verl_rlooo'",
                    "hint: did you mean verl-rloo or openrlhf-rloo? (choose one of: "
                    + ", ".join(PRESETS)
                    + " (grpo-adv presets shows them))",
                ],
            ),
        ],
    )
    def test_usage_errors(self, args: list[str], lines: list[str]) -> None:
        result = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
        assert result.exit_code == 2
        assert result.output.splitlines() == lines

    @pytest.mark.parametrize(
        ("given", "canonical"),
        [
            (["-e", "RLOO"], {"estimator": "rloo"}),
            (["--preset", "TRL"], {"preset": "trl"}),
            (["--preset", "verl_rloo"], {"preset": "verl-rloo"}),
            (["--singleton", "ZERO", "--backend", "Polars"], {}),
        ],
    )
    def test_names_ignore_case_and_separators(
        self, tmp_path: Path, given: list[str], canonical: dict[str, str]
    ) -> None:
        out_given, out_canonical = tmp_path / "a.csv", tmp_path / "b.csv"
        source = "sample_data/rewards.csv"
        given = [*given, "--deterministic"]  # bit-for-bit repeatable runs
        first = CliRunner().invoke(app, ["compute", source, "-o", str(out_given), "-q", *given])
        assert first.exit_code == 0, first.output
        flags = [part for key, value in canonical.items() for part in (f"--{key}", value)]
        flags.append("--deterministic")
        second = CliRunner().invoke(
            app, ["compute", source, "-o", str(out_canonical), "-q", *flags]
        )
        assert second.exit_code == 0, second.output
        assert out_given.read_bytes() == out_canonical.read_bytes()


class TestPythonApiErrors:
    """The Python API's errors name keyword arguments; the CLI's name flags."""

    FRAME = pl.DataFrame({"prompt_id": ["a", "a"], "reward": [1.0, 2.0]})

    @pytest.mark.parametrize(
        ("given", "message", "hint"),
        [
            ({"eps": -1.0}, "eps must be a finite number >= 0, got -1.0", "e.g. eps=1e-8"),
            (
                {"group_cols": ()},
                "no group column given",
                'pass group_cols=("COL",) (e.g. prompt_id)',
            ),
            (
                {"clip": (3.0, 1.0)},
                "clip needs LO,HI with LO < HI, got (3.0, 1.0)",
                "e.g. clip=(-10, 10)",
            ),
            (
                {"estimator": "opo"},
                "estimator opo needs length_col",
                'name the column with length_col="COL"',
            ),
            (
                {"reward_weights": (1.0, 2.0)},
                "2 reward weight(s) for 1 reward column(s): reward",
                "give one weight per reward_cols, e.g. reward_weights=(1, 0.5)",
            ),
            (
                {"aggregation": "normalize_then_sum", "estimator": "rloo"},
                'aggregation="normalize_then_sum" works with estimator="grpo", not rloo',
                'use aggregation="sum_then_normalize" with this estimator',
            ),
            (
                {"group_cols": ("nope",)},
                "group column 'nope' not found; the input has columns: prompt_id, reward",
                'choose the group column with group_cols, e.g. group_cols=("prompt_id",)',
            ),
        ],
    )
    def test_keyword_arguments(self, given: dict[str, Any], message: str, hint: str) -> None:
        from grpo_cli import GrpoAdvError, compute_advantages

        with pytest.raises(GrpoAdvError) as raised:
            compute_advantages(self.FRAME, **given)
        assert (raised.value.message, raised.value.hint) == (message, hint)

    def test_options_alone(self) -> None:
        from grpo_cli import AdvantageOptions, GrpoAdvError

        with pytest.raises(GrpoAdvError, match=r"^group_size must be at least 1, got 0$"):
            AdvantageOptions(group_size=0)

    def test_the_cli_still_names_flags(self, tmp_path: Path) -> None:
        out = tmp_path / "o.csv"
        result = CliRunner().invoke(
            app, ["compute", "sample_data/rewards.csv", "-o", str(out), "--eps", "-1"]
        )
        assert (result.exit_code, result.stderr) == (
            2,
            "error: --eps must be a finite number >= 0, got -1.0\nhint: e.g. --eps 1e-8\n",
        )
        assert not out.exists()


class TestHints:
    @pytest.mark.parametrize(
        ("source", "hint"),
        [
            (
                "sample_data/verl_dump",
                "hint: this looks like a verl rollout dump: use --preset verl",
            ),
            (
                "sample_data/trl_completions",
                "hint: this looks like a TRL completions dump: use --preset trl",
            ),
        ],
    )
    def test_dumps_without_a_preset(self, tmp_path: Path, source: str, hint: str) -> None:
        result = CliRunner().invoke(app, ["compute", source, "-o", str(tmp_path / "o.csv")])
        assert result.exit_code == 3
        assert result.output.splitlines()[1] == hint

    def test_existing_summary_names_its_own_flag(self, tmp_path: Path) -> None:
        summary = tmp_path / "groups.md"
        summary.write_text("mine")
        args = ["compute", "sample_data/rewards.csv", "-o", str(tmp_path / "o.csv")]
        result = CliRunner().invoke(app, [*args, "--summary", str(summary)])
        assert result.exit_code == 4
        assert "hint: pass --force to overwrite it, or choose another --summary" in result.output
        assert summary.read_text() == "mine"

    def test_low_memory_on_csv_suggests_a_real_conversion(self, tmp_path: Path) -> None:
        args = ["compute", "sample_data/rewards.csv", "--low-memory", "-o", str(tmp_path / "o")]
        result = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
        assert result.exit_code == 2
        assert "sink_parquet" in result.output and "grpo-adv compute IN" not in result.output

    @pytest.mark.usefixtures("width_80")
    def test_verl_uid_group_is_named_readably(self, tmp_path: Path) -> None:
        args = ["compute", "sample_data/verl_dump", "--preset", "verl", "--replace"]
        result = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "o.jsonl")])
        assert result.exit_code == 0, result.output
        assert "(by step, uid (verl))" in result.output
        assert "__grpo" not in result.output

    def test_torch_hint_is_the_users(self) -> None:
        from grpo_cli.engines.torch import INSTALL_HINT

        assert INSTALL_HINT == "pip install 'grpo-adv[torch]'"

    def test_batch_estimator_without_batch_column_names_the_step_column(
        self, tmp_path: Path
    ) -> None:
        args = ["compute", "sample_data/rewards.parquet", "-o", str(tmp_path / "o.parquet")]
        warned = CliRunner().invoke(app, [*args, "-e", "batch_std"], env={"COLUMNS": "400"})
        assert warned.exit_code == 0, warned.output
        assert (
            "warning: batch_std reads batch statistics and no --batch-col is given: the whole "
            "log is one batch; 'step' looks like the batch (a trainer computes per step): "
            "--batch-col step"
        ) in warned.output
        per_step = ["-e", "batch_std", "--batch-col", "step", "-g", "step", "-g", "prompt_id"]
        quiet = CliRunner().invoke(app, [*args, *per_step, "-f"], env={"COLUMNS": "400"})
        assert quiet.exit_code == 0 and "looks like the batch" not in quiet.output

    def test_a_key_that_makes_most_groups_singletons_is_questioned(self, tmp_path: Path) -> None:
        source = tmp_path / "s.csv"
        pl.DataFrame(
            {"prompt_id": ["a", "b", "c", "d", "d"], "reward": [1.0, 0.0, 1.0, 0.0, 1.0]}
        ).write_csv(source)
        result = CliRunner().invoke(
            app, ["compute", str(source), "-o", str(tmp_path / "o.csv")], env={"COLUMNS": "400"}
        )
        assert result.exit_code == 0, result.output
        assert result.output.splitlines()[0] == (
            "warning: 3 of 4 groups (by prompt_id) hold a single response: the group key is "
            "probably wrong (a group is one prompt's responses; name it with --group-col)"
        )
        fine = CliRunner().invoke(
            app, ["compute", "sample_data/rewards.csv", "-o", str(tmp_path / "f.csv")]
        )
        assert fine.exit_code == 0 and "hold a single response" not in fine.output


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


def test_plot_of_a_compare_table_overlays_the_methods(tmp_path: Path) -> None:
    from grpo_cli.report.summarize import read_report

    both = tmp_path / "both.parquet"
    args = ["compare", "sample_data/rewards.parquet", "-e", "grpo", "-e", "dr_grpo", "-q"]
    assert CliRunner().invoke(app, [*args, "-o", str(both)]).exit_code == 0
    report = read_report([str(both)], None, {"advantage_col": "advantage_grpo"}, None, None)
    assert list(report.methods) == ["grpo", "dr_grpo"]
    written = pl.read_parquet(both)
    assert report.methods["dr_grpo"].len() == written["advantage_dr_grpo"].drop_nulls().len()
    result = CliRunner().invoke(app, ["plot", str(both), "-o", str(tmp_path / "p.png")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_opo_takes_the_logs_length_column(tmp_path: Path) -> None:
    out, explicit = tmp_path / "auto.parquet", tmp_path / "named.parquet"
    base = ["compute", "sample_data/rewards.parquet", "-e", "opo", "--deterministic"]
    auto = CliRunner().invoke(app, [*base, "-o", str(out)], env={"COLUMNS": "300"})
    assert auto.exit_code == 0, auto.output
    assert auto.output.splitlines()[0] == (
        "warning: using the length column 'length' (--length-col names another)"
    )
    named = CliRunner().invoke(app, [*base, "--length-col", "length", "-o", str(explicit), "-q"])
    assert named.exit_code == 0
    assert pl.read_parquet(out).equals(pl.read_parquet(explicit))
    source = tmp_path / "no_length.csv"
    pl.DataFrame({"prompt_id": ["a", "a"], "reward": [1.0, 0.0]}).write_csv(source)
    missing = CliRunner().invoke(
        app, ["compute", str(source), "-e", "opo", "-o", str(tmp_path / "x.csv")]
    )
    assert missing.exit_code == 2
    assert missing.output.splitlines()[0] == "error: estimator opo needs --length-col"
    weighted = CliRunner().invoke(
        app, ["compute", str(source), "--preset", "openrlhf-reinforce-baseline", "-o", "-"]
    )
    assert weighted.exit_code == 2
    assert weighted.output.splitlines()[0] == "error: --token-weighted needs --length-col"
