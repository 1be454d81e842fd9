"""The bad-input corpus: every file users feed grpo-adv by mistake (or on purpose), with the
exact stderr and exit code each must produce. Built by :func:`write_corpus` (binary and
compressed cases are easier to generate than to commit); ``python -m
tests.bad_inputs.corpus DIR`` writes the files for a look.

A case with ``exit_code`` 0 must simply work; ``check`` then names what to assert.
"""

from __future__ import annotations

import bz2
import gzip
import io
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

GOOD_CSV = b"prompt_id,reward\np1,1.0\np1,0.0\np2,0.5\np2,0.25\n"
GOOD_JSONL = (
    b'{"prompt_id":"p1","reward":1}\n{"prompt_id":"p1","reward":0.5}\n'
    b'{"prompt_id":"p2","reward":0}\n'
)


def _z(deviation: float, var: float) -> float:
    """GRPO's default advantage: deviation / (sqrt(var) + 1e-8)."""
    return deviation / (math.sqrt(var) + 1e-8)


PAIR = _z(0.5, 0.5)  # a group [1, 0]: mean 0.5, var (ddof 1) 0.5
GOOD_ADVANTAGES = [PAIR, -PAIR, _z(0.125, 0.03125), -_z(0.125, 0.03125)]
JSONL_ADVANTAGES = [_z(0.25, 0.125), -_z(0.25, 0.125), 0.0]
HINT_ONE_ROW = "hint: give a reward log with at least one row"
HINT_EMPTY = "hint: give a reward log with a header or JSON objects and at least one row"
HINT_JSON_LINE = 'hint: each line must be one JSON object, e.g. {"prompt_id": "p1", "reward": 1.0}'
HINT_NUMERIC = "hint: rewards must be numeric; check --reward-col, or convert the column"


@dataclass(frozen=True)
class Case:
    """One input file and what grpo-adv must do with it.

    ``stderr``: the exact error and hint lines (exit code != 0). ``advantages``: the exact
    advantage column for a case that works.
    """

    name: str
    data: bytes
    exit_code: int
    stderr: tuple[str, ...] = ()
    advantages: Sequence[float | None] | None = None
    args: tuple[str, ...] = field(default_factory=tuple)


def _parquet(csv: bytes) -> bytes:
    import polars as pl

    buffer = io.BytesIO()
    pl.read_csv(io.BytesIO(csv)).write_parquet(buffer)
    return buffer.getvalue()


def _zstd(data: bytes) -> bytes:
    import pyarrow as pa

    out = pa.BufferOutputStream()
    with pa.CompressedOutputStream(out, "zstd") as stream:
        stream.write(data)
    return bytes(out.getvalue().to_pybytes())


def _cut_with_footer(parquet: bytes) -> bytes:
    """A Parquet file cut in the middle of its data, its footer re-appended: the magic
    bytes and the footer look right, the column chunks lie past the end of the data."""
    footer = int.from_bytes(parquet[-8:-4], "little") + 8
    return parquet[: (len(parquet) - footer) // 2] + parquet[-footer:]


def _damaged_page(parquet: bytes) -> bytes:
    """A Parquet file whose last column chunk has its last 12 bytes damaged."""
    import pyarrow.parquet as pq

    chunk = pq.read_metadata(io.BytesIO(parquet)).row_group(0).column(1)
    end = (chunk.dictionary_page_offset or chunk.data_page_offset) + chunk.total_compressed_size
    damaged = bytearray(parquet)
    for i in range(end - 12, end):
        damaged[i] ^= 0x5A
    return bytes(damaged)


def _duplicate_columns_parquet() -> bytes:
    """A Parquet file with two columns named ``reward`` (pyarrow writes it; Polars cannot)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = [pa.array(["p1", "p1"]), pa.array([1.0, 0.0]), pa.array([2.0, 3.0])]
    buffer = io.BytesIO()
    pq.write_table(pa.table(columns, names=["prompt_id", "reward", "reward"]), buffer)
    return buffer.getvalue()


HINT_PARQUET = "hint: the file may be truncated or not Parquet; pass --format to read it as another"
HINT_TEXT = (
    "hint: csv, jsonl and json logs are UTF-8 text; for parquet or arrow, name the file "
    ".parquet or .arrow or pass --format parquet or arrow"
)
HINT_DAMAGED = "hint: the file is truncated or damaged: write it again"
CUT_CAUSE = (
    "row group 0, column reward: its data lies outside the file (bytes 130..203 of 708); "
    "the file is truncated or corrupt"
)
DEEP = b"[" * 100_000 + b"]" * 100_000  # RecursionError in Python's json module
DAMAGED_CAUSE = "parquet: File out of specification: zstd error: Data corruption detected"
WIDE_HEADER = b",".join(b"column_%d" % i for i in range(120_000)) + b"\nrow\n"  # 1.3 MB
HINT_FIRST_LINE = (
    "hint: a CSV log's first line names its columns; a JSONL log holds one JSON object per line"
)
HINT_UNIQUE = "hint: rename the columns so that every name is unique"


def kind_cases() -> list[Case]:
    """JSONL fields whose values differ in kind from line to line: rewards mixing numbers,
    numbers written as text and booleans, a reward with an object or a list among them,
    and an extra field no one type fits (carried through as JSON text)."""
    return [
        Case(  # each kind read as it is on its own: true 1, "0.5" 0.5
            "mixed_kind_rewards.jsonl",
            b'{"prompt_id":"p1","reward":true}\n{"prompt_id":"p1","reward":"0.5"}\n'
            b'{"prompt_id":"p2","reward":0}\n',
            0,
            advantages=JSONL_ADVANTAGES,
        ),
        Case(  # no text: Polars alone refuses a boolean among numbers
            "bool_and_number_rewards.jsonl",
            b'{"prompt_id":"p1","reward":true}\n{"prompt_id":"p1","reward":0.5}\n'
            b'{"prompt_id":"p2","reward":0}\n',
            0,
            advantages=JSONL_ADVANTAGES,
        ),
        Case(
            "object_among_rewards.jsonl",
            b'{"prompt_id":"p1","reward":1}\n{"prompt_id":"p1","reward":true}\n'
            b'{"prompt_id":"p2","reward":{"a": 0}}\n{"prompt_id":"p2","reward":"x"}\n',
            3,
            (
                "error: reward column 'reward' holds String values, not numbers "
                """(row 2: '{"a": 0}')""",
                HINT_NUMERIC,
            ),
        ),
        Case(
            "list_among_rewards.jsonl",
            b'{"prompt_id":"p1","reward":1}\n{"prompt_id":"p1","reward":true}\n'
            b'{"prompt_id":"p2","reward":[0]}\n',
            3,
            (
                "error: reward column 'reward' holds String values, not numbers (row 2: '[0]')",
                HINT_NUMERIC,
            ),
        ),
        Case(  # an extra field no one type fits: carried through as JSON text
            "mixed_kind_extra_field.jsonl",
            b'{"prompt_id":"p1","reward":1,"info":{"a":1,"b":2,"c":3}}\n'
            b'{"prompt_id":"p1","reward":0.5,"info":[1,2]}\n'
            b'{"prompt_id":"p2","reward":0,"info":{"a":[1],"b":2,"c":3}}\n',
            0,
            advantages=JSONL_ADVANTAGES,
        ),
    ]


def cases() -> list[Case]:
    """The corpus (see the module docstring)."""
    parquet = _parquet(GOOD_CSV)
    return [
        Case("empty.csv", b"", 3, ("error: empty.csv is empty", HINT_EMPTY)),
        Case("empty.jsonl", b"\n\n", 3, ("error: empty.jsonl is empty", HINT_EMPTY)),
        Case(
            "header_only.csv",
            b"prompt_id,reward\n",
            3,
            ("error: header_only.csv has no rows (columns: prompt_id, reward)", HINT_ONE_ROW),
        ),
        Case(
            "no_group_column.csv",
            b"id,reward\np1,1\n",
            3,
            (
                "error: group column 'prompt_id' not found; the input has columns: id, reward",
                "hint: choose the group column with --group-col, e.g. --group-col id",
            ),
        ),
        Case(
            "no_reward_column.csv",
            b"prompt_id,score_x\np1,1\n",
            3,
            (
                "error: reward column 'reward' not found; the input has columns: prompt_id, "
                "score_x",
                "hint: choose the reward column with --reward-col, e.g. --reward-col score_x",
            ),
        ),
        Case(
            "text_reward.csv",
            b"prompt_id,reward\np1,1\np1,abc\n",
            3,
            (
                "error: reward column 'reward' holds String values, not numbers (row 1: 'abc')",
                HINT_NUMERIC,
            ),
        ),
        Case(
            "bool_reward.jsonl",
            b'{"prompt_id":"p1","reward":true}\n{"prompt_id":"p1","reward":false}\n',
            0,
            advantages=[PAIR, -PAIR],
        ),
        Case(
            "nested_reward.jsonl",
            b'{"prompt_id":"p1","reward":{"a":1}}\n{"prompt_id":"p1","reward":{"a":0}}\n',
            3,
            (
                "error: reward column 'reward' holds Struct({'a': Int64}) values, not numbers",
                HINT_NUMERIC,
            ),
        ),
        Case(
            "mixed_int_float.jsonl",
            b'{"prompt_id":"p1","reward":1}\n{"prompt_id":"p1","reward":0.5}\n'
            b'{"prompt_id":"p2","reward":0}\n',
            0,
            advantages=JSONL_ADVANTAGES,
        ),
        Case(
            "numbers_as_strings.jsonl",
            b'{"prompt_id":"p1","reward":"1"}\n{"prompt_id":"p1","reward":"0.5"}\n'
            b'{"prompt_id":"p2","reward":"0"}\n',
            0,
            advantages=JSONL_ADVANTAGES,
        ),
        Case(
            "infinite.csv",
            b"prompt_id,reward\np1,inf\np1,1\np2,-inf\np2,0\n",
            3,
            (
                "error: 2 row(s) have an infinite reward (reward)",
                "hint: rewards must be finite: clip them, or make them null to leave those "
                "rows out",
            ),
        ),
        Case(
            "huge.csv",
            b"prompt_id,reward\np1,1e200\np1,2e200\n",
            3,
            (
                "error: 2 row(s) have a reward of magnitude 1e+140 or more (reward): "
                "their squares overflow float64",
                "hint: rescale the rewards (advantages do not depend on the scale, up to eps)",
            ),
        ),
        Case(
            "json_infinity.jsonl",
            b'{"prompt_id":"p1","reward":1}\n{"prompt_id":"p1","reward":-Infinity}\n',
            3,
            (
                "error: json_infinity.jsonl line 2: -Infinity is not JSON",
                "hint: write null for a missing reward, or a finite number",
            ),
        ),
        Case(
            "nan.csv",
            b"prompt_id,reward\np1,NaN\np1,1\np1,0\n",
            0,
            advantages=[None, PAIR, -PAIR],
        ),
        Case(
            "null_key.csv",
            b"prompt_id,reward\n,1\np1,0\n",
            3,
            (
                "error: 1 row(s) have a null group or batch key (prompt_id)",
                "hint: every response needs the id of its prompt; fill or drop those rows first",
            ),
        ),
        Case(
            "duplicate_columns.csv",
            b"prompt_id,reward,reward\np1,1,2\n",
            3,
            (
                "error: duplicate_columns.csv has more than one column named 'reward'",
                HINT_UNIQUE,
            ),
        ),
        Case(
            "duplicate_columns.parquet",
            _duplicate_columns_parquet(),
            3,
            (
                "error: duplicate_columns.parquet has more than one column named 'reward'",
                HINT_UNIQUE,
            ),
        ),
        Case(
            "duplicate_columns_lowmem.parquet",
            _duplicate_columns_parquet(),
            3,
            (
                "error: duplicate_columns_lowmem.parquet has more than one column named 'reward'",
                HINT_UNIQUE,
            ),
            args=("--low-memory",),
        ),
        Case(
            "wide_header.csv",
            WIDE_HEADER,
            3,
            (
                "error: wide_header.csv is not a reward log: the header line of a CSV log is "
                "longer than 1 MiB",
                HINT_FIRST_LINE,
            ),
        ),
        Case("utf8_bom.csv", b"\xef\xbb\xbf" + GOOD_CSV, 0, advantages=GOOD_ADVANTAGES),
        Case("crlf.csv", GOOD_CSV.replace(b"\n", b"\r\n"), 0, advantages=GOOD_ADVANTAGES),
        Case(
            "quoted_newline.csv",
            b'prompt_id,completion,reward\np1,"line one\nline two",1\np1,"x, y",0\n',
            0,
            advantages=[PAIR, -PAIR],
        ),
        Case("semicolons.csv", GOOD_CSV.replace(b",", b";"), 0, advantages=GOOD_ADVANTAGES),
        Case("tabs.tsv", GOOD_CSV.replace(b",", b"\t"), 0, advantages=GOOD_ADVANTAGES),
        Case(
            "truncated_last_line.jsonl",
            GOOD_JSONL + b'{"prompt_id":"p2","rew',
            3,
            (
                "error: truncated_last_line.jsonl line 4: malformed JSON (Unterminated string "
                "starting at)",
                HINT_JSON_LINE,
            ),
        ),
        Case(
            "blank_line.jsonl",
            GOOD_JSONL.replace(b"\n", b"\n\n", 1) + b"\n",
            0,
            advantages=JSONL_ADVANTAGES,
        ),
        Case(
            "non_object_line.jsonl",
            GOOD_JSONL + b"[1, 2]\n",
            3,
            (
                "error: non_object_line.jsonl line 4: expected a JSON object, got list",
                HINT_JSON_LINE,
            ),
        ),
        Case(
            "truncated.parquet",
            parquet[: len(parquet) // 2],
            3,
            (
                "error: truncated.parquet is not a complete Parquet file (no PAR1 footer: "
                "truncated?)",
                "hint: write the file again, or pass --format if it is not Parquet",
            ),
        ),
        Case(
            "cut_footer_kept.parquet",
            _cut_with_footer(parquet),
            3,
            (f"error: cannot read cut_footer_kept.parquet as parquet: {CUT_CAUSE}", HINT_PARQUET),
        ),
        Case(
            "cut_footer_kept_lowmem.parquet",
            _cut_with_footer(parquet),
            3,
            (
                f"error: cannot read cut_footer_kept_lowmem.parquet as parquet: {CUT_CAUSE}",
                HINT_DAMAGED,
            ),
            args=("--low-memory",),
        ),
        Case(
            "damaged_page.parquet",
            _damaged_page(parquet),
            3,
            (f"error: cannot read damaged_page.parquet as parquet: {DAMAGED_CAUSE}", HINT_PARQUET),
        ),
        Case(
            "damaged_page_lowmem.parquet",
            _damaged_page(parquet),
            3,
            (
                f"error: cannot read damaged_page_lowmem.parquet as parquet: {DAMAGED_CAUSE}",
                HINT_DAMAGED,
            ),
            args=("--low-memory",),
        ),
        Case(
            "deep_nesting.jsonl",
            GOOD_JSONL + b'{"prompt_id": "p3", "reward": ' + DEEP + b"}\n",
            3,
            ("error: deep_nesting.jsonl line 4: JSON nested too deeply to read", HINT_JSON_LINE),
        ),
        Case(
            "binary.csv",
            bytes(range(256)) * 4,
            3,
            (
                "error: binary.csv is not UTF-8 text (byte 0x80 at offset 128)",
                HINT_TEXT,
            ),
        ),
        Case("gzip.csv.gz", gzip.compress(GOOD_CSV), 0, advantages=GOOD_ADVANTAGES),
        Case("gzip.jsonl.gz", gzip.compress(GOOD_JSONL), 0, advantages=JSONL_ADVANTAGES),
        Case("zstd.csv.zst", _zstd(GOOD_CSV), 0, advantages=GOOD_ADVANTAGES),
        Case("bzip2.jsonl.bz2", bz2.compress(GOOD_JSONL), 0, advantages=JSONL_ADVANTAGES),
        Case(
            "corrupt.csv.gz",
            gzip.compress(GOOD_CSV)[:20],
            3,
            (
                "error: cannot decompress corrupt.csv.gz (gzip): the data is truncated or corrupt",
                "hint: check the file (gzip -t), or decompress it yourself",
            ),
        ),
    ]


def write_corpus(folder: Path) -> dict[str, Path]:
    """Write every case's file into ``folder``; also an empty folder and return the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for case in cases():
        path = folder / case.name
        path.write_bytes(case.data)
        paths[case.name] = path
    return paths


if __name__ == "__main__":  # pragma: no cover
    write_corpus(Path(sys.argv[1]))
