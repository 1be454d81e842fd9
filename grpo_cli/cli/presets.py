"""``grpo-adv presets``: the trainer presets and their conventions."""

from __future__ import annotations

from typing import Annotated

from grpo_cli.cli.help import OUTPUT
from grpo_cli.cli.params import cli_option
from grpo_cli.core.errors import OptionsError


def presets_cmd(
    output_format: Annotated[
        str,
        cli_option(
            "--output-format",
            "--format",
            metavar="FORMAT",
            help="table (the terminal), markdown (for docs), json (one array of objects) or csv.",
            panel=OUTPUT,
            show_default=True,
        ),
    ] = "table",
) -> None:
    """List the trainer presets and the conventions each one sets."""
    from grpo_cli.cli.render import PipeConsole, render_presets
    from grpo_cli.core.presets import presets_frame

    if output_format == "table":
        render_presets(PipeConsole(soft_wrap=False))
        return
    if output_format not in ("markdown", "md", "json", "csv"):
        raise OptionsError(
            f"unknown --format {output_format!r}", hint="choose table, markdown, json or csv"
        )
    from pathlib import Path

    from grpo_cli.io.write import write_table

    write_table(presets_frame(), Path("-"), force=False, fmt=output_format)
