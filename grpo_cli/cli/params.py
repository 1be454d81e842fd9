"""Every option that several commands share, declared once, and the option blocks.

An option is an ``Annotated`` alias (its flags, metavar and help: :func:`cli_option`); the
help texts are generated from the core's registries. The policy options (``--group-col``
... ``--ray-address``) and the report options of ``summarize`` and ``plot`` are *blocks*: a
frozen dataclass whose fields declare them, and a decorator that puts them into a
command's signature where it declares ``*, policy: PolicyParams`` (so ``--help`` lists them
there) and hands the command one instance. Only options the user gave become core fields
(the rest are None), so a ``--preset`` can fill them in.

This module imports nothing heavy: ``grpo-adv --help`` must stay fast.
"""
# ruff: noqa: RUF009 (the option blocks' fields come of field factories)

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any, Final, get_args, get_origin, get_type_hints

import typer

from grpo_cli.cli.help import ENGINE, INPUT, LAYOUT, OUTPUT, POLICIES
from grpo_cli.core.columns import STEP_COLUMNS
from grpo_cli.core.engine_options import BACKENDS, DEVICES
from grpo_cli.core.errors import OptionRef, OptionsError, Verbatim, option
from grpo_cli.core.estimators import ESTIMATORS
from grpo_cli.core.options import (
    AGGREGATIONS,
    CLIP_STAGES,
    EPS_MODES,
    NULL_POLICIES,
    SINGLETON_POLICIES,
)
from grpo_cli.core.presets import PRESETS
from grpo_cli.io.formats import DATA_FORMATS, TABLE_FORMATS, describe

Command = Callable[..., None]


def _choices(title: str, choices: dict[str, str], default: str | None = None) -> str:
    """``TITLE: name = text; ...`` and, given, ``Default: NAME.`` (the one way help shows
    a default: a "(default)" inside a choice's text is left out)."""
    listed = "; ".join(
        f"{name} = {text.replace(' (default)', '').replace('(default; ', '(')}"
        for name, text in choices.items()
    )
    return f"{title}: {listed}." + (f" Default: {default}." if default else "")


def cli_option(
    *decls: str,
    help: str,
    panel: str | None = None,
    metavar: str | None = None,
    complete: Collection[str] | None = None,
    show_default: bool = False,
    **extra: Any,
) -> Any:
    """A ``typer.Option`` in help ``panel`` that completes the names in ``complete``; its
    default is not shown unless ``show_default`` (the help text says it)."""

    def completion(incomplete: str) -> list[str]:
        return [name for name in complete or () if name.startswith(incomplete)]

    return typer.Option(
        *decls,
        metavar=metavar,
        help=help,
        autocompletion=None if complete is None else completion,
        show_default=show_default,
        rich_help_panel=panel,
        **extra,
    )


def _option_field(*decls: str, **option: Any) -> Any:
    """A block's option (:func:`cli_option`'s arguments), not given (None) by default."""
    return field(default=None, metadata={"option": cli_option(*decls, **option)})


Sources = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="INPUT",
        help=f"Reward log(s): {describe(DATA_FORMATS, suffixes=True)} files (also gzip, zstd, "
        "bzip2 or xz compressed), folders or globs "
        "(read as one log); - reads standard input, as does no INPUT when standard input is "
        "a pipe.",
        show_default=False,
    ),
]
Preset = Annotated[
    str | None,
    cli_option(
        "--preset",
        metavar="NAME",
        help=f"Reproduce a trainer: {', '.join(PRESETS)} (see grpo-adv presets). "
        "Explicit options override it.",
        complete=PRESETS,
        panel=POLICIES,
    ),
]
InputFormat = Annotated[
    str | None,
    cli_option(
        "--format",
        metavar="FORMAT",
        help=f"Input format: {describe(DATA_FORMATS)}. Default: from the suffix, "
        "else from the content.",
        complete=DATA_FORMATS,
        panel=INPUT,
    ),
]


def parse_group_size(text: str) -> int | None:
    """``--group-size``: a whole number, or ``auto`` (None, as if not given: a TRL dump's G
    is then inferred from its runs of equal prompts)."""
    if text.strip().lower() == "auto":
        return None
    try:
        return int(text)
    except ValueError:  # the usage error (exit 2) of any bad option value
        raise typer.BadParameter("expected a whole number or auto") from None


Output = Annotated[
    str | None,
    cli_option(
        "--output",
        "-o",
        metavar="PATH",
        help="Output file, or - for standard output. Default: <stem>.adv.<suffix> beside "
        "INPUT; standard output when INPUT is -. With --backend ray: a folder of Parquet "
        "parts (required).",
        panel=OUTPUT,
    ),
]
OutputFormat = Annotated[
    str | None,
    cli_option(
        "--output-format",
        metavar="FORMAT",
        help=f"Output format: {describe(DATA_FORMATS)}. Default: from -o's suffix, "
        "else the input's format.",
        complete=DATA_FORMATS,
        panel=OUTPUT,
    ),
]
SummaryPath = Annotated[
    Path | None,
    cli_option(
        "--summary",
        metavar="PATH",
        help=f"Write the per-group table here ({describe(TABLE_FORMATS, suffixes=True)}; "
        "with --backend ray, a folder of Parquet parts).",
        panel=OUTPUT,
    ),
]
SummaryFormat = Annotated[
    str | None,
    cli_option(
        "--summary-format",
        metavar="FORMAT",
        help=f"Format of the --summary table: {describe(TABLE_FORMATS)}. Default: from "
        "its suffix; csv for standard output (--summary -).",
        complete=TABLE_FORMATS,
        panel=OUTPUT,
    ),
]
By = Annotated[
    list[str] | None,
    cli_option(
        "--by",
        metavar="COL",
        help="Per-step table by this column (repeat for several). Default: --batch-col, "
        "else step when the log has it.",
        panel=LAYOUT,
    ),
]
Force = Annotated[
    bool,
    cli_option("--force", "-f", help="Overwrite existing output files.", panel=OUTPUT),
]
Quiet = Annotated[
    bool,
    cli_option("--quiet", "-q", help="Print nothing on stderr but errors.", panel=OUTPUT),
]


# --------------------------------------------------------------------------- flag spelling

KEYWORDS: Final = {"group_col": "group_cols", "reward_col": "reward_cols"}
"""Options given once per value (``-g a -g b``) whose library keyword holds them all; every
other option's keyword is its parameter's name."""

ALIASES: Final[dict[tuple[str, object], str]] = {("backend", "partitioned"): "--low-memory"}
"""Flags that stand for an option and value: ``--low-memory`` is ``--backend partitioned``."""


def _cli_value(value: object) -> str:
    if isinstance(value, Verbatim):
        return value.text
    return str(value)


@dataclass(frozen=True)
class Flags:
    """How the command line names one keyword: its flags (long, then short) and whether
    it takes one value per flag (``-g a -g b``; other tuples are comma-separated:
    ``--clip -10,10``)."""

    names: tuple[str, ...]
    repeated: bool = False


_COMMANDS: Final[list[Command]] = []


def declares_options(command: Command) -> Command:
    """``command``, whose declared options :func:`flags` reads from now on (the app
    registers each command so)."""
    _COMMANDS.append(command)
    flags.cache_clear()
    return command


@functools.cache
def flags() -> dict[str, Flags]:
    """The flags of each keyword a message can name, read from the options the commands
    declare (the first command to declare a keyword names it): the one place where
    ``eps`` becomes ``--eps`` (see :mod:`grpo_cli.core.errors`)."""
    from typer.models import OptionInfo
    from typer.utils import get_params_from_function

    table: dict[str, Flags] = {}
    for command in _COMMANDS:
        for name, param in get_params_from_function(command).items():
            if isinstance(param.default, OptionInfo):
                names = tuple(decl.split("/")[0] for decl in param.default.param_decls or ())
                kinds = (param.annotation, *get_args(param.annotation))
                repeated = any(get_origin(kind) is list for kind in kinds)
                table.setdefault(KEYWORDS.get(name, name), Flags(names, repeated))
    return table


def flag_spelling(ref: OptionRef) -> str:
    """The option as the command line takes it: ``--eps``, ``--eps 1e-8``, ``--force``
    (a value True), ``--clip -10,10``, ``-g a -g b``, ``--low-memory`` (an alias)."""
    named = flags().get(ref.keyword) or Flags(("--" + ref.keyword.replace("_", "-"),))
    flag = named.names[-1] if ref.short else named.names[0]
    if not ref.has_value or ref.value is True:
        plain = flag
    elif isinstance(ref.value, tuple) and named.repeated:
        plain = " ".join(f"{flag} {_cli_value(v)}" for v in ref.value)
    elif isinstance(ref.value, tuple):
        plain = f"{flag} {','.join(_cli_value(v) for v in ref.value)}"
    else:
        plain = f"{flag} {_cli_value(ref.value)}"
    alias = ALIASES.get((ref.keyword, ref.value)) if ref.alias else None
    if alias is None:
        return plain
    return alias if ref.alias == "alone" else f"{alias} ({plain})"


def alias_backend(flag: str, explicit: Mapping[str, Any]) -> str:
    """The engine an alias flag (``--low-memory``) stands for; refused when ``explicit``
    names another ``backend``."""
    name = next(value for (_, value), alias in ALIASES.items() if alias == flag)
    if explicit.get("backend", name) != name:
        raise OptionsError(
            f"{flag} is --backend {name}, not --backend {explicit['backend']}",
            hint="give one of them",
        )
    return str(name)


def parse_floats(text: str, keyword: str, count: int | None = None) -> tuple[float, ...]:
    """``"1,0.5"`` -> ``(1.0, 0.5)``; a clear error, naming the option ``keyword``, for
    anything else."""
    example = Verbatim("-10,10" if count == 2 else "1,0.5")
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise OptionsError(
            option(keyword) + f" needs comma-separated numbers, got {text!r}",
            hint="e.g. " + option(keyword, example),
        ) from None
    if count is not None and len(values) != count:
        raise OptionsError(
            option(keyword) + f" needs {count} comma-separated numbers, got {text!r}",
            hint="e.g. " + option(keyword, example),
        )
    return values


@dataclass(frozen=True)
class OptionBlock:
    """Options several commands share; a subclass's fields are the options, in --help
    order, each declared by :func:`_option_field` and None when not given."""

    def explicit(self) -> dict[str, Any]:
        """The AdvantageOptions fields the user gave, in declaration order (every field of
        the block, none picked by name): repeated options as tuples, numbers parsed."""
        given: dict[str, Any] = {}
        for name, value in ((f.name, getattr(self, f.name)) for f in fields(self)):
            if value is None or (isinstance(value, list) and not value):
                continue
            if name in KEYWORDS:
                given[KEYWORDS[name]] = tuple(value)
            elif name in ("reward_weights", "clip", "reward_clip"):
                given[name] = parse_floats(
                    value, name, count=None if name == "reward_weights" else 2
                )
            else:
                given[name] = value
        return given


@dataclass(frozen=True)
class PolicyParams(OptionBlock):
    """How advantages are computed: the options of ``compute``, ``verify`` and
    ``explain``."""

    group_col: list[str] | None = _option_field(
        "--group-col",
        "-g",
        metavar="COL",
        help="Column identifying a group; repeat for a composite key "
        "(-g step -g prompt_id). Default: step, prompt_id when the log has a step column "
        f"(the first of {', '.join(STEP_COLUMNS)}), else prompt_id.",
        panel=INPUT,
    )
    reward_col: list[str] | None = _option_field(
        "--reward-col",
        "-r",
        metavar="COL",
        help="Reward column; repeat for several rewards (see --aggregation). Default: reward.",
        panel=INPUT,
    )
    reward_weights: str | None = _option_field(
        "--reward-weights",
        metavar="W1,W2",
        help="One weight per --reward-col, e.g. 1,0.5. Default: 1 each.",
        panel=INPUT,
    )
    aggregation: str | None = _option_field(
        "--aggregation",
        metavar="MODE",
        help=_choices("How several rewards combine", AGGREGATIONS, "sum_then_normalize"),
        complete=AGGREGATIONS,
        panel=POLICIES,
    )
    estimator: str | None = _option_field(
        "--estimator",
        "-e",
        metavar="NAME",
        help="Advantage estimator: "
        + "; ".join(f"{e.name} = {e.summary}" for e in ESTIMATORS.values())
        + ". Default: grpo.",
        complete=ESTIMATORS,
        panel=POLICIES,
    )
    ddof: int | None = _option_field(
        "--ddof",
        metavar="0|1",
        help="Degrees-of-freedom correction of every std: 1 sample, 0 population. Default: 1.",
        panel=POLICIES,
    )
    eps: float | None = _option_field(
        "--eps", metavar="FLOAT", help="The stabiliser. Default: 1e-8.", panel=POLICIES
    )
    eps_mode: str | None = _option_field(
        "--eps-mode",
        metavar="MODE",
        help=_choices("Where eps goes", EPS_MODES, "std"),
        complete=EPS_MODES,
        panel=POLICIES,
    )
    singleton: str | None = _option_field(
        "--singleton",
        metavar="POLICY",
        help=_choices("A group with one valid reward", SINGLETON_POLICIES, "zero"),
        complete=SINGLETON_POLICIES,
        panel=POLICIES,
    )
    nulls: str | None = _option_field(
        "--nulls",
        metavar="POLICY",
        help=_choices("Null or NaN rewards", NULL_POLICIES, "exclude"),
        complete=NULL_POLICIES,
        panel=POLICIES,
    )
    clip: str | None = _option_field(
        "--clip",
        metavar="LO,HI",
        help="Clip advantages to [LO, HI] (OpenRLHF: -10,10).",
        panel=POLICIES,
    )
    clip_stage: str | None = _option_field(
        "--clip-stage",
        metavar="STAGE",
        help=_choices("Where --clip applies", CLIP_STAGES, "advantage"),
        complete=CLIP_STAGES,
        panel=POLICIES,
    )
    reward_clip: str | None = _option_field(
        "--reward-clip",
        metavar="LO,HI",
        help="Clamp every reward to [LO, HI] before any statistic (AReaL: -20,20).",
        panel=POLICIES,
    )
    whiten: bool | None = _option_field(
        "--whiten/--no-whiten",
        help="After the estimator, whiten the advantages over the batch (token-weighted "
        "with --token-weighted), as AReaL's adv_norm and ROLL's whiten_advantages.",
        panel=POLICIES,
    )
    whiten_ddof: int | None = _option_field(
        "--whiten-ddof",
        metavar="0|1",
        help="Degrees-of-freedom correction of the --whiten variance. Default: 1.",
        panel=POLICIES,
    )
    whiten_eps: float | None = _option_field(
        "--whiten-eps",
        metavar="FLOAT",
        help="The stabiliser of --whiten. Default: 1e-8.",
        panel=POLICIES,
    )
    whiten_eps_mode: str | None = _option_field(
        "--whiten-eps-mode",
        metavar="MODE",
        help="Where --whiten-eps goes (see --eps-mode). Default: var.",
        complete=EPS_MODES,
        panel=POLICIES,
    )
    batch_col: str | None = _option_field(
        "--batch-col",
        metavar="COL",
        help="Batch statistics per value of this column (e.g. step). Default: the whole "
        "input is one batch.",
        panel=LAYOUT,
    )
    group_size: int | None = _option_field(
        "--group-size",
        metavar="G",
        parser=parse_group_size,
        help="Positional groups: consecutive runs of G rows (within each batch), for logs "
        "without a prompt id (TRL's num_generations). auto (or not given, with a TRL "
        "preset): inferred from a TRL dump's runs of equal prompts.",
        panel=LAYOUT,
    )
    length_col: str | None = _option_field(
        "--length-col",
        metavar="COL",
        help="Response lengths in tokens (opo weights, --token-weighted statistics).",
        panel=INPUT,
    )
    token_weighted: bool | None = _option_field(
        "--token-weighted/--no-token-weighted",
        help="Weight batch statistics by --length-col, as verl and OpenRLHF whiten over tokens.",
        panel=POLICIES,
    )
    baseline_col: str | None = _option_field(
        "--baseline-col",
        metavar="COL",
        help="Per-row baseline reward (remax: the greedy response's reward).",
        panel=INPUT,
    )
    step_rewards_col: str | None = _option_field(
        "--step-rewards-col",
        metavar="COL",
        help="List column of per-step rewards (estimator process).",
        panel=INPUT,
    )
    deterministic: bool | None = _option_field(
        "--deterministic/--fast",
        help="Bit-for-bit repeatable results (Polars' in-memory engine, about 2x slower on "
        "large logs). Default --fast: the streaming engine, whose parallel sums may differ in "
        "the last bit (~1e-16 relative) between runs.",
        panel=ENGINE,
    )
    backend: str | None = _option_field(
        "--backend",
        metavar="NAME",
        help=_choices("Where the arithmetic runs", BACKENDS, "polars"),
        complete=BACKENDS,
        panel=ENGINE,
    )
    device: str | None = _option_field(
        "--device",
        metavar="DEVICE",
        help=_choices("The torch device", DEVICES, "auto"),
        complete=DEVICES,
        panel=ENGINE,
    )
    ray_address: str | None = _option_field(
        "--ray-address",
        metavar="ADDRESS",
        help="With --backend ray: auto (the cluster this machine belongs to) or HOST:PORT "
        "(its head). Default: a private local Ray (RAY_ADDRESS is not followed).",
        panel=ENGINE,
    )


def _shared(name: str) -> Any:
    """The policy block's option ``name``, for another block."""
    (policy,) = (f for f in fields(PolicyParams) if f.name == name)
    return field(default=None, metadata=policy.metadata)


@dataclass(frozen=True)
class ReportParams(OptionBlock):
    """The input and grouping options of ``summarize`` and ``plot``."""

    group_col: list[str] | None = _shared("group_col")
    reward_col: list[str] | None = _shared("reward_col")
    reward_weights: str | None = _shared("reward_weights")
    ddof: int | None = _shared("ddof")
    nulls: str | None = _shared("nulls")
    batch_col: str | None = _shared("batch_col")
    group_size: int | None = _shared("group_size")


def _block_options(
    block: type[OptionBlock], placeholder: str, exclude: Collection[str]
) -> Callable[[Command], Command]:
    """A decorator that replaces a command's keyword-only parameter ``placeholder`` with
    the options of ``block`` (less ``exclude``) and calls the command with one ``block``
    instance there. Every mistake (an unknown name in ``exclude``, no placeholder, a
    command parameter that shadows an option) fails at import."""
    hints = get_type_hints(block, include_extras=True)
    names = [field.name for field in fields(block)]
    unknown = set(exclude) - set(names)
    if unknown:
        raise TypeError(f"{block.__name__} has no option(s) {', '.join(sorted(unknown))}")
    options = [
        inspect.Parameter(
            field.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=Annotated[hints[field.name], field.metadata["option"]],
        )
        for field in fields(block)
        if field.name not in exclude
    ]

    def decorate(command: Command) -> Command:
        signature = inspect.signature(command, eval_str=True)
        parameters = list(signature.parameters.values())
        where = [i for i, p in enumerate(parameters) if p.name == placeholder]
        if not where or parameters[where[0]].kind is not inspect.Parameter.KEYWORD_ONLY:
            raise TypeError(
                f"{command.__name__} needs a keyword-only parameter "
                f"`{placeholder}: {block.__name__}` where the options go"
            )
        shadowed = {p.name for p in parameters} & {p.name for p in options}
        if shadowed:
            raise TypeError(
                f"{command.__name__} declares {', '.join(sorted(shadowed))} of "
                f"{block.__name__} itself"
            )
        parameters[where[0] : where[0] + 1] = options
        rewritten = signature.replace(parameters=parameters)
        own = [p.name for p in options]

        @functools.wraps(command)
        def run(**given: Any) -> None:
            values = block(**{name: given.pop(name) for name in own})
            command(**given, **{placeholder: values})

        run.__signature__ = rewritten  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters}
        return run

    return decorate


def policy_options(*, exclude: Collection[str] = ()) -> Callable[[Command], Command]:
    """Put the policy options (``--group-col`` ... ``--device``, less ``exclude``) where the
    command declares ``*, policy: PolicyParams``."""
    return _block_options(PolicyParams, "policy", exclude)


def report_options(*, exclude: Collection[str] = ()) -> Callable[[Command], Command]:
    """Put the report options (``--group-col`` ... ``--group-size``, less ``exclude``) where
    the command declares ``*, report_params: ReportParams``."""
    return _block_options(ReportParams, "report_params", exclude)
