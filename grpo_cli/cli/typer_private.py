"""Every private name of Typer that grpo-adv uses: the vendored Click's usage errors
(:mod:`grpo_cli.cli.app`), completion for a named shell (Typer's flag takes none), and a
parameter's ``type_descriptor`` and lazily built ``_runtime_param``, where
:mod:`grpo_cli.cli.coercion` puts its converter. ``pyproject.toml`` pins Typer to
:data:`TYPER_PINNED`; ``tests/test_typer_private.py`` names any that an upgrade moves.
"""

from __future__ import annotations

from typing import Any, Final

from typer._click import exceptions as click_errors

TYPER_PINNED: Final = ">=0.29,<0.30"
TYPE_DESCRIPTOR: Final = "type_descriptor"
RUNTIME_PARAM: Final = "_runtime_param"

UsageError = click_errors.UsageError
NoSuchOption = click_errors.NoSuchOption
NoArgsIsHelpError = click_errors.NoArgsIsHelpError


def completion() -> tuple[Any, Any]:
    """Typer's ``(get_completion_script, install)``, imported on use (completion only)."""
    from typer._completion_shared import get_completion_script, install

    return get_completion_script, install


def descriptor(param: Any) -> Any:
    """The parameter's type descriptor (``.annotation``, ``.parameter_info.parser``), or
    None for a parameter without one."""
    return getattr(param, TYPE_DESCRIPTOR, None)


def runtime_param(param: Any) -> Any:
    """The converter the parameter runs (None until Typer builds it on first use)."""
    return getattr(param, RUNTIME_PARAM, None)


def set_runtime_param(param: Any, converter: Any) -> None:
    """Give the parameter ``converter`` before Typer builds its own."""
    setattr(param, RUNTIME_PARAM, converter)
