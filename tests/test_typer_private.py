"""Typer's private names that grpo-adv relies on (grpo_cli/cli/typer_private.py) are
where it expects them, in the Typer version pyproject.toml pins: an upgrade that moves one
fails here, naming it, instead of silently losing the option coercion's speed."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.cli import typer_private as private
from grpo_cli.cli.coercion import PlainValue, install
from tests.conftest import ROOT


def _pinned_range() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (typer_req,) = [r for r in project["dependencies"] if r.startswith("typer")]
    return str(typer_req).removeprefix("typer").split(";")[0].strip()


def test_pyproject_pins_the_range_the_module_names() -> None:
    assert _pinned_range() == private.TYPER_PINNED


def test_the_installed_typer_is_in_that_range() -> None:
    low, high = re.fullmatch(r">=([\d.]+),<([\d.]+)", private.TYPER_PINNED).groups()  # type: ignore[union-attr]

    def parts(text: str) -> tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"\d+", text)[:3])

    assert parts(low) <= parts(version("typer")) < parts(high), version("typer")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["compute", "x.csv", "--no-such-flag"], private.NoSuchOption),
        ([], private.NoArgsIsHelpError),
        (["compute", "x.csv", "--eps"], private.UsageError),
    ],
)
def test_the_click_errors_are_the_ones_typer_raises(args: list[str], error: type) -> None:
    """The names the one error style catches are the classes Typer raises for a misspelled
    option, a bare command and a flag without its value."""
    with pytest.raises(error):
        get_command(app).main(args, prog_name="grpo-adv", standalone_mode=False)


def test_completion_functions_take_the_shell() -> None:
    get_completion_script, install_completion = private.completion()
    script = get_completion_script(
        prog_name="grpo-adv", complete_var="_GRPO_ADV_COMPLETE", shell="zsh"
    )
    assert "_GRPO_ADV_COMPLETE" in script and "compdef" in script
    assert callable(install_completion)


def _compute_params() -> list[Any]:
    group: Any = get_command(app)
    return list(group.commands["compute"].params)


def test_parameters_carry_the_descriptor_coercion_reads() -> None:
    params = _compute_params()
    described = [p for p in params if private.descriptor(p) is not None]
    assert len(described) == len(params), [p.name for p in params if p not in described]
    for param in described:
        info = private.descriptor(param)
        assert hasattr(info, "annotation") and hasattr(info.parameter_info, "parser"), param.name


def test_coercion_takes_the_place_typer_reads() -> None:
    """After install, the parameters convert with PlainValue, and Typer uses it: a bad
    number is the one error style's message, not Pydantic's."""
    params = _compute_params()
    install(params)
    converters = [private.runtime_param(p) for p in params]
    plain = [c for c in converters if isinstance(c, PlainValue)]
    assert len(plain) >= 25, len(plain)
    result = CliRunner().invoke(app, ["compute", "x.csv", "--eps", "abc"])
    assert result.exit_code == 2
    assert "expected a number" in result.stderr
