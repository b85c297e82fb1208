"""SWF reading and writing: header, streaming, malformed input, gzip, round trips."""

from __future__ import annotations

import dataclasses
import gzip
import io
import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workload.swf import (
    FIELD_NAMES,
    FLOAT_FIELDS,
    SwfError,
    SwfHeader,
    SwfRecord,
    format_record,
    open_swf,
    parse_record,
    read_header,
    read_swf,
    write_swf,
)

PWA = Path(__file__).resolve().parents[3] / "shared" / "workloads" / "pwa"

HEADER = """\
; Version: 2.2
; Computer: IBM SP2
; Installation: Test Center
; Information: http://example.org/
;              http://example.org/more
; MaxJobs: 3
; MaxRecords: 3
; UnixStartTime: 835823160
; TimeZone: -18000
; TimeZoneString: US/Eastern
; MaxNodes: 338 (batch partition; 512 total)
; MaxProcs: 338
; Queue:  1 DSI
; Queue:  2 astro
;
; Note: THIS IS A CLEANED VERSION OF THE LOG!
;       user=135 (2080 jobs removed)
;
"""


def line(
    job: int,
    submit: float = 0,
    *,
    run: float = 100,
    alloc: int = 4,
    req_procs: int = 4,
    req_time: float = 200,
    status: int = 1,
    **extra: float,
) -> str:
    """One SWF job line; the other fields are -1 unless given in ``extra``."""
    values: dict[str, float] = dict.fromkeys(FIELD_NAMES, -1)
    values.update(
        job_number=job,
        submit_time=submit,
        run_time=run,
        allocated_procs=alloc,
        requested_procs=req_procs,
        requested_time=req_time,
        status=status,
    )
    values.update(extra)
    return " ".join(str(values[name]) for name in FIELD_NAMES) + "\n"


def write(path: Path, text: str, *, compress: bool = False) -> Path:
    data = text.encode()
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def test_reads_header_and_records(tmp_path: Path) -> None:
    path = write(tmp_path / "t.swf", HEADER + line(1, 0) + line(2, 10) + line(3, 20))
    with open_swf(path) as reader:
        header = reader.header
        records = list(reader)
    assert [r.job_number for r in records] == [1, 2, 3]
    assert records[1].submit_time == 10.0
    assert records[0].wait_time == -1
    assert header.max_procs == 338
    assert header.max_nodes == 338  # text after the number is ignored
    assert header["MaxNodes"] == "338 (batch partition; 512 total)"
    assert header.max_jobs == 3
    assert header.max_records == 3
    assert header.unix_start_time == 835823160
    assert header.time_zone == -18000
    assert header.time_zone_string == "US/Eastern"
    assert header.installation == "Test Center"
    assert header.queues == {1: "DSI", 2: "astro"}
    assert header["Information"] == "http://example.org/\nhttp://example.org/more"
    assert header.values_of("Queue") == ("1 DSI", "2 astro")
    assert header["Note"].endswith("(2080 jobs removed)")
    assert "MaxPartitions" not in header
    assert header.max_partitions is None


def test_header_without_maxprocs(tmp_path: Path) -> None:
    path = write(tmp_path / "l.swf", "; MaxNodes: 256\n; Acknowledge: Uri Lublin\n" + line(1))
    header = read_header(path)
    assert header.max_procs is None
    assert header.max_nodes == 256


def test_header_value_that_is_not_a_number(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.swf", "; MaxProcs: lots\n" + line(1))
    header = read_header(path)
    with pytest.raises(SwfError, match=r"MaxProcs: expected a number, got 'lots'"):
        _ = header.max_procs


def test_comments_and_blank_lines_anywhere(tmp_path: Path) -> None:
    text = "\n" + HEADER + "\n" + line(1) + "; a comment in the middle\n\n   \n" + line(2) + ";\n"
    path = write(tmp_path / "t.swf", text)
    header, records = read_swf(path)
    assert [r.job_number for r in records] == [1, 2]
    assert header.max_procs == 338
    # a mid-file comment is not part of the header
    assert all("middle" not in v for v in header.values())


def test_file_without_header_or_jobs(tmp_path: Path) -> None:
    assert read_swf(write(tmp_path / "a.swf", line(7))) == (SwfHeader(), [parse_record(line(7))])
    header, records = read_swf(write(tmp_path / "b.swf", HEADER))
    assert records == []
    assert header.max_procs == 338
    assert read_swf(write(tmp_path / "c.swf", "")) == (SwfHeader(), [])


def test_wrong_field_count_names_file_and_line(tmp_path: Path) -> None:
    # line 1 header, 2 job, 3 blank, 4 comment, 5 the short line
    text = "; MaxProcs: 8\n" + line(1) + "\n; note\n" + "1 2 3 4 5 6 7 8 9 10 11 12\n"
    path = write(tmp_path / "trace.swf", text)
    with open_swf(path) as reader, pytest.raises(SwfError) as info:
        list(reader)
    assert str(info.value) == f"{path}:5: expected 18 fields, got 12"
    assert info.value.line == 5
    assert info.value.source == str(path)


def test_non_numeric_field_names_the_field(tmp_path: Path) -> None:
    bad = line(2).replace(" 200 ", " soon ")
    path = write(tmp_path / "trace.swf", line(1) + bad)
    with pytest.raises(SwfError, match=r"trace\.swf:2: field 9 \(requested_time\) is not a number"):
        read_swf(path)


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("nan", "field 4 (run_time) is not a finite number"),
        ("inf", "field 4 (run_time) is not a finite number"),
        ("0x10", "field 4 (run_time) is not a number"),
    ],
)
def test_non_finite_float_field(tmp_path: Path, token: str, message: str) -> None:
    path = write(tmp_path / "t.swf", line(1, run=12345).replace(" 12345 ", f" {token} "))
    with pytest.raises(SwfError, match=rf":1: {re.escape(message)}"):
        read_swf(path)


def test_fractions_in_float_fields_and_integral_decimals_in_int_fields() -> None:
    rec = parse_record(line(1, submit=12.5, run=3.25, alloc=4, avg_cpu_time=0.5, used_memory=1.5))
    assert (rec.submit_time, rec.run_time, rec.avg_cpu_time, rec.used_memory) == (
        12.5,
        3.25,
        0.5,
        1.5,
    )
    lenient = parse_record(line(1).replace(" 4 ", " 4.0 ", 1))
    assert lenient.allocated_procs == 4
    assert isinstance(lenient.allocated_procs, int)
    with pytest.raises(ValueError, match=r"field 5 \(allocated_procs\) must be an integer"):
        parse_record(line(1).replace(" 4 ", " 4.5 ", 1))
    with pytest.raises(ValueError, match="expected 18 fields, got 19"):
        parse_record(line(1) + " 7")


def test_record_types() -> None:
    rec = parse_record(line(1))
    for name in FIELD_NAMES:
        value = getattr(rec, name)
        assert isinstance(value, float if name in FLOAT_FIELDS else int), name
    with pytest.raises(AttributeError):
        rec.run_time = 5  # type: ignore[misc]
    assert rec == SwfRecord(*(getattr(rec, n) for n in FIELD_NAMES))
    assert hash(rec) == hash(parse_record(line(1)))


def test_crlf_line_endings(tmp_path: Path) -> None:
    path = write(tmp_path / "t.swf", (HEADER + line(1) + line(2)).replace("\n", "\r\n"))
    header, records = read_swf(path)
    assert header.max_procs == 338
    assert len(records) == 2


@pytest.mark.parametrize("name", ["t.swf", "t.swf.gz", "t.txt"])
@pytest.mark.parametrize("compress", [False, True])
def test_gzip_detected_by_content_not_name(tmp_path: Path, name: str, compress: bool) -> None:
    path = write(tmp_path / name, HEADER + line(1) + line(2), compress=compress)
    header, records = read_swf(path)
    assert header.max_nodes == 338
    assert [r.job_number for r in records] == [1, 2]


def test_truncated_gzip(tmp_path: Path) -> None:
    data = gzip.compress((HEADER + line(1) * 2000).encode())
    path = tmp_path / "cut.swf.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SwfError, match="cannot read"):
        read_swf(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SwfError, match=r"nope\.swf: cannot open"):
        open_swf(tmp_path / "nope.swf")


def test_header_is_read_without_the_records(tmp_path: Path) -> None:
    path = write(tmp_path / "t.swf", HEADER + line(1) + "garbage\n")
    assert read_header(path).max_procs == 338  # the bad line 2 is never reached


def test_records_iterate_once(tmp_path: Path) -> None:
    path = write(tmp_path / "t.swf", line(1))
    with open_swf(path) as reader:
        assert len(list(reader)) == 1
        with pytest.raises(RuntimeError, match="once"):
            iter(reader)


def test_streams_without_reading_ahead(tmp_path: Path) -> None:
    path = write(tmp_path / "t.swf", line(1) + line(2) + "broken\n")
    with open_swf(path) as reader:
        records = iter(reader)
        assert next(records).job_number == 1
        assert next(records).job_number == 2
        assert reader.line == 2
        with pytest.raises(SwfError, match=":3: expected 18 fields, got 1"):
            next(records)


# -- writing ------------------------------------------------------------------


def test_write_layout(tmp_path: Path) -> None:
    rec = parse_record(line(1, submit=5, run=2.5, req_time=60))
    out = io.StringIO()
    assert write_swf(out, [rec], {"Version": "2.2", "MaxProcs": "8"}) == 1
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["; Version: 2.2", "; MaxProcs: 8"]
    fields = lines[2].split()
    assert fields[:4] == ["1", "5", "-1", "2.5"]  # integral floats without decimals
    assert len(fields) == 18
    assert format_record(rec) == lines[2] + "\n"


def test_write_then_read_round_trip(tmp_path: Path) -> None:
    source = write(tmp_path / "in.swf", HEADER + line(1, 0) + line(2, 7.5, run=0) + line(3, 9))
    header, records = read_swf(source)
    for name in ("out.swf", "out.swf.gz"):
        target = tmp_path / name
        assert write_swf(target, records, header) == 3
        again_header, again = read_swf(target)
        assert again == records
        assert again_header == header  # line for line, continuations included
        assert again_header.lines == header.lines
    assert (tmp_path / "out.swf.gz").read_bytes()[:2] == b"\x1f\x8b"
    assert (
        gzip.decompress((tmp_path / "out.swf.gz").read_bytes())
        == (tmp_path / "out.swf").read_bytes()
    )


def test_gzip_output_is_reproducible(tmp_path: Path) -> None:
    records = [parse_record(line(i)) for i in range(1, 4)]
    write_swf(tmp_path / "a.swf.gz", records)
    write_swf(tmp_path / "b.swf.gz", records)
    assert (tmp_path / "a.swf.gz").read_bytes() == (tmp_path / "b.swf.gz").read_bytes()


def test_mapping_header_with_multiline_value(tmp_path: Path) -> None:
    target = tmp_path / "h.swf"
    write_swf(target, [], {"Note": "first\nsecond", "MaxNodes": "16 (all)", "Empty": ""})
    header = read_header(target)
    assert dict(header) == {"Note": "first\nsecond", "MaxNodes": "16 (all)", "Empty": ""}
    assert header.max_nodes == 16


def test_write_rejects_bad_values() -> None:
    with pytest.raises(SwfError, match="not a single word"):
        write_swf(io.StringIO(), [], {"Max Procs": "8"})
    rec = parse_record(line(1))
    fractional = dataclasses.replace(rec, allocated_procs=2.5)  # type: ignore[arg-type]
    with pytest.raises(SwfError, match="job 1: field allocated_procs must be an integer"):
        format_record(fractional)
    infinite = dataclasses.replace(rec, run_time=math.inf)
    with pytest.raises(SwfError, match="job 1: field run_time must be finite"):
        format_record(infinite)


_ints = st.integers(min_value=-1, max_value=2**40)
_floats = st.one_of(
    st.integers(min_value=-1, max_value=10**12).map(float),
    st.floats(allow_nan=False, allow_infinity=False),
)


@st.composite
def records(draw: st.DrawFn) -> SwfRecord:
    values = {n: draw(_floats if n in FLOAT_FIELDS else _ints) for n in FIELD_NAMES}
    return SwfRecord(**values)  # type: ignore[arg-type]  # ints where FIELD_NAMES says int


_header_values = st.text(
    alphabet=st.characters(codec="ascii", categories=["L", "N", "P", "Zs"]), max_size=30
)


@settings(max_examples=60, deadline=None)
@given(
    recs=st.lists(records(), max_size=20),
    header=st.dictionaries(
        st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,12}", fullmatch=True), _header_values
    ),
)
def test_round_trip_property(
    tmp_path_factory: pytest.TempPathFactory, recs: list[SwfRecord], header: dict[str, str]
) -> None:
    path = tmp_path_factory.mktemp("rt") / "p.swf"
    write_swf(path, recs, header)
    read_back_header, read_back = read_swf(path)
    assert read_back == recs
    assert dict(read_back_header) == {k: v.strip() for k, v in header.items()}


# -- the real traces ----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(not PWA.is_dir(), reason=f"{PWA} not present")
def test_real_trace_headers_and_counts() -> None:
    expected = {
        "CTC-SP2-1996-3.1-cln.swf.gz": (77222, 338, 338),
        "KTH-SP2-1996-2.1-cln.swf.gz": (28476, 100, 100),
        "SDSC-SP2-1998-4.2-cln.swf.gz": (59715, 128, 128),
        "SDSC-BLUE-2000-4.2-cln.swf.gz": (243306, 1152, 144),
    }
    # MaxRecords counts the log before cleaning in CTC (79302), so the counts are explicit.
    for name, (count, procs, nodes) in expected.items():
        with open_swf(PWA / name) as reader:
            header = reader.header
            assert sum(1 for _ in reader) == count, name
        assert (header.max_procs, header.max_nodes) == (procs, nodes), name
    lublin = read_header(PWA / "synthetic" / "lublin_256.swf.gz")
    assert (lublin.max_procs, lublin.max_nodes) == (None, 256)
