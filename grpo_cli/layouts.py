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

A layout only fills in what the user did not set explicitly.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final

import polars as pl

from grpo_cli.columns import UID_GROUP
from grpo_cli.errors import OptionsError

TRL_NON_REWARD: Final = frozenset({"step", "advantage"})


def derived_column(name: str) -> pl.Expr:
    """A key column a layout derives from each row (named in ``apply_layout``'s derived
    list), as an expression: verl's uid group is the uid without its last two
    ``_``-separated parts (``_{session}_{index}``)."""
    if name != UID_GROUP:
        raise KeyError(name)
    return pl.col("uid").cast(pl.String).str.replace(r"(_[^_]*){1,2}$", "").alias(UID_GROUP)


def detect_layout(frame: pl.DataFrame, layout: str | None) -> str | None:
    """``layout`` when ``frame`` looks like that trainer's dump, else None."""
    columns = set(frame.columns)
    if layout == "verl" and "score" in columns and ("uid" in columns or "input" in columns):
        return "verl"
    if (
        layout == "trl"
        and {"step", "prompt", "completion"} <= columns
        and ("prompt_id" not in columns)
    ):
        return "trl"
    return None


def apply_layout(
    frame: pl.DataFrame, layout: str | None, fields: dict[str, Any], explicit: Collection[str]
) -> tuple[pl.DataFrame, dict[str, Any], list[str]]:
    """Fill in the option fields a detected dump layout implies.

    Returns the frame (with any derived key column), the fields and the derived columns
    (to drop from the output).
    """
    found = detect_layout(frame, layout)
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
            numeric = [
                name
                for name, dtype in frame.schema.items()
                if dtype.is_numeric() and name not in TRL_NON_REWARD
            ]
            if not numeric:
                raise OptionsError(
                    "found no reward columns in this TRL completions log",
                    hint="name them with --reward-col",
                )
            fields["reward_cols"] = tuple(numeric)
        if not grouping_given:
            raise OptionsError(
                "a TRL completions log has no prompt id: groups are runs of num_generations rows",
                hint="pass --group-size G with your GRPOConfig num_generations (TRL's "
                "default is 8)",
            )
    return frame, fields, derived
