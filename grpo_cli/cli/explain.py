"""``grpo-adv explain``: one group's advantages with the formula filled in."""

from __future__ import annotations

from typing import Annotated, Final

from grpo_cli.cli.help import INPUT
from grpo_cli.cli.params import (
    InputFormat,
    PolicyParams,
    Preset,
    Quiet,
    Sources,
    cli_option,
    flag_spelling,
    policy_options,
)

# --pick's choices (grpo_cli.report.explain.PICKS, which a test keeps equal; not imported here:
# it imports Polars, and --help must stay fast).
PICK_HELP: Final = {
    "worst": "the group holding the largest |advantage| of the log (the first, on a tie)",
    "zero-variance": "the first group whose valid rewards (two or more) are all equal",
    "singleton": "the first group with exactly one valid reward",
}


# Where the output goes and how the arithmetic runs change nothing that explain shows.
@policy_options(exclude={"backend", "device", "ray_address"})
def explain_cmd(
    sources: Sources = None,
    group: Annotated[
        list[str] | None,
        cli_option(
            "--group",
            metavar="KEY",
            help="The group's key value, or its start when only one group's key starts so. "
            "A composite key: comma-separated (1,p015), or one --group per column, by name "
            'when a value holds commas (--group step=1 --group "prompt=a, b"). Positional '
            "groups (--group-size) are keyed BATCH,GROUP_INDEX, e.g. 3,0 for the first run "
            "of G rows of step 3 (GROUP_INDEX alone without a batch column); a verl dump's "
            "by its uid.",
        ),
    ] = None,
    row: Annotated[
        int | None,
        cli_option(
            "--row",
            metavar="N",
            help="Explain the group of input row N, counting from 0 (several inputs: in the "
            "order read); the table's row column counts the same way.",
        ),
    ] = None,
    pick: Annotated[
        str | None,
        cli_option(
            "--pick",
            metavar="WHICH",
            help="Let explain find the group: "
            + "; ".join(f"{name} = {text}" for name, text in PICK_HELP.items())
            + ". Give one of --group, --row, --pick.",
            complete=PICK_HELP,
        ),
    ] = None,
    input_format: InputFormat = None,
    preset: Preset = None,
    *,
    policy: PolicyParams,
    advantage_col: Annotated[
        str | None,
        cli_option(
            "--advantage-col",
            metavar="COL",
            help="The advantage column of an annotated log (its values are shown beside). "
            "Default: advantage, else advantages (verl).",
            panel=INPUT,
        ),
    ] = None,
    quiet: Quiet = False,
) -> None:
    """Show one group's advantages with the formula filled in.

    Prints the rewards, n, mean, the std (ddof stated), eps, and each response's
    advantage as the formula with numbers, for the chosen estimator or preset, beside its
    input row (and its step and the start of its text, when the log has them), on
    standard output; warnings go to standard error.
    """
    from grpo_cli.cli.render import PipeConsole, print_warnings, render_explanation, stderr_console
    from grpo_cli.report.explain import run_explain

    explanation = run_explain(
        sources or [],
        group,
        row=row,
        pick=pick,
        preset=preset,
        options={**policy.explicit(), "advantage_col": advantage_col},
        input_format=input_format,
    )
    if not quiet:
        print_warnings(stderr_console(), explanation.warnings)
    render_explanation(PipeConsole(highlight=False, soft_wrap=True), explanation, flag_spelling)
