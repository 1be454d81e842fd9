"""`grpo-adv compute` end to end: formats, stdin, outputs, summaries and errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from grpo_cli import __version__, compute_advantages
from grpo_cli.cli import app
from tests.conftest import ROOT, SAMPLE_FILES

EXPECTED = compute_advantages(pl.read_parquet(SAMPLE_FILES["parquet"]))["advantage"]


def assert_same_advantages(got: list[float | None], expected: list[float | None]) -> None:
    """Equal but for the last bit the default (streaming) engine may vary; nulls in place."""
    assert [g is None for g in got] == [e is None for e in expected]
    pairs = [(g, e) for g, e in zip(got, expected, strict=True) if g is not None and e is not None]
    assert all(abs(g - e) <= 1e-12 * max(1.0, abs(e)) for g, e in pairs)


def test_deterministic_runs_are_bit_for_bit_identical_across_formats(
    runner: CliRunner, sample_copy: dict[str, Path], tmp_path: Path
) -> None:
    outputs = []
    for fmt in ("parquet", "csv", "jsonl"):
        out = tmp_path / f"det.{fmt}"
        args = ["compute", str(sample_copy[fmt]), "-o", str(out), "-q", "--deterministic"]
        assert runner.invoke(app, args).exit_code == 0
        outputs.append(read_any(out, fmt)["advantage"].to_list())
    assert outputs[0] == outputs[1] == outputs[2]


def read_any(path: Path, fmt: str) -> pl.DataFrame:
    return {
        "parquet": pl.read_parquet,
        "csv": lambda p: pl.read_csv(p, schema_overrides={"prompt_id": pl.String}),
        "jsonl": pl.read_ndjson,
        "json": pl.read_json,
    }[fmt](path)


@pytest.mark.parametrize("fmt", sorted(SAMPLE_FILES))
@pytest.mark.parametrize("via", ["file", "stdin"])
def test_every_format_from_file_or_stdin_gives_the_same_advantages(
    runner: CliRunner, sample_copy: dict[str, Path], tmp_path: Path, fmt: str, via: str
) -> None:
    out = tmp_path / f"out.{fmt}"
    if via == "file":
        result = runner.invoke(app, ["compute", str(sample_copy[fmt]), "-o", str(out), "-q"])
    else:
        args = ["compute", "-", "-o", str(out), "-q"]
        result = runner.invoke(app, args, input=sample_copy[fmt].read_bytes())
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    annotated = read_any(out, fmt)
    assert_same_advantages(annotated["advantage"].to_list(), EXPECTED.to_list())


def test_parquet_output_keeps_every_column_row_and_dtype(
    runner: CliRunner, sample_copy: dict[str, Path]
) -> None:
    result = runner.invoke(app, ["compute", str(sample_copy["parquet"]), "--with-stats"])
    assert result.exit_code == 0, result.stderr
    original = pl.read_parquet(sample_copy["parquet"])
    annotated = pl.read_parquet(sample_copy["parquet"].with_name("rewards.adv.parquet"))
    assert annotated.columns == [
        *original.columns,
        "advantage",
        "group_size",
        "group_mean",
        "group_std",
    ]
    assert annotated.select(original.columns).equals(original)
    assert annotated.schema["advantage"] == pl.Float64


@pytest.mark.parametrize(("fmt", "suffix"), [("csv", ".csv"), ("jsonl", ".jsonl")])
def test_default_output_sits_beside_the_input(
    runner: CliRunner, sample_copy: dict[str, Path], fmt: str, suffix: str
) -> None:
    result = runner.invoke(app, ["compute", str(sample_copy[fmt]), "-q"])
    assert result.exit_code == 0, result.stderr
    out = sample_copy[fmt].with_name(f"rewards.adv{suffix}")
    assert_same_advantages(read_any(out, fmt)["advantage"].to_list(), EXPECTED.to_list())


def test_csv_in_parquet_out(runner: CliRunner, sample_copy: dict[str, Path]) -> None:
    args = ["compute", str(sample_copy["csv"]), "--output-format", "parquet", "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    out = sample_copy["csv"].with_name("rewards.adv.parquet")
    annotated = pl.read_parquet(out)
    assert_same_advantages(annotated["advantage"].to_list(), EXPECTED.to_list())
    assert annotated.schema["step"] == pl.Int64


def test_stdin_goes_to_stdout_as_jsonl_and_humans_read_stderr(
    runner: CliRunner, sample_copy: dict[str, Path]
) -> None:
    result = runner.invoke(app, ["compute", "-"], input=sample_copy["jsonl"].read_bytes())
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == EXPECTED.len()
    assert_same_advantages([json.loads(line)["advantage"] for line in lines], EXPECTED.to_list())
    assert (
        "warning: 1 null or NaN reward(s): left out of the statistics; their advantage is null"
        in result.stderr
    )
    assert "groups" in result.stderr and "64" in result.stderr


def test_dash_o_is_stdout_for_a_file_input(runner: CliRunner, sample_copy: dict[str, Path]) -> None:
    result = runner.invoke(app, ["compute", str(sample_copy["csv"]), "-o", "-", "-q"])
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0] == (
        "step,prompt_id,completion_id,task,completion,length,reward,advantage"
    )
    assert sorted(p.name for p in sample_copy["csv"].parent.iterdir()) == [
        "rewards.csv",
        "rewards.jsonl",
        "rewards.parquet",
    ]


def test_csv_stdin_by_content_or_flag(runner: CliRunner, sample_copy: dict[str, Path]) -> None:
    data = sample_copy["csv"].read_bytes()
    for extra in ([], ["--format", "csv"]):
        result = runner.invoke(app, ["compute", "-", "-q", *extra], input=data)
        assert result.exit_code == 0, result.stderr
        assert result.stdout.splitlines()[0].endswith(",reward,advantage")


def test_summary_files_in_every_format(
    runner: CliRunner, sample_copy: dict[str, Path], tmp_path: Path
) -> None:
    for suffix in (".csv", ".parquet", ".jsonl", ".json", ".md"):
        summary = tmp_path / f"groups{suffix}"
        out = tmp_path / f"out{suffix}.parquet"
        args = ["compute", str(sample_copy["parquet"]), "-o", str(out), "--summary", str(summary)]
        result = runner.invoke(app, [*args, "-q"])
        assert result.exit_code == 0, result.stderr
        assert summary.stat().st_size > 0
    table = pl.read_parquet(tmp_path / "groups.parquet")
    # the sample has a step column: groups are (step, prompt_id)
    assert table.columns == [
        "step",
        "prompt_id",
        "size",
        "n_null",
        "mean",
        "std",
        "min",
        "max",
        "zero_std",
    ]
    assert table.height == 64
    assert table["size"].sum() == EXPECTED.len()
    assert table.filter(pl.col("prompt_id") == "p003")["zero_std"].to_list() == [True]
    assert (
        (tmp_path / "groups.md")
        .read_text()
        .startswith(
            "| step | prompt_id | size | n_null | mean | std | min | max | zero_std |\n|---|"
        )
    )
    assert pl.read_json(tmp_path / "groups.json").equals(pl.read_ndjson(tmp_path / "groups.jsonl"))


@pytest.mark.usefixtures("width_80")
def test_terminal_summary_figures(runner: CliRunner, sample_copy: dict[str, Path]) -> None:
    result = runner.invoke(app, ["compute", str(sample_copy["parquet"])])
    assert result.exit_code == 0
    err = result.stderr
    for line in (
        "│ rows                          │ 570",
        "│ groups                        │ 64  (by step, prompt_id)",
        "│ group size min / median / max │ 1 / 9 / 16",
        "│ singleton groups              │ 1 (--singleton zero)",
        "│ null rewards                  │ 1",
        "│ estimator                     │ grpo (ddof 1, eps 1e-08 std)",
        "│ batches                       │ the whole input is one batch",
    ):
        assert line in err
    quiet = runner.invoke(app, ["compute", str(sample_copy["parquet"]), "-q", "-f"])
    assert (quiet.exit_code, quiet.stderr) == (0, "")


def _run_error(runner: CliRunner, args: list[str], stdin: bytes | None = None) -> tuple[int, str]:
    result = runner.invoke(app, args, input=stdin)
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    return result.exit_code, result.stderr


def test_errors_say_one_line_and_a_hint(
    runner: CliRunner, sample_copy: dict[str, Path], tmp_path: Path
) -> None:
    csv = str(sample_copy["csv"])
    cases: list[tuple[list[str], bytes | None, int, str]] = [
        (
            ["compute", csv, "-r", "score"],
            None,
            3,
            "error: reward column 'score' not found; the input has columns: step, prompt_id, "
            "completion_id, task, completion, length, reward\n"
            "hint: choose the reward column with --reward-col, e.g. --reward-col reward\n",
        ),
        (
            ["compute", csv, "-g", "uid"],
            None,
            3,
            "error: group column 'uid' not found; the input has columns: step, prompt_id, "
            "completion_id, task, completion, length, reward\n"
            "hint: choose the group column with --group-col, e.g. --group-col prompt_id\n",
        ),
        (
            ["compute", csv, "-r", "task"],
            None,
            3,
            "error: reward column 'task' holds String values, not numbers (row 0: 'math')\n"
            "hint: rewards must be numeric; check --reward-col, or convert the column\n",
        ),
        (
            ["compute", str(tmp_path / "missing.jsonl")],
            None,
            3,
            f"error: no such file: {tmp_path / 'missing.jsonl'}\n"
            "hint: check the path, or give - to read standard input\n",
        ),
        (
            ["compute", "-"],
            b"",
            3,
            "error: <stdin> is empty\n"
            "hint: give a reward log with a header or JSON objects and at least one row\n",
        ),
        (
            ["compute", "-"],
            b'{"prompt_id": "a", "reward": 1}\n{"prompt_id": "a", "reward": }\n',
            3,
            "error: <stdin> line 2: malformed JSON (Expecting value)\n"
            'hint: each line must be one JSON object, e.g. {"prompt_id": "p1", "reward": 1.0}\n',
        ),
        (
            ["compute", csv, "--ddof", "2"],
            None,
            2,
            "error: --ddof must be 0 or 1, got 2\n"
            "hint: 1 = sample std (TRL, verl, the lessons), 0 = population std\n",
        ),
        (
            ["compute", csv, "--estimator", "ppo"],
            None,
            2,
            "error: unknown estimator 'ppo'\nhint: did you mean opo? (choose one of: grpo, "
            "dr_grpo, batch_std, rloo, reinforce_pp_baseline, reinforce_pp, opo, gpg, "
            "grpo_passk, remax, loo_grpo, maxrl, maxrl_positive, batch_baseline, process)\n",
        ),
        (
            ["compute", csv, "--estimator", "reinforce_pp", "--whiten"],
            None,
            2,
            "error: estimator reinforce_pp already whitens over the batch: --whiten would "
            "whiten twice\nhint: leave --whiten out (its whitening takes --ddof, --eps and "
            "--eps-mode)\n",
        ),
        (
            ["compute", csv, "--reward-clip", "20,-20"],
            None,
            2,
            "error: --reward-clip needs LO,HI with LO < HI, got (20.0, -20.0)\n"
            "hint: e.g. --reward-clip -20,20\n",
        ),
        (
            ["compute", csv, "--whiten-eps-mode", "sd"],
            None,
            2,
            "error: unknown --whiten-eps-mode value 'sd'\nhint: did you mean std? (choose one "
            "of: std, var, var_floor, positive_std, center)\n",
        ),
        (
            ["compute", csv, "--format", "xlsx"],
            None,
            2,
            "error: unknown format 'xlsx'\nhint: choose one of: parquet, csv, jsonl, json, arrow\n",
        ),
        (
            ["compute", csv, "-o", csv, "--force"],
            None,
            4,
            f"error: refusing to overwrite the input {csv}\n"
            "hint: choose another output path with -o\n",
        ),
    ]
    for args, stdin, code, message in cases:
        assert _run_error(runner, args, stdin) == (code, message), args
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["rewards.csv", "rewards.jsonl", "rewards.parquet"]
    )


def test_refuses_to_clobber_without_force(runner: CliRunner, sample_copy: dict[str, Path]) -> None:
    out = sample_copy["csv"].with_name("rewards.adv.csv")
    out.write_text("keep me\n")
    code, err = _run_error(runner, ["compute", str(sample_copy["csv"])])
    assert (code, err) == (
        4,
        f"error: {out} already exists\nhint: pass --force to overwrite it, or choose another -o\n",
    )
    assert out.read_text() == "keep me\n"
    forced = runner.invoke(app, ["compute", str(sample_copy["csv"]), "--force", "-q"])
    assert forced.exit_code == 0
    assert out.read_text().startswith("step,prompt_id")


def test_failed_run_leaves_no_output_file(runner: CliRunner, tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("prompt_id,reward\na,1\na,abc\n")
    out = tmp_path / "out.parquet"
    code, err = _run_error(runner, ["compute", str(bad), "-o", str(out)])
    assert code == 3
    assert err.startswith("error: reward column 'reward' holds String values, not numbers (row 1:")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv"]


def test_interrupted_write_leaves_nothing(
    runner: CliRunner, sample_copy: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import grpo_cli.io.write

    real_write = grpo_cli.io.write.write_frame

    def write_then_interrupt(frame: pl.DataFrame, sink: object, fmt: str) -> None:
        real_write(frame, sink, fmt)  # type: ignore[arg-type]
        raise KeyboardInterrupt

    monkeypatch.setattr(grpo_cli.io.write, "write_frame", write_then_interrupt)
    result = runner.invoke(app, ["compute", str(sample_copy["parquet"])])
    assert result.exit_code == 130
    assert result.stderr == "error: interrupted; no output was written\n"
    assert sorted(p.name for p in sample_copy["parquet"].parent.iterdir()) == [
        "rewards.csv",
        "rewards.jsonl",
        "rewards.parquet",
    ]


def _cli_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _bash_pipeline(command: str) -> subprocess.CompletedProcess[str]:
    """Run a shell pipeline with pipefail, so any stage's failure shows in the status."""
    return subprocess.run(
        ["bash", "-c", f"set -o pipefail; {command}"],
        capture_output=True,
        text=True,
        env=_cli_env(),
        check=False,
        timeout=60,
    )


@pytest.mark.slow
def test_real_pipe_through_a_subprocess() -> None:
    cli = f"{sys.executable} -m grpo_cli"
    done = _bash_pipeline(f"cat {SAMPLE_FILES['jsonl']} | {cli} compute - --quiet | head -n 2")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert_same_advantages([row["advantage"] for row in rows], EXPECTED.to_list()[:2])


@pytest.mark.slow
def test_closed_pipe_on_a_big_output_exits_quietly(tmp_path: Path) -> None:
    big = pl.read_parquet(SAMPLE_FILES["parquet"])
    big = pl.concat([big.with_columns(pl.col("prompt_id") + f"-{i}") for i in range(200)])
    source = tmp_path / "big.parquet"
    big.write_parquet(source)
    cli = f"{sys.executable} -m grpo_cli"
    done = _bash_pipeline(f"{cli} compute {source} -o - --output-format jsonl -q | head -n 1")
    assert done.returncode == 0
    assert done.stderr == ""
    assert json.loads(done.stdout)["prompt_id"] == big["prompt_id"][0]


@pytest.mark.slow
def test_closed_stdout_still_shows_warnings_and_summary(tmp_path: Path) -> None:
    """``... | grpo-adv compute - | head -c 100``: the data ends where the reader stopped,
    and what is said on stderr (the null-reward warning, the summary) still comes out."""
    sample = pl.read_parquet(SAMPLE_FILES["parquet"])
    big = pl.concat([sample.with_columns(pl.col("prompt_id") + f"-{i}") for i in range(50)])
    big = big.with_columns(
        pl.when(pl.int_range(pl.len()) < 3).then(None).otherwise(pl.col("reward")).alias("reward")
    )
    source = tmp_path / "big.jsonl"
    big.write_ndjson(source)
    nulls = big["reward"].null_count() + big["reward"].is_nan().sum()
    cli = f"{sys.executable} -m grpo_cli"
    done = _bash_pipeline(f"cat {source} | {cli} compute - | head -c 100")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout) == 100
    lines = done.stderr.splitlines()
    assert (
        f"warning: {nulls:,} null or NaN reward(s): left out of the statistics; "
        "their advantage is null"
    ) in lines
    assert "grpo-adv compute" in lines
    assert any(line.split() == ["│", "rows", "│", f"{big.height:,}", "│"] for line in lines)


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["summarize", "SAMPLE"],
        ["explain", "SAMPLE", "--pick", "worst"],
        ["compute", "SAMPLE", "-o", "-", "--output-format", "jsonl"],
        ["verify", "ANNOTATED"],
    ],
    ids=["summarize", "explain", "compute", "verify"],
)
def test_a_reader_closing_stderr_early_is_a_success(args: list[str], tmp_path: Path) -> None:
    """What a person reads goes to stderr, so ``2>&1 | head`` pages it: the reader
    going away is exit 0, as for a closed stdout (Rich's own handling exited 1)."""
    annotated = tmp_path / "annotated.parquet"
    subprocess.run(
        [sys.executable, "-m", "grpo_cli", "compute", str(SAMPLE_FILES["parquet"]),
         "-o", str(annotated), "-q"],
        check=True, env=_cli_env(), timeout=60,
    )  # fmt: skip
    given = [
        {"SAMPLE": str(SAMPLE_FILES["parquet"]), "ANNOTATED": str(annotated)}.get(a, a)
        for a in args
    ]
    cli = f"{sys.executable} -m grpo_cli"
    done = _bash_pipeline(f"{cli} {' '.join(given)} 2>&1 | head -c 1 >/dev/null")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_stdin_terminal_gets_a_hint_not_a_hang(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from grpo_cli.jobs import outputs

    monkeypatch.setattr(outputs, "_stdin_is_terminal", lambda: True)
    code, err = _run_error(runner, ["compute", "-"])
    assert (code, err) == (
        2,
        "error: no data on standard input (it is a terminal)\n"
        "hint: pipe a log in, e.g. cat rewards.jsonl | grpo-adv compute -\n",
    )


def test_parquet_is_never_written_to_a_terminal(
    runner: CliRunner, sample_copy: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from grpo_cli.jobs import outputs

    monkeypatch.setattr(outputs, "_stdout_is_terminal", lambda: True)
    code, err = _run_error(runner, ["compute", str(sample_copy["parquet"]), "-o", "-"])
    assert (code, err) == (
        2,
        "error: refusing to write Parquet to a terminal\n"
        "hint: redirect it (> out.parquet), pipe it, or give -o FILE\n",
    )


@pytest.mark.slow
def test_version_and_module_entry_point() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "grpo_cli", "--version"],
        capture_output=True,
        text=True,
        env=_cli_env(),
        check=True,
        timeout=60,
    )

    assert done.stdout == f"grpo-adv {__version__}\n"


@pytest.mark.slow
def test_help_does_not_import_polars() -> None:
    code = "import sys; from grpo_cli.cli import app; print('polars' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_cli_env(), check=True
    )
    assert done.stdout == "False\n"


@pytest.mark.slow
def test_a_run_imports_only_what_it_uses(tmp_path: Path) -> None:
    """Option values are converted without Typer's Pydantic adapters (grpo_cli.cli.coercion),
    and a compute of a CSV needs neither pyarrow, numpy's consumers nor the optional engines."""
    out = tmp_path / "o.csv"
    code = (
        "import sys\n"
        "from grpo_cli.cli.app import app\n"
        f"sys.argv = ['grpo-adv', 'compute', 'sample_data/rewards.csv', '-o', {str(out)!r}, "
        "'--eps', '1e-6', '--group-size', 'auto', '-q']\n"
        "try:\n"
        "    app()\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
        "print(sorted(m for m in ('pydantic', 'pyarrow', 'torch', 'ray', 'matplotlib', 'pandas')"
        " if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_cli_env(), check=True
    )
    assert done.stdout == "[]\n", done.stderr
    assert pl.read_csv(out).height == pl.read_csv("sample_data/rewards.csv").height


@pytest.mark.slow
def test_the_process_exits_at_once_with_every_output_flushed(tmp_path: Path) -> None:
    """main() ends the process without the interpreter's teardown (os._exit), after
    flushing: what a pipe reads is whole, and the exit status is the command's."""
    code = "from grpo_cli.cli.app import main; main()"
    args = [sys.executable, "-c", code, "compute", "sample_data/rewards.csv", "-o", "-", "-q"]
    done = subprocess.run(args, capture_output=True, env=_cli_env(), check=False)
    assert done.returncode == 0, done.stderr
    expected = pl.read_csv("sample_data/rewards.csv").height
    assert pl.read_csv(done.stdout).height == expected
    missing = [sys.executable, "-c", code, "compute", str(tmp_path / "no.csv")]
    failed = subprocess.run(missing, capture_output=True, text=True, env=_cli_env(), check=False)
    assert failed.returncode == 3
    assert failed.stderr.startswith("error: no such file")


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
        app, ["compute", str(source), "-e", "reinforce_pp_baseline", "--token-weighted", "-o", "-"]
    )
    assert weighted.exit_code == 2
    assert weighted.output.splitlines()[0] == "error: --token-weighted needs --length-col"


REPEATED = (
    "warning: 570 rows repeat a completion_id within their group (e.g. completion_id=1 in the "
    "group step=1, prompt_id='p015'): duplicated rows count twice in the group's mean and std"
)


@pytest.mark.slow
@pytest.mark.parametrize("engine", [[], ["--low-memory"]], ids=["default", "low_memory"])
def test_rows_repeated_in_their_group_are_one_warning(
    runner: CliRunner, tmp_path: Path, engine: list[str]
) -> None:
    """The sample log twice over: every completion_id twice in its group, one line with the
    count and the first. The sample itself (completion_id counts from 1 in every group)
    gets none."""
    log = pl.read_parquet(SAMPLE_FILES["parquet"])
    twice = tmp_path / "twice.parquet"
    pl.concat([log, log]).write_parquet(twice)
    runs = {}
    for name, source in (("twice", twice), ("once", SAMPLE_FILES["parquet"])):
        out = tmp_path / f"{name}.adv.parquet"
        result = runner.invoke(app, ["compute", str(source), "-o", str(out), *engine])
        assert result.exit_code == 0, result.stderr
        runs[name] = [
            line
            for line in result.stderr.splitlines()
            if line.startswith("warning:") and "repeat" in line
        ]
    assert runs == {"twice": [REPEATED], "once": []}


TWICE_IN_GROUP = (
    "within their group (e.g. response_id={}): duplicated rows count twice in the group's "
    "mean and std"
)


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        ([1, 2, 1, 2], []),  # ids repeat across groups only
        ([1, None, None, 2], []),  # a missing id is no duplicate
        (
            [7, 7, 1, 1],
            [
                "2 rows repeat a response_id "
                + TWICE_IN_GROUP.format("7 in the group prompt_id='a'")
            ],
        ),
        (
            [1, 2, 3, 3],
            [
                "1 row repeats a response_id "
                + TWICE_IN_GROUP.format("3 in the group prompt_id='b'")
            ],
        ),
    ],
)
def test_a_response_id_repeats_only_within_a_group(
    ids: list[int | None], expected: list[str]
) -> None:
    from grpo_cli.jobs.pipeline import annotate

    log = pl.DataFrame(
        {"prompt_id": ["a", "a", "b", "b"], "response_id": ids, "reward": [1.0, 0.0, 1.0, 0.5]}
    )
    assert [w for w in annotate(log).warnings if "repeat" in str(w)] == expected
