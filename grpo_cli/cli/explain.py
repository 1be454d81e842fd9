"""``grpo-adv explain``: one group's advantages with the formula filled in."""

from __future__ import annotations

from typing import Annotated

import typer

from grpo_cli.cli.outputs import read_input, sources_or_stdin
from grpo_cli.cli.params import InputFormat, PolicyParams, Preset, Sources, policy_options


# Where the output goes and how the arithmetic runs change nothing that explain shows.
@policy_options(exclude={"backend", "device", "ray_address"})
def explain_cmd(
    sources: Sources,
    group: Annotated[
        str,
        typer.Option(
            "--group",
            metavar="KEY",
            help="The group's key value (comma-separated for a composite key). Positional "
            "groups (--group-size) are keyed BATCH,GROUP_INDEX, e.g. 3,0 for the first run "
            "of G rows of step 3 (GROUP_INDEX alone without a batch column); a verl dump's "
            "by its uid.",
            show_default=False,
        ),
    ],
    input_format: InputFormat = None,
    preset: Preset = None,
    *,
    policy: PolicyParams,
    advantage_col: Annotated[
        str,
        typer.Option(
            "--advantage-col",
            metavar="COL",
            help="The advantage column of an annotated log (its values are shown beside).",
        ),
    ] = "advantage",
) -> None:
    """Show one group's advantages with the formula filled in.

    Prints the rewards, n, mean, the std (ddof stated), eps, and each response's
    advantage as the formula with numbers, for the chosen estimator or preset.
    """
    from grpo_cli.explain import explain_one
    from grpo_cli.render import render_explanation, stderr_console

    explicit = {**policy.explicit(), "advantage_col": advantage_col}
    key_cols = tuple(explicit.get("group_cols", ("prompt_id",)))
    log = read_input(sources_or_stdin(sources), input_format, key_cols)
    explanation = explain_one(log.frame, preset, explicit, group)
    render_explanation(stderr_console(), explanation)
