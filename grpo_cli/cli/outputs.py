"""What the commands share of the outputs' handling that speaks to the terminal."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grpo_cli.core.errors import Message


def warner(*, quiet: bool) -> Callable[[Message], None] | None:
    """Where the core's warnings go: ``warning: ...`` on stderr (options named by their
    flags), or nowhere with --quiet."""
    if quiet:
        return None
    from grpo_cli.cli.params import flag_spelling
    from grpo_cli.cli.render import print_warning, stderr_console

    return functools.partial(print_warning, stderr_console(), spell=flag_spelling)
