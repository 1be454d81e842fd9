"""The narrow rows that an engine moving rows between pieces (the partitioned engine's
spills, the Ray engine's shuffle) moves, and how it computes on them.

Only what the formula reads crosses: the group key as two independent 64-bit hashes
(:data:`GROUP`, and :data:`CHECK` for the collision check), the reward, batch, length and
baseline columns, a row locator and a response id's hash (:func:`piece_repeats`). On a
hash collision, or when it needs the key's values, the engine moves the exact key columns.
After a shuffle by :data:`GROUP` every group lies whole in one piece, computed by the Polars
engine with the plan made once for the whole log (:func:`inner_plan`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Final

import polars as pl

from grpo_cli.core import metrics, progress
from grpo_cli.core.columns import PART_CHECK, PART_GROUP, PART_INDEX, RESPONSE_HASH
from grpo_cli.core.errors import InputError
from grpo_cli.core.grouping import with_profile
from grpo_cli.core.layouts import derived_column
from grpo_cli.core.options import AdvantageOptions
from grpo_cli.core.plan import Plan, resolve_keys, step_column
from grpo_cli.core.run_summary import Spanning, repeated_rows, response_expr

GROUP: Final = PART_GROUP
MERGE_EVERY: Final = 64  # pieces whose partials are kept before merging them
CHECK: Final = PART_CHECK


def needed_columns(options: AdvantageOptions, schema: Collection[str] | None = None) -> list[str]:
    """The columns the formula reads besides the group key (those in ``schema``, if given)."""
    names = [*options.reward_cols]
    for extra in (options.batch_col, options.length_col, options.baseline_col):
        if extra is not None:
            names.append(extra)
    return [n for n in dict.fromkeys(names) if schema is None or n in schema]


def read_columns(plan: Plan, derived: Sequence[str], response: str | None = None) -> list[str]:
    """The log's columns a piece must read: the key columns (or those a derived key is
    made from), :func:`needed_columns`', the ``response`` id column and the step column
    groups should not span (:func:`grpo_cli.core.plan.step_column`)."""
    sources: list[str] = []
    for column in plan.keys.exact:
        if column in derived:
            sources += derived_column(column).meta.root_names()
        else:
            sources.append(column)
    ids = [] if response is None else [response]
    step = step_column(plan)
    steps = [] if step is None else [step]
    return list(dict.fromkeys([*sources, *needed_columns(plan.options), *ids, *steps]))


def hashed_key(key_cols: Sequence[str]) -> list[pl.Expr]:
    """The key ``key_cols`` as GROUP and CHECK: two independent 64-bit hashes."""
    key = pl.struct(list(key_cols)) if len(key_cols) > 1 else pl.col(key_cols[0])
    return [key.hash(seed=0).alias(GROUP), key.hash(seed=1).alias(CHECK)]


def inner_plan(plan: Plan, group: tuple[str, ...], *, check_hash: bool) -> Plan:
    """``plan`` on narrow rows whose group key is ``group`` (GROUP, with CHECK when
    ``check_hash``; else the exact key columns); the reward may hold nulls."""
    inner_options = plan.options.with_overrides(group_cols=group)
    keys = resolve_keys(inner_options)
    if check_hash:
        keys = replace(keys, check=CHECK)
    return Plan(inner_options, plan.estimator, keys, has_nulls=True, engine=plan.engine)


def span_plan(plan: Plan, piece: pl.DataFrame, column: str | None) -> Plan:
    """``plan`` flagging, in its one grouping pass, the groups of ``piece`` that span
    ``column`` (:attr:`grpo_cli.core.plan.Plan.span_col`) where its values allow that
    (integers, no null); else ``plan`` (those groups are then found by grouping)."""
    values = None if column is None else piece.get_column(column)
    if values is None or not values.dtype.is_integer() or values.null_count():
        return plan
    return replace(plan, span_col=column)


def check_batch_spans(
    part: pl.DataFrame, options: AdvantageOptions, group: tuple[str, ...], *, uses_groups: bool
) -> None:
    """:func:`grpo_cli.core.run_summary.check_batch_spans` for one piece (every group whole
    in it)."""
    column = options.batch_col
    if column is None or column in options.group_cols or not uses_groups:
        return
    spanning = (
        part.group_by(list(group)).agg(pl.col(column).n_unique().alias("n")).filter(pl.col("n") > 1)
    )
    if spanning.height:
        key = ", ".join(options.group_cols)
        fix = " ".join(f"-g {c}" for c in (column, *options.group_cols))
        raise InputError(
            f"groups (by {key}) span several values of {column} (batch column): "
            f"at least {spanning.height} do",
            hint=f"group within each batch: {fix}",
        )


def piece_run_partials(
    full: pl.DataFrame, options: AdvantageOptions, group: tuple[str, ...]
) -> pl.DataFrame:
    """The run figures' partials (:mod:`grpo_cli.core.metrics`) of one annotated piece,
    unreduced."""
    rows = with_profile(full.lazy(), group, options.ddof)
    return metrics.partials(
        rows,
        ddof=options.ddof,
        advantage=pl.col(options.advantage_col),
        batch=(options.batch_col,) if options.batch_col is not None else (),
        reduce=False,
    )


def response_hash(column: str) -> pl.Expr:
    """The response id ``column`` as narrow rows move it (RESPONSE_HASH): a 64-bit hash,
    null for no id (see :func:`grpo_cli.core.run_summary.response_expr`)."""
    ids = response_expr(column)
    return pl.when(ids.is_not_null()).then(ids.hash(seed=2)).alias(RESPONSE_HASH)


def piece_repeats(full: pl.DataFrame, group: tuple[str, ...], row: str) -> tuple[int, int] | None:
    """The count of an annotated piece's rows that repeat a RESPONSE_HASH in their group,
    and the ``row`` column's value at the first; None without any."""
    count, at = repeated_rows(full, group, pl.col(RESPONSE_HASH))
    return None if at is None else (count, int(full.get_column(row)[at]))


def merge_repeats(found: Iterable[tuple[int, int] | None]) -> tuple[int, int] | None:
    """:func:`piece_repeats` of disjoint pieces as one: the counts add, the first in the
    input is the smallest row."""
    parts = [f for f in found if f is not None]
    return (sum(c for c, _ in parts), min(r for _, r in parts)) if parts else None


def merge_spans(found: Iterable[Spanning | None]) -> Spanning | None:
    """:func:`grpo_cli.core.run_summary.spanning_groups` of disjoint pieces (each group
    whole in one, by locator) as one: the counts add, the first is at the smallest
    locator."""
    parts = [f for f in found if f is not None]
    if not parts:
        return None
    first = min(parts, key=lambda f: f[1])
    return sum(f[0] for f in parts), first[1], first[2]


def spill_parts(
    rows: pl.LazyFrame, folder: Path, batch_rows: int, *, compression: str | None = None
) -> None:
    """Stream ``rows`` into ``folder`` (made here), ``batch_rows`` rows at a time: the rows
    of each value of their PART_INDEX column appended to ``{value}.arrow`` (without that
    column), input order kept within a file; rows done reported to
    :mod:`grpo_cli.core.progress`. Memory: one batch, whatever the count of files (Polars'
    partitioned sink buffered about 3 MB for each: 2.2 GiB at 500). ``compression``: see
    :func:`appending_writers`."""
    folder.mkdir()
    with appending_writers(compression) as write:
        for batch in rows.collect_batches(chunk_size=batch_rows):
            parts = batch.partition_by(PART_INDEX, as_dict=True, include_key=False)
            for (index,), part in parts.items():
                write(folder / f"{index}.arrow", part)
            progress.advance(batch.height)


@contextlib.contextmanager
def appending_writers(
    compression: str | None = None,
) -> Iterator[Callable[[Path, pl.DataFrame], None]]:
    """A function appending a frame to the Arrow IPC file at a path, each file opened at
    its first frame and all closed at the end: nothing is buffered here, whatever the count
    of files. ``compression``: the IPC buffers' codec (``"lz4"``, ``"zstd"``); None
    (``--low-memory``'s narrow rows: hashes and floats, which lz4 barely shrinks, at 10% of
    the run)."""
    from pyarrow import ipc

    writers: dict[Path, ipc.RecordBatchFileWriter] = {}
    options = ipc.IpcWriteOptions(compression=compression)

    def write(path: Path, frame: pl.DataFrame) -> None:
        table = frame.to_arrow()
        if path not in writers:
            writers[path] = ipc.new_file(path, table.schema, options=options)
        writers[path].write_table(table)

    try:
        yield write
    finally:
        for writer in writers.values():
            writer.close()


def keep_merging(
    parts: list[pl.DataFrame],
    part: pl.DataFrame,
    merge: Callable[[list[pl.DataFrame]], pl.DataFrame],
) -> None:
    """Add a piece's partials ``part`` to ``parts``, merged into one every MERGE_EVERY
    pieces: the partials held stay bounded however many pieces the log has."""
    parts.append(part)
    if len(parts) >= MERGE_EVERY:
        parts[:] = [merge(parts)]
