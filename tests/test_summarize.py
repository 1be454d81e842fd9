"""`summarize` metrics: hand-computed values, the trainers' formulas, properties, the CLI."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from grpo_cli import compute_advantages
from grpo_cli.cli import app
from grpo_cli.core.errors import InputError, OptionsError
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.report.summarize import histogram, summarize
from tests.conftest import SAMPLE_FILES, annotated_log, token_dump, with_damaged_column


def two_step_log() -> pl.DataFrame:
    """step 1: a = [1, 0, 0, 1], b = [1, 1] (zero std); step 2: c = [0.5] (one reward),
    d = [null, 2, 4]."""
    rows = [
        (1, "a", 1.0),
        (1, "a", 0.0),
        (1, "b", 1.0),
        (1, "a", 0.0),
        (1, "b", 1.0),
        (1, "a", 1.0),
        (2, "c", 0.5),
        (2, "d", None),
        (2, "d", 2.0),
        (2, "d", 4.0),
    ]
    return pl.DataFrame(
        rows, schema={"step": pl.Int64, "prompt_id": pl.String, "reward": pl.Float64}, orient="row"
    )


class TestHandComputed:
    def test_step_one(self) -> None:
        step = summarize(two_step_log(), AdvantageOptions()).steps.row(0, named=True)
        assert step["step"] == 1
        assert step["responses"] == 6
        assert step["groups"] == 2
        assert (step["group_size_min"], step["group_size_median"], step["group_size_max"]) == (
            2,
            3.0,
            4,
        )
        assert step["reward"] == pytest.approx(4 / 6)
        # deviations from 2/3: 1/3 x4, -2/3 x2: sum of squares 4/3, / (6 - 1)
        assert step["reward_std"] == pytest.approx(math.sqrt(4 / 15))
        assert step["frac_reward_zero_std"] == pytest.approx(2 / 6)  # b's two responses
        # a: std(1,0,0,1, ddof 1) = sqrt(1/3) for 4 responses; b: 0 for 2 responses
        assert step["group_reward_std"] == pytest.approx(4 * math.sqrt(1 / 3) / 6)
        assert (step["zero_std_groups"], step["singleton_groups"], step["null_rewards"]) == (
            1,
            0,
            0,
        )

    def test_step_two(self) -> None:
        step = summarize(two_step_log(), AdvantageOptions()).steps.row(1, named=True)
        assert (step["responses"], step["groups"]) == (4, 2)
        assert (step["group_size_min"], step["group_size_median"], step["group_size_max"]) == (
            1,
            2.0,
            3,
        )
        valid = [0.5, 2.0, 4.0]
        assert step["reward"] == pytest.approx(6.5 / 3)
        assert step["reward_std"] == pytest.approx(float(np.std(valid, ddof=1)))
        # c has one reward (no std), d's std is sqrt(2): nobody has a zero std
        assert step["frac_reward_zero_std"] == 0.0
        # c's response has no std and is left out; d's 3 responses have sqrt(2)
        assert step["group_reward_std"] == pytest.approx(math.sqrt(2))
        assert (step["zero_std_groups"], step["singleton_groups"], step["null_rewards"]) == (
            0,
            1,
            1,
        )

    def test_overall(self) -> None:
        report = summarize(two_step_log(), AdvantageOptions())
        overall = report.overall.row(0, named=True)
        assert (overall["responses"], overall["groups"]) == (10, 4)
        assert overall["group_size_median"] == 2.5  # sizes 4, 2, 1, 3
        valid = [1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.5, 2.0, 4.0]
        assert overall["reward"] == pytest.approx(sum(valid) / 9)
        assert overall["reward_std"] == pytest.approx(float(np.std(valid, ddof=1)))
        assert overall["frac_reward_zero_std"] == pytest.approx(2 / 10)
        assert not report.binary and "pass_at_n" not in report.overall.columns
        assert not report.annotated and "advantage_mean" not in report.overall.columns

    def test_binary_pass_rates(self) -> None:
        frame = pl.DataFrame(
            {
                "prompt_id": ["x"] * 4 + ["y"] * 2 + ["z"] * 3,
                "reward": [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0],
            }
        )
        report = summarize(frame, AdvantageOptions())
        overall = report.overall.row(0, named=True)
        assert report.binary
        assert overall["pass_at_n"] == pytest.approx(2 / 3)  # x and z have a success
        assert overall["pass_at_1"] == pytest.approx((1 / 4 + 0 + 2 / 3) / 3)

    def test_annotated_input_adds_advantage_metrics(self) -> None:
        annotated = compute_advantages(two_step_log())
        steps = summarize(annotated, AdvantageOptions()).steps
        one, two = steps.row(0, named=True), steps.row(1, named=True)
        assert one["advantage_mean"] == pytest.approx(0.0, abs=1e-12)
        assert one["advantage_max"] == pytest.approx(0.5 / (math.sqrt(1 / 3) + 1e-8))
        assert one["frac_zero_advantage"] == pytest.approx(2 / 6)  # b is flat
        # c (one reward) gets 0; d's null reward has a null advantage; d's two are +-0.707
        assert two["frac_zero_advantage"] == pytest.approx(1 / 4)
        assert two["advantage_min"] == pytest.approx(-1 / (math.sqrt(2) + 1e-8))


class TestTrainerFormulas:
    @settings(max_examples=30, deadline=None)
    @given(
        groups=st.integers(1, 12),
        size=st.integers(1, 6),
        seed=st.integers(0, 10_000),
    )
    def test_trl_frac_reward_zero_std_and_openrlhf_group_reward_std(
        self, groups: int, size: int, seed: int
    ) -> None:
        """TRL: ``std = nanstd(r.view(-1, G), ddof=1)`` repeated per completion,
        ``frac = isclose(std, 0, atol=1e-8).mean()``; OpenRLHF: mean of the repeated std."""
        rng = np.random.default_rng(seed)
        rewards = rng.choice([0.0, 1.0, 0.5], size=(groups, size))
        frame = pl.DataFrame(
            {
                "prompt_id": np.repeat(np.arange(groups), size).astype(str),
                "reward": rewards.ravel(),
            }
        )
        overall = summarize(frame, AdvantageOptions()).overall.row(0, named=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            std = np.std(rewards, axis=1, ddof=1) if size > 1 else np.full(groups, np.nan)
        per_completion = np.repeat(std, size)
        trl = np.isclose(per_completion, 0.0, rtol=1e-5, atol=1e-8).mean()
        assert overall["frac_reward_zero_std"] == pytest.approx(trl)
        if size > 1:
            assert overall["group_reward_std"] == pytest.approx(per_completion.mean())
        assert overall["reward_std"] == pytest.approx(
            float(np.std(rewards, ddof=1)) if rewards.size > 1 else None
        )

    def test_steps_invariant_under_row_shuffling(self) -> None:
        frame = pl.read_parquet(SAMPLE_FILES["parquet"])
        base = summarize(frame, AdvantageOptions()).steps
        shuffled = summarize(frame.sample(fraction=1.0, shuffle=True, seed=3), AdvantageOptions())
        for column in base.columns:
            assert np.allclose(
                base[column].cast(pl.Float64).to_numpy(),
                shuffled.steps[column].cast(pl.Float64).to_numpy(),
                rtol=1e-12,
                equal_nan=True,
            ), column


class TestReportApi:
    def test_by_defaults_to_step_then_batch_col(self) -> None:
        frame = two_step_log()
        assert summarize(frame, AdvantageOptions()).by == ("step",)
        assert summarize(frame.rename({"step": "it"}), AdvantageOptions()).by == ()
        batch = AdvantageOptions(batch_col="it")
        assert summarize(frame.rename({"step": "it"}), batch).by == ("it",)

    def test_unknown_by_column(self) -> None:
        with pytest.raises(InputError, match="no column 'epoch'"):
            summarize(two_step_log(), AdvantageOptions(), by=("epoch",))

    def test_step_level_needs_by(self) -> None:
        report = summarize(two_step_log().drop("step"), AdvantageOptions())
        with pytest.raises(OptionsError, match="needs a batch column"):
            report.table("step")

    def test_group_table_carries_the_step(self) -> None:
        groups = summarize(two_step_log(), AdvantageOptions()).groups
        assert groups.columns[:3] == ["prompt_id", "step", "size"]
        assert groups.filter(pl.col("prompt_id") == "b")["zero_std"].item() is True

    @pytest.mark.parametrize("seed", [0, 1, 2])
    def test_histogram_bins_as_numpy_does(self, seed: int) -> None:
        import numpy as np

        rng = np.random.default_rng(seed)
        data = np.concatenate([rng.normal(size=5000), rng.integers(0, 2, 500).astype(float)])
        edges, counts = histogram(pl.Series("x", data), bins=12)
        expected_counts, expected_edges = np.histogram(data, bins=12)
        assert counts == expected_counts.tolist()
        assert edges == pytest.approx(expected_edges.tolist(), rel=1e-12, abs=1e-12)

    def test_histogram(self) -> None:
        edges, counts = histogram(pl.Series([0.0, 0.0, 1.0, None, float("nan")]), bins=2)
        assert edges == [0.0, 0.5, 1.0] and counts == [2, 1]
        assert histogram(pl.Series([3.0, 3.0]), bins=1) == ([2.5, 3.5], [2])
        assert histogram(pl.Series([], dtype=pl.Float64)) == ([], [])


class TestSummarizeCli:
    def test_terminal_output(self, runner: CliRunner) -> None:
        result = runner.invoke(app, ["summarize", str(SAMPLE_FILES["parquet"])])
        assert result.exit_code == 0, result.output
        assert "frac_reward_zero_std" in result.output
        assert "0.0386" in result.output  # 22 of 570 responses
        assert "reward histogram (569 values)" in result.output

    @pytest.mark.parametrize("suffix", [".csv", ".parquet", ".json", ".jsonl", ".md"])
    def test_step_table_file(self, runner: CliRunner, tmp_path: Path, suffix: str) -> None:
        out = tmp_path / f"steps{suffix}"
        result = runner.invoke(app, ["summarize", str(SAMPLE_FILES["csv"]), "-o", str(out), "-q"])
        assert result.exit_code == 0, result.output
        assert result.output == ""
        if suffix == ".parquet":
            table = pl.read_parquet(out)
            assert table["step"].to_list() == [1, 2, 3, 4]
            assert table["responses"].sum() == 570
        elif suffix == ".json":
            rows = json.loads(out.read_text())
            assert [r["step"] for r in rows] == [1, 2, 3, 4]
        else:
            assert out.stat().st_size > 0

    def test_group_and_overall_levels(self, runner: CliRunner, tmp_path: Path) -> None:
        groups = tmp_path / "groups.csv"
        overall = tmp_path / "overall.json"
        for level, path in (("group", groups), ("overall", overall)):
            result = runner.invoke(
                app,
                ["summarize", str(SAMPLE_FILES["jsonl"]), "--level", level, "-o", str(path), "-q"],
            )
            assert result.exit_code == 0, result.output
        assert pl.read_csv(groups).height == 64
        assert json.loads(overall.read_text())[0]["responses"] == 570

    def test_a_table_onto_an_input_a_glob_matched_is_refused(
        self, runner: CliRunner, tmp_path: Path
    ) -> None:
        log = tmp_path / "a.csv"
        log.write_bytes(SAMPLE_FILES["csv"].read_bytes())
        args = ["summarize", str(tmp_path / "*.csv"), "-o", str(log), "--force"]
        result = runner.invoke(app, args)
        assert result.exit_code == 4
        assert f"refusing to overwrite the input {log}" in result.output
        assert log.read_bytes() == SAMPLE_FILES["csv"].read_bytes()

    def test_bad_level(self, runner: CliRunner, tmp_path: Path) -> None:
        result = runner.invoke(
            app, ["summarize", str(SAMPLE_FILES["csv"]), "--level", "epoch", "-o", "x.csv"]
        )
        assert result.exit_code == 2
        assert "unknown --level 'epoch'" in result.output


class TestTrainerDumps:
    def test_verl_dump_groups_by_uid(self, runner: CliRunner, tmp_path: Path) -> None:
        out = tmp_path / "groups.csv"
        dump = sorted(str(p) for p in (SAMPLE_FILES["csv"].parent / "verl_dump").iterdir())
        result = runner.invoke(
            app, ["summarize", *dump, "--preset", "verl", "--level", "group", "-o", str(out), "-q"]
        )
        assert result.exit_code == 0, result.output
        table = pl.read_csv(out)
        assert table.columns[:3] == ["step", "group", "size"]  # groups within each step
        assert table.height == 18 and (table["size"] == 4).all()
        assert (table["advantage_mean"].abs() < 1e-6).all()  # logged float32 advantages

    def test_trl_positional_groups_per_step(self, runner: CliRunner, tmp_path: Path) -> None:
        out = tmp_path / "steps.json"
        folder = SAMPLE_FILES["csv"].parent / "trl_completions"
        result = runner.invoke(
            app,
            ["summarize", str(folder), "--preset", "trl", "--group-size", "8", "-o", str(out)],
        )
        assert result.exit_code == 0, result.output
        steps = json.loads(out.read_text())
        assert all(row["group_size_min"] == row["group_size_max"] == 8 for row in steps)
        assert sum(row["responses"] for row in steps) == sum(8 * row["groups"] for row in steps)


@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("by", [None, ()])
def test_group_sizes_are_the_group_tables(ddof: int, by: tuple[str, ...] | None) -> None:
    """What plot draws (sizes and stds from one row per group) equals the group table's
    columns, group by group, with nulls and singletons in the log."""
    frame = pl.read_parquet(SAMPLE_FILES["parquet"]).with_columns(
        reward=pl.when(pl.int_range(pl.len()) % 7 == 3).then(None).otherwise(pl.col("reward"))
    )
    report = summarize(frame, AdvantageOptions(ddof=ddof), by)
    table = report.groups.select("size", "std").sort("size", "std", nulls_last=True)
    drawn = report.group_sizes.sort("size", "std", nulls_last=True)
    assert drawn["size"].to_list() == table["size"].to_list()
    assert drawn["std"].is_null().to_list() == table["std"].is_null().to_list()
    assert drawn["std"].to_numpy() == pytest.approx(table["std"].to_numpy(), nan_ok=True)


def _overall(runner: CliRunner, *args: str) -> dict[str, float]:
    """summarize's overall table, read back from standard output."""
    base = ["summarize", *args, "-o", "-", "--output-format", "jsonl", "--level", "overall"]
    result = runner.invoke(app, [*base, "-q"])
    assert result.exit_code == 0, result.output
    row: dict[str, float] = json.loads(result.stdout)
    return row


class TestTrainerNames:
    """Each trainer's figures under the name it logs them."""

    def test_openrlhf_presets_use_openrlhfs_names(self, runner: CliRunner) -> None:
        source = str(SAMPLE_FILES["parquet"])
        plain = _overall(runner, source)
        for preset in ("openrlhf-group-norm", "openrlhf-rloo"):
            row = _overall(runner, source, "--preset", preset)
            assert "reward" not in row and "reward_std" not in row
            assert row["rollout/reward_mean"] == pytest.approx(plain["reward"], rel=1e-12)
            assert row["rollout/reward_std"] == pytest.approx(plain["reward_std"], rel=1e-12)
            assert row["group_reward_std"] == pytest.approx(plain["group_reward_std"], rel=1e-12)
        rewards = pl.read_parquet(source)["reward"].fill_nan(None).drop_nulls().to_numpy()
        assert plain["reward"] == pytest.approx(rewards.mean(), rel=1e-12)
        assert plain["reward_std"] == pytest.approx(rewards.std(ddof=1), rel=1e-12)

    def test_verl_presets_log_the_scores_min_and_max(self, runner: CliRunner) -> None:
        dump = str(SAMPLE_FILES["csv"].parent / "verl_dump")
        row = _overall(runner, dump, "--preset", "verl")
        scores = pl.read_ndjson(f"{dump}/*.jsonl")["score"]
        assert row["critic/score/min"] == scores.min()
        assert row["critic/score/max"] == scores.max()
        assert row["critic/score/mean"] == pytest.approx(scores.mean(), rel=1e-12)
        assert {"reward_min", "reward_max", "reward"}.isdisjoint(row)
        # verl's critic/advantages/mean is over tokens: a per-response mean keeps its name
        assert "critic/advantages/mean" not in row and "advantage_mean" in row
        logged = pl.read_ndjson(f"{dump}/*.jsonl")["advantage"]
        assert row["critic/advantages/min"] == pytest.approx(logged.min(), rel=1e-12)

    def test_a_verl_token_tensor_is_one_advantage_per_response(
        self, runner: CliRunner, tmp_path: Path
    ) -> None:
        logged = pl.read_ndjson(SAMPLE_FILES["csv"].parent / "verl_dump" / "*.jsonl")["advantage"]
        dump = token_dump(tmp_path / "dump")
        row = _overall(runner, str(dump), "--preset", "verl")
        assert row["critic/advantages/max"] == pytest.approx(logged.max(), rel=1e-12)
        assert row["advantage_mean"] == pytest.approx(logged.mean(), abs=1e-15)
        varied = token_dump(tmp_path / "varied", differ=int(logged.arg_max() or 0))
        row = _overall(runner, str(varied), "--preset", "verl")
        assert row["critic/advantages/max"] == pytest.approx(logged.sort()[-2], rel=1e-12)
        result = runner.invoke(app, ["summarize", str(varied), "--preset", "verl"])
        assert result.exit_code == 0, result.output
        assert "token-level advantages (verl's gae" in result.stderr

    def test_the_step_and_overall_tables_build_no_group_table(self) -> None:
        """``summarize -o`` writes the step table: the group table (one more grouping of
        the key, 45% more memory on 3M rows) is built for ``--level group`` only."""

        def no_group_table() -> pl.DataFrame:
            raise AssertionError("the group table was built")

        report = replace(summarize(two_step_log(), AdvantageOptions()), group_rows=no_group_table)
        assert report.table("step")["responses"].to_list() == [6, 4]
        assert report.table("overall")["responses"].to_list() == [10]

    def test_step_level_reward_extremes(self) -> None:
        report = summarize(two_step_log(), AdvantageOptions())
        assert report.steps["reward_min"].to_list() == [0.0, 0.5]
        assert report.steps["reward_max"].to_list() == [1.0, 4.0]
        assert report.overall.select("reward_min", "reward_max").row(0) == (0.0, 4.0)

    def test_a_verl_advantages_column_is_the_logged_advantage(
        self, runner: CliRunner, tmp_path: Path
    ) -> None:
        dump = SAMPLE_FILES["csv"].parent / "verl_dump"
        folder = tmp_path / "verl"
        folder.mkdir()
        for path in sorted(dump.iterdir()):
            frame = pl.read_ndjson(path).rename({"advantage": "advantages"})
            frame.write_ndjson(folder / path.name)
        logged = pl.read_ndjson(f"{folder}/*.jsonl")["advantages"]
        row = _overall(runner, str(folder), "--preset", "verl")
        assert row["critic/advantages/max"] == pytest.approx(logged.max(), rel=1e-12)
        assert row["advantage_mean"] == pytest.approx(logged.mean(), abs=1e-15)
        verified = runner.invoke(app, ["verify", str(folder), "--preset", "verl"])
        assert verified.exit_code == 0, verified.output
        assert "agree" in verified.stderr
        both = tmp_path / "both.csv"  # "advantage" first, as grpo-adv and TRL name it
        pl.read_ndjson(f"{folder}/*.jsonl").with_columns(advantage=pl.lit(0.0)).write_csv(both)
        row = _overall(runner, str(both), "-r", "score", "-g", "uid")
        assert row["advantage_max"] == 0.0


def _assert_same_table(got: pl.DataFrame, expected: pl.DataFrame) -> None:
    assert got.columns == expected.columns
    assert got.height == expected.height
    for column in expected.columns:
        a, b = got[column], expected[column]
        if b.dtype.is_float():
            assert a.to_numpy() == pytest.approx(b.to_numpy(), rel=1e-12, abs=1e-12, nan_ok=True)
        else:
            assert a.to_list() == b.to_list(), column


class TestBigLogsInPieces:
    """A Parquet log over PIECE_ROWS rows is summarized in pieces of whole groups, reading
    only the columns it needs: the same tables as the log loaded whole."""

    @pytest.mark.parametrize("split_rows", [2_000_000, 900], ids=["whole steps", "split"])
    @pytest.mark.parametrize("binary", [False, True])
    @pytest.mark.parametrize("by", [None, ("step",)])
    def test_pieces_give_the_in_memory_figures(
        self,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        binary: bool,
        by: tuple[str, ...] | None,
        split_rows: int,
    ) -> None:
        """The pieces' summaries merged as they come (the first kept for its values); per
        step, pieces of whole steps (disjoint partials), or with every step over
        SPLIT_ROWS split again by group (``split``: each step's partials in several)."""
        from grpo_cli.report import pieces
        from grpo_cli.report.summarize import read_report

        frame = annotated_log(4000, binary=binary)
        frame.write_parquet(tmp_path / "whole.parquet")
        expected = read_report([tmp_path / "whole.parquet"], None, {}, None, by)  # in memory
        path = with_damaged_column(frame, tmp_path / "log.parquet")
        monkeypatch.setattr(pieces, "PIECE_ROWS", 900)  # 5 pieces
        monkeypatch.setattr(pieces, "SPLIT_ROWS", split_rows)  # steps of 1,000 rows
        report = read_report([path], None, {}, None, by)
        _assert_same_table(report.overall, expected.overall)
        _assert_same_table(report.steps, expected.steps)
        _assert_same_table(report.groups, expected.groups)  # read again, in input order
        assert report.binary is binary
        assert report.sampled and not expected.sampled  # histograms: the first piece's
        assert report.overall["responses"][0] == 4000
        assert report.overall["completions/mean_length"][0] == pytest.approx(
            frame["length"].mean(), rel=1e-12
        )
        assert not list(tmp_path.glob(".*spill"))  # the spill folder is gone

    @pytest.mark.parametrize("split_rows", [2_000_000, 1500])
    def test_pieces_of_whole_steps_hold_every_row_once(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, split_rows: int
    ) -> None:
        """Spread by the step, each step lies whole in one piece, rows in input order;
        a step over SPLIT_ROWS rows is split again by group (each group whole)."""
        from grpo_cli.report import pieces

        frame = annotated_log(4000).with_columns(  # step 0 holds 2,000 rows
            step=pl.when(pl.int_range(pl.len()) < 2000).then(0).otherwise(pl.col("step") + 1)
        )
        frame.write_parquet(tmp_path / "log.parquet")
        monkeypatch.setattr(pieces, "PIECE_ROWS", 700)
        monkeypatch.setattr(pieces, "SPLIT_ROWS", split_rows)
        read = list(
            pieces.read_pieces(
                tmp_path / "log.parquet",
                4000,
                ["step", "prompt_id"],
                ["step", "prompt_id"],
                ["step"],
            )
        )
        rows = pl.concat(read)
        assert sorted(rows[pieces.ROW].to_list()) == list(range(4000))
        assert all(piece[pieces.ROW].is_sorted() for piece in read)
        holding = rows.with_columns(
            piece=pl.concat([pl.repeat(i, p.height) for i, p in enumerate(read)])
        )
        in_pieces = holding.group_by("step").agg(pl.col("piece").n_unique()).sort("step")
        groups = holding.group_by("step", "prompt_id").agg(pl.col("piece").n_unique())
        assert groups["piece"].max() == 1  # every group whole
        if split_rows > 2000:
            assert in_pieces["piece"].to_list() == [1] * in_pieces.height
            assert max(p.height for p in read) >= 2000  # step 0's
        else:  # step 0's part (and any step sharing it) split into parts of whole groups
            assert in_pieces["piece"][0] > 1
            assert max(p.height for p in read) < 1500
        assert not list(tmp_path.glob(".*spill"))

    def test_a_group_larger_than_a_piece_is_one_piece(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from grpo_cli import compute_advantages
        from grpo_cli.report import pieces
        from grpo_cli.report.summarize import read_report

        raw = annotated_log(3000).drop("advantage")
        big = pl.int_range(pl.len()) < 1200  # 1,200 rows in one group of step 0
        raw = raw.with_columns(
            prompt_id=pl.when(big).then(pl.lit("big")).otherwise("prompt_id"),
            step=pl.when(big).then(0).otherwise("step"),
        )
        frame = compute_advantages(raw)
        frame.write_parquet(tmp_path / "whole.parquet")
        expected = read_report([tmp_path / "whole.parquet"], None, {}, None, None)
        path = with_damaged_column(frame, tmp_path / "log.parquet")
        monkeypatch.setattr(pieces, "PIECE_ROWS", 500)
        report = read_report([path], None, {}, None, None)
        _assert_same_table(report.overall, expected.overall)
        _assert_same_table(report.steps, expected.steps)
        assert report.overall["group_size_max"][0] == 1200

    def test_a_small_log_is_read_whole(self, tmp_path: Path) -> None:
        from grpo_cli.report.summarize import read_report

        path = with_damaged_column(annotated_log(400), tmp_path / "log.parquet")
        with pytest.raises(InputError, match="cannot read"):
            read_report([path], None, {}, None, None)
