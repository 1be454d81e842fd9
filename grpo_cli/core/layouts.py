"""Trainer dump layouts, read as they are.

- ``verl``: the rollout dump ``{rollout_data_dir}/{step}.jsonl`` (verl 0.9
  ``_dump_generations``): fields ``input``, ``output``, ``gts``, ``score``, ``step`` (and
  ``uid`` in v1-trainer dumps, ``"{uuid}_{session}_{index}"``). Reward ``score``; batch
  ``step``; group: (``step``, the uid without its last two ``_``-separated parts), else
  (``step``, ``input``): verl computes advantages per training batch, so a uid sampled again
  in a later step is another group.
- ``trl``: ``completions/completions_{step:05d}.parquet`` (TRL >= 0.28 ``log_completions``):
  ``step``, ``prompt``, ``completion``, one float column per reward function, ``log_extra``
  columns, ``advantage``. No prompt id: groups are consecutive runs of ``--group-size``
  (num_generations) rows within a step; rewards default to every numeric column but
  ``step`` and ``advantage`` (name them with ``--reward-col`` when log_extra adds numbers).
  Without ``--group-size``, G is inferred (:func:`infer_group_size`); a generation TRL
  logs under several steps is counted once (:func:`once_per_generation`).

Any log, whatever its layout: groups form within each training step (:func:`within_steps`);
pooling a prompt sampled again in a later step into one group takes an explicit
``-g prompt_id``.

A layout only fills in what the user did not set explicitly.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final

import polars as pl

from grpo_cli.core.columns import ROW_HASH, STEP_COLUMNS, UID_GROUP, user_columns
from grpo_cli.core.errors import InputError, Message, OptionsError, Verbatim, option
from grpo_cli.core.options import DEFAULT_GROUP_COLS

TRL_NON_REWARD: Final = frozenset({"step", "advantage"})
TRL_PROMPT: Final = "prompt"
GROUP_SIZE_HINT: Final = (
    "pass "
    + option("group_size", Verbatim("G"))
    + " with your GRPOConfig num_generations (TRL's default is 8)"
)


@dataclass(frozen=True)
class PromptRun:
    """One run of consecutive rows with the same prompt (and batch value).

    Attributes:
        batch: the batch column's value in the run (None without a batch column).
        row: the run's first row, counting from 0 in the order read.
        length: rows in the run.
    """

    batch: Any
    row: int
    length: int


def prompt_runs(frame: pl.DataFrame, batch_col: str | None) -> list[PromptRun]:
    """The runs of consecutive rows of ``frame`` with equal TRL_PROMPT (two nulls are
    equal) and equal ``batch_col`` (a run never crosses a batch boundary), in order."""
    keys = [c for c in (batch_col, TRL_PROMPT) if c is not None and c in frame.columns]
    if not keys or frame.height == 0:
        return []
    batch = batch_col if batch_col is not None and batch_col in frame.columns else None
    runs = (
        frame.select(keys)
        .with_row_index("__row")
        .with_columns(pl.struct(keys).rle_id().alias("__run"))
        .group_by("__run", maintain_order=True)
        .agg(
            pl.col("__row").first(),
            pl.len().alias("__length"),
            (pl.col(batch).first() if batch else pl.lit(None)).alias("__batch"),
        )
    )
    return [
        PromptRun(batch=b, row=int(r), length=int(n))
        for b, r, n in zip(runs["__batch"], runs["__row"], runs["__length"], strict=True)
    ]


def runs_group_size(runs: list[PromptRun]) -> int | None:
    """The G the runs imply: the gcd of their lengths when it is at least 2 and some run
    has exactly that length (every run is then G rows, or a multiple: the same prompt
    sampled twice in a row makes a run of 2G), else None (no runs, or lengths with no such
    G: runs of 4 and 6 rows are a broken run, not groups of 2)."""
    if not runs:
        return None
    lengths = [run.length for run in runs]
    g = math.gcd(*lengths)
    return g if g >= 2 and g == min(lengths) else None


def infer_group_size(frame: pl.DataFrame, batch_col: str | None) -> tuple[int, Message]:
    """TRL's num_generations from a completions log (each prompt's G completions are
    one run of equal ``prompt`` within a step: :func:`runs_group_size`), and the warning
    that says so. No such G is an :class:`InputError` naming the first run that is no
    multiple of the commonest run length of 2 or more; an empty log an
    :class:`OptionsError`."""
    runs = prompt_runs(frame, batch_col)
    if not runs:
        raise OptionsError(
            "a TRL completions log has no prompt id, and this one has no rows to infer "
            "num_generations from",
            hint=GROUP_SIZE_HINT,
        )
    g = runs_group_size(runs)
    where = "runs of equal prompts (TRL num_generations)"
    if g is None:
        counts = Counter(run.length for run in runs if run.length >= 2)
        if not counts:
            raise InputError(
                "cannot infer "
                + option("group_size")
                + f": each of the {len(runs)} runs of equal {TRL_PROMPT!r} holds one row",
                hint=GROUP_SIZE_HINT,
            )
        expected = counts.most_common(1)[0][0]
        bad = next(run for run in runs if run.length % expected)
        step = "" if bad.batch is None else f"{batch_col} {bad.batch}, "
        raise InputError(
            "cannot infer "
            + option("group_size")
            + f": the run of equal {TRL_PROMPT!r} at {step}row "
            f"{bad.row} has {bad.length} rows, not a multiple of {expected} (the other runs)",
            hint=GROUP_SIZE_HINT,
        )
    lengths = sorted({run.length for run in runs})
    if len(lengths) > 1:
        shown = ", ".join(str(n) for n in lengths)
        where += f"; runs of {shown} rows: the same prompt sampled again in a row"
    return g, "inferred " + option("group_size", g) + f" from {where}"


def derived_column(name: str) -> pl.Expr:
    """A key column a layout derives from each row (named in ``apply_layout``'s derived
    list), as an expression: verl's uid group is the uid without its last two
    ``_``-separated parts (``_{session}_{index}``)."""
    if name != UID_GROUP:
        raise KeyError(name)
    return pl.col("uid").cast(pl.String).str.replace(r"(_[^_]*){1,2}$", "").alias(UID_GROUP)


def detect_layout(columns: Collection[str], layout: str | None) -> str | None:
    """``layout`` when a log of ``columns`` looks like that trainer's dump, else None."""
    if layout == "verl" and "score" in columns and ("uid" in columns or "input" in columns):
        return "verl"
    trl = {"step", "prompt", "completion"} <= {*columns} and "prompt_id" not in columns
    return "trl" if layout == "trl" and trl else None


def apply_layout(
    frame: pl.DataFrame,
    layout: str | None,
    fields: dict[str, Any],
    explicit: Collection[str],
    warnings: list[Message] | None = None,
) -> tuple[pl.DataFrame, dict[str, Any], list[str]]:
    """Fill in the option fields the dump ``layout`` that ``frame`` is in implies (as
    :func:`detect_layout` found it; None: nothing).

    Returns the frame (with any derived key column), the fields and the derived columns
    (to drop from the output). A TRL log without ``--group-size`` gets the G of
    :func:`infer_group_size`; ``warnings`` (when given) receives its warning line.
    """
    found = layout
    fields = dict(fields)
    derived: list[str] = []
    grouping_given = "group_cols" in explicit or "group_size" in explicit
    if found == "verl":
        if "reward_cols" not in explicit:
            fields["reward_cols"] = ("score",)
        if "batch_col" not in explicit and "step" in frame.columns:
            fields["batch_col"] = "step"
        if not grouping_given:
            if "uid" in frame.columns:
                frame = frame.with_columns(derived_column(UID_GROUP))
                batch = fields.get("batch_col")
                within = (batch,) if batch is not None and batch in frame.columns else ()
                fields["group_cols"] = (*within, UID_GROUP)
                derived.append(UID_GROUP)
            else:
                fields["group_cols"] = ("step", "input")
    elif found == "trl":
        if "batch_col" not in explicit:
            fields["batch_col"] = "step"
        if "reward_cols" not in explicit:
            schema = frame.schema
            numeric = [
                name
                for name in user_columns(schema)
                if schema[name].is_numeric() and name not in TRL_NON_REWARD
            ]
            if not numeric:
                raise OptionsError(
                    "found no reward columns in this TRL completions log",
                    hint="name them with " + option("reward_cols"),
                )
            fields["reward_cols"] = tuple(numeric)
        if not grouping_given:
            batch = fields.get("batch_col")
            fields["group_size"], warning = infer_group_size(frame, batch)
            if warnings is not None:
                warnings.append(warning)
    return frame, fields, derived


def within_steps(
    step: str | None, fields: dict[str, Any], explicit: Collection[str]
) -> dict[str, Any]:
    """``fields`` with the log's ``step`` column put first in the group key, as every
    trainer groups within a step: ``(step, prompt_id)``; not when the user named the
    grouping, the key holds a step column already, or the key is positional."""
    if "group_cols" in explicit or fields.get("group_size") is not None:
        return fields
    group_cols = tuple(fields.get("group_cols", DEFAULT_GROUP_COLS))
    if step is None or any(c in STEP_COLUMNS for c in group_cols):
        return fields
    return {**fields, "group_cols": (step, *group_cols)}


def repeated_steps(frame: pl.DataFrame, step_col: str = "step") -> list[Any]:
    """The values of ``step_col`` whose rows repeat, in order and to the last bit, the rows
    of the step logged before (every column but ``step_col``), in the order steps appear.
    A hash of each row finds the candidates; each is then checked exactly."""
    if step_col not in frame.columns or frame.height == 0 or frame.width < 2:
        return []
    others = [c for c in frame.columns if c != step_col]
    per_step = (
        frame.select(step_col, pl.struct(others).hash(7).alias(ROW_HASH))
        .group_by(step_col, maintain_order=True)
        .agg(ROW_HASH)
    )
    steps, hashes = per_step[step_col].to_list(), per_step[ROW_HASH].to_list()
    rows = frame.partition_by(step_col, as_dict=True, include_key=False, maintain_order=True)
    return [
        steps[i]
        for i in range(1, len(steps))
        if hashes[i] == hashes[i - 1]
        and rows[(steps[i],)].equals(rows[(steps[i - 1],)], null_equal=True)
    ]


def once_per_generation(
    frame: pl.DataFrame, preset_layout: str | None
) -> tuple[pl.DataFrame, str | None]:
    """A TRL completions log with each generation once: the steps that repeat the rows of
    the step before (TRL logs one generation under each of its ``steps_per_generation``
    steps when that exceeds the gradient accumulation) left out, and the warning line
    that says so; ``frame`` as it is, and None, for any other log."""
    if detect_layout(frame.columns, preset_layout) != "trl":
        return frame, None
    repeated = repeated_steps(frame)
    if not repeated:
        return frame, None
    shown = ", ".join(str(s) for s in repeated[:5]) + (" ..." if len(repeated) > 5 else "")
    warning = (
        f"{len(repeated)} step(s) repeat the rows of the step before ({shown}): TRL logs one "
        "generation under each of its steps_per_generation steps; each generation is counted "
        "once"
    )
    return frame.filter(~pl.col("step").is_in(repeated)), warning


# verl's estimators whose advantages vary along a response (see per_response).
TOKEN_LEVEL: Final = (
    "verl's gae or optimal_token_baseline, reinforce_plus_plus with gamma < 1, or KL in the "
    "reward under reinforce_plus_plus or remax"
)


def per_response(frame: pl.DataFrame, column: str) -> tuple[pl.DataFrame, str | None]:
    """``frame`` with a logged advantage ``column`` of one list per response (verl's
    advantage tensor: one value per token) read as one float per response: the value of
    its tokens when they all agree, as an outcome estimator's do (null and NaN tokens left
    out); null when they differ or none is valid. The second value is the one-line note
    naming the first row (from 0) whose tokens differ and how many responses do, or None. A column
    that is missing or not a list of numbers comes back as it is (the callers' checks name
    it)."""
    dtype = frame.schema.get(column)
    if not (isinstance(dtype, pl.List) and dtype.inner.is_numeric()):
        return frame, None
    spans = frame.select(
        low=pl.col(column).list.min().cast(pl.Float64),
        high=pl.col(column).list.max().cast(pl.Float64),
    )
    varies = spans["low"] != spans["high"]
    frame = frame.with_columns(pl.when(~varies).then(spans["low"]).alias(column))
    count = int(varies.sum())
    if not count:
        return frame, None
    row = int(varies.arg_true()[0])
    low, high = spans.row(row)
    more = f"; {count:,} responses do" if count > 1 else ""
    note = (
        f"input row {row}'s tokens differ in {column} ({low:g} to {high:g}{more}): "
        f"token-level advantages ({TOKEN_LEVEL}) cannot be compared per response; they are "
        "read as null"
    )
    return frame, note
