"""Help that teaches: every command's help has option panels, one way to show defaults, a
readable usage line and 3-5 examples, and every example runs; the main help keeps whole
command summaries, and ``-V`` prints the version."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grpo_cli import __version__
from grpo_cli.cli import app
from grpo_cli.cli.help import EXAMPLES
from grpo_cli.io.formats import DATA_FORMATS, FORMATS, TABLE_FORMATS
from tests.conftest import run_example

COMMANDS = ("compute", "verify", "summarize", "plot", "explain", "presets", "compare")


def help_of(command: str) -> str:
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_help_has_panels_one_default_style_and_examples(command: str) -> None:
    text = help_of(command)
    assert "[default:" not in text  # defaults are written "Default: X."
    assert "<list[str]>" not in text and "INPUT...}" not in text
    assert "\nHelp:\n" in text and "\nExamples:\n" in text.replace("  Examples:", "Examples:")
    assert 3 <= len(EXAMPLES[command]) <= 5
    for line, _ in EXAMPLES[command]:
        assert line in text
    if command not in ("presets", "compare"):
        assert ("\nInput:\n" in text and "\nOutput:\n" in text) or command == "explain"


def test_compute_help_groups_its_options() -> None:
    text = help_of("compute")
    panels = [
        line[:-1]
        for line in text.splitlines()
        if line and line.endswith(":") and not line.startswith(" ")
    ]
    assert panels == [
        "Arguments", "Input", "Estimator and policies", "Batch and layout", "Output", "Engine",
        "Help",
    ]  # fmt: skip
    assert "Usage: grpo-adv compute [OPTIONS] [INPUT]..." in text
    assert "--device DEVICE" in text and "Default: auto." in text


def test_group_col_help_gives_the_default_with_a_step_column() -> None:
    text = " ".join(help_of("compute").split())
    assert (
        "Column identifying a group; repeat for a composite key (-g step -g prompt_id). "
        "Default: step, prompt_id when the log has a step column (the first of step, "
        "global_step, training_step, iteration, batch, batch_id, epoch), else prompt_id."
    ) in text


EXAMPLE_LINES = [line for examples in EXAMPLES.values() for line, _ in examples]


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLE_LINES)
def test_every_example_runs(example: str, tmp_path: Path) -> None:
    done = run_example(example, tmp_path)
    assert done.returncode == 0, done.stderr


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


@pytest.mark.parametrize(
    ("command", "formats", "named"),
    [
        ("compute", DATA_FORMATS, True),
        ("compare", DATA_FORMATS, True),
        ("summarize", TABLE_FORMATS, True),
        ("verify", TABLE_FORMATS, False),  # no format option: the suffixes only
    ],
)
def test_help_names_every_format_and_suffix(
    command: str, formats: tuple[str, ...], named: bool
) -> None:
    """The format lists of --help come from the registry: every format's name (where the
    command has a format option) and every suffix appear (a new format is listed without
    touching the help)."""
    text = " ".join(help_of(command).replace("│", " ").split())
    for fmt in formats:
        for word in (fmt, *FORMATS[fmt].suffixes) if named else FORMATS[fmt].suffixes:
            assert re.search(rf"(?<![\w.]){re.escape(word)}\b", text), (command, word)
