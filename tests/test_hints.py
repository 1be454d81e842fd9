"""Hints that point the right way, and TRL's repeated steps.

- verify names the sibling preset, or the reward columns, that reproduce the logged column;
- a count of reward weights that does not fit names the column that is no reward, and -r;
- a preset that weights by tokens, on a log without lengths, names a candidate column;
- an unknown preset suggests the preset it extends (``verl-grpo``: ``verl``) and those that
  hold it (``open-rlhf``: every ``openrlhf-...``);
- engine errors under --low-memory name --low-memory;
- a reward written as the text None, null or N/A says how a missing reward is written;
- CSV or JSON text named .parquet is said to be that text, with the --format that reads it;
- a JSONL with an accepted NaN and a later Infinity blames the Infinity line;
- a TRL log that repeats a generation under consecutive steps is counted once.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.cli.params import flag_spelling
from grpo_cli.core.errors import OptionsError, as_text
from grpo_cli.core.presets import get_preset, siblings
from grpo_cli.jobs.pipeline import annotate
from grpo_cli.report.verify import verify_advantages
from tests.conftest import SAMPLE_DIR, cli_text

TRL_DIR = SAMPLE_DIR / "trl_completions"
WEIGHTS = (1.0, 0.5)


def trl_log() -> pl.DataFrame:
    return pl.read_parquet(sorted(TRL_DIR.iterdir()))


def logged_as(preset: str, frame: pl.DataFrame | None = None) -> pl.DataFrame:
    """A TRL log whose advantage column was written under ``preset``."""
    frame = trl_log() if frame is None else frame
    return annotate(frame.drop("advantage"), preset, reward_weights=WEIGHTS).frame


class TestSiblingPresets:
    def test_siblings_are_the_same_trainers(self) -> None:
        assert siblings("trl") == ["trl-batch", "trl-none", "trl-gdpo"]
        assert siblings("verl-rloo")[0] == "verl"
        assert "openrlhf-group-norm" not in siblings("trl")

    @pytest.mark.parametrize(
        ("written", "matching"),
        [
            ("trl-batch", "--preset trl-batch"),
            # r - mean_g: the same numbers as every trainer's Dr. GRPO, the trainer's first
            (
                "trl-none",
                "--preset trl-none, --preset verl-dr-grpo, --preset openrlhf-dr-grpo, --preset "
                "slime-no-std, --preset skyrl-no-std, --preset prime-rl, --preset open-instruct",
            ),
            ("trl-gdpo", "--preset trl-gdpo"),
        ],
    )
    def test_verify_names_the_presets_that_match(self, written: str, matching: str) -> None:
        report = verify_advantages(logged_as(written), "trl", reward_weights=WEIGHTS)
        assert not report.agree
        same = ": identical on this log" if "," in matching else ""
        assert tuple(map(cli_text, report.hints)) == (
            f"the logged advantages match {matching}{same}",
        )
        if not same:
            assert str(report.hints[0]) == f"the logged advantages match preset={written}"

    def test_the_named_preset_does_agree(self) -> None:
        report = verify_advantages(logged_as("trl-batch"), "trl-batch", reward_weights=WEIGHTS)
        assert report.agree and report.hints == ()

    def test_a_log_extra_column_is_named_as_no_reward(self) -> None:
        frame = logged_as("trl").with_columns(
            num_tokens=pl.Series([float(10 + i % 7) for i in range(64)])
        )
        report = verify_advantages(frame, "trl", reward_weights=(*WEIGHTS, 1.0))
        assert [str(hint) for hint in report.hints] == [
            'the logged advantages match reward_cols=("accuracy_reward", "format_reward") '
            "reward_weights=(1, 0.5) (num_tokens is not a reward)"
        ]
        assert tuple(as_text(hint).render(flag_spelling) for hint in report.hints) == (
            "the logged advantages match -r accuracy_reward -r format_reward "
            "--reward-weights 1,0.5 (num_tokens is not a reward)",
        )

    def test_nothing_matches_keeps_the_weights_hint(self) -> None:
        frame = logged_as("trl")
        report = verify_advantages(frame, "trl", reward_weights=(1.0, 3.0))
        assert len(report.hints) == 1
        hint = str(report.hints[0])
        assert hint.startswith("64 of 64 rows differ") or "weights" in hint

    def test_cli_prints_the_route(self, runner: CliRunner, tmp_path: Path) -> None:
        source = tmp_path / "batch.parquet"
        logged_as("trl-batch").write_parquet(source)
        result = runner.invoke(
            app, ["verify", str(source), "--preset", "trl", "--reward-weights", "1,0.5"]
        )
        assert result.exit_code == 1
        assert "hint: the logged advantages match --preset trl-batch\n" in result.stderr


class TestWeightsCount:
    @pytest.mark.parametrize(
        ("extra", "weights"),
        [("num_tokens", "1,0.5"), ("seed", "1"), ("sample_id", "1,0.5,2,3")],
    )
    def test_names_the_column_that_is_no_reward_first(
        self, runner: CliRunner, tmp_path: Path, extra: str, weights: str
    ) -> None:
        frame = trl_log().with_columns(pl.lit(12).alias(extra))
        source = tmp_path / "extra.parquet"
        frame.write_parquet(source)
        result = runner.invoke(
            app, ["verify", str(source), "--preset", "trl", "--reward-weights", weights]
        )
        assert result.exit_code == 2
        count = len(weights.split(","))
        assert result.stderr == (
            f"error: {count} reward weight(s) for 3 reward column(s): accuracy_reward, "
            f"format_reward, {extra}\nhint: {extra} is not a reward: name the rewards with "
            "-r accuracy_reward -r format_reward\n"
        )

    @pytest.mark.parametrize("extra", ["len_reward", "length_penalty"])
    def test_a_column_that_may_be_a_reward_keeps_the_weights_hint(
        self, runner: CliRunner, tmp_path: Path, extra: str
    ) -> None:
        source = tmp_path / "extra.parquet"
        trl_log().with_columns(pl.lit(0.5).alias(extra)).write_parquet(source)
        result = runner.invoke(
            app, ["verify", str(source), "--preset", "trl", "--reward-weights", "1,0.5"]
        )
        assert result.exit_code == 2
        assert result.stderr.endswith(
            "hint: give one weight per reward column, or name the rewards: "
            "-r accuracy_reward -r format_reward\n"
        )

    def test_verify_without_weights_names_the_column_and_two_weights(
        self, runner: CliRunner, tmp_path: Path
    ) -> None:
        source = tmp_path / "extra.parquet"
        trl_log().with_columns(num_tokens=pl.lit(12.0)).write_parquet(source)
        result = runner.invoke(app, ["verify", str(source), "--preset", "trl"])
        assert result.exit_code == 1
        assert result.stderr.endswith(
            "hint: 60 of 64 rows differ and 3 reward columns are summed (accuracy_reward, "
            "format_reward, num_tokens; weights 1, 1, 1); num_tokens is not a reward: name "
            "the rewards with -r accuracy_reward -r format_reward and the trainer's weights "
            "with --reward-weights W1,W2 (TRL: GRPOConfig reward_weights)\n"
        )


class TestLengthFromPreset:
    """A preset that weights by tokens, on a log with no length column, names the preset
    (the user typed no --token-weighted) and a column that may hold the token counts."""

    @pytest.mark.parametrize(
        ("extra", "hint"),
        [
            (
                {"completion_id": [1, 2], "n_tokens": [30.0, 41.0], "chars": [90, 120]},
                "--length-col n_tokens",
            ),
            ({"completion_id": [1, 2], "chars": [90, 120]}, "--length-col chars"),
            (
                {"completion_id": [1, 2]},
                "--length-col COL (no numeric column here looks like one)",
            ),
        ],
    )
    def test_names_the_preset_and_a_candidate(
        self, runner: CliRunner, tmp_path: Path, extra: dict[str, list[object]], hint: str
    ) -> None:
        source = tmp_path / "log.csv"
        pl.DataFrame({"prompt_id": ["a", "a"], "reward": [1.0, 0.0], **extra}).write_csv(source)
        result = runner.invoke(
            app, ["compute", str(source), "--preset", "verl-reinforce-pp-baseline", "-o", "-"]
        )
        assert result.exit_code == 2
        assert result.stderr == (
            "error: --preset verl-reinforce-pp-baseline weights batch statistics by response "
            "tokens (--token-weighted) and the log has no length column (length, "
            "completion_length, response_length)\n"
            f"hint: name the column of token counts: {hint}\n"
        )
        assert result.stdout == ""


class TestPresetSuggestions:
    def test_verl_grpo_suggests_verl_first(self) -> None:
        with pytest.raises(OptionsError) as info:
            get_preset("verl-grpo")
        assert info.value.hint is not None
        assert info.value.hint.startswith(
            "did you mean verl, verl-grpo-passk, verl-dr-grpo or verl-gdpo? "
        )

    @pytest.mark.parametrize(
        ("typed", "suggested"),
        [
            (
                "open-rlhf",
                "openrlhf-group-norm, openrlhf-rloo, openrlhf-dr-grpo or "
                "openrlhf-reinforce-baseline",
            ),
            ("rlhf_rloo", "openrlhf-rloo or verl-rloo"),
            ("passk", "verl-grpo-passk"),
            ("group-norm", "openrlhf-group-norm"),
        ],
    )
    def test_names_that_hold_the_spelling_come(
        self, runner: CliRunner, typed: str, suggested: str
    ) -> None:
        result = runner.invoke(app, ["compute", "x.csv", "--preset", typed])
        assert result.exit_code == 2
        assert result.stderr.startswith(
            f"error: unknown preset {typed!r}\nhint: did you mean {suggested}? (choose one of: "
        )

    def test_a_close_spelling_still_comes(self) -> None:
        with pytest.raises(OptionsError) as info:
            get_preset("trl-bach")
        assert info.value.hint is not None
        assert info.value.hint.startswith("did you mean trl or trl-batch")

    def test_another_trainers_dump_says_use(self, runner: CliRunner) -> None:
        result = runner.invoke(app, ["summarize", str(TRL_DIR), "--preset", "openrlhf-rloo"])
        assert result.exit_code == 3
        assert result.stderr.endswith(
            "hint: this looks like a TRL completions dump: use --preset trl\n"
        )


def test_low_memory_errors_name_low_memory(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    args = [str(SAMPLE_DIR / "rewards.parquet"), "--singleton", "drop", "-o", str(out)]
    result = runner.invoke(app, ["compute", *args, "--low-memory"])
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "error: --low-memory (--backend partitioned) does not support --singleton drop"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("name", "body", "cell"),
    [
        ("log.csv", "prompt_id,reward\na,1\na,None\n", "None"),
        ("log.csv", "prompt_id,reward\na,1\na, N/A\n", " N/A"),
        ("log.csv", "prompt_id,reward\na,1\na,NULL\n", "NULL"),
        ("log.jsonl", '{"prompt_id":"a","reward":1}\n{"prompt_id":"a","reward":"null"}\n', "null"),
    ],
)
def test_a_missing_reward_spelled_as_text_says_how_to_write_it(
    runner: CliRunner, tmp_path: Path, name: str, body: str, cell: str
) -> None:
    source = tmp_path / name
    source.write_text(body)
    result = runner.invoke(app, ["compute", str(source), "-o", str(tmp_path / "out.csv")])
    assert result.exit_code == 3
    assert result.stderr == (
        f"error: reward column 'reward' holds String values, not numbers (row 1: {cell!r})\n"
        "hint: a missing reward is an empty CSV cell, NaN or JSON null, not the text "
        f"{cell!r}: write missing rewards that way (--nulls says what they get)\n"
    )
    assert not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize(
    ("body", "fmt", "kind"),
    [
        (b"prompt_id,reward\na,1\n", "csv", "CSV"),
        (b'{"prompt_id":"a","reward":1}\n', "jsonl", "JSON"),
    ],
)
def test_text_named_parquet_is_not_called_truncated(
    runner: CliRunner, tmp_path: Path, body: bytes, fmt: str, kind: str
) -> None:
    source = tmp_path / "log.parquet"
    source.write_bytes(body)
    result = runner.invoke(app, ["compute", str(source), "-o", str(tmp_path / "out.csv")])
    assert result.exit_code == 3
    assert result.stderr == (
        f"error: {source} is not Parquet (it looks like {kind} text)\n"
        f"hint: give --format {fmt} or rename it\n"
    )
    again = runner.invoke(app, ["compute", str(source), "--format", fmt, "-o", "-", "-q"])
    assert again.exit_code == 0
    assert again.stdout.splitlines()[-1] == (
        "a,1,0.0" if fmt == "csv" else '{"prompt_id":"a","reward":1,"advantage":0.0}'
    )


def test_infinity_after_nan_blames_the_infinity_line(runner: CliRunner, tmp_path: Path) -> None:
    source = tmp_path / "log.jsonl"
    source.write_text(
        '{"prompt_id":"p","reward":NaN}\n{"prompt_id":"p","reward":1}\n'
        '{"prompt_id":"p","reward":Infinity}\n'
    )
    result = runner.invoke(app, ["compute", str(source), "-o", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 3
    assert result.stderr.startswith(f"error: {source} line 3: Infinity is not JSON\n")


class TestRepeatedSteps:
    """TRL with steps_per_generation > gradient accumulation logs one generation under
    consecutive steps: identical rows but for ``step``."""

    def repeated(self) -> pl.DataFrame:
        frame = logged_as("trl")
        again = frame.filter(pl.col("step") == 20)
        step = frame.schema["step"]
        return pl.concat(
            [
                frame,
                again.with_columns(step=pl.lit(21, step)),
                again.with_columns(step=pl.lit(22, step)),
            ]
        )

    WARNING = (
        "2 step(s) repeat the rows of the step before (21, 22): TRL logs one generation under "
        "each of its steps_per_generation steps; each generation is counted once"
    )

    def test_verify_says_so_and_compares_once(self) -> None:
        report = verify_advantages(self.repeated(), "trl", reward_weights=WEIGHTS)
        assert report.agree and report.rows == 64 and report.groups == 16
        assert self.WARNING in report.warnings

    def test_summarize_counts_each_generation_once(self, runner: CliRunner, tmp_path: Path) -> None:
        source = tmp_path / "repeated.parquet"
        self.repeated().write_parquet(source)
        out = tmp_path / "steps.csv"
        args = ["summarize", str(source), "--preset", "trl", "--reward-weights", "1,0.5"]
        result = runner.invoke(app, [*args, "-o", str(out)])
        assert result.exit_code == 0, result.stderr
        assert f"warning: {self.WARNING}\n" in result.stderr.replace("\n ", " ")
        assert pl.read_csv(out)["step"].to_list() == [10, 20]

    def test_a_step_that_differs_in_one_value_is_its_own(self) -> None:
        frame = self.repeated()
        changed = frame.with_columns(
            advantage=pl.when((pl.col("step") == 22) & (pl.int_range(pl.len()) == 100))
            .then(pl.col("advantage") + 1e-12)
            .otherwise(pl.col("advantage"))
        )
        from grpo_cli.core.layouts import repeated_steps

        assert repeated_steps(changed) == [21]
