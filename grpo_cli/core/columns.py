"""Every temporary column grpo-adv adds, named once (all start with ``__grpo_``, never
reach an output nor a message), and the names that say what a log column holds."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import Final

PREFIX: Final = "__grpo_"
BATCH_KEY: Final = "__grpo_batch"  # the constant batch when there is no batch column
POSITION_KEY: Final = "__grpo_position"  # positional group index within the batch
GROUP_HASH: Final = "__grpo_group"  # 64-bit hash of the group key
CHECK_HASH: Final = "__grpo_check"  # a second, independent hash of it
CHECK_MAX: Final = "__grpo_check_max"  # per row, its group's largest CHECK_HASH
REWARD_KEY: Final = "__grpo_reward"  # the one reward the estimator sees
ROW_KEY: Final = "__grpo_row"  # a row's index in the input
ROW_HASH: Final = "__grpo_row_hash"  # repeated steps: a hash of a row's other columns
SIZE_KEY: Final = "__grpo_size"  # rows in the row's group
VALID_KEY: Final = "__grpo_valid"  # valid rewards in the row's group
CONSTANT_KEY: Final = "__grpo_constant"  # the row's group has zero variance
STAT_COUNT: Final = "__grpo_n"  # group statistics, one grouping pass
STAT_MEAN: Final = "__grpo_mean"
STAT_VAR: Final = "__grpo_var"
STEP_Z: Final = "__grpo_z"  # process supervision: a step's z-score
UID_GROUP: Final = "__grpo_uid_group"  # verl dumps: the uid without _session_index
SOURCE_KEY: Final = "__grpo_source"  # --out-dir: the input file a row came from
LOGGED_KEY: Final = "__grpo_logged_advantage"  # explain: the log's own advantage
RECOMPUTED_KEY: Final = "__grpo_recomputed"  # verify: the recomputed advantage
SPAN_ROW: Final = "__grpo_span_row"  # groups across steps: a row index
SPAN_VALUES: Final = "__grpo_span_values"  # groups across steps: distinct values
PART_ROW: Final = "__grpo_part_row"  # partitioned engine: input row index
PART_INDEX: Final = "__grpo_part"  # partitioned engine: partition of a row
PART_GROUP: Final = "__grpo_part_group"  # partitioned engine: spilled group hash
PART_CHECK: Final = "__grpo_part_check"  # partitioned engine: spilled check hash
RAY_LOCATOR: Final = "__grpo_locator"  # Ray engine: a row's piece and row number
RAY_PARTITION: Final = "__grpo_partition"  # Ray engine: a row's partition (or its piece)
RESPONSE_HASH: Final = "__grpo_response"  # partitioned and Ray engines: a response id's hash
UNUSED_OUTPUT: Final = "__grpo_unused"  # a stand-in output name for reading jobs
BATCH_STAT: Final = "__grpo_bstat"  # batch statistics from partials: see batch_stat_column
TORCH_RAW: Final = "__grpo_torch_raw"  # torch engine: the formula's value before policies


def user_columns(columns: Iterable[str]) -> list[str]:
    """The user's columns among ``columns``, in order: all but those grpo-adv adds
    (PREFIX). Only these are candidates for a role or listed in messages."""
    return [name for name in columns if not name.startswith(PREFIX)]


def span_flag_column(column: str) -> str:
    """The column flagging rows of groups that hold several values of ``column`` (see
    :func:`grpo_cli.core.plan.span_flag`; the engine adds it for the log's step column)."""
    return f"{SPAN_VALUES}:{column}"


def batch_stat_column(index: int, name: str) -> str:
    """The column of the batch statistic ``name`` of an estimator's ``index``-th batch
    input (see :mod:`grpo_cli.engines.batch_partials`)."""
    return f"{BATCH_STAT}{index}_{name}"


# Log columns that number training steps, in order of preference: groups should not span
# them (a warning).
STEP_COLUMNS: Final = (
    "step",
    "global_step",
    "training_step",
    "iteration",
    "batch",
    "batch_id",
    "epoch",
)

# Log columns that name one response, in order of preference: a value repeated within a
# group is a duplicated row (a warning). verl's ``uid`` is not among them: in verl's batch
# it names the prompt (every response of a group shares it); a verl dump's
# ``{uuid}_{session}_{index}`` names the response (see core.run_summary.response_id).
RESPONSE_IDS: Final = ("completion_id", "response_id", "sample_id")

# Names that say a log column holds response lengths (``num_tokens``, ``seq_len``) or numbers
# something (``sample_id``, ``seed``, ``epoch``).
LENGTH_NAME: Final = re.compile("len|tok", re.IGNORECASE)
COUNTER_NAME: Final = re.compile("(id|idx|index|step|seed|epoch|rank)$", re.IGNORECASE)


def not_a_reward(name: str) -> bool:
    """Whether a column's name says it holds no reward, whatever its type: a length, a
    token count or a counter (``num_tokens``, ``completion_length``, ``seed``,
    ``sample_id``) with no ``reward``, ``score``, ``penalty`` or ``bonus`` in it
    (``len_reward`` and ``length_penalty`` may be rewards)."""
    if re.search("reward|score|penalty|bonus", name, re.IGNORECASE):
        return False
    return bool(LENGTH_NAME.search(name) or COUNTER_NAME.search(name))


# The names a log's own advantage column goes by, in order of preference: grpo-adv's and
# TRL's ``advantage``, then ``advantages`` (verl's name for the advantage tensor).
LOGGED_ADVANTAGE: Final = ("advantage", "advantages")


def logged_advantage(columns: Collection[str], given: str | None = None) -> str:
    """The column holding a log's advantages: ``given`` when the user named one, else the
    first of ``LOGGED_ADVANTAGE`` the log has, else ``advantage`` (a raw log)."""
    if given is not None:
        return given
    return next((name for name in LOGGED_ADVANTAGE if name in columns), LOGGED_ADVANTAGE[0])


READABLE: Final = {UID_GROUP: "uid (verl)", POSITION_KEY: "group_index", BATCH_KEY: "batch"}


def readable(column: str) -> str:
    """How messages and tables name ``column``: a temporary key column by what it holds
    (verl's uid group is "uid (verl)"), any other column as it is."""
    return READABLE.get(column, column)
