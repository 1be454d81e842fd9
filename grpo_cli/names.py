"""Names the user types (estimators, presets, engines, policies): matched exactly, then
ignoring case and separators (``RLOO``, ``verl_rloo``, ``TRL`` are ``rloo``, ``verl-rloo``,
``trl``), else refused with a "did you mean" suggestion.

This module imports nothing heavy, so the CLI may use it while parsing.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection

from grpo_cli.errors import OptionsError


def _key(name: str) -> str:
    """``name`` without case, ``-``, ``_``, ``.`` or spaces."""
    return "".join(ch for ch in name.lower() if ch not in "-_. ")


def canonical(value: str, names: Collection[str]) -> str | None:
    """The name in ``names`` that ``value`` spells (exactly, or the one name equal to it
    without case and separators), or None."""
    if value in names:
        return value
    found = [name for name in names if _key(name) == _key(value)]
    return found[0] if len(found) == 1 else None


def match_name(value: str, names: Collection[str], what: str, *, see: str = "") -> str:
    """The name in ``names`` that ``value`` spells (see :func:`canonical`); otherwise an
    OptionsError ``unknown WHAT 'VALUE'`` whose hint suggests the closest names and lists
    them all (``see``: where to read more, appended to the hint)."""
    found = canonical(value, names)
    if found is not None:
        return found
    keys = {_key(name): name for name in names}
    close = [keys[k] for k in difflib.get_close_matches(_key(value), list(keys), n=2, cutoff=0.6)]
    listing = f"choose one of: {', '.join(names)}{see}"
    hint = f"did you mean {' or '.join(close)}? ({listing})" if close else listing
    raise OptionsError(f"unknown {what} {value!r}", hint=hint)
