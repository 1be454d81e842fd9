"""Typer option declarations shared by the commands, and their conversion into the core's
option fields. Only options the user actually gave become fields (the rest are None), so
a ``--preset`` can fill them in. Help texts are generated from the core's registries."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from grpo_cli.errors import OptionsError
from grpo_cli.estimators import ESTIMATORS
from grpo_cli.options import (
    AGGREGATIONS,
    BACKENDS,
    CLIP_STAGES,
    DEVICES,
    EPS_MODES,
    NULL_POLICIES,
    SINGLETON_POLICIES,
)
from grpo_cli.presets import PRESETS


def _choices(title: str, choices: dict[str, str]) -> str:
    return f"{title}: " + "; ".join(f"{name} = {text}" for name, text in choices.items())


Sources = Annotated[
    list[str],
    typer.Argument(
        metavar="INPUT...",
        help="Reward log(s): .parquet, .csv, .jsonl/.ndjson or .json files (also gzip, zstd, "
        "bzip2 or xz compressed), folders or globs "
        "(read as one log); - reads standard input.",
        show_default=False,
    ),
]
Preset = Annotated[
    str | None,
    typer.Option(
        "--preset",
        metavar="NAME",
        help=f"Reproduce a trainer: {', '.join(PRESETS)} (see grpo-adv presets). "
        "Explicit options override it.",
        show_default=False,
    ),
]
InputFormat = Annotated[
    str | None,
    typer.Option(
        "--format",
        metavar="FORMAT",
        help="Input format: parquet, csv, jsonl or json. Default: from the suffix, "
        "else from the content.",
        show_default=False,
    ),
]
GroupCol = Annotated[
    list[str] | None,
    typer.Option(
        "--group-col",
        "-g",
        metavar="COL",
        help="Column identifying a group; repeat for a composite key "
        "(-g step -g prompt_id). Default: prompt_id.",
        show_default=False,
    ),
]
RewardCol = Annotated[
    list[str] | None,
    typer.Option(
        "--reward-col",
        "-r",
        metavar="COL",
        help="Reward column; repeat for several rewards (see --aggregation). Default: reward.",
        show_default=False,
    ),
]
RewardWeights = Annotated[
    str | None,
    typer.Option(
        "--reward-weights",
        metavar="W1,W2",
        help="One weight per --reward-col, e.g. 1,0.5. Default: 1 each.",
        show_default=False,
    ),
]
Aggregation = Annotated[
    str | None,
    typer.Option(
        "--aggregation",
        metavar="MODE",
        help=_choices("How several rewards combine", AGGREGATIONS),
        show_default=False,
    ),
]
Estimator = Annotated[
    str | None,
    typer.Option(
        "--estimator",
        "-e",
        metavar="NAME",
        help="Advantage estimator (default grpo): "
        + "; ".join(f"{e.name} = {e.summary}" for e in ESTIMATORS.values()),
        show_default=False,
    ),
]
Ddof = Annotated[
    int | None,
    typer.Option(
        "--ddof",
        metavar="0|1",
        help="Degrees-of-freedom correction of every std: 1 sample (default), 0 population.",
        show_default=False,
    ),
]
Eps = Annotated[
    float | None,
    typer.Option(
        "--eps", metavar="FLOAT", help="The stabiliser (default 1e-8).", show_default=False
    ),
]
EpsMode = Annotated[
    str | None,
    typer.Option(
        "--eps-mode",
        metavar="MODE",
        help=_choices("Where eps goes", EPS_MODES),
        show_default=False,
    ),
]
Singleton = Annotated[
    str | None,
    typer.Option(
        "--singleton",
        metavar="POLICY",
        help=_choices("A group with one valid reward", SINGLETON_POLICIES),
        show_default=False,
    ),
]
Nulls = Annotated[
    str | None,
    typer.Option(
        "--nulls",
        metavar="POLICY",
        help=_choices("Null or NaN rewards", NULL_POLICIES),
        show_default=False,
    ),
]
Clip = Annotated[
    str | None,
    typer.Option(
        "--clip",
        metavar="LO,HI",
        help="Clip advantages to [LO, HI] (OpenRLHF: -10,10).",
        show_default=False,
    ),
]
ClipStage = Annotated[
    str | None,
    typer.Option(
        "--clip-stage",
        metavar="STAGE",
        help=_choices("Where --clip applies", CLIP_STAGES),
        show_default=False,
    ),
]
BatchCol = Annotated[
    str | None,
    typer.Option(
        "--batch-col",
        metavar="COL",
        help="Batch statistics per value of this column (e.g. step). Default: the whole "
        "input is one batch.",
        show_default=False,
    ),
]
GroupSize = Annotated[
    int | None,
    typer.Option(
        "--group-size",
        metavar="G",
        help="Positional groups: consecutive runs of G rows (within each batch), for logs "
        "without a prompt id (TRL's num_generations).",
        show_default=False,
    ),
]
LengthCol = Annotated[
    str | None,
    typer.Option(
        "--length-col",
        metavar="COL",
        help="Response lengths in tokens (opo weights, --token-weighted statistics).",
        show_default=False,
    ),
]
TokenWeighted = Annotated[
    bool | None,
    typer.Option(
        "--token-weighted/--no-token-weighted",
        help="Weight batch statistics by --length-col, as verl and OpenRLHF whiten over tokens.",
        show_default=False,
    ),
]
BaselineCol = Annotated[
    str | None,
    typer.Option(
        "--baseline-col",
        metavar="COL",
        help="Per-row baseline reward (remax: the greedy response's reward).",
        show_default=False,
    ),
]
StepRewardsCol = Annotated[
    str | None,
    typer.Option(
        "--step-rewards-col",
        metavar="COL",
        help="List column of per-step rewards (estimator process).",
        show_default=False,
    ),
]
Deterministic = Annotated[
    bool | None,
    typer.Option(
        "--deterministic/--fast",
        help="Bit-for-bit repeatable results (Polars' in-memory engine, about 2x slower on "
        "large logs). Default --fast: the streaming engine, whose parallel sums may differ in "
        "the last bit (~1e-16 relative) between runs.",
        show_default=False,
    ),
]
Backend = Annotated[
    str | None,
    typer.Option(
        "--backend",
        metavar="NAME",
        help=_choices("Where the arithmetic runs", BACKENDS),
        show_default=False,
    ),
]
Device = Annotated[
    str | None,
    typer.Option(
        "--device",
        metavar="DEVICE",
        help=_choices("The torch device", DEVICES),
        show_default=False,
    ),
]
Output = Annotated[
    str | None,
    typer.Option(
        "--output",
        "-o",
        metavar="PATH",
        help="Output file, or - for standard output. Default: <stem>.adv.<suffix> beside "
        "INPUT; standard output when INPUT is -.",
        show_default=False,
    ),
]
OutputFormat = Annotated[
    str | None,
    typer.Option(
        "--output-format",
        metavar="FORMAT",
        help="Output format: parquet, csv, jsonl or json. Default: from -o's suffix, "
        "else the input's format.",
        show_default=False,
    ),
]
SummaryPath = Annotated[
    Path | None,
    typer.Option(
        "--summary",
        metavar="PATH",
        help="Write the per-group table here (.csv, .parquet, .jsonl, .json or .md).",
        show_default=False,
    ),
]
By = Annotated[
    list[str] | None,
    typer.Option(
        "--by",
        metavar="COL",
        help="Per-step table by this column (repeat for several). Default: --batch-col, "
        "else step when the log has it.",
        show_default=False,
    ),
]
Force = Annotated[bool, typer.Option("--force", "-f", help="Overwrite existing output files.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing on stderr but errors.")]


def parse_floats(text: str, flag: str, count: int | None = None) -> tuple[float, ...]:
    """``"1,0.5"`` -> ``(1.0, 0.5)``; a clear error for anything else."""
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        example = "-10,10" if count == 2 else "1,0.5"
        raise OptionsError(
            f"{flag} needs comma-separated numbers, got {text!r}", hint=f"e.g. {flag} {example}"
        ) from None
    if count is not None and len(values) != count:
        raise OptionsError(
            f"{flag} needs {count} comma-separated numbers, got {text!r}",
            hint=f"e.g. {flag} -10,10",
        )
    return values


POLICY_PARAMS = (
    "group_col",
    "reward_col",
    "reward_weights",
    "aggregation",
    "estimator",
    "ddof",
    "eps",
    "eps_mode",
    "singleton",
    "nulls",
    "clip",
    "clip_stage",
    "batch_col",
    "group_size",
    "length_col",
    "token_weighted",
    "baseline_col",
    "step_rewards_col",
    "deterministic",
    "backend",
    "device",
)


REPORT_PARAMS = (
    "group_col",
    "reward_col",
    "reward_weights",
    "ddof",
    "nulls",
    "batch_col",
    "group_size",
    "advantage_col",
)


def report_fields(params: dict[str, Any]) -> dict[str, Any]:
    """The input and grouping options of ``summarize`` and ``plot`` (given ones only)."""
    return explicit_fields(**{name: params.get(name) for name in REPORT_PARAMS})


def policy_fields(params: dict[str, Any]) -> dict[str, Any]:
    """The policy options among a command's parameters, as option fields (given ones only)."""
    return explicit_fields(**{name: params[name] for name in POLICY_PARAMS})


def explicit_fields(**given: Any) -> dict[str, Any]:
    """The AdvantageOptions fields the user gave (None means not given)."""
    fields: dict[str, Any] = {}
    for name, value in given.items():
        if value is None or (isinstance(value, list) and not value):
            continue
        if name == "group_col":
            fields["group_cols"] = tuple(value)
        elif name == "reward_col":
            fields["reward_cols"] = tuple(value)
        elif name == "reward_weights":
            fields["reward_weights"] = parse_floats(value, "--reward-weights")
        elif name == "clip":
            fields["clip"] = parse_floats(value, "--clip", count=2)
        else:
            fields[name] = value
    return fields
