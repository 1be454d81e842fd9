"""``grpo-adv presets``: the trainer presets and their conventions."""

from __future__ import annotations

from typing import Annotated

import typer

from grpo_cli.errors import OptionsError


def presets_cmd(
    output_format: Annotated[
        str,
        typer.Option(
            "--format", metavar="FORMAT", help="table (the terminal) or markdown (for docs)."
        ),
    ] = "table",
) -> None:
    """List the trainer presets and the conventions each one sets."""
    from grpo_cli.presets import presets_frame
    from grpo_cli.render import render_presets

    if output_format == "markdown":
        from grpo_cli.io import frame_to_markdown

        typer.echo(frame_to_markdown(presets_frame()), nl=False)
    elif output_format == "table":
        from rich.console import Console

        render_presets(Console(soft_wrap=False))
    else:
        raise OptionsError(f"unknown --format {output_format!r}", hint="choose table or markdown")
