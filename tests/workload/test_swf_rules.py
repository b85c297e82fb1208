"""SWF records to jobs (the stated rules, skip counts, ordering, limit) and schedules back."""

from __future__ import annotations

import dataclasses
import gzip
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model import Job
from tests.builders import job
from workload.swf import FIELD_NAMES, SwfRecord, read_swf, write_swf
from workload.swf_load import TraceOrderError, iter_jobs, load_jobs
from workload.swf_rules import AdjustReason, SkipReason, SwfRules, record_to_job
from workload.swf_schedule import records_from_schedule

PWA = Path(__file__).resolve().parents[3] / "shared" / "workloads" / "pwa"


def rec(job: int = 1, submit: float = 0, **fields: float) -> SwfRecord:
    """A completed 4-processor job of 100 s requesting 200 s; other fields -1 unless given."""
    values: dict[str, float] = dict.fromkeys(FIELD_NAMES, -1)
    values.update(
        job_number=job,
        submit_time=submit,
        run_time=100,
        allocated_procs=4,
        requested_procs=4,
        requested_time=200,
        status=1,
    )
    values.update(fields)
    return SwfRecord(**values)  # type: ignore[arg-type]


def trace(tmp_path: Path, records: list[SwfRecord], name: str = "t.swf") -> Path:
    path = tmp_path / name
    write_swf(path, records, {"MaxProcs": "16"})
    return path


def job_of(record: SwfRecord, rules: SwfRules | None = None, total_cpus: int | None = None) -> Job:
    result = record_to_job(record, rules or SwfRules(), total_cpus=total_cpus)
    assert isinstance(result, Job), result
    return result


def test_basic_mapping() -> None:
    got = job_of(rec(42, 17.5, user_id=7, group_id=-1, queue=3, avg_cpu_time=50))
    assert got == job(
        "42",
        4,
        submit=17.5,
        walltime=200,
        runtime=100,
        user="u7",
        group="unknown",
        cpu_util=0.5,
        qos=3,
    )
    assert job_of(rec(queue=-1)).qos == 0
    assert job_of(rec(user_id=-1, group_id=0)).user == "unknown"
    assert job_of(rec(group_id=0)).group == "g0"
    assert job_of(rec(), SwfRules(ref_speed=2.0)).ref_speed == 2.0


@pytest.mark.parametrize(
    ("avg_cpu", "run", "util"),
    [
        (50, 100, 0.5),
        (150, 100, 1.0),
        (0.001, 100, 0.01),
        (-1, 100, 1.0),
        (0, 100, 1.0),
        (5, 0, 1.0),
    ],
)
def test_cpu_util(avg_cpu: float, run: float, util: float) -> None:
    assert job_of(rec(avg_cpu_time=avg_cpu, run_time=run)).cpu_util == pytest.approx(util)


def test_cpu_util_can_be_ignored() -> None:
    assert job_of(rec(avg_cpu_time=50), SwfRules(cpu_util_from_trace=False)).cpu_util == 1.0


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"run_time": -1}, SkipReason.NO_RUNTIME),
        ({"run_time": -1, "allocated_procs": -1, "status": 5}, SkipReason.NO_RUNTIME),
        ({"allocated_procs": -1, "requested_procs": -1}, SkipReason.NO_PROCS),
        ({"allocated_procs": 0, "requested_procs": -1}, SkipReason.NO_PROCS),
        ({"submit_time": -1}, SkipReason.NO_SUBMIT),
        ({"status": 2}, SkipReason.STATUS),
        ({"status": 3}, SkipReason.STATUS),
        ({"status": 4}, SkipReason.STATUS),
    ],
)
def test_unreplayable_records(fields: dict[str, float], reason: SkipReason) -> None:
    assert record_to_job(dataclasses.replace(rec(), **fields)) is reason  # type: ignore[arg-type]


@pytest.mark.parametrize("status", [0, 1, 5, -1])
def test_failed_cancelled_and_unknown_status_kept_when_known(status: int) -> None:
    assert isinstance(record_to_job(rec(status=status)), Job)


def test_status_rule_is_overridable() -> None:
    rules = SwfRules(skip_statuses=frozenset({0, 5}))
    assert record_to_job(rec(status=5), rules) is SkipReason.STATUS
    assert isinstance(record_to_job(rec(status=3), rules), Job)


def test_zero_run_time_kept_with_minimum_walltime() -> None:
    adjusted: Counter[str] = Counter()
    job = record_to_job(rec(run_time=0, requested_time=-1), adjusted=adjusted)
    assert isinstance(job, Job)
    assert (job.runtime, job.walltime) == (0, 1.0)
    assert adjusted == {AdjustReason.ESTIMATE_FALLBACK: 1, AdjustReason.WALLTIME_FLOOR: 1}


def test_processor_rules() -> None:
    assert job_of(rec(requested_procs=-1, allocated_procs=6)).procs == 6
    assert job_of(rec(requested_procs=8, allocated_procs=6)).procs == 8
    allocated = SwfRules(procs_from="allocated")
    lenient_allocated = SwfRules(procs_from="allocated", require_allocated=False)
    assert job_of(rec(requested_procs=8, allocated_procs=6), allocated).procs == 6
    assert job_of(rec(requested_procs=8, allocated_procs=-1), lenient_allocated).procs == 8
    # requested but never allocated: cancelled before it ran, skipped by default
    assert record_to_job(rec(allocated_procs=-1)) is SkipReason.NOT_ALLOCATED
    lenient = SwfRules(require_allocated=False)
    assert job_of(rec(requested_procs=8, allocated_procs=-1), lenient).procs == 8


@pytest.mark.parametrize("missing", [-1, 0])
@pytest.mark.parametrize(
    ("rules", "walltime"),
    [
        (SwfRules(), 100),
        (SwfRules(missing_estimate="fixed", estimate_seconds=900), 900),
        (SwfRules(missing_estimate="factor", estimate_factor=1.5), 150),
    ],
)
def test_missing_requested_time(missing: float, rules: SwfRules, walltime: float) -> None:
    adjusted: Counter[str] = Counter()
    job = record_to_job(rec(requested_time=missing), rules, adjusted=adjusted)
    assert isinstance(job, Job)
    assert job.walltime == walltime
    assert adjusted == {AdjustReason.ESTIMATE_FALLBACK: 1}


def test_requested_time_kept_or_ignored() -> None:
    assert job_of(rec(requested_time=300)).walltime == 300
    assert job_of(rec(requested_time=300), SwfRules(ignore_requested_time=True)).walltime == 100


def test_overrun_walltime() -> None:
    assert job_of(rec(run_time=250, requested_time=200)).walltime == 200
    covered = SwfRules(walltime_covers_runtime=True)
    assert job_of(rec(run_time=250, requested_time=200), covered).walltime == 250


def test_oversized_jobs() -> None:
    big = rec(requested_procs=32)
    assert record_to_job(big, total_cpus=16) is SkipReason.TOO_BIG
    assert job_of(big, total_cpus=32).procs == 32
    assert job_of(big).procs == 32  # no cluster size, no check
    adjusted: Counter[str] = Counter()
    clipped = record_to_job(big, SwfRules(oversize="clip"), total_cpus=16, adjusted=adjusted)
    assert isinstance(clipped, Job)
    assert clipped.procs == 16
    assert adjusted == {AdjustReason.CLIPPED: 1}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"procs_from": "both"},
        {"missing_estimate": "guess"},
        {"oversize": "shrink"},
        {"estimate_seconds": 0},
        {"estimate_factor": 0},
        {"min_walltime": 0},
        {"min_cpu_util": 0},
        {"ref_speed": -1},
    ],
)
def test_rules_are_validated(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        SwfRules(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "rules"),
    [
        ("runtime", SwfRules()),
        (" Runtime ", SwfRules()),
        ("runtime*3", SwfRules(missing_estimate="factor", estimate_factor=3)),
        ("runtime * 1.5", SwfRules(missing_estimate="factor", estimate_factor=1.5)),
        ("900", SwfRules(missing_estimate="fixed", estimate_seconds=900)),
        ("3600.5", SwfRules(missing_estimate="fixed", estimate_seconds=3600.5)),
    ],
)
def test_rules_from_fallback_text(text: str, rules: SwfRules) -> None:
    assert SwfRules.from_fallback(text) == rules


def test_rules_from_fallback_text_with_overrides() -> None:
    rules = SwfRules.from_fallback("600", oversize="clip")
    assert (rules.estimate_seconds, rules.oversize) == (600, "clip")


@pytest.mark.parametrize("text", ["", "never", "runtime*", "runtime*0", "-5", "0", "inf", "nan"])
def test_rules_from_fallback_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="missing-walltime fallback"):
        SwfRules.from_fallback(text)


# -- streams and files --------------------------------------------------------


def test_load_counts_skips_and_keeps_order(tmp_path: Path) -> None:
    records = [
        rec(1, 0),
        rec(2, 5, run_time=-1, status=5),  # cancelled before it ran
        rec(3, 6, allocated_procs=-1, requested_procs=-1),
        rec(4, 7, requested_procs=-1, allocated_procs=2),
        rec(5, 8, requested_time=-1),
        rec(6, 9, requested_procs=64),
        rec(7, 10, status=3),
        rec(4, 11),  # same job number again
        rec(8, 12),
    ]
    result = load_jobs(trace(tmp_path, records), total_cpus=16)
    assert [j.id for j in result.jobs] == ["1", "4", "5", "8"]
    assert result.jobs[1].procs == 2
    assert result.jobs[2].walltime == 100
    assert result.skipped == {
        SkipReason.NO_RUNTIME: 1,
        SkipReason.NO_PROCS: 1,
        SkipReason.TOO_BIG: 1,
        SkipReason.STATUS: 1,
        SkipReason.DUPLICATE: 1,
    }
    assert result.skipped["no_runtime"] == 1  # plain string keys work too
    assert result.adjusted == {AdjustReason.ESTIMATE_FALLBACK: 1}
    assert result.sorted_input
    assert (result.records, result.replayable) == (9, 4)
    assert result.header.max_procs == 16


def test_unsorted_input_is_sorted_stably(tmp_path: Path) -> None:
    records = [rec(1, 50), rec(2, 10), rec(5, 30), rec(3, 30), rec(4, 0)]
    result = load_jobs(trace(tmp_path, records))
    assert not result.sorted_input
    assert [(j.submit, j.id) for j in result.jobs] == [
        (0, "4"),
        (10, "2"),
        (30, "3"),  # equal submit: by job number
        (30, "5"),
        (50, "1"),
    ]


def test_limit_takes_first_jobs_in_submit_order(tmp_path: Path) -> None:
    records = [rec(1, 50), rec(2, 10), rec(3, 30, run_time=-1), rec(4, 0), rec(5, 20)]
    path = trace(tmp_path, records)
    result = load_jobs(path, limit=2)
    assert [j.id for j in result.jobs] == ["4", "2"]
    assert result.skipped == {SkipReason.NO_RUNTIME: 1}  # the whole file, not only the first 2
    assert result.replayable == 4
    assert load_jobs(path, limit=0).jobs == []
    assert [j.id for j in load_jobs(path, limit=99).jobs] == ["4", "2", "5", "1"]
    with pytest.raises(ValueError, match="limit"):
        load_jobs(path, limit=-1)


def test_limit_on_sorted_input(tmp_path: Path) -> None:
    path = trace(
        tmp_path, [rec(i, i * 10, requested_time=-1 if i % 2 else 50) for i in range(1, 11)]
    )
    result = load_jobs(path, limit=3)
    assert [j.id for j in result.jobs] == ["1", "2", "3"]
    assert result.sorted_input
    # adjustments count the jobs returned (jobs 1 and 3 had no estimate)
    assert result.adjusted == {AdjustReason.ESTIMATE_FALLBACK: 2}


def test_gzip_trace(tmp_path: Path) -> None:
    path = trace(tmp_path, [rec(1), rec(2, 3)], name="t.swf.gz")
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    assert [j.id for j in load_jobs(path).jobs] == ["1", "2"]


def test_iter_jobs_streams_sorted_and_rejects_unsorted() -> None:
    skipped: Counter[str] = Counter()
    jobs = iter_jobs([rec(1, 0), rec(2, 5, run_time=-1), rec(3, 5)], skipped=skipped)
    assert [j.id for j in jobs] == ["1", "3"]
    assert skipped == {SkipReason.NO_RUNTIME: 1}
    stream = iter_jobs([rec(1, 10), rec(2, 5)])
    assert next(stream).id == "1"
    with pytest.raises(TraceOrderError, match=r"job 2 .* comes after job 1") as info:
        next(stream)
    assert (info.value.job_number, info.value.previous) == (2, 1)
    # skipped records do not count for the order
    assert [j.id for j in iter_jobs([rec(1, 10), rec(2, 5, run_time=-1), rec(3, 11)])] == ["1", "3"]


def test_malformed_file_is_an_error_with_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.swf.gz"
    path.write_bytes(gzip.compress(b"; MaxProcs: 4\n1 0 -1 10 1 -1 -1 1 10 -1 1 1 1 1 1 -1 -1\n"))
    with pytest.raises(ValueError, match=r"bad\.swf\.gz:2: expected 18 fields, got 17"):
        load_jobs(path)


@settings(max_examples=50, deadline=None)
@given(
    submits=st.lists(st.integers(min_value=0, max_value=50), min_size=0, max_size=30),
    limit=st.integers(min_value=0, max_value=35),
    data=st.data(),
)
def test_limit_is_a_prefix_of_the_sorted_whole(
    tmp_path_factory: pytest.TempPathFactory, submits: list[int], limit: int, data: st.DataObject
) -> None:
    numbers = data.draw(st.permutations(range(1, len(submits) + 1)))
    runs = data.draw(
        st.lists(st.sampled_from([-1, 0, 5]), min_size=len(submits), max_size=len(submits))
    )
    records = [rec(n, s, run_time=r) for n, s, r in zip(numbers, submits, runs, strict=True)]
    path = trace(tmp_path_factory.mktemp("lim"), records)
    whole = load_jobs(path)
    assert [(j.submit, int(j.id)) for j in whole.jobs] == sorted(
        (j.submit, int(j.id)) for j in whole.jobs
    )
    assert len(whole.jobs) == sum(1 for r in runs if r >= 0)
    part = load_jobs(path, limit=limit)
    assert part.jobs == whole.jobs[:limit]
    assert part.skipped == whole.skipped
    assert part.sorted_input == whole.sorted_input


# -- schedule back to SWF -----------------------------------------------------


def test_records_from_schedule(tmp_path: Path) -> None:
    a = job("7", 4, submit=10, walltime=300, runtime=100, user="u12", group="g3", qos=2)
    b = job("live-job", 2, walltime=60, runtime=None, user="alice")
    out = list(records_from_schedule([(a, 15.0, 115.0, 2, 1), (b, 0.0, 30.5, 2, 0)]))
    assert out[0] == dataclasses.replace(
        rec(7, 10),
        wait_time=5,
        run_time=100,
        allocated_procs=2,
        requested_procs=4,
        requested_time=300,
        status=1,
        user_id=12,
        group_id=3,
        queue=2,
    )
    assert (out[1].job_number, out[1].user_id, out[1].group_id, out[1].run_time) == (
        2,
        -1,
        -1,
        30.5,
    )
    # written and read back, the jobs come back as they were scheduled
    path = tmp_path / "out.swf"
    write_swf(path, out)
    assert read_swf(path)[1] == out
    again = load_jobs(path).jobs
    assert again[1] == dataclasses.replace(a, cpu_util=1.0)


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [(5.0, 20.0, "before submit"), (15.0, 12.0, "before start"), (15.0, float("nan"), "finite")],
)
def test_records_from_schedule_rejects_impossible_rows(
    start: float, end: float, message: str
) -> None:
    j = job("1", submit=10, walltime=10, runtime=None)
    with pytest.raises(ValueError, match=message):
        list(records_from_schedule([(j, start, end, 1, 1)]))


# -- the real traces ----------------------------------------------------------

REAL = {
    # name: (records, cluster CPUs, kept jobs, skipped by reason)
    "CTC-SP2-1996-3.1-cln.swf.gz": (77222, 338, 77222, {}),
    "KTH-SP2-1996-2.1-cln.swf.gz": (28476, 100, 28475, {SkipReason.NO_PROCS: 1}),
    "SDSC-SP2-1998-4.2-cln.swf.gz": (59715, 128, 54044, {SkipReason.NO_RUNTIME: 5671}),
    "SDSC-BLUE-2000-4.2-cln.swf.gz": (
        243306,
        1152,
        223663,
        {SkipReason.NO_RUNTIME: 10744, SkipReason.NOT_ALLOCATED: 8899},
    ),
}


@pytest.mark.slow
@pytest.mark.skipif(not PWA.is_dir(), reason=f"{PWA} not present")
@pytest.mark.parametrize("name", sorted(REAL))
def test_real_traces(name: str) -> None:
    records, cpus, kept, skipped = REAL[name]
    result = load_jobs(PWA / name, total_cpus=cpus)
    assert result.records == records
    assert result.header.max_procs == cpus
    assert len(result.jobs) == kept
    assert result.skipped == skipped
    assert result.sorted_input
    assert all(1 <= j.procs <= cpus for j in result.jobs)
    head = load_jobs(PWA / name, limit=500, total_cpus=cpus)
    assert head.jobs == result.jobs[:500]


@pytest.mark.slow
@pytest.mark.skipif(not PWA.is_dir(), reason=f"{PWA} not present")
def test_real_lublin_trace_needs_fallbacks() -> None:
    result = load_jobs(PWA / "synthetic" / "lublin_256.swf.gz", total_cpus=256)
    assert len(result.jobs) == 10000
    assert result.adjusted[AdjustReason.ESTIMATE_FALLBACK] == 10000
    assert all(j.walltime == max(j.runtime or 0, 1.0) for j in result.jobs)
