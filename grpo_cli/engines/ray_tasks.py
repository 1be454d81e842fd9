"""The Ray engine's tasks: what runs on the cluster's workers (see
:mod:`grpo_cli.engines.ray`). This module imports Ray; workers import it by name."""

from __future__ import annotations

import io as _io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl
from ray.data import Datasink

from grpo_cli.core import metrics
from grpo_cli.core.columns import PREFIX
from grpo_cli.core.plan import Plan, make_plan, run_with_fallback
from grpo_cli.engines.batch_partials import applied, piece_partials, with_batch_stats
from grpo_cli.engines.polars import ENGINE as POLARS
from grpo_cli.io.formats import PARQUET_ZSTD_LEVEL

if TYPE_CHECKING:
    import pyarrow as pa


def _polars(table: pa.Table) -> pl.DataFrame:
    return pl.DataFrame(pl.from_arrow(table))


@dataclass(frozen=True)
class Derive:
    """Adds the key columns a dump layout derives from each row."""

    names: tuple[str, ...]

    def __call__(self, table: pa.Table) -> pa.Table:
        from grpo_cli.core.layouts import derived_column

        frame = _polars(table).with_columns([derived_column(n) for n in self.names])
        return frame.to_arrow()


@dataclass(frozen=True)
class ReadText:
    """Reads one JSONL or CSV file (a row ``{"path": ...}``) with grpo-adv's reader."""

    fmt: str
    key_cols: tuple[str, ...]
    derived: tuple[str, ...]

    def __call__(self, table: pa.Table) -> pa.Table:
        from grpo_cli.core.layouts import derived_column
        from grpo_cli.io.read import read_rewards

        path = Path(str(table.column("path")[0].as_py()))
        strings = [c for c in self.key_cols if not c.startswith(PREFIX)]
        frame = read_rewards(path, self.fmt, string_cols=strings).frame
        if self.derived:
            frame = frame.with_columns([derived_column(n) for n in self.derived])
        return frame.to_arrow()


def _piece_plan(piece: pl.DataFrame, plan: Plan) -> Plan:
    """The plan for one block: its values checked (every row is checked once, in its
    block), its nulls noted."""
    return make_plan(piece, plan.options)


@dataclass(frozen=True)
class BatchPartials:
    """One block's batch partials (see :mod:`grpo_cli.engines.batch_partials`)."""

    plan: Plan

    def __call__(self, table: pa.Table) -> pa.Table:
        if not table.num_rows:
            return table.slice(0, 0).select([])
        piece = _polars(table)
        return piece_partials(piece, _piece_plan(piece, self.plan)).to_arrow()


class PartSink(Datasink[list[bytes]]):
    """A Ray Data datasink: annotates each block (a whole shuffle partition), writes it as
    one Parquet part file named by its write task, and returns the block's run partials
    (Arrow IPC bytes), which the driver keeps in :attr:`partials`."""

    def __init__(
        self,
        folder: str,
        plan: Plan,
        stats: pl.DataFrame | None,
        derived: Sequence[str],
        groups: str | None,
    ) -> None:
        self.folder = folder
        self.plan = plan
        self.stats = stats
        self.derived = tuple(derived)
        self.groups = groups
        self.partials: list[pl.DataFrame] = []

    # Ray Data's Datasink interface -------------------------------------------------
    def on_write_start(self, schema: Any = None) -> None:
        """Nothing to prepare: the folder exists."""

    def write(self, blocks: Iterable[pa.Table], ctx: Any) -> list[bytes]:
        """Annotate and write each block; its partials as Arrow IPC bytes."""
        out: list[bytes] = []
        for index, table in enumerate(blocks):
            if not table.num_rows:
                continue
            name = f"part-{ctx.task_idx:05d}-{index:03d}.parquet"
            partial = self._annotate(_polars(table), name)
            buffer = _io.BytesIO()
            partial.write_ipc(buffer)
            out.append(buffer.getvalue())
        return out

    def on_write_complete(self, write_result: Any) -> None:
        """Keep every task's partials (on the driver)."""
        for returned in write_result.write_returns:
            self.partials += [pl.read_ipc(_io.BytesIO(b)) for b in returned or ()]

    def on_write_failed(self, error: Exception) -> None:
        """Nothing to undo here: the caller removes the whole folder."""

    def get_name(self) -> str:
        """The name Ray Data shows for the write."""
        return "grpo-adv"

    @property
    def supports_distributed_writes(self) -> bool:
        """Tasks write their parts on the nodes where they run."""
        return True

    @property
    def min_rows_per_write(self) -> int | None:
        """Blocks are written as they come (each is a whole partition)."""
        return None

    @property
    def min_bytes_per_write(self) -> int | None:
        """Blocks are written as they come."""
        return None

    # -------------------------------------------------------------------------------
    def _annotate(self, piece: pl.DataFrame, name: str) -> pl.DataFrame:
        from grpo_cli.core.grouping import with_profile
        from grpo_cli.core.run_summary import check_batch_spans, group_table

        columns = [c for c in piece.columns if c not in self.derived]
        plan = _piece_plan(piece, self.plan)
        stats = self.stats
        if stats is not None:
            piece = with_batch_stats(piece, plan, stats)

        def annotate(chosen: Plan) -> pl.DataFrame:
            return POLARS.annotate(piece, chosen if stats is None else applied(chosen))

        full, used = run_with_fallback(annotate, plan)
        options = plan.options
        check_batch_spans(full, used)
        written = pl.DataFrame([full.get_column(c) for c in (*columns, *options.added_columns())])
        written.write_parquet(
            Path(self.folder) / name, compression="zstd", compression_level=PARQUET_ZSTD_LEVEL
        )
        if self.groups is not None:
            table = group_table(full.lazy(), used)
            table.write_parquet(
                Path(self.groups) / name, compression="zstd", compression_level=PARQUET_ZSTD_LEVEL
            )
        rows = with_profile(full.lazy(), used.keys.group, options.ddof)
        return metrics.partials(
            rows,
            ddof=options.ddof,
            advantage=pl.col(options.advantage_col),
            batch=(options.batch_col,) if options.batch_col is not None else (),
        )
