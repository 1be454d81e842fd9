"""Every private name of Typer that grpo-adv uses, in one place.

Typer has no public API for these:

- ``typer._click.exceptions`` (Typer vendors Click): the usage errors the one error style
  catches (:mod:`grpo_cli.cli.app`).
- ``typer._completion_shared``: completion for the shell the user names
  (``--install-completion zsh``), which Typer's own flag cannot take.
- A parameter's ``type_descriptor`` (its annotation and ``parameter_info.parser``) and its
  lazily built ``_runtime_param``: :mod:`grpo_cli.cli.coercion` puts its converter there,
  which skips Pydantic.

``pyproject.toml`` pins Typer to :data:`TYPER_PINNED`; ``tests/test_typer_private.py``
fails, naming the name, when an upgrade moves one of them.
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
