"""Names the user types (estimators, presets, engines, policies): matched exactly, then
ignoring case and separators (``RLOO``, ``verl_rloo``, ``TRL`` are ``rloo``, ``verl-rloo``,
``trl``), else refused with a "did you mean" suggestion.

This module imports nothing heavy, so the CLI may use it while parsing.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection

from grpo_cli.core.errors import Message, OptionsError


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


def match_name(value: str, names: Collection[str], what: Message, *, see: str = "") -> str:
    """The name in ``names`` that ``value`` spells (see :func:`canonical`); otherwise an
    OptionsError ``unknown WHAT 'VALUE'`` whose hint suggests up to four names: the longest
    name ``value`` starts with (``verl-grpo``: ``verl``), the names that hold ``value`` (3
    characters or more, without case and separators: ``open-rlhf`` suggests every
    ``openrlhf-...``, ``passk`` ``verl-grpo-passk``), then the closest spellings; and lists
    them all (``see``: where to read more, appended to the hint)."""
    found = canonical(value, names)
    if found is not None:
        return found
    keys = {_key(name): name for name in names}
    typed = _key(value)
    # a name the value extends (``verl-grpo`` is ``verl`` with its estimator spelled out)
    # comes first, the longest such; then the names the value is part of; then the closest
    prefixes = sorted((k for k in keys if k and typed.startswith(k)), key=len, reverse=True)
    holding = [k for k in keys if len(typed) >= 3 and typed in k]
    similar = difflib.get_close_matches(typed, list(keys), n=2, cutoff=0.6)
    close = [keys[k] for k in dict.fromkeys([*prefixes[:1], *holding, *similar])][:4]
    listing = f"choose one of: {', '.join(names)}{see}"
    if not close:
        raise OptionsError("unknown " + what + f" {value!r}", hint=listing, value=value)
    either = close[0] if len(close) == 1 else f"{', '.join(close[:-1])} or {close[-1]}"
    hint = f"did you mean {either}? ({listing})"
    raise OptionsError("unknown " + what + f" {value!r}", hint=hint, value=value)
