"""Every `$ grpo-adv ...` example in the README runs and succeeds (the docs cannot rot)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, SAMPLE_DIR, run_example

README = (ROOT / "README.md").read_text()
EXAMPLES = [
    line.removeprefix("$ ")
    for block in re.findall(r"```console\n(.*?)```", README, flags=re.DOTALL)
    for line in block.splitlines()
    if line.startswith("$ ")
]


def test_readme_has_examples() -> None:
    assert len(EXAMPLES) >= 5
    assert all("grpo-adv" in example for example in EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES)
def test_readme_example_runs(example: str, tmp_path: Path) -> None:
    done = run_example(example, tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.usefixtures("width_80")
def test_readme_summary_block_is_what_compute_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from grpo_cli.cli import app

    shutil.copytree(SAMPLE_DIR, tmp_path / "sample_data")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["compute", "sample_data/rewards.parquet"])
    assert result.exit_code == 0
    block = README.split("prints a summary on stderr:\n\n```\n", 1)[1].split("```", 1)[0]
    assert result.stderr == block


@pytest.mark.parametrize(
    "example",
    [
        "$ grpo-adv compare sample_data/rewards.parquet --preset trl --preset verl --estimator "
        "dr_grpo --top 3 -o compared.parquet",
        "$ grpo-adv explain sample_data/rewards.parquet --row 42 --ddof 0",
    ],
)
def test_readme_output_blocks_are_what_the_commands_print(
    example: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The block after an example is the output of its command at 101 columns (for explain,
    of the first example above it: ``--group p007``)."""
    from typer.testing import CliRunner

    from grpo_cli.cli import app

    shutil.copytree(SAMPLE_DIR, tmp_path / "sample_data")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "101")
    block = README.split(example + "\n```\n\n", 1)[1].split("\n", 1)[1].split("```", 1)[0]
    if "explain" in example:
        args = ["explain", "sample_data/rewards.parquet", "--group", "p007"]
    else:
        args = example.removeprefix("$ grpo-adv ").split()
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0
    assert result.output == block


def test_readme_lists_every_exit_code_the_errors_module_defines() -> None:
    """The README's exit-code table and ``grpo_cli.core.errors``' EXIT_* constants name the
    same codes, and each constant says what it means where it is defined."""
    from grpo_cli.core import errors

    section = README.split("## Exit codes", 1)[1].split("\n\n", 2)[1]
    in_readme = {int(code) for code in re.findall(r"^\| (\d+) \|", section, re.MULTILINE)}
    defined = {value for name, value in vars(errors).items() if name.startswith("EXIT_")}
    source = Path(errors.__file__).read_text()
    commented = {int(c) for c in re.findall(r"^EXIT_[A-Z]+ = (\d+)  # \w", source, re.MULTILINE)}
    assert in_readme == defined == commented, (in_readme, defined, commented)
