"""The codec: every kind round-trips; every malformed payload is a WireError that says why."""

from __future__ import annotations

import math
import typing
from typing import Any

import msgspec
import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st

from broker import messages as m
from broker.codec import REASONS, WireError, decode, encode, peek_reply_to
from broker.vocabulary import (
    BadMessage,
    CancelRefusal,
    DrainRefusal,
    JobEventKind,
    JobState,
    MachineState,
    Rejection,
)
from tests.builders import spec

JOB = spec(
    "job-1",
    8,
    walltime=3600.0,
    work=1800.0,
    workload="mpi",
    user="alice",
    group="physics",
    qos=5,
    deadline=7200.0,
    malleable=True,
    cpu_util=0.5,
    ref_speed=2.0,
)
MACHINE = m.MachineSpec(id="node-1", cpus=32, speed=1.5, labels=("gpu", "fast"))
HEARTBEAT = m.Heartbeat(agent_id="node-1", seq=0, running=())
PARTS = (m.PartSpec(machine="node-1", cpus=4), m.PartSpec(machine="node-2", cpus=4))

ONE_OF_EACH: tuple[m.Message, ...] = (
    m.SubmitJobs(request_id="r1", reply_to="cli-1", jobs=(JOB, spec("j2", walltime=1.0, work=0.5))),
    m.CancelJob(request_id="r2", reply_to="cli-1", job_id="job-1"),
    m.StatusRequest(request_id="r3", reply_to="cli-1"),
    m.CancelJobs(
        request_id="r5",
        reply_to="cli-1",
        job_ids=("job-1",),
        patterns=("sweep-*", "r[0-9]?-[!x]*"),
        user="alice",
        states=(JobState.QUEUED,),
    ),
    m.CancelJobsReply(
        request_id="r5", cancelled=3, not_found=1, not_allowed=2, already_final=0, skipped=1
    ),
    m.HistoryRequest(request_id="r4", reply_to="cli-1", job_ids=("job-1", "j2")),
    m.HistoryReply(
        request_id="r4",
        events=(
            m.JobEvent(job_id="job-1", event=JobEventKind.RUNNING, at=2.0, seq=1, parts=PARTS),
        ),
        unknown=("j2",),
    ),
    m.SubmitReply(
        request_id="r1",
        results=(
            m.SubmitResult("job-1", accepted=True),
            m.SubmitResult(
                "j2", accepted=False, reason="wider than the cluster", code=Rejection.TOO_WIDE
            ),
            m.SubmitResult("j3", accepted=True, duplicate=True),
        ),
    ),
    m.CancelReply(
        request_id="r2",
        job_id="job-1",
        cancelled=False,
        reason="job 'job-1' is already finished",
        code=CancelRefusal.ENDED,
    ),
    m.EventsRequest(request_id="r5", reply_to="cli-1", after=12, limit=500),
    m.EventsReply(
        request_id="r5",
        events=(m.JobEvent(job_id="job-1", event=JobEventKind.QUEUED, at=1.0, seq=1, stream=13),),
        last=20,
        more=True,
    ),
    m.DrainMachine(request_id="r6", reply_to="cli-1", machine="node-1"),
    m.DrainReply(
        request_id="r6",
        machine="node-2",
        draining=False,
        reason="no machine 'node-2' has registered",
        code=DrainRefusal.UNKNOWN_MACHINE,
    ),
    m.StatusReply(
        request_id="r3",
        now=12.5,
        machines=(
            m.MachineStatus("node-1", 32, 1.5, free=24, online=True),
            m.MachineStatus("node-2", 8, 1.0, free=0, online=True, state=MachineState.DRAINING),
        ),
        queue=(
            m.JobStatus(
                id="j2",
                state=JobState.QUEUED,
                procs=1,
                user="bob",
                submit=3.0,
                walltime=60.0,
                deadline=500.0,
            ),
        ),
        running=(
            m.JobStatus(
                id="job-1",
                state=JobState.RUNNING,
                procs=8,
                user="alice",
                submit=1.0,
                walltime=600.0,
                start=2.0,
                parts=PARTS,
                est_end=602.0,
            ),
            m.JobStatus(
                id="j3",
                state=JobState.RUNNING,
                procs=2,
                user="bob",
                submit=1.5,
                walltime=30.0,
                parts=PARTS,
                reconciling=True,
            ),
        ),
        totals=m.StatusTotals(
            queued=1,
            running=2,
            cpus=10,
            users=2,
            by_user=(m.UserTotals("bob", queued=1, running=1, cpus=2),),
        ),
        next_cursor="q:7",
        max_user_cpus=16,
    ),
    m.ErrorReply(request_id="r9", code=BadMessage.INVALID, error="invalid message: ..."),
    m.AgentOnline(
        machine=MACHINE,
        incarnation="inc-7",
        running=(m.RunningPart(job_id="job-1", cpus=4, started=2.0),),
    ),
    m.AgentOffline(agent_id="node-1", incarnation="inc-7", reason="stopping"),
    m.Heartbeat(
        agent_id="node-1",
        seq=42,
        running=(m.RunningPart(job_id="job-1", cpus=4, started=2.0, attempt=2),),
    ),
    m.PartStarted(job_id="job-1", agent_id="node-1", pid=4242, at=2.0),
    m.PartProgress(job_id="job-1", agent_id="node-1", done=10.0, rate=0.5, at=22.0),
    m.PartFinished(job_id="job-1", agent_id="node-1", exit_code=-15, at=30.0, reason="stopped"),
    m.StartPart(job=JOB, cpus=4, pace=0.5, part=1, parts=2, time_scale=60.0),
    m.ResizePart(job_id="job-1", cpus=2, pace=0.75),
    m.CancelPart(job_id="job-1"),
    m.ClusterSummary(now=1.0, machines=2, cpus=64, free=8, queued=3, running=2, policy="easy"),
    m.JobEvent(job_id="job-1", event=JobEventKind.FINISHED, at=30.0, detail="exit 0", seq=1),
)


def test_one_of_each_covers_every_kind() -> None:
    kinds = {cls.__struct_config__.tag for cls in typing.get_args(m.AnyMessage)}
    assert {type(msg).__struct_config__.tag for msg in ONE_OF_EACH} == kinds


@pytest.mark.parametrize("message", ONE_OF_EACH, ids=lambda msg: type(msg).__name__)
def test_round_trip(message: m.Message) -> None:
    payload = encode(message)
    assert decode(payload) == message
    assert msgspec.msgpack.decode(payload)["kind"] == type(message).__struct_config__.tag


#: Each kind's required fields: the protocol's contract (a change here is a new version).
REQUIRED: dict[str, set[str]] = {
    "submit_jobs": {"jobs"},
    "cancel_job": {"job_id"},
    "status_request": set(),
    "cancel_jobs": set(),
    "cancel_jobs_reply": {
        "request_id",
        "cancelled",
        "not_found",
        "not_allowed",
        "already_final",
        "skipped",
    },
    "history_request": {"job_ids"},
    "submit_reply": {"request_id", "results"},
    "cancel_reply": {"request_id", "job_id", "cancelled"},
    "status_reply": {"request_id", "now", "machines", "queue", "running", "totals"},
    "error_reply": {"request_id", "code", "error"},
    "history_reply": {"request_id", "events", "unknown"},
    "events_request": {"after"},
    "events_reply": {"request_id", "events", "last"},
    "drain_machine": {"machine"},
    "drain_reply": {"request_id", "machine", "draining"},
    "agent_online": {"machine", "incarnation", "running"},
    "agent_offline": {"agent_id", "incarnation", "reason"},
    "heartbeat": {"agent_id", "seq", "running"},
    "part_started": {"job_id", "agent_id", "pid", "at"},
    "part_progress": {"job_id", "agent_id", "done", "rate", "at"},
    "part_finished": {"job_id", "agent_id", "exit_code", "at", "reason"},
    "start_part": {"job", "cpus"},
    "resize_part": {"job_id", "cpus"},
    "cancel_part": {"job_id"},
    "cluster_summary": {"now", "machines", "cpus", "free", "queued", "running", "policy"},
    "job_event": {"job_id", "event", "at", "seq"},
}


def _required(message: m.Message) -> list[str]:
    return [f.name for f in msgspec.structs.fields(message) if f.required]


@pytest.mark.parametrize("message", ONE_OF_EACH, ids=lambda msg: type(msg).__name__)
def test_each_kind_requires_what_the_protocol_says(message: m.Message) -> None:
    assert set(_required(message)) == REQUIRED[type(message).__struct_config__.tag]


@pytest.mark.parametrize("message", ONE_OF_EACH, ids=lambda msg: type(msg).__name__)
def test_a_message_of_its_required_fields_alone_round_trips(message: m.Message) -> None:
    minimal = type(message)(**{name: getattr(message, name) for name in _required(message)})
    assert decode(encode(minimal)) == minimal


@pytest.mark.parametrize(
    ("message", "field"),
    [(msg, name) for msg in ONE_OF_EACH for name in _required(msg)],
    ids=lambda value: value if isinstance(value, str) else type(value).__name__,
)
def test_a_message_missing_a_required_field_is_invalid(message: m.Message, field: str) -> None:
    fields = msgspec.msgpack.decode(encode(message))
    del fields[field]
    with pytest.raises(WireError) as caught:
        decode(msgspec.msgpack.encode(fields))
    assert caught.value.reason == "invalid"
    assert f"missing required field `{field}`" in str(caught.value)


@pytest.mark.parametrize(
    ("job", "says"),
    [
        pytest.param({"id": "j", "procs": 1, "walltime": 1.0}, "`work`", id="no-work"),
        pytest.param({"procs": 1, "walltime": 1.0, "work": 1.0}, "`id`", id="no-id"),
    ],
)
def test_a_start_whose_job_misses_a_field_is_invalid(job: dict[str, Any], says: str) -> None:
    with pytest.raises(WireError) as caught:
        decode(_raw(kind="start_part", job=job, cpus=1))
    assert caught.value.reason == "invalid"
    assert f"missing required field {says} - at `$.job`" in str(caught.value)


def test_a_status_whose_job_has_no_wall_time_is_invalid() -> None:
    # Every job has the user's estimate; a chart of the plan (accordion gantt) needs it.
    job = {"id": "j", "state": "queued", "procs": 1, "user": "ann", "submit": 0.0}
    with pytest.raises(WireError) as caught:
        decode(
            _raw(kind="status_reply", request_id="r", now=0.0, machines=[], queue=[job], running=[])
        )
    assert caught.value.reason == "invalid"
    assert "missing required field `walltime` - at `$.queue[0]`" in str(caught.value)


@pytest.mark.parametrize(
    "result",
    [
        pytest.param({"job_id": "j", "accepted": False, "reason": "no"}, id="refused-no-code"),
        pytest.param({"job_id": "j", "accepted": True, "code": "too_wide"}, id="accepted-code"),
        pytest.param({"job_id": "j", "accepted": False, "code": "too_big"}, id="unknown-code"),
    ],
)
def test_a_submit_result_whose_code_contradicts_it_is_invalid(result: dict[str, Any]) -> None:
    with pytest.raises(WireError) as caught:
        decode(_raw(kind="submit_reply", request_id="r", results=[result]))
    assert caught.value.reason == "invalid"


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        pytest.param({"event": "exploded"}, "$.event", id="event-kind"),
        pytest.param({"event": "resized", "state": "running"}, "state", id="state-field"),
    ],
)
def test_a_job_event_of_another_vocabulary_is_invalid(fields: dict[str, Any], where: str) -> None:
    # ``state`` was protocol 1's field: a version-1 event does not pass for a version-2 one.
    with pytest.raises(WireError) as caught:
        decode(_raw(kind="job_event", job_id="j", at=1.0, seq=1, **fields))
    assert caught.value.reason == "invalid"
    assert where in str(caught.value)


def test_enums_travel_as_their_values() -> None:
    event = m.JobEvent(job_id="j", event=JobEventKind.REQUEUED, at=1.0, seq=2)
    assert msgspec.msgpack.decode(encode(event))["event"] == "requeued"
    assert decode(encode(event)).state is JobState.QUEUED
    status = m.JobStatus(
        id="j", state=JobState.RUNNING, procs=1, user="ann", submit=0.0, walltime=1.0
    )
    assert (
        msgspec.msgpack.decode(
            encode(
                m.StatusReply(
                    request_id="r",
                    now=0.0,
                    machines=(),
                    queue=(),
                    running=(status,),
                    totals=m.StatusTotals(queued=0, running=1, cpus=1),
                )
            )
        )["running"][0]["state"]
        == "running"
    )


def _raw(**fields: Any) -> bytes:
    return msgspec.msgpack.encode(fields)


def _job(**overrides: Any) -> dict[str, Any]:
    return {"id": "j", "procs": 1, "walltime": 10.0, "work": 5.0} | overrides


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        pytest.param(b"\xc1\x00", "not a msgpack message", id="not-msgpack"),
        pytest.param(b"", "not a msgpack message", id="empty"),
        pytest.param(
            encode(m.Heartbeat(agent_id="a", seq=0, running=())) + b"\x00",
            "trailing",
            id="trailing-bytes",
        ),
        pytest.param(msgspec.msgpack.encode([1, 2]), "Expected `object`, got `array`", id="array"),
        pytest.param(_raw(v=1), "missing required field `kind`", id="no-kind"),
        pytest.param(_raw(kind="launch_missiles"), "'launch_missiles' - at `$.kind`", id="kind"),
        pytest.param(_raw(kind=3), "Expected `str`, got `int` - at `$.kind`", id="kind-type"),
        pytest.param(
            _raw(kind="heartbeat", seq="one"), "Expected `int`, got `str` - at `$.seq`", id="type"
        ),
        pytest.param(_raw(kind="heartbeat", v="1"), "at `$.v`", id="version-type"),
        pytest.param(
            _raw(kind="submit_jobs", jobs=[_job(procs=-1)]),
            "Expected `int` >= 1 - at `$.jobs[0].procs`",
            id="negative-procs",
        ),
        pytest.param(
            _raw(kind="submit_jobs", jobs=[_job(procs=0)]),
            "Expected `int` >= 1 - at `$.jobs[0].procs`",
            id="zero-procs",
        ),
        pytest.param(
            _raw(kind="submit_jobs", jobs=[_job(procs=10**9)]),
            "Expected `int` <= 1048576 - at `$.jobs[0].procs`",
            id="absurd-procs",
        ),
        pytest.param(
            _raw(kind="submit_jobs", jobs=[_job(walltime=0.0)]),
            "> 0.0 - at `$.jobs[0].walltime`",
            id="zero-walltime",
        ),
        pytest.param(
            _raw(kind="submit_jobs", jobs=[_job(walltime=math.nan)]),
            "at `$.jobs[0].walltime`",
            id="nan-walltime",
        ),
        pytest.param(
            _raw(kind="submit_jobs", jobs=[_job(work=-1.0)]),
            "> 0.0 - at `$.jobs[0].work`",
            id="negative-work",
        ),
        pytest.param(
            _raw(kind="submit_jobs", jobs=[_job(work=-0.0)]),
            "> 0.0 - at `$.jobs[0].work`",
            id="negative-zero-work",
        ),
        pytest.param(
            _raw(kind="submit_jobs", jobs=[_job(id="..")]),
            "at `$.jobs[0].id`",
            id="dot-dot-job-id",
        ),
        pytest.param(
            _raw(kind="submit_jobs", jobs=[_job(id="-")]),
            "at `$.jobs[0].id`",
            id="dash-job-id",
        ),
        pytest.param(
            _raw(kind="submit_jobs", jobs=[_job(cpu_util=1.5)]),
            "at `$.jobs[0].cpu_util`",
            id="utilisation-above-1",
        ),
        pytest.param(
            _raw(kind="submit_jobs", jobs=[_job(qos=10**9)]),
            "<= 1000000 - at `$.jobs[0].qos`",
            id="absurd-qos",
        ),
        pytest.param(
            _raw(kind="submit_jobs", jobs=[_job(workload="bitcoin")]),
            "at `$.jobs[0].workload`",
            id="unknown-workload",
        ),
        pytest.param(
            _raw(kind="cancel_job", job_id="j", extra=1),
            "unknown field `extra`",
            id="unknown-field",
        ),
        pytest.param(
            _raw(kind="submit_jobs", jobs=[_job(colour="red")]),
            "unknown field `colour` - at `$.jobs[0]`",
            id="unknown-nested-field",
        ),
        pytest.param(_raw(kind="cancel_job", job_id="a/b"), "at `$.job_id`", id="id-slash"),
        pytest.param(_raw(kind="cancel_job", job_id="+"), "at `$.job_id`", id="id-plus"),
        pytest.param(_raw(kind="cancel_job", job_id="a#"), "at `$.job_id`", id="id-hash"),
        pytest.param(_raw(kind="cancel_job", job_id=""), "length >= 1", id="id-empty"),
        pytest.param(_raw(kind="cancel_job", job_id="a" * 129), "length <= 128", id="id-long"),
        pytest.param(
            _raw(kind="submit_jobs", jobs=[_job(id="x/y")]), "at `$.jobs[0].id`", id="job-id-slash"
        ),
        pytest.param(
            _raw(kind="heartbeat", agent_id="node+1"), "at `$.agent_id`", id="agent-id-plus"
        ),
        pytest.param(
            _raw(kind="start_part", cpus=0), "Expected `int` >= 1 - at `$.cpus`", id="zero-cpus"
        ),
        pytest.param(_raw(kind="heartbeat", seq=-1), ">= 0 - at `$.seq`", id="negative-seq"),
    ],
)
def test_malformed_payload_is_a_wire_error_that_says_why(payload: bytes, says: str) -> None:
    with pytest.raises(WireError) as caught:
        decode(payload)
    assert says in str(caught.value)
    assert isinstance(caught.value.__cause__, msgspec.MsgspecError)


@pytest.mark.parametrize("reply_to", ["a/b", "+", "#"])
def test_reply_to_that_cannot_be_a_topic_level_is_refused(reply_to: str) -> None:
    with pytest.raises(WireError):
        decode(_raw(kind="status_request", request_id="r", reply_to=reply_to))


def test_infinite_walltime_is_refused() -> None:
    with pytest.raises(WireError):
        decode(_raw(kind="submit_jobs", jobs=[_job(walltime=math.inf)]))


def test_peek_reply_to_of_a_bad_request_gives_its_envelope() -> None:
    bad = _raw(kind="submit_jobs", request_id="r7", reply_to="cli-2", jobs=[_job(procs=0)])
    with pytest.raises(WireError):
        decode(bad)
    assert peek_reply_to(bad) == ("r7", "cli-2")


@pytest.mark.parametrize(
    ("payload", "envelope"),
    [
        pytest.param(b"\xc1", (None, None), id="not-msgpack"),
        pytest.param(msgspec.msgpack.encode([1]), (None, None), id="array"),
        pytest.param(
            _raw(kind="submit_jobs", request_id=3, reply_to=["x"]), (None, None), id="wrong-types"
        ),
        pytest.param(
            _raw(kind="submit_jobs", request_id="r", reply_to=""), ("r", None), id="no-reply-to"
        ),
    ],
)
def test_peek_reply_to_without_a_usable_envelope(
    payload: bytes, envelope: tuple[str | None, str | None]
) -> None:
    assert peek_reply_to(payload) == envelope


# -- properties -----------------------------------------------------------------------

ids = st.from_regex(r"[A-Za-z0-9_.:@-]{1,128}", fullmatch=True)
names = st.text(min_size=1, max_size=128)
positive = st.floats(
    min_value=0.0, exclude_min=True, max_value=1e12, allow_nan=False, allow_infinity=False
)

job_ids = ids.filter(lambda i: i not in (".", "..", "-"))
job_specs = st.builds(
    m.JobSpec,
    id=job_ids,
    procs=st.integers(1, 1_048_576),
    walltime=positive,
    work=positive,
    workload=st.sampled_from(["sleep", "mpi"]),
    user=names,
    group=names,
    qos=st.integers(0, 1_000_000),
    deadline=st.none() | positive,
    malleable=st.booleans(),
    cpu_util=st.floats(
        min_value=0.0, exclude_min=True, max_value=1.0, allow_nan=False, allow_infinity=False
    ),
    ref_speed=st.floats(
        min_value=0.0, exclude_min=True, max_value=1e6, allow_nan=False, allow_infinity=False
    ),
)
submits = st.builds(
    m.SubmitJobs,
    request_id=ids,
    reply_to=ids,
    jobs=st.lists(job_specs, max_size=20).map(tuple),
)


@given(job_specs)
def test_job_spec_round_trips_inside_a_start_part(job: m.JobSpec) -> None:
    message = m.StartPart(job=job, cpus=job.procs)
    assert decode(encode(message)) == message


@given(submits)
def test_submit_jobs_round_trips(message: m.SubmitJobs) -> None:
    assert decode(encode(message)) == message


messages = st.one_of(
    st.sampled_from(ONE_OF_EACH),
    submits,
    job_specs.map(lambda job: m.StartPart(job=job, cpus=job.procs)),
)


@st.composite
def payloads(draw: st.DrawFn) -> tuple[bytes, m.Message | None]:
    """Bytes to decode, and the message they must decode to if they are one's encoding.

    A third are a message's encoding, a third the same with one byte replaced or the
    tail cut off (mostly refused, sometimes another valid message), a third noise.
    """
    source = draw(st.sampled_from(["message", "damaged", "noise"]))
    if source == "noise":
        return draw(st.binary(max_size=256)), None
    message = draw(messages)
    data = encode(message)
    if source == "message":
        return data, message
    at = draw(st.integers(0, len(data) - 1))
    if draw(st.booleans()):
        return data[:at], None
    return data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1 :], None


def outcome(payload: bytes) -> m.AnyMessage | WireError:
    """What decoding ``payload`` gives: a message, or the WireError it raised (only that
    type is caught: any other exception fails the test that asks)."""
    try:
        return decode(payload)
    except WireError as exc:
        return exc


def assert_decodes_as_documented(payload: bytes, meant: m.Message | None = None) -> None:
    """``payload`` decodes to a message that re-encodes to the same bytes (``meant``, if
    given), or raises the documented WireError with one of its reasons; hypothesis
    counts which (``--hypothesis-show-statistics``)."""
    got = outcome(payload)
    if isinstance(got, WireError):
        assert meant is None, f"the encoding of {meant!r} was refused: {got}"
        assert got.reason in REASONS
        assert str(got).startswith(
            ("not a msgpack message", "unknown message kind", "invalid message", "message too")
        )
        event(f"refused: {got.reason}")
        return
    if meant is not None:
        assert got == meant
    # Compared as bytes: a float field may decode to NaN, which equals nothing.
    assert encode(decode(encode(got))) == encode(got)
    event(f"decoded: {type(got).__struct_config__.tag}")


@given(payloads())
@example((encode(HEARTBEAT), HEARTBEAT))
@example((b"\xc1", None))
def test_any_bytes_decode_to_a_message_that_round_trips_or_raise_a_wire_error(
    case: tuple[bytes, m.Message | None],
) -> None:
    assert_decodes_as_documented(*case)


kinds = st.sampled_from(sorted(cls.__struct_config__.tag for cls in typing.get_args(m.AnyMessage)))
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
field_names = st.sampled_from(["v", "job_id", "jobs", "procs", "seq", "reply_to", "cpus", "x"])


@given(kinds, st.dictionaries(field_names, values, max_size=4))
@example("heartbeat", {"seq": 3})
@example("heartbeat", {"x": 1})
def test_well_formed_msgpack_of_any_shape_decodes_or_raises_a_wire_error(
    kind: str, fields: dict[str, Any]
) -> None:
    payload = msgspec.msgpack.encode({"kind": kind} | fields)
    got = outcome(payload)
    if isinstance(got, WireError):
        # Well-formed msgpack of a known kind: only its fields can be wrong.
        assert got.reason == "invalid", got
        event("refused")
        return
    assert type(got).__struct_config__.tag == kind
    assert encode(decode(encode(got))) == encode(got)
    event("decoded")
