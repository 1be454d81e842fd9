"""`explain` reaches every layout `compute` reads: positional groups (`--group-size`, TRL
completions logs) keyed STEP,GROUP_INDEX, verl dumps keyed by uid, GDPO's per-reward
z-scores, and the option set `compute` takes for grouping and rewards."""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.cli.compute import compute_cmd
from grpo_cli.cli.explain import explain_cmd
from grpo_cli.core.columns import UID_GROUP
from grpo_cli.core.errors import InputError
from grpo_cli.core.resolve import make_request, resolve
from grpo_cli.jobs.pipeline import annotate
from grpo_cli.report.explain import Explanation, explain_one
from tests.conftest import SAMPLE_DIR, SAMPLE_FILES, import_or_skip, load_script, token_dump
from tests.test_presets import hostile_log

G = 4
WEIGHTS = (1.0, 0.5)
# Step 2's second run of G rows (group index 1): the group the tests explain.
ACCURACY_2_1 = [1.0, 0.0, 1.0, 0.0]
FORMAT_2_1 = [0.5, 0.25, None, 1.0]
COMBINED_2_1 = [1.25, 0.125, 1.0, 0.5]  # accuracy + 0.5 format, a None counting 0
VERL_DIR = SAMPLE_DIR / "verl_dump"


def trl_completions(steps: tuple[int, ...] = (1, 2, 3), prompts: int = 3) -> pl.DataFrame:
    """A TRL >= 0.28 ``log_completions`` log (``step``, ``prompt``, ``completion``, one column
    per reward function, the float32 ``advantage`` TRL logs), built with the sample dump
    script's TRL arithmetic: num_generations G, reward_weights 1,0.5."""
    dumps = load_script("make_trainer_dumps")
    rng = np.random.default_rng(11)
    frames = []
    for step in steps:
        n = G * prompts
        accuracy = rng.integers(0, 2, size=n).astype(np.float64)
        fmt = rng.integers(0, 5, size=n) / 4
        if step == 2:
            accuracy[G : 2 * G] = ACCURACY_2_1
            fmt[G : 2 * G] = [math.nan if v is None else v for v in FORMAT_2_1]
        matrix = np.stack([accuracy, fmt], axis=1).astype(np.float32)
        logged = dumps.trl_advantages(matrix, np.array(WEIGHTS, dtype=np.float32), G)
        frames.append(
            pl.DataFrame(
                {
                    "step": [step] * n,
                    "prompt": [f"Question {step}-{i // G}" for i in range(n)],
                    "completion": [f"The answer is {i}." for i in range(n)],
                    "accuracy_reward": accuracy,
                    "format_reward": fmt,
                    "advantage": logged.astype(np.float64),
                }
            ).with_columns(pl.col("format_reward").fill_nan(None))
        )
    return pl.concat(frames)


TRL_LOG = trl_completions()


def write_trl_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "completions"
    folder.mkdir()
    for (step,), part in TRL_LOG.group_by(["step"], maintain_order=True):
        part.write_parquet(folder / f"completions_{step:05d}.parquet")
    return folder


def compute_rows(
    frame: pl.DataFrame, preset: str, step: int, index: int, **explicit: Any
) -> pl.DataFrame:
    """The rows ``compute`` annotates for run ``index`` of ``step`` (positional groups)."""
    out = annotate(frame.drop("advantage"), preset, **explicit).frame
    return out.filter(pl.col("step") == step).slice(index * G, G)


def table_rows(output: str) -> list[list[str]]:
    """The cells of the explanation table's numbered rows."""
    rows = []
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) >= 4 and cells[0].isdigit():
            rows.append(cells)
    return rows


def assert_reproduces_compute(explanation: Explanation, expected: list[float]) -> None:
    """Each advantage is compute's, and the filled-in formula gives it (or a policy does)."""
    assert len(explanation.rows) == len(expected)
    for row, want in zip(explanation.rows, expected, strict=True):
        assert row.advantage == pytest.approx(want, rel=1e-12, abs=1e-12)
        if row.policy is None:
            assert row.value == pytest.approx(want, rel=1e-12, abs=1e-12)


class TestTrlPositionalGroups:
    def test_cli_explains_step_and_group_index(self, runner: CliRunner, tmp_path: Path) -> None:
        folder = write_trl_folder(tmp_path)
        args = ["explain", str(folder), "--preset", "trl", "--group-size", "4"]
        wide = {"COLUMNS": "200"}  # the table in one part
        result = runner.invoke(
            app, [*args, "--reward-weights", "1,0.5", "--group", "2,1"], env=wide
        )
        assert result.exit_code == 0, result.output
        assert "group step=2, group_index=1: 4 responses" in result.output
        assert "__grpo" not in result.output
        expected = compute_rows(TRL_LOG, "trl", 2, 1, group_size=4, reward_weights=WEIGHTS)
        # each reward function's value (a None said), then their weighted sum
        assert "r = 1 x accuracy_reward + 0.5 x format_reward (a None counts 0)" in result.stdout
        assert "note: row 18: format_reward is None, counted as 0 in r" in result.stdout
        rows = table_rows(result.stdout)
        assert [r[1:4] for r in rows] == [
            [f"{a:g}", "None" if f is None else f"{f:g}", f"{r:g}"]
            for a, f, r in zip(ACCURACY_2_1, FORMAT_2_1, COMBINED_2_1, strict=True)
        ]
        assert [float(r[5]) for r in rows] == [float(f"{a:.6g}") for a in expected["advantage"]]
        # TRL's logged float32 advantages are shown beside, not taken for a reward.
        logged = TRL_LOG.filter(pl.col("step") == 2)["advantage"][G : 2 * G]
        assert [float(r[6]) for r in rows] == [float(f"{a:.6g}") for a in logged]

    def test_formula_equals_compute(self) -> None:
        explicit = {"group_size": 4, "reward_weights": WEIGHTS}
        explanation = explain_one(TRL_LOG, "trl", explicit, "2,1")
        assert explanation.key == {"step": 2, "group_index": 1}
        assert [r.reward for r in explanation.rows] == COMBINED_2_1
        expected = compute_rows(TRL_LOG, "trl", 2, 1, **explicit)["advantage"].to_list()
        assert_reproduces_compute(explanation, expected)
        assert all(r.policy is None for r in explanation.rows)
        assert explanation.options.reward_cols == ("accuracy_reward", "format_reward")
        logged = TRL_LOG.filter(pl.col("step") == 2)["advantage"][G : 2 * G].to_list()
        assert [r.logged for r in explanation.rows] == logged
        for row, trl in zip(explanation.rows, logged, strict=True):
            assert row.advantage == pytest.approx(trl, abs=1e-5)  # TRL's float32

    @pytest.mark.parametrize("key", ["1,0", "2,2", "3,1"])
    def test_every_run_reproduces_compute(self, key: str) -> None:
        explicit = {"group_size": 4, "reward_weights": WEIGHTS, "deterministic": True}
        explanation = explain_one(TRL_LOG, "trl", explicit, key)
        step, index = (int(v) for v in key.split(","))
        expected = compute_rows(TRL_LOG, "trl", step, index, **explicit)
        assert explanation.key == {"step": step, "group_index": index}
        assert_reproduces_compute(explanation, expected["advantage"].to_list())

    @pytest.mark.parametrize(
        "estimator",
        ["grpo", "dr_grpo", "rloo", "batch_std", "gpg", "grpo_passk", "reinforce_pp_baseline"],
    )
    def test_every_filled_estimator_on_positional_groups(self, estimator: str) -> None:
        explicit = {"group_size": 4, "reward_weights": WEIGHTS, "estimator": estimator}
        checked = 0
        for key in ("1,1", "2,1", "3,0"):
            explanation = explain_one(TRL_LOG, "trl", explicit, key)
            step, index = (int(v) for v in key.split(","))
            expected = compute_rows(TRL_LOG, "trl", step, index, **explicit)["advantage"]
            assert_reproduces_compute(explanation, expected.to_list())
            checked += sum(r.policy is None for r in explanation.rows)
        assert checked >= 4

    def test_one_value_with_a_batch_column_is_refused(
        self, runner: CliRunner, tmp_path: Path
    ) -> None:
        folder = write_trl_folder(tmp_path)
        args = ["explain", str(folder), "--preset", "trl", "--group-size", "4", "--group", "2"]
        result = runner.invoke(app, args)
        assert result.exit_code == 3
        lines = result.output.strip().splitlines()
        assert len(lines) == 2, result.output
        assert lines[0] == "error: --group '2' gives 1 value for 2 key columns (step, group_index)"
        assert lines[1].startswith("hint: give STEP,GROUP_INDEX")
        assert lines[1].endswith(
            "existing keys: 1,0; 1,1; 1,2; 2,0; 2,1; 2,2; 3,0; 3,1 (and 1 more)"
        )
        assert "__grpo" not in result.output and "Traceback" not in result.output

    def test_unknown_run_lists_readable_keys(self) -> None:
        with pytest.raises(InputError) as info:
            explain_one(TRL_LOG, "trl", {"group_size": 4}, "2,3")
        assert info.value.message == "no group '2,3' in step, group_index"
        assert info.value.hint is not None and info.value.hint.startswith("existing keys: 1,0; 1,1")

    def test_without_a_batch_column_the_key_is_the_index(self) -> None:
        frame = pl.DataFrame({"reward": [0.0, 1.0, 3.0, 1.0, 2.0, 2.0]})
        explanation = explain_one(frame, None, {"group_size": 2}, "1")
        assert explanation.key == {"group_index": 1}
        assert [r.reward for r in explanation.rows] == [3.0, 1.0]
        expected = annotate(frame, group_size=2).frame["advantage"].to_list()[2:4]
        assert_reproduces_compute(explanation, expected)
        assert expected[0] == pytest.approx(1 / math.sqrt(2))

    def test_the_group_size_is_inferred_or_taken(self, runner: CliRunner) -> None:
        """The TRL layout infers --group-size from the runs of equal prompts; explain also
        takes it given."""
        args = ["explain", str(SAMPLE_DIR / "trl_completions"), "--preset", "trl"]
        inferred = runner.invoke(app, [*args, "--group", "10,0"])
        assert inferred.exit_code == 0, inferred.output
        assert "group step=10, group_index=0: 4 responses" in inferred.output
        followed = runner.invoke(app, [*args, "--group", "10,0", "--group-size", "4"])
        assert followed.exit_code == 0, followed.output
        assert "group step=10, group_index=0: 4 responses" in followed.output


class TestGdpo:
    @pytest.mark.parametrize("key", ["1,0", "2,1", "3,2"])
    def test_per_reward_zscores_reproduce_compute(self, key: str) -> None:
        explicit = {"group_size": 4, "reward_weights": WEIGHTS}
        explanation = explain_one(TRL_LOG, "trl-gdpo", explicit, key)
        step, index = (int(v) for v in key.split(","))
        expected = compute_rows(TRL_LOG, "trl-gdpo", step, index, **explicit)
        assert_reproduces_compute(explanation, expected["advantage"].to_list())
        assert sum(r.policy is None for r in explanation.rows) >= 3
        assert explanation.formula.startswith("z_k = (r_k - mean_k)")
        assert any(line.startswith("accuracy_reward (weight 1):") for line in explanation.steps)

    @pytest.mark.parametrize(
        "policies",
        [
            {},
            {"batch_col": "step", "ddof": 0},
            {"eps_mode": "var_floor", "eps": 1e-4},
            {"singleton": "verl"},
            {"singleton": "formula"},
            {"nulls": "fill_zero"},
            {"clip": (-1.0, 1.0)},
            {"clip": (-0.5, 0.5), "clip_stage": "shaped"},
            {"length_col": "length", "token_weighted": True, "batch_col": "step"},
        ],
        ids=[
            "default",
            "ddof0",
            "var_floor",
            "verl",
            "formula",
            "fill_zero",
            "clip",
            "shaped",
            "tokens",
        ],
    )
    def test_policies_on_keyed_groups(self, policies: dict[str, object]) -> None:
        """Groups of 1 to 16 responses, ties, a zero-variance group and null rewards."""
        log = hostile_log(with_nulls=True)
        explicit: dict[str, Any] = {
            "reward_cols": ("reward", "format_reward"),
            "reward_weights": WEIGHTS,
            "aggregation": "normalize_then_sum",
            **policies,
        }
        out = annotate(log, None, **explicit).frame
        checked = 0
        for key in ("a", "b", "d", "f", "g", "h"):
            explanation = explain_one(log, None, explicit, key)
            expected = out.filter(pl.col("prompt_id") == key)["advantage"].to_list()
            for row, want in zip(explanation.rows, expected, strict=True):
                if want is None:
                    assert row.advantage is None and row.policy is not None
                    continue
                assert row.advantage == pytest.approx(want, rel=1e-12, abs=1e-12)
                if row.policy is None:
                    assert row.value == pytest.approx(want, rel=1e-12, abs=1e-12)
                    checked += 1
                elif str(row.policy).startswith("clipped"):
                    assert want in policies["clip"]  # type: ignore[operator]
        assert checked > (15 if "clip" in policies and "clip_stage" not in policies else 25)

    def test_the_engines_formula_is_filled_in(self) -> None:
        """explain evaluates the engines' GDPO: under eps_mode var_floor a one-reward
        group's undefined variance is floored at eps, so each z is 0 (not null) and is
        written out as such."""
        log = pl.DataFrame(
            {
                "prompt_id": ["a", "b", "b", "c", "c"],
                "reward": [1.0, 0.0, 1.0, 2.0, 0.0],
                "format_reward": [0.5, 0.0, 1.0, 1.0, 1.0],
            }
        )
        explicit: dict[str, Any] = {
            "reward_cols": ("reward", "format_reward"),
            "reward_weights": WEIGHTS,
            "aggregation": "normalize_then_sum",
            "eps_mode": "var_floor",
            "eps": 1e-4,
            "singleton": "formula",
        }
        explained = explain_one(log, None, explicit, "a")
        assert explained.steps[1] == (
            "reward (weight 1): n = 1, mean = 1; std (ddof=1) undefined: z = 0 (var_floor)"
        )
        assert explained.steps[3] == (
            "s whitened over the batch's 5 values of s: mean_b = 0, var_b (ddof=1) = 0.8125"
        )
        (row,) = explained.rows
        assert row.formula == "s = 1 x 0 + 0.5 x 0 = 0; (0 - 0) / sqrt(max(0.8125, 0.0001))"
        assert row.value == row.advantage == 0.0
        b = explain_one(log, None, explicit, "b")
        expected = annotate(log, None, **explicit).frame["advantage"].to_list()[1:3]
        assert [r.value for r in b.rows] == pytest.approx(expected, rel=1e-12)

    def test_aggregation_option_on_the_command_line(
        self, runner: CliRunner, tmp_path: Path
    ) -> None:
        folder = write_trl_folder(tmp_path)
        args = ["explain", str(folder), "--preset", "trl", "--group-size", "4", "--group", "2,1"]
        result = runner.invoke(
            app, [*args, "--reward-weights", "1,0.5", "--aggregation", "normalize_then_sum"]
        )
        assert result.exit_code == 0, result.output
        expected = compute_rows(
            TRL_LOG,
            "trl",
            2,
            1,
            group_size=4,
            reward_weights=WEIGHTS,
            aggregation="normalize_then_sum",
        )["advantage"]
        rows = table_rows(result.output)
        assert [float(r[3]) for r in rows] == [float(f"{a:.6g}") for a in expected]
        # Not the sum_then_normalize advantages: the option reached the computation.
        plain = compute_rows(TRL_LOG, "trl", 2, 1, group_size=4, reward_weights=WEIGHTS)
        assert [float(r[3]) for r in rows] != [float(f"{a:.6g}") for a in plain["advantage"]]


class TestVerlDump:
    FRAME = pl.concat([pl.read_ndjson(p) for p in sorted(VERL_DIR.glob("*.jsonl"))])
    UID = FRAME.filter(pl.col("step") == 2)["uid"][0].rsplit("_", 2)[0]
    # The layout keys a verl dump by the uid-derived column, within each step when it
    # groups per batch.
    KEY_COLS = resolve(make_request("verl"), FRAME, checks=False).options.group_cols
    SHOWN: ClassVar[dict[str, object]] = (
        {"step": 2, "uid": UID} if "step" in KEY_COLS else {"uid": UID}
    )
    KEY = ",".join(str(v) for v in SHOWN.values())

    def test_key_is_shown_as_uid(self, runner: CliRunner) -> None:
        assert UID_GROUP in self.KEY_COLS
        args = ["explain", str(VERL_DIR), "--preset", "verl", "--group", self.KEY]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        header = ", ".join(f"{k}={v}" for k, v in self.SHOWN.items())
        assert f"group {header}: 4 responses" in result.output
        assert "__grpo" not in result.output

    def test_values_and_unknown_uid(self) -> None:
        explanation = explain_one(self.FRAME, "verl", {}, self.KEY)
        assert explanation.key == self.SHOWN
        rows = self.FRAME.filter(pl.col("uid").str.starts_with(f"{self.UID}_"))
        assert [r.reward for r in explanation.rows] == rows["score"].to_list()
        computed = annotate(self.FRAME.drop("advantage"), "verl").frame
        expected = computed.filter(pl.col("uid").str.starts_with(f"{self.UID}_"))
        assert_reproduces_compute(explanation, expected["advantage"].to_list())
        for row, was in zip(explanation.rows, rows["advantage"], strict=True):
            assert row.logged == was and row.advantage == pytest.approx(was, abs=1e-5)
        unknown = self.KEY.replace(self.UID, "nope")
        with pytest.raises(InputError) as info:
            explain_one(self.FRAME, "verl", {}, unknown)
        assert info.value.message == f"no group {unknown!r} in {', '.join(self.SHOWN)}"
        assert info.value.hint is not None and info.value.hint.startswith("existing keys: ")
        first = self.FRAME["uid"][0]
        assert first.rsplit("_", 2)[0] in info.value.hint and first not in info.value.hint

    @pytest.mark.parametrize("named", [[], ["--advantage-col", "advantages"]])
    def test_a_token_tensor_is_read_per_response(
        self, runner: CliRunner, tmp_path: Path, named: list[str]
    ) -> None:
        dump = token_dump(tmp_path / "dump", differ=2)
        result = runner.invoke(
            app, ["explain", str(dump), "--preset", "verl", "--row", "0", *named]
        )
        assert result.exit_code == 0, result.output
        logged = [cells[4] for cells in table_rows(result.stdout)]
        want = self.FRAME["advantage"].head(4).to_list()
        assert logged == [f"{want[0]:.6g}", f"{want[1]:.6g}", "-", f"{want[3]:.6g}"]
        assert "input row 2's tokens differ in advantages" in result.stderr


class TestBackend:
    @pytest.mark.parametrize("estimator", ["grpo", "batch_std", "reinforce_pp_baseline"])
    def test_torch_backend_from_python(self, estimator: str) -> None:
        import_or_skip("torch")
        frame = pl.read_parquet(SAMPLE_FILES["parquet"])
        given = {"estimator": estimator, "backend": "torch", "device": "cpu"}
        explanation = explain_one(frame, None, given, "p015")
        polars = explain_one(frame, None, {"estimator": estimator}, "p015")
        assert explanation.options == polars.options  # the engine is no estimator option
        assert [r.reward for r in explanation.rows] == [r.reward for r in polars.rows]
        for row, same in zip(explanation.rows, polars.rows, strict=True):
            assert row.value == pytest.approx(same.value, rel=1e-12, abs=1e-12)
        computed = annotate(frame, estimator=estimator).frame
        expected = computed.filter(pl.col("prompt_id") == "p015")["advantage"].to_list()
        assert_reproduces_compute(explanation, expected)


class TestOptions:
    # compute's options that explain leaves out: where the output goes and how the
    # arithmetic runs, none of which changes a group's rows or its rewards (explain's
    # output is its report, on stdout; --quiet silences its warnings as compute's).
    LEFT_OUT: ClassVar[set[str]] = {
        "output",
        "output_format",
        "with_stats",
        "summary_path",
        "summary_format",
        "out_dir",
        "low_memory",
        "force",
        "backend",
        "device",
        "ray_address",
        "replace",
    }

    # explain's own options: the three ways of choosing the group it explains.
    EXPLAIN_ONLY: ClassVar[set[str]] = {"group", "row", "pick"}

    def test_explain_takes_every_grouping_and_input_option_of_compute(self) -> None:
        compute = set(inspect.signature(compute_cmd).parameters)
        explain = set(inspect.signature(explain_cmd).parameters)
        assert compute - self.LEFT_OUT == explain - self.EXPLAIN_ONLY
        assert explain - compute == self.EXPLAIN_ONLY
        assert not (explain & self.LEFT_OUT)

    def test_process_supervision_is_refused(self, runner: CliRunner, tmp_path: Path) -> None:
        path = tmp_path / "steps.jsonl"
        rows = [{"prompt_id": "a", "steps": [1.0, 0.0]}, {"prompt_id": "a", "steps": [0.5]}]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        args = ["explain", str(path), "--group", "a", "--estimator", "process"]
        for named in (["--step-rewards-col", "steps"], []):  # refused before its options
            result = runner.invoke(app, [*args, *named])
            assert result.exit_code == 3
            assert "error: explain does not cover process supervision" in result.output

    def test_estimator_without_groups_is_refused(self, runner: CliRunner) -> None:
        args = ["explain", str(SAMPLE_FILES["csv"]), "--group", "p015", "-e", "remax"]
        result = runner.invoke(app, [*args, "--baseline-col", "length"])
        assert result.exit_code == 2
        assert "error: explain shows one group; estimator remax has no groups" in result.output

    def test_deterministic_and_group_col_reach_the_computation(self, runner: CliRunner) -> None:
        args = ["explain", str(SAMPLE_FILES["csv"]), "-g", "step", "-g", "prompt_id"]
        result = runner.invoke(app, [*args, "--group", "1,p015", "--deterministic"])
        assert result.exit_code == 0, result.output
        assert "group step=1, prompt_id=p015:" in result.output
