"""Format detection, reading with clear errors, and safe (atomic) writing."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from grpo_cli.cli import app
from grpo_cli.core.errors import InputError, OptionsError, OutputError
from grpo_cli.io.atomic import atomic_write
from grpo_cli.io.formats import (
    DATA_FORMATS,
    FORMATS,
    default_output_path,
    describe,
    format_from_suffix,
    normalize_format,
    output_format_for,
    sniff_format,
)
from grpo_cli.io.read import read_rewards
from grpo_cli.io.write import check_output_path, frame_to_markdown, write_frame
from tests.conftest import SAMPLE_FILES, cli_error, import_or_skip


@pytest.mark.parametrize(
    ("head", "fmt"),
    [
        (b"PAR1\x15\x04", "parquet"),
        (b'{"prompt_id": "a"}\n', "jsonl"),
        (b'\xef\xbb\xbf  \n{"a": 1}', "jsonl"),
        (b'[{"a": 1}]', "json"),
        (b"prompt_id,reward\n", "csv"),
        (b"ARROW1\x00\x00", "arrow"),
        (b"\xff\xff\xff\xff\xa8\x00", "arrow"),  # an IPC stream (a Hugging Face cache file)
    ],
)
def test_sniff_format(head: bytes, fmt: str) -> None:
    assert sniff_format(head) == fmt


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("a.parquet", "parquet"),
        ("a.PQ", "parquet"),
        ("a.csv", "csv"),
        ("a.jsonl", "jsonl"),
        ("a.ndjson", "jsonl"),
        ("a.json", None),
        ("a.arrow", "arrow"),
        ("a.feather", "arrow"),
        ("a.IPC.gz", "arrow"),
        ("a.log", None),
        ("a", None),
    ],
)
def test_format_from_suffix(name: str, fmt: str | None) -> None:
    assert format_from_suffix(Path(name)) == fmt


@pytest.mark.parametrize("fmt", DATA_FORMATS)
def test_every_format_of_the_registry_round_trips(fmt: str, tmp_path: Path) -> None:
    """Each format's writer, sniffing, suffix and reader agree: what is written reads back
    equal, by its suffix and by its content alone (standard input)."""
    frame = pl.DataFrame({"prompt_id": ["a", "a", "b"], "reward": [1.0, 0.5, -2.25]})
    sink = io.BytesIO()
    write_frame(frame, sink, fmt)
    data = sink.getvalue()
    assert sniff_format(data[:4096]) == fmt
    for suffix in FORMATS[fmt].suffixes:
        path = tmp_path / f"log{suffix}"
        path.write_bytes(data)
        assert format_from_suffix(path, written=True) == fmt
        assert format_from_suffix(path) == (fmt if FORMATS[fmt].by_suffix else None)
        log = read_rewards(path, string_cols=["prompt_id"])
        assert (log.format, log.frame.to_dicts()) == (fmt, frame.to_dicts())
    sniffed = read_rewards(io.BytesIO(data), string_cols=["prompt_id"])
    assert (sniffed.format, sniffed.frame.to_dicts()) == (fmt, frame.to_dicts())
    for alias in FORMATS[fmt].aliases:
        assert normalize_format(alias.upper()) == fmt


@pytest.mark.parametrize("fmt", sorted(SAMPLE_FILES))
def test_reads_each_sample_format_alike(fmt: str) -> None:
    log = read_rewards(SAMPLE_FILES[fmt], string_cols=["prompt_id"])
    reference = pl.read_parquet(SAMPLE_FILES["parquet"])
    assert log.format == fmt
    assert log.frame.equals(reference)


ARROW_FORMS: dict[str, Callable[[pl.DataFrame, Path], object]] = {
    "file.arrow": pl.DataFrame.write_ipc,
    "file.feather": pl.DataFrame.write_ipc,
    "file.data": pl.DataFrame.write_ipc,  # no suffix that names it: by its content
    "stream.arrow": pl.DataFrame.write_ipc_stream,  # as Hugging Face datasets caches
    "stream.data": pl.DataFrame.write_ipc_stream,
}
ENGINES = {"polars": [], "torch": ["--backend", "torch"], "low-memory": ["--low-memory"]}


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("form", sorted(ARROW_FORMS))
def test_arrow_ipc_inputs_give_what_parquet_gives(
    runner: CliRunner, tmp_path: Path, engine: str, form: str
) -> None:
    """An Arrow IPC file or stream, by suffix or by content, gives every engine the
    numbers the same log gives as Parquet; --low-memory scans a file and refuses a stream,
    which it cannot read lazily."""
    if engine == "torch":
        import_or_skip("torch")
    source = tmp_path / form
    ARROW_FORMS[form](pl.read_parquet(SAMPLE_FILES["parquet"]), source)
    expected, out = tmp_path / "expected.parquet", tmp_path / "out.parquet"
    for log, target in ((SAMPLE_FILES["parquet"], expected), (source, out)):
        result = runner.invoke(app, ["compute", str(log), "-o", str(target), *ENGINES[engine]])
        if engine == "low-memory" and form.startswith("stream") and log == source:
            assert result.exit_code == 2
            assert result.stderr.startswith(
                f"error: --low-memory needs a parquet or arrow input; {source} is not one it "
                "can scan (compressed, text or a stream?)"
            )
            return
        assert result.exit_code == 0, result.output
    got, want = pl.read_parquet(out), pl.read_parquet(expected)
    assert got["advantage"].null_count() == want["advantage"].null_count() == 1
    assert_frame_equal(got, want, rel_tol=1e-12, abs_tol=1e-15)


def test_arrow_ipc_outputs(runner: CliRunner, tmp_path: Path) -> None:
    """Arrow IPC is written by -o's suffix, --output-format, beside an Arrow input (its
    suffix kept) and as the --summary table; never to a terminal; --low-memory writes
    Parquet only."""
    arrow = tmp_path / "log.feather"
    pl.read_parquet(SAMPLE_FILES["parquet"]).write_ipc(arrow)
    result = runner.invoke(app, ["compute", str(arrow), "--summary", str(tmp_path / "g.ipc")])
    assert result.exit_code == 0, result.output
    reference, groups = tmp_path / "ref.parquet", tmp_path / "g.parquet"
    args = ["compute", str(arrow), "-o", str(reference), "--summary", str(groups)]
    assert runner.invoke(app, args).exit_code == 0
    want = pl.read_parquet(reference)
    assert_frame_equal(pl.read_ipc(tmp_path / "log.adv.feather"), want, rel_tol=1e-12)
    assert_frame_equal(pl.read_ipc(tmp_path / "g.ipc"), pl.read_parquet(groups), rel_tol=1e-12)
    piped = runner.invoke(
        app, ["compute", str(SAMPLE_FILES["csv"]), "-o", "-", "--output-format", "ipc"]
    )
    assert piped.exit_code == 0 and piped.stdout_bytes.startswith(b"ARROW1")
    assert_frame_equal(pl.read_ipc(io.BytesIO(piped.stdout_bytes)), want, rel_tol=1e-12)
    refused = runner.invoke(
        app, ["compute", str(arrow), "-o", str(tmp_path / "o.arrow"), "--low-memory"]
    )
    assert refused.exit_code == 2
    assert refused.stderr.startswith("error: --low-memory writes Parquet (zstd-compressed inside)")


def test_content_decides_when_the_suffix_says_nothing(tmp_path: Path) -> None:
    for fmt, source in SAMPLE_FILES.items():
        target = tmp_path / f"log_{fmt}.data"
        target.write_bytes(source.read_bytes())
        assert read_rewards(target).format == fmt
    as_json = tmp_path / "lines.json"
    as_json.write_bytes(SAMPLE_FILES["jsonl"].read_bytes())
    assert read_rewards(as_json).format == "jsonl"
    array = tmp_path / "array.json"
    array.write_text('[{"prompt_id": "a", "reward": 1}, {"prompt_id": "a", "reward": 0.5}]')
    log = read_rewards(array)
    assert (log.format, log.frame["reward"].to_list()) == ("json", [1.0, 0.5])


def test_csv_group_keys_stay_text(tmp_path: Path) -> None:
    path = tmp_path / "ids.csv"
    path.write_text("prompt_id,reward\n007,1\n7,0\n")
    frame = read_rewards(path, string_cols=["prompt_id"]).frame
    assert frame["prompt_id"].to_list() == ["007", "7"]


def test_reads_a_stream() -> None:
    log = read_rewards(
        io.BytesIO(b'{"prompt_id":"a","reward":1}\n{"prompt_id":"a","reward":2.5}\n')
    )
    assert (log.format, log.source, log.frame["reward"].to_list()) == (
        "jsonl",
        "<stdin>",
        [1.0, 2.5],
    )


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        (b"", "empty.csv", "{path} is empty"),
        (b"  \n", "blank.jsonl", "{path} is empty"),
        (b"prompt_id,reward\n", "header.csv", "{path} has no rows (columns: prompt_id, reward)"),
        (
            b'{"prompt_id":"a","reward":1}\n{"prompt_id":"a","reward":\n{"x":1}\n',
            "bad.jsonl",
            "{path} line 2: malformed JSON (Expecting value)",
        ),
        (
            b'{"prompt_id":"a","reward":1}\n\n[1, 2]\n',
            "list.jsonl",
            "{path} line 3: expected a JSON object, got list",
        ),
        (
            b"PAR1\x00\x00",
            "cut.parquet",
            "{path} is not a complete Parquet file (no PAR1 footer: truncated?)",
        ),
        (
            b"prompt_id,reward\na,1\n",
            "csv.parquet",
            "{path} is not Parquet (it looks like CSV text)",
        ),
        (b'{"prompt_id":"a"}\n', "json.parquet", "{path} is not Parquet (it looks like JSON text)"),
        (b"\x00\x01garbage", "bin.parquet", "{path} is not Parquet (it does not start with PAR1)"),
        (
            b"prompt_id,reward\na,1\n",
            "csv.arrow",
            "cannot read {path} as arrow: it does not start with ARROW1 or 0xffffffff",
        ),
        (
            b"ARROW1\x00\x00\xff",
            "cut.feather",
            "cannot read {path} as arrow: invalid seek to a negative or overflowing position",
        ),
    ],
)
def test_read_errors(tmp_path: Path, content: bytes, name: str, message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(InputError) as info:
        read_rewards(path)
    assert info.value.message == message.format(path=path)
    assert info.value.exit_code == 3


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        read_rewards(tmp_path / "nope.csv")
    assert info.value.message == f"no such file: {tmp_path / 'nope.csv'}"
    assert info.value.hint == "check the path, or give - to read standard input"
    with pytest.raises(InputError) as info:
        read_rewards(tmp_path)
    assert info.value.message == f"{tmp_path} is a directory, not a file"


def _claiming_rows(path: Path, rows: int) -> None:
    """Rewrite the Parquet file ``path``'s footer to claim ``rows`` rows (FileMetaData's
    field 3, after its version and schema, in Thrift's compact protocol)."""
    from grpo_cli.io.read import _thrift

    data = path.read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    meta = data[-8 - length : -8]
    assert meta[0] == 0x15  # field 1, i32: the version
    pos = 1
    while meta[pos] & 0x80:
        pos += 1
    assert meta[pos + 1] == 0x19  # field 2, a list: the schema
    _, pos = _thrift(meta, pos + 2, 9)
    assert meta[pos] == 0x16  # field 3, i64: the row count
    end = pos + 1
    while meta[end] & 0x80:
        end += 1
    value, varint = rows << 1, bytearray()  # zigzag, then 7 bits a byte
    while value >= 0x80:
        varint.append(value & 0x7F | 0x80)
        value >>= 7
    varint.append(value)
    meta = meta[: pos + 1] + bytes(varint) + meta[end + 1 :]
    path.write_bytes(data[: -8 - length] + meta + len(meta).to_bytes(4, "little") + b"PAR1")


@pytest.mark.skipif(pl.get_index_type() != pl.UInt32, reason="Polars' 64-bit runtime")
@pytest.mark.parametrize("low_memory", [False, True])
def test_a_log_past_the_32_bit_row_index_is_refused_with_the_runtime_to_install(
    runner: CliRunner, tmp_path: Path, low_memory: bool
) -> None:
    """Polars' default runtime indexes at most 2**32 - 1 rows; a log of more (its footer's
    count) is refused before Polars reads it, naming the 64-bit runtime (Polars' own error
    came out as a damaged file, or an internal error from summarize)."""
    path = tmp_path / "huge.parquet"
    pl.DataFrame({"prompt_id": ["a", "a"], "reward": [1.0, 0.0]}).write_parquet(path)
    _claiming_rows(path, 2**32)
    from grpo_cli.io.read import check_parquet_layout

    with pytest.raises(InputError) as info:
        check_parquet_layout(path, str(path))
    assert cli_error(info.value) == (
        f"{path} has 4,294,967,296 rows, more than the 4,294,967,295 that Polars' 32-bit "
        "runtime can index",
        "install Polars' 64-bit runtime beside grpo-adv: pip install 'polars[rt64]'",
    )
    out = tmp_path / "out.parquet"
    for command in (
        ["compute", str(path), "-o", str(out), *(["--low-memory"] if low_memory else [])],
        ["summarize", str(path)],
        ["verify", str(path)],
    ):
        result = runner.invoke(app, command)
        assert result.exit_code == 3, command
        assert "has 4,294,967,296 rows" in result.stderr, command
    assert not out.exists()
    _claiming_rows(path, 2)  # the same file, its true count: read as before
    assert check_parquet_layout(path, str(path)) == 2
    assert read_rewards(path).frame.height == 2


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # CI runs as root, which reads any file: simulate the denial the OS gives a user.
    path = tmp_path / "secret.csv"
    path.write_text("prompt_id,reward\na,1\n")

    def deny(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", deny)
    with pytest.raises(InputError) as info:
        read_rewards(path)
    assert info.value.message == f"permission denied reading {path}"
    assert info.value.hint == "check the file's permissions"


def test_default_output_path() -> None:
    assert default_output_path(Path("d/r.parquet"), "parquet", "parquet") == Path("d/r.adv.parquet")
    assert default_output_path(Path("r.ndjson"), "jsonl", "jsonl") == Path("r.adv.ndjson")
    assert default_output_path(Path("r.csv"), "csv", "parquet") == Path("r.adv.parquet")
    assert default_output_path(Path("r.log"), "jsonl", "jsonl") == Path("r.adv.jsonl")
    assert default_output_path(Path("rewards"), "csv", "csv") == Path("rewards.adv.csv")
    assert default_output_path(Path("r.jsonl.gz"), "jsonl", "jsonl") == Path("r.adv.jsonl.gz")
    assert default_output_path(Path("r.csv.zst"), "csv", "jsonl") == Path("r.adv.jsonl.zst")
    assert default_output_path(Path("r.csv.zst"), "csv", "parquet") == Path("r.adv.parquet")


def test_output_format_for() -> None:
    assert output_format_for(Path("o.parquet"), None, "csv") == "parquet"
    assert output_format_for(Path("out"), None, "csv") == "csv"
    assert output_format_for(Path("out.gz"), None, "jsonl") == "jsonl"
    assert output_format_for(Path("o.out"), "jsonl", "csv") == "jsonl"
    with pytest.raises(OptionsError) as info:
        output_format_for(Path("o.xlsx"), None, "csv")
    assert cli_error(info.value) == (
        "cannot tell the output format of o.xlsx",
        "end the file name with .parquet, .csv, .jsonl, .json or .arrow, or name the format with "
        "--output-format",
    )
    with pytest.raises(OptionsError) as info:
        output_format_for(Path("o.csv"), "parquet", "csv")
    assert cli_error(info.value)[0] == "--output-format parquet does not match the suffix of o.csv"
    assert info.value.message == 'output_format="parquet" does not match the suffix of o.csv'
    assert (info.value.value, info.value.path) == ("parquet", "o.csv")


def test_check_output_path_protects_the_input_even_through_a_link(tmp_path: Path) -> None:
    original = tmp_path / "r.csv"
    original.write_text("x\n")
    link = tmp_path / "link.csv"
    link.symlink_to(original)
    for target in (original, link):
        with pytest.raises(OutputError) as info:
            check_output_path(target, force=True, protected=[original])
        assert info.value.message == f"refusing to overwrite the input {original}"
    with pytest.raises(OutputError, match="already exists"):
        check_output_path(original, force=False)
    check_output_path(original, force=True)
    with pytest.raises(OutputError, match="does not exist"):
        check_output_path(tmp_path / "no" / "o.csv", force=False)


def test_atomic_write_failure_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    target.write_text("precious\n")

    def half_then_fail(sink: IO[bytes]) -> None:
        sink.write(b"partial")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, half_then_fail)
    assert target.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


def test_atomic_write_success_has_normal_permissions(tmp_path: Path) -> None:
    target = tmp_path / "out.csv"

    def write_line(sink: IO[bytes]) -> None:
        sink.write(b"a\n")

    atomic_write(target, write_line)
    umask = os.umask(0)
    os.umask(umask)
    assert target.read_bytes() == b"a\n"
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


def test_markdown_table() -> None:
    frame = pl.DataFrame({"k": ["a|b", None], "x": [1 / 3, 2.0], "n": [1, 2]})
    assert frame_to_markdown(frame) == (
        "| k | x | n |\n|---|---|---|\n| a\\|b | 0.333333 | 1 |\n|  | 2 | 2 |\n"
    )


def test_nested_columns_cannot_go_to_csv() -> None:
    frame = pl.DataFrame({"steps": [[1.0, 2.0]]})
    with pytest.raises(OutputError) as info:
        write_frame(frame, io.BytesIO(), "csv")
    nested = describe([name for name in DATA_FORMATS if FORMATS[name].nested])
    assert nested.startswith("parquet, jsonl")
    assert cli_error(info.value)[1] == f"nested columns need --output-format {nested}"


MIXED_KINDS = (
    b'{"prompt_id":"p1","reward":1,"info":{"a":1,"b":2,"c":3},"extra":{"x":{"k":1}}}\n'
    b'{"prompt_id":"p1","reward":0.5,"info":[1,2],"extra":{"y":2}}\n'
    b'{"prompt_id":"p2","reward":0,"info":"text","extra":{"x":[1]}}\n'
    b'{"prompt_id":"p2","reward":1}\n'
)


def test_jsonl_fields_of_mixed_kinds_are_read_as_json_text() -> None:
    log = read_rewards(io.BytesIO(MIXED_KINDS))
    assert log.frame.schema == pl.Schema(
        {"prompt_id": pl.String, "reward": pl.Float64, "info": pl.String, "extra": pl.String}
    )
    assert log.frame["info"].to_list() == ['{"a": 1, "b": 2, "c": 3}', "[1, 2]", "text", None]
    assert log.frame["extra"].to_list() == ['{"x": {"k": 1}}', '{"y": 2}', '{"x": [1]}', None]
    assert log.warnings == (
        "<stdin>: the values of 'info', 'extra' differ in kind from line to line "
        "(objects, lists, numbers, text): carried through as JSON text",
    )


def test_jsonl_rewards_of_several_kinds_read_as_each_kind_alone() -> None:
    lines = [1, "0.5", True, None, False, "2e-1", 0.25]
    data = "".join(f'{{"prompt_id":"p","reward":{json.dumps(v)}}}\n' for v in lines).encode()
    log = read_rewards(io.BytesIO(data))
    assert log.frame["reward"].to_list() == [1.0, 0.5, 1.0, None, 0.0, 0.2, 0.25]
    assert log.warnings == ()
    keys = b'{"prompt_id":7,"reward":1}\n{"prompt_id":"007","reward":true}\n'
    assert read_rewards(io.BytesIO(keys)).frame["prompt_id"].to_list() == ["7", "007"]


@pytest.mark.parametrize("route", ["file", "stdin", "gzip"])
def test_mixed_kinds_warned_once_and_written_back(
    route: str, runner: CliRunner, tmp_path: Path
) -> None:
    source = {"file": tmp_path / "r.jsonl", "gzip": tmp_path / "r.jsonl.gz"}.get(route)
    data = gzip.compress(MIXED_KINDS) if route == "gzip" else MIXED_KINDS
    if source is not None:
        source.write_bytes(data)
    out = tmp_path / "out.jsonl"
    result = runner.invoke(
        app,
        ["compute", str(source or "-"), "-o", str(out)],
        input=None if source else data,
    )
    assert result.exit_code == 0, result.stderr
    name = source or "<stdin>"
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: {name}: the values of 'info', 'extra' differ in kind from line to line "
        "(objects, lists, numbers, text): carried through as JSON text"
    ]
    written = pl.read_ndjson(out)
    assert written["info"].to_list() == ['{"a": 1, "b": 2, "c": 3}', "[1, 2]", "text", None]
    assert written["advantage"].to_list() == pytest.approx(
        [0.7071067, -0.7071067, -0.7071067, 0.7071067], rel=1e-6
    )


def _parquet_variants(folder: Path) -> list[Path]:
    """Parquet files whose footers differ in shape: Polars' and pyarrow's writers, many
    row groups, dictionary pages, statistics, page indexes, nested, map and boolean
    columns, key-value metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    log = pl.read_parquet(SAMPLE_FILES["parquet"])
    log.write_parquet(folder / "polars.parquet", row_group_size=50)
    table = log.to_arrow().replace_schema_metadata({"writer": "test"})
    pq.write_table(table, folder / "pyarrow.parquet", row_group_size=100, write_page_index=True)
    nested = pa.table(
        {
            "s": pa.array([{"a": 1, "b": [1, 2]}, None] * 5),
            "m": pa.array([[("k", 1)], []] * 5, type=pa.map_(pa.string(), pa.int64())),
            "flag": [True, False] * 5,
            "x": pa.array([1.5, None] * 5),
        }
    )
    pq.write_table(nested, folder / "nested.parquet", use_dictionary=False)
    return [SAMPLE_FILES["parquet"], *sorted(folder.glob("*.parquet"))]


def test_the_parquet_footer_check_reads_what_pyarrow_reads(tmp_path: Path) -> None:
    """check_parquet_layout's own footer reader (Thrift's compact protocol) gives the row
    count pyarrow reads, on files and on their bytes, and passes every sound file."""
    import pyarrow.parquet as pq

    from grpo_cli.io.read import check_parquet_layout

    for path in _parquet_variants(tmp_path):
        rows = pq.read_metadata(path).num_rows
        assert check_parquet_layout(path, path.name) == rows > 0
        assert check_parquet_layout(path.read_bytes(), path.name) == rows


def test_no_cut_parquet_file_passes_the_check_and_makes_polars_panic() -> None:
    """The sample cut at every 7th byte of its data, footer re-appended: the footer check
    refuses it, or Polars reads it (or raises an error) without panicking."""
    from grpo_cli.io.read import check_parquet_layout

    data = SAMPLE_FILES["parquet"].read_bytes()
    footer = int.from_bytes(data[-8:-4], "little") + 8
    refused = 0
    for end in range(4, len(data) - footer, 7):
        cut = data[:end] + data[-footer:]
        try:
            check_parquet_layout(cut, "cut.parquet")
        except InputError as exc:
            assert exc.message.startswith("cannot read cut.parquet as parquet: row group 0")
            refused += 1
            continue
        with contextlib.suppress(pl.exceptions.PolarsError):
            pl.read_parquet(io.BytesIO(cut))
    assert refused > 900


@pytest.mark.parametrize(
    ("footer", "cause"),
    [
        (b"\x15\x04", "its footer is not Parquet metadata"),  # a struct cut short
        (b"\xff" * 40, "its footer is not Parquet metadata"),
    ],
)
def test_a_footer_that_is_not_parquet_metadata(footer: bytes, cause: str) -> None:
    from grpo_cli.io.read import check_parquet_layout

    data = b"PAR1" + b"\x00" * 8 + footer + len(footer).to_bytes(4, "little") + b"PAR1"
    with pytest.raises(InputError) as info:
        check_parquet_layout(data, "x.parquet")
    assert info.value.message == f"cannot read x.parquet as parquet: {cause}"
