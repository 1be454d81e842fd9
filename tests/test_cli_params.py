"""The shared option blocks of the command line (grpo_cli/cli/params.py): each option is
declared once, reaches every command that takes it, and is never silently dropped."""

from __future__ import annotations

import inspect
import re
from dataclasses import fields
from typing import Any

import pytest
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.cli.compute import compute_cmd
from grpo_cli.cli.explain import explain_cmd
from grpo_cli.cli.params import (
    PolicyParams,
    Preset,
    ReportParams,
    Sources,
    policy_options,
    report_options,
)
from grpo_cli.cli.plot import plot_cmd
from grpo_cli.cli.summarize import summarize_cmd
from grpo_cli.cli.verify import verify_cmd
from grpo_cli.core.engine_options import EngineOptions, split_engine
from grpo_cli.core.options import AdvantageOptions

GIVEN: dict[str, Any] = {
    "group_col": ["step", "prompt_id"],
    "reward_col": ["a", "b"],
    "reward_weights": "1,0.5",
    "aggregation": "normalize_then_sum",
    "estimator": "grpo",
    "ddof": 0,
    "eps": 1e-6,
    "eps_mode": "var",
    "singleton": "raw",
    "nulls": "zero",
    "clip": "-1,1",
    "clip_stage": "shaped",
    "reward_clip": "-20,20",
    "whiten": True,
    "whiten_ddof": 0,
    "whiten_eps": 1e-5,
    "whiten_eps_mode": "positive_std",
    "batch_col": "step",
    "group_size": 4,
    "length_col": "length",
    "token_weighted": True,
    "baseline_col": "baseline",
    "step_rewards_col": "steps",
    "deterministic": True,
    "backend": "ray",
    "device": "cpu",
    "ray_address": "auto",
}


@pytest.mark.parametrize("block", [PolicyParams, ReportParams])
def test_every_option_of_a_block_becomes_an_options_field(block: type[Any]) -> None:
    names = [field.name for field in fields(block)]
    assert set(names) <= set(GIVEN), "give the new option a sample value above"
    explicit = block(**{name: GIVEN[name] for name in names}).explicit()
    assert len(explicit) == len(names)  # nothing dropped
    estimator, engine = split_engine(explicit)
    AdvantageOptions(**estimator)  # every name is a field (a rename fails here)
    EngineOptions(**engine)


def test_options_not_given_are_left_to_the_preset() -> None:
    assert PolicyParams().explicit() == {}
    assert PolicyParams(group_col=[], reward_col=[]).explicit() == {}


def _own(command: Any) -> list[str]:
    return list(inspect.signature(command).parameters)


def test_the_blocks_stand_where_the_commands_put_them() -> None:
    policy = [field.name for field in fields(PolicyParams)]
    report = [field.name for field in fields(ReportParams)]
    compute = _own(compute_cmd)
    assert compute[5 : 5 + len(policy)] == policy
    verify = _own(verify_cmd)
    assert verify[6 : 6 + len(policy)] == policy
    explain = _own(explain_cmd)
    engine = ("backend", "device", "ray_address")
    assert explain[6 : 6 + len(policy) - 3] == [n for n in policy if n not in engine]
    assert _own(summarize_cmd)[8 : 8 + len(report)] == report
    assert _own(plot_cmd)[5 : 5 + len(report) - 1] == [n for n in report if n != "ddof"]
    for command in (compute_cmd, verify_cmd, explain_cmd, summarize_cmd, plot_cmd):
        assert not {"policy", "report_params"} & set(_own(command))


@pytest.mark.parametrize(
    ("command", "flags"),
    [
        ("compute", ["--group-col", "--estimator", "--deterministic", "--backend", "--device"]),
        ("verify", ["--group-col", "--clip-stage", "--backend", "--device"]),
        ("explain", ["--group-col", "--step-rewards-col", "--deterministic"]),
        ("summarize", ["--group-col", "--ddof", "--group-size"]),
        ("plot", ["--group-col", "--nulls", "--group-size"]),
    ],
)
def test_help_lists_the_block(command: str, flags: list[str]) -> None:
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for flag in flags:
        assert re.search(rf"[ ,]{flag}\b", result.output), flag


def test_plot_and_explain_leave_out_what_they_never_took() -> None:
    runner = CliRunner()
    assert "--ddof" not in runner.invoke(app, ["plot", "--help"]).output
    explain = runner.invoke(app, ["explain", "--help"]).output
    assert "--backend" not in explain
    assert "--device" not in explain


def test_a_block_options_mistake_fails_at_import() -> None:
    with pytest.raises(TypeError, match="has no option"):
        policy_options(exclude={"devices"})

    with pytest.raises(TypeError, match="keyword-only parameter"):

        @report_options()
        def no_placeholder(sources: Sources, preset: Preset = None) -> None: ...

    with pytest.raises(TypeError, match="keyword-only parameter"):

        @policy_options()
        def positional(sources: Sources, policy: PolicyParams = PolicyParams()) -> None: ...

    with pytest.raises(TypeError, match="declares ddof"):

        @report_options()
        def shadowing(sources: Sources, *, report_params: ReportParams, ddof: int = 1) -> None: ...


def test_the_command_gets_one_typed_block() -> None:
    seen: list[PolicyParams] = []

    @policy_options(exclude={"backend", "device"})
    def command(sources: Sources, *, policy: PolicyParams) -> None:
        seen.append(policy)

    command(sources=["x"], **{name: None for name in _own(command)[1:]} | {"ddof": 0})
    assert seen == [PolicyParams(ddof=0)]
