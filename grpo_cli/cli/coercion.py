"""Option text to values, without Typer's Pydantic adapters (built per parameter on each
run: a third of a small file's run). :class:`PlainValue` converts ``bool``, ``str``,
``int``, ``float``, ``Path`` and ``list[str]`` (or None) parameters and those with a
``parser``; any other kind keeps Typer's own conversion.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from typer import BadParameter

from grpo_cli.cli.typer_private import descriptor, runtime_param, set_runtime_param


def _flag(text: str) -> bool:
    """A boolean's text (from an environment variable): Click's spellings."""
    lowered = text.strip().lower()
    if lowered in ("1", "true", "t", "yes", "y", "on"):
        return True
    if lowered in ("0", "false", "f", "no", "n", "off", ""):
        return False
    raise ValueError(text)


_SCALARS: Final[dict[Any, tuple[Callable[[str], Any], str]]] = {
    bool: (_flag, "expected true or false"),
    str: (str, ""),
    int: (int, "expected a whole number"),
    float: (float, "expected a number"),
    Path: (Path, ""),
}


@dataclass(frozen=True)
class PlainValue:
    """Converts one parameter's text (or texts, for a multi-value parameter) with
    ``convert``; a ValueError is the usage error ``invalid value for '--X': <message>``."""

    convert: Callable[[str], Any]
    message: str

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        """What Typer's runtime parameter does: None stays None (an empty tuple for a
        multi-value parameter); texts are converted one by one."""
        many = param.multiple or param.nargs == -1
        if value is None:
            return () if many else None
        if many:
            return [self._one(item, param, ctx) for item in value]
        return self._one(value, param, ctx)

    def _one(self, item: Any, param: Any, ctx: Any) -> Any:
        if not isinstance(item, str):
            return item  # a default already of its type
        try:
            return self.convert(item)
        except ValueError:
            raise BadParameter(self.message, ctx=ctx, param=param) from None


def plain_value(annotation: Any, parser: Callable[[str], Any] | None) -> PlainValue | None:
    """The converter of a parameter annotated ``annotation`` (with Typer's ``parser``),
    or None when it is of a kind this module does not convert."""
    if parser is not None:
        return PlainValue(parser, "")
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(kinds) != 1:
            return None
        annotation, origin = kinds[0], typing.get_origin(kinds[0])
    if origin is list:
        (annotation,) = typing.get_args(annotation)
    if annotation not in _SCALARS:
        return None
    return PlainValue(*_SCALARS[annotation])


def install(params: list[Any]) -> None:
    """Give every parameter of a kind :func:`plain_value` converts its
    :class:`PlainValue` (Typer's parameters build theirs lazily, on first use, into
    ``_runtime_param``)."""
    for param in params:
        described = descriptor(param)
        if described is None or runtime_param(param) is not None:
            continue
        converter = plain_value(described.annotation, described.parameter_info.parser)
        if converter is not None:
            set_runtime_param(param, converter)
