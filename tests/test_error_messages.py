"""One error style: `error:` and `hint:` lines, did-you-mean, the Python API's keyword
spelling, and hints that name the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.core.presets import PRESETS


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
                    "hint: did you mean verl-rloo or verl-rloo-vectorized? (choose one of: "
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
                {"aggregation": "normalize_then_sum", "estimator": "batch_std"},
                'aggregation="normalize_then_sum" normalises each reward within its group, '
                "which estimator batch_std does not",
                "use a group estimator (grpo, loo_grpo, rloo, ...) or "
                'aggregation="sum_then_normalize"',
            ),
            (
                {"whiten": True, "estimator": "reinforce_pp"},
                "estimator reinforce_pp already whitens over the batch: whiten would whiten twice",
                "leave whiten out (its whitening takes ddof, eps and eps_mode)",
            ),
            (
                {"eps_mode": "center"},
                'eps_mode="center" centres a batch whitening; estimator grpo does not whiten',
                'use it with reinforce_pp(_baseline), or whiten_eps_mode="center" with whiten',
            ),
            (
                {"reward_clip": (1.0, -1.0)},
                "reward_clip needs LO,HI with LO < HI, got (1.0, -1.0)",
                "e.g. reward_clip=(-20, 20)",
            ),
            (
                {"whiten_ddof": 2},
                "whiten_ddof must be 0 or 1, got 2",
                "1 = sample std (TRL, verl, the lessons), 0 = population std",
            ),
            (
                {"whiten_eps": -1.0},
                "whiten_eps must be a finite number >= 0, got -1.0",
                "e.g. whiten_eps=1e-8",
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

        assert INSTALL_HINT == ".venv/bin/pip install -e '.[torch]' (in the grpo-adv checkout)"

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


def test_the_host_running_out_of_memory_is_exit_5_with_the_low_memory_hint(
    monkeypatch: pytest.MonkeyPatch, runner: CliRunner, tmp_path: Path
) -> None:
    """A real allocation that fails in the command (NumPy asked for 8 PiB by a formula
    registered in the test, as the Polars engine builds its plan) is this machine's limit,
    not a bug: one line, the ``--low-memory`` hint, exit 5, nothing written."""
    import numpy as np

    from grpo_cli.core import estimators
    from grpo_cli.core.estimators import FormulaContext, Value, register_estimator
    from tests.conftest import SAMPLE_FILES

    monkeypatch.setattr(estimators, "ESTIMATORS", dict(estimators.ESTIMATORS))

    @register_estimator("too_big", "r x (an array of 2^50 zeros)", "a test")
    def too_big(ctx: FormulaContext) -> Value:
        return ctx.reward * float(np.zeros(2**50).sum())

    out = tmp_path / "out.parquet"
    args = ["compute", str(SAMPLE_FILES["parquet"]), "--estimator", "too_big", "-o", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 5, result.output
    assert result.stderr.splitlines() == [
        "error: out of memory: this machine cannot hold the log and its columns in memory",
        "hint: compute with --low-memory (partitions spilled to disk, about 1 GiB whatever "
        "the log's size), or on a machine with more memory",
    ]
    assert not out.exists()


@pytest.mark.slow
def test_a_torch_that_fails_to_load_is_an_options_error_not_a_bug(tmp_path: Path) -> None:
    """An installed PyTorch whose import fails (a CUDA library missing: OSError) ends with
    one line naming the cause, the reinstall hint, exit 2, and nothing written (it was an
    internal error with a thread's traceback)."""
    import os
    import subprocess
    import sys

    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "raise OSError('libcudart.so.13: cannot open shared object file')\n"
    )
    source = tmp_path / "tiny.csv"
    source.write_text("prompt_id,reward\np1,1\np1,0\n")
    out = tmp_path / "out.csv"
    env = {
        **os.environ,
        "PYTHONPATH": f"{fake.parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "COLUMNS": "200",  # each line whole
    }
    done = subprocess.run(
        [sys.executable, "-m", "grpo_cli", "compute", str(source), "-o", str(out),
         "--backend", "torch", "--device", "cpu"],
        capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == (
        "error: --backend torch needs PyTorch, which failed to load: OSError: "
        "libcudart.so.13: cannot open shared object file"
    )
    assert lines[1] == (
        "hint: reinstall it with: .venv/bin/pip install -e '.[torch]' (in the grpo-adv "
        "checkout); or leave --backend out (the Polars engine)"
    )
    assert "Traceback" not in done.stderr
    assert not out.exists()
