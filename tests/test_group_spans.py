"""Groups that span steps: verl groups within the batch, a batch column refuses groups that
span it, a step-like column gives one warning line, and `summarize` counts positional
groups once per step."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, ClassVar

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.core.errors import InputError
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.jobs.pipeline import annotate
from grpo_cli.report.summarize import summarize
from grpo_cli.report.verify import verify_advantages
from tests.conftest import SAMPLE_DIR, cli_error, cli_text, import_or_skip

TRL_DIR = SAMPLE_DIR / "trl_completions"
EPS = 1e-6  # the verl preset's epsilon

# p7 is sampled again in steps 2 and 7, p1 in step 7; p2 only in step 2.
RESAMPLED = [
    (1, "p7", 1.0),
    (1, "p7", 0.0),
    (1, "p1", 1.0),
    (1, "p1", 0.0),
    (2, "p7", 1.0),
    (2, "p7", 1.0),
    (2, "p2", 0.0),
    (2, "p2", 1.0),
    (7, "p7", 0.0),
    (7, "p7", 0.0),
    (7, "p1", 1.0),
    (7, "p1", 1.0),
]
WARNING = (
    "warning: 2 groups (by prompt_id) span several values of step and are pooled across "
    "them (first: prompt_id='p7' in step 1, 2 and 7); to group within each step: "
    "-g step -g prompt_id\n"
)


def log(rows: list[tuple[int, str, float]], step: str = "step") -> pl.DataFrame:
    return pl.DataFrame(
        rows,
        schema={step: pl.Int64, "prompt_id": pl.String, "reward": pl.Float64},
        orient="row",
    )


def write_csv(frame: pl.DataFrame, tmp_path: Path, name: str = "log.csv") -> str:
    path = tmp_path / name
    frame.write_csv(path)
    return str(path)


class TestVerlGroupsWithinTheBatch:
    """A uid sampled in steps 1, 2 and 7: three groups, as verl computes per batch."""

    def dump(self) -> pl.DataFrame:
        scores = [1.0, 0.0, 1.0, 1.0, 0.0, 0.5, 1.0, 0.0]
        steps = [1, 1, 2, 2, 2, 7, 1, 1]
        uids = [
            "u7_0_0",
            "u7_0_1",
            "u7_1_0",
            "u7_1_1",
            "u7_1_2",
            "u7_0_0",
            "a_0_0",
            "a_0_1",
        ]
        return pl.DataFrame(
            {"input": ["q"] * 8, "score": scores, "step": steps, "uid": uids}
        ).with_columns(output=pl.lit("o"))

    def test_three_groups_with_their_sizes(self) -> None:
        result = annotate(self.dump(), "verl")
        assert result.options.group_cols == ("step", "__grpo_uid_group")
        groups = result.groups.sort("step", "group").select("step", "group", "size")
        assert groups.rows() == [(1, "a", 2), (1, "u7", 2), (2, "u7", 3), (7, "u7", 1)]

    def test_advantages_by_hand(self) -> None:
        got = annotate(self.dump(), "verl").frame["advantage"].to_list()
        s1 = math.sqrt(0.5)  # std of (1, 0), ddof 1
        s2 = math.sqrt(1 / 3)  # std of (1, 1, 0): deviations 1/3, 1/3, -2/3
        expected = [
            0.5 / (s1 + EPS),
            -0.5 / (s1 + EPS),
            (1 / 3) / (s2 + EPS),
            (1 / 3) / (s2 + EPS),
            (-2 / 3) / (s2 + EPS),
            0.5 / (1 + EPS),  # a one-response group: mean 0, std 1
            0.5 / (s1 + EPS),
            -0.5 / (s1 + EPS),
        ]
        assert got == pytest.approx(expected, rel=1e-12, abs=1e-12)

    def test_equal_to_computing_each_step_separately(self) -> None:
        dump = self.dump()
        whole = annotate(dump, "verl").frame
        for step in (1, 2, 7):
            alone = annotate(dump.filter(pl.col("step") == step), "verl").frame
            part = whole.filter(pl.col("step") == step)
            assert part["advantage"].to_list() == pytest.approx(
                alone["advantage"].to_list(), rel=1e-12, abs=1e-12
            )

    def test_verify_accepts_per_step_advantages(self) -> None:
        dump = self.dump()
        logged = annotate(dump, "verl").frame
        report = verify_advantages(logged, "verl", tol=1e-12)
        assert report.agree and report.groups == 4 and report.warnings == ()


class TestBatchColumnRefusesSpanningGroups:
    ERROR = (
        "error: 2 groups (by prompt_id) span several values of step (batch column); "
        "first: prompt_id='p7' in step 1, 2 and 7\n"
        "hint: group within each batch: -g step -g prompt_id\n"
    )

    @pytest.mark.parametrize("command", ["compute", "summarize", "verify"])
    def test_exit_3_and_the_message(self, runner: CliRunner, tmp_path: Path, command: str) -> None:
        frame = log(RESAMPLED).with_columns(advantage=pl.lit(0.0))
        source = write_csv(frame if command == "verify" else log(RESAMPLED), tmp_path)
        extra = ["-o", str(tmp_path / "out.csv")] if command == "compute" else []
        pooled = ["-g", "prompt_id", "--batch-col", "step"]
        result = runner.invoke(app, [command, source, *pooled, *extra])
        assert result.exit_code == 3
        assert result.stderr == self.ERROR
        assert not (tmp_path / "out.csv").exists()

    def test_grouping_within_the_batch_runs(self, runner: CliRunner, tmp_path: Path) -> None:
        source = write_csv(log(RESAMPLED), tmp_path)
        out = tmp_path / "out.csv"
        args = ["--batch-col", "step", "-g", "step", "-g", "prompt_id", "-o", str(out)]
        result = runner.invoke(app, ["compute", source, *args])
        assert result.exit_code == 0, result.stderr
        assert "span" not in result.stderr

    def test_composite_key_one_group_text_batches(self) -> None:
        frame = pl.DataFrame(
            {
                "batch": ["a", "a", "b", "b", "b"],
                "task": ["math", "math", "math", "code", "code"],
                "prompt_id": ["q", "q", "q", "q", "q"],
                "reward": [1.0, 0.0, 1.0, 0.0, 1.0],
            }
        )
        with pytest.raises(InputError) as info:
            annotate(frame, group_cols=("task", "prompt_id"), batch_col="batch")
        assert info.value.message == (
            "1 group (by task, prompt_id) spans several values of batch (batch column); "
            "first: task='math', prompt_id='q' in batch 'a' and 'b'"
        )
        assert cli_error(info.value)[1] == "group within each batch: -g batch -g task -g prompt_id"

    def test_many_values_are_abbreviated(self) -> None:
        rows = [(step, "p", float(step % 2)) for step in (1, 2, 3, 4, 5, 8)]
        with pytest.raises(InputError) as info:
            summarize(log(rows), AdvantageOptions(batch_col="step"))
        assert info.value.message.endswith("prompt_id='p' in step 1, 2, 3, ... and 8 (6 values)")

    def test_positional_groups_are_within_batches(self) -> None:
        frame = log(RESAMPLED)
        result = annotate(frame, group_size=2, batch_col="step")
        assert result.run.groups == 6 and result.warnings == ()


def warning_lines(stderr: str) -> list[str]:
    """The warning lines of ``stderr`` (a line that starts with ``warning:``): never a
    substring test, since stderr also shows the output path (pytest's temporary folder,
    named after the test, wrapped by Rich or not depending on its length)."""
    return [line for line in stderr.splitlines() if line.startswith("warning:")]


POOLED = ("-g", "prompt_id")  # pooling across steps: only when asked for


class TestDefaultGroupsWithinSteps:
    """With a step column and no explicit key, a group is (step, prompt): a prompt sampled
    again in a later step is another group, as in every trainer."""

    # by hand, ddof 1, eps 1e-8: each group is a pair; (1, 0) gives +-0.5 / (sqrt(0.5) +
    # eps), a constant pair 0 (pooled, p7 would be (1, 0, 1, 1, 0, 0) across 3 steps)
    HALF = 0.5 / (math.sqrt(0.5) + 1e-8)
    EXPECTED: ClassVar = [HALF, -HALF, HALF, -HALF, 0.0, 0.0, -HALF, HALF, 0.0, 0.0, 0.0, 0.0]

    def test_python_annotate_groups_by_step_and_prompt(self) -> None:
        result = annotate(log(RESAMPLED))
        assert result.options.group_cols == ("step", "prompt_id")
        assert result.frame["advantage"].to_list() == pytest.approx(self.EXPECTED, abs=1e-15)
        assert result.run.groups == 6 and result.warnings == ()

    def test_compute_advantages_default_and_explicit_options(self) -> None:
        from grpo_cli import compute_advantages

        got = compute_advantages(log(RESAMPLED))["advantage"].to_list()
        assert got == pytest.approx(self.EXPECTED, abs=1e-15)
        # an explicit key, or an options object, is taken as it is: pooled
        pooled = compute_advantages(log(RESAMPLED), group_cols=("prompt_id",))
        as_given = compute_advantages(log(RESAMPLED), AdvantageOptions())
        assert pooled["advantage"].to_list() == pytest.approx(
            as_given["advantage"].to_list(), abs=1e-15
        )
        assert pooled["advantage"].to_list() != pytest.approx(self.EXPECTED, abs=1e-6)

    def test_first_step_like_column_is_used(self) -> None:
        rows = [(10, "p", 1.0), (10, "p", 0.0), (20, "p", 1.0), (20, "p", 0.0)]
        result = annotate(log(rows, step="global_step"))
        assert result.options.group_cols == ("global_step", "prompt_id")
        assert result.run.groups == 2

    def test_no_step_column_keeps_prompt_id(self) -> None:
        frame = log(RESAMPLED).drop("step")
        assert annotate(frame).options.group_cols == ("prompt_id",)

    @pytest.mark.slow
    @pytest.mark.parametrize("engine", [[], ["--low-memory"]])
    def test_compute_cli_no_warning_and_per_step_values(
        self, runner: CliRunner, tmp_path: Path, engine: list[str]
    ) -> None:
        source = tmp_path / "log.parquet"
        log(RESAMPLED).write_parquet(source)
        out = tmp_path / "out.parquet"
        result = runner.invoke(app, ["compute", str(source), "-o", str(out), *engine])
        assert result.exit_code == 0, result.stderr
        assert warning_lines(result.stderr) == []
        got = pl.read_parquet(out)["advantage"].to_list()
        assert got == pytest.approx(self.EXPECTED, abs=1e-15)

    def test_summarize_steps_are_not_pooled(self, runner: CliRunner, tmp_path: Path) -> None:
        source = write_csv(log(RESAMPLED), tmp_path)
        out = tmp_path / "steps.csv"
        result = runner.invoke(app, ["summarize", source, "-o", str(out)])
        assert result.exit_code == 0, result.stderr
        assert warning_lines(result.stderr) == []
        steps = pl.read_csv(out)
        # step 7: p7 (0, 0) and p1 (1, 1): both constant, so every response has zero std
        assert steps["step"].to_list() == [1, 2, 7]
        assert steps["frac_reward_zero_std"].to_list() == [0.0, 0.5, 1.0]


class TestExplicitPoolingWarns:
    """``-g prompt_id`` alone on a log with a step column pools a prompt's steps: allowed,
    with one warning line."""

    def test_compute_warns_once_with_the_count(self, runner: CliRunner, tmp_path: Path) -> None:
        source = write_csv(log(RESAMPLED), tmp_path)
        result = runner.invoke(app, ["compute", source, *POOLED, "-o", str(tmp_path / "out.csv")])
        assert result.exit_code == 0, result.stderr
        assert result.stderr.startswith(WARNING)
        assert len(warning_lines(result.stderr)) == 1

    def test_quiet_prints_nothing(self, runner: CliRunner, tmp_path: Path) -> None:
        source = write_csv(log(RESAMPLED), tmp_path)
        out = str(tmp_path / "out.csv")
        result = runner.invoke(app, ["compute", source, *POOLED, "-o", out, "-q"])
        assert result.exit_code == 0
        assert result.stderr == ""

    def test_summarize_warns(self, runner: CliRunner, tmp_path: Path) -> None:
        source = write_csv(log(RESAMPLED), tmp_path)
        result = runner.invoke(app, ["summarize", source, *POOLED])
        assert result.exit_code == 0, result.stderr
        assert result.stderr.startswith(WARNING)
        quiet = runner.invoke(app, ["summarize", source, *POOLED, "-q"])
        assert quiet.exit_code == 0 and quiet.stderr == ""
        warnings = summarize(log(RESAMPLED), AdvantageOptions()).warnings
        assert tuple(map(cli_text, warnings)) == (WARNING[9:-1],)

    def test_verify_warns(self, runner: CliRunner, tmp_path: Path) -> None:
        annotated = annotate(log(RESAMPLED), group_cols=("prompt_id",)).frame
        source = write_csv(annotated, tmp_path)
        result = runner.invoke(app, ["verify", source, *POOLED])
        assert result.exit_code == 0, result.stderr
        assert result.stderr.startswith(WARNING)
        quiet = runner.invoke(app, ["verify", source, *POOLED, "-q"])
        assert quiet.exit_code == 0 and quiet.stderr == ""

    def test_first_step_like_column_present(self) -> None:
        rows = [(10, "p", 1.0), (10, "p", 0.0), (20, "p", 1.0), (20, "q", 0.0)]
        warnings = annotate(log(rows, step="global_step"), group_cols=("prompt_id",)).warnings
        assert tuple(map(cli_text, warnings)) == (
            "1 group (by prompt_id) spans several values of global_step and is pooled across "
            "them (first: prompt_id='p' in global_step 10 and 20); to group within each "
            "global_step: -g global_step -g prompt_id",
        )

    def test_no_warning_when_grouped_by_step(self, runner: CliRunner, tmp_path: Path) -> None:
        source = write_csv(log(RESAMPLED), tmp_path)
        result = runner.invoke(
            app,
            ["compute", source, "-g", "step", "-g", "prompt_id", "-o", str(tmp_path / "o.csv")],
        )
        assert result.exit_code == 0, result.stderr
        assert warning_lines(result.stderr) == []

    def test_no_warning_when_groups_stay_within_steps(
        self, runner: CliRunner, tmp_path: Path
    ) -> None:
        within = [row for row in RESAMPLED if (row[0], row[1]) in {(1, "p7"), (1, "p1"), (2, "p2")}]
        source = write_csv(log(within), tmp_path)
        out = str(tmp_path / "o.csv")
        for command in (["compute", source, *POOLED, "-o", out], ["summarize", source, *POOLED]):
            result = runner.invoke(app, command)
            assert result.exit_code == 0, result.stderr
            assert warning_lines(result.stderr) == []
        assert annotate(log(within), group_cols=("prompt_id",)).warnings == ()

    def test_positional_groups_are_not_checked(self) -> None:
        assert annotate(log(RESAMPLED), group_size=2).warnings == ()


# Every (step, prompt) group holds one response: a per-response id taken for the prompt's.
SINGLES = [(1, "r1", 1.0), (1, "r2", 0.0), (2, "r3", 0.5), (2, "r4", 1.0)]
SINGLES_WARNING = (
    "warning: 4 of 4 groups (by step, prompt_id) hold a single response: the group key is "
    "probably wrong (a group is one prompt's responses; name it with --group-col)"
)
WRONG_GROUPINGS = [
    pytest.param(RESAMPLED, POOLED, WARNING.rstrip("\n"), id="spans"),
    pytest.param(SINGLES, (), SINGLES_WARNING, id="singles"),
]


class TestWrongGroupingSaidOnce:
    """Groups pooled across steps, and a key that makes every group one response: one
    line, worded alike, from every engine and every command (a hand-built log)."""

    @pytest.mark.parametrize(("rows", "grouping", "expected"), WRONG_GROUPINGS)
    @pytest.mark.parametrize(
        "engine",
        [
            pytest.param([], id="polars"),
            pytest.param(["--backend", "torch"], id="torch"),
            pytest.param(["--low-memory"], id="low_memory", marks=pytest.mark.slow),
        ],
    )
    def test_compute_on_every_engine(
        self,
        runner: CliRunner,
        tmp_path: Path,
        engine: list[str],
        rows: list[tuple[int, str, float]],
        grouping: tuple[str, ...],
        expected: str,
    ) -> None:
        if "torch" in engine:
            import_or_skip("torch")
        source = tmp_path / "log.parquet"
        log(rows).write_parquet(source)
        out = ["-o", str(tmp_path / "out.parquet")]
        result = runner.invoke(app, ["compute", str(source), *grouping, *engine, *out])
        assert result.exit_code == 0, result.stderr
        assert warning_lines(result.stderr) == [expected]

    @pytest.mark.parametrize(("rows", "grouping", "expected"), WRONG_GROUPINGS)
    @pytest.mark.parametrize("command", ["verify", "summarize", "explain", "plot"])
    def test_every_command(
        self,
        runner: CliRunner,
        tmp_path: Path,
        command: str,
        rows: list[tuple[int, str, float]],
        grouping: tuple[str, ...],
        expected: str,
    ) -> None:
        frame = log(rows)
        if command == "verify":
            keys: dict[str, Any] = {"group_cols": grouping[1:]} if grouping else {}
            frame = annotate(frame, **keys).frame
        source = write_csv(frame, tmp_path)
        extra = {
            "explain": ["--row", "0"],
            "plot": ["-o", str(tmp_path / "p.png")],
        }.get(command, [])
        if command == "plot":
            import_or_skip("matplotlib")
        result = runner.invoke(app, [command, source, *grouping, *extra])
        assert result.exit_code == 0, result.stderr
        assert warning_lines(result.stderr) == [expected]
        again = ["-f"] if command == "plot" else []
        quiet = runner.invoke(app, [command, source, *grouping, *extra, *again, "-q"])
        assert quiet.exit_code == 0 and warning_lines(quiet.stderr) == []


class TestSummarizePositionalGroups:
    """TRL completions: 2 steps x 32 rows, groups of 8 per step: 8 groups, not 4."""

    ARGS = ("--preset", "trl", "--group-size", "8", "--reward-weights", "1,0.5")

    def test_overall_groups_match_the_group_table_and_verify(
        self, runner: CliRunner, tmp_path: Path
    ) -> None:
        overall_path, group_path = tmp_path / "overall.json", tmp_path / "groups.csv"
        for level, path in (("overall", overall_path), ("group", group_path)):
            result = runner.invoke(
                app, ["summarize", str(TRL_DIR), *self.ARGS, "--level", level, "-o", str(path)]
            )
            assert result.exit_code == 0, result.stderr
        overall = json.loads(overall_path.read_text())[0]
        groups = pl.read_csv(group_path)
        frame = pl.read_parquet(sorted(TRL_DIR.iterdir()))
        verified = verify_advantages(frame, "trl", group_size=8, reward_weights=(1.0, 0.5))
        assert overall["responses"] == 64
        assert overall["groups"] == groups.height == verified.groups == 8
        assert groups.select("step", "group_index").unique().height == 8


@settings(max_examples=80, deadline=None)
@given(
    data=st.lists(
        st.tuples(st.integers(0, 5), st.integers(-3, 3), st.one_of(st.none(), st.floats(0, 1))),
        min_size=1,
        max_size=40,
    )
)
def test_the_one_window_span_flag_is_the_two_window_one(
    data: list[tuple[int, int, float | None]],
) -> None:
    """The engine's span flag for integer steps (value x rows against the group's sum: one
    window) flags some row of exactly the groups the two-window flag (smallest and largest
    values differ) flags in full."""
    from grpo_cli.core.plan import span_flag

    frame = pl.DataFrame(data, schema=["g", "step", "reward"], orient="row")
    flags = frame.with_columns(
        one=span_flag("step", ("g",), pl.len().over("g")).alias("one"),
        two=span_flag("step", ("g",)).alias("two"),
        spans=pl.col("step").n_unique().over("g") > 1,
    )
    assert flags["two"].to_list() == flags["spans"].to_list()
    per_group = flags.group_by("g").agg(pl.col("one").any(), pl.col("spans").first())
    assert per_group["one"].to_list() == per_group["spans"].to_list()
    assert not flags.filter(~pl.col("spans"))["one"].any()
