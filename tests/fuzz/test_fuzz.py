"""No payload crashes a receiver: 100,000 hostile payloads per topic family, counted.

Each family's corpus (``tests.fuzz.corpus``) goes through the codec and then
through the real receiver's decode-and-dispatch function, in-process and
without a network round trip so the whole run takes seconds: the scheduler
actor's ``_on_delivery`` (requests, agent state, agent events), the node
agent's ``_command`` (its commands topic) and the job process's ``_handle``
(its control topic) and an MPI-like leader's ``_take_remote`` (its job's ranks
topics). Nothing may escape, and every payload the codec refuses
must show in the receiver's count of bad messages.
"""

from __future__ import annotations

import asyncio
import random
import struct
from pathlib import Path

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from broker.bus import Delivery
from broker.codec import MAX_PAYLOAD, REASONS, WireError, decode, encode, peek_reply_to
from broker.memory import MemoryBroker
from broker.messages import AnyMessage, Heartbeat, StartPart
from broker.topics import Topics
from nodeagent.job.mpi import MpiJob
from nodeagent.job.sleep_job import SleepJob
from nodeagent.launch.contract import Launch, MpiParams
from nodeagent.launch.spawn import Spawn
from scheduler.policies.registry import build_policy
from scheduler.runtime.actor import SchedulerActor
from scheduler.runtime.clock import ManualClock
from scheduler.runtime.exporter import BAD_MESSAGE_REASONS
from scheduler.runtime.journal import Journal
from tests.fuzz.corpus import BY_NAME, FAMILIES, POISON, Family, payloads
from tests.nodeagent.harness import running_agent, settled

N = 100_000
TOPICS = Topics("fuzz/v1")


def _refused(payload: bytes) -> bool:
    try:
        decode(payload)
    except WireError:
        return True
    return False


# -- the codec ------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_codec_raises_only_wire_errors_with_a_bounded_reason(family: Family) -> None:
    reasons: dict[str, int] = {}
    for payload in payloads(family, N):
        peek_reply_to(payload)  # never raises
        try:
            decode(payload)
        except WireError as exc:
            reasons[exc.reason] = reasons.get(exc.reason, 0) + 1
    assert set(reasons) <= set(REASONS)
    assert sum(reasons.values()) > N * 0.9  # the corpus is mostly garbage, as meant


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (POISON[0], "invalid"),  # a bare (broken) string is not a message
        (POISON[1], "not_msgpack"),  # {"kind": <invalid UTF-8>}
        (b"\x91" * 100_000 + b"\xc0", "invalid"),
        (b"\x81\xa4kind" + b"\x91" * 100_000 + b"\xc0", "unknown_kind"),
        (b"\x81\xa1x" + b"\x91" * 100_000 + b"\xc0", "not_msgpack"),
        (b"\x81\xa1x\xdd\xff\xff\xff\xff", "not_msgpack"),  # 4 billion items claimed
        (b"\x00" * (MAX_PAYLOAD + 1), "too_large"),
        (b"\x81\xa4kind\xa3xyz", "unknown_kind"),
        # A whole heartbeat, then a byte too many.
        (encode(Heartbeat(agent_id="a", seq=1, running=())) + b"\x81", "not_msgpack"),
    ],
)
def test_hostile_payload_reason(payload: bytes, reason: str) -> None:
    with pytest.raises(WireError) as caught:
        decode(payload)
    assert caught.value.reason == reason
    assert peek_reply_to(payload) == (None, None)


def test_peek_reply_to_reads_the_envelope_beside_a_broken_string() -> None:
    payload = b"\x83\xa4kind\xa1\xff\xaarequest_id\xa2r1\xa8reply_to\xa3cli"
    assert peek_reply_to(payload) == ("r1", "cli")
    assert peek_reply_to(b"\x82\xaarequest_id\xa1\xff\xa8reply_to\xa3cli") == (None, "cli")


@settings(max_examples=2000)
@given(st.binary(max_size=512))
@example(b"\x81\xa4kind\xa9heartbeat")  # {"kind": "heartbeat"}: a valid message
@example(b"\xc1")  # a byte msgpack never uses
def test_any_bytes_round_trip_or_raise_only_a_wire_error(payload: bytes) -> None:
    peek_reply_to(payload)  # never raises
    got: AnyMessage | WireError
    try:
        got = decode(payload)
    except WireError as exc:  # any other exception fails the test
        got = exc
    if isinstance(got, WireError):
        assert got.reason in REASONS
        event(f"refused: {got.reason}")
    else:
        # Compared as bytes: a float field may decode to NaN, which equals nothing.
        assert encode(decode(encode(got))) == encode(got)
        event("decoded")


# -- the scheduler ----------------------------------------------------------------------


def _bad_count(actor: SchedulerActor) -> float:
    """What the metrics endpoint would serve (its registry, not client_python's insides)."""
    sample = actor.metrics.registry.get_sample_value
    return sum(
        sample("accordion_scheduler_bad_messages_total", {"reason": r}) or 0.0
        for r in ("not_msgpack", "unknown_kind", "invalid")
    )


@pytest.mark.parametrize(
    ("family", "topic"),
    [
        ("requests", TOPICS.requests),
        ("agent_state", TOPICS.agent_state("fz-node")),
        ("agent_events", TOPICS.agent_events("fz-node")),
    ],
)
def test_scheduler_survives_and_counts(family: str, topic: str, tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.sqlite")
    journal.ensure_meta(epoch=0.0, time_scale=1.0, policy="fcfs")
    broker = MemoryBroker()
    actor = SchedulerActor(
        broker.client("scheduler"),
        TOPICS,
        policy=build_policy("fcfs"),
        journal=journal,
        clock=ManualClock(1.0),
    )
    refused = 0
    for i, payload in enumerate(payloads(BY_NAME[family], N)):
        # An empty retained state is MQTT's delete, not a message: not counted.
        refused += _refused(payload) and not (family == "agent_state" and not payload)
        actor._on_delivery(Delivery(topic, payload), float(i))
        actor.ctx.out.take()  # the replies would go to a client we are not
    assert refused > 0
    assert _bad_count(actor) == refused
    assert set(BAD_MESSAGE_REASONS) >= {"not_msgpack", "unknown_kind", "invalid"}
    journal.close()


# -- the node agent ----------------------------------------------------------------------


async def _no_spawn(launch: Launch) -> asyncio.subprocess.Process:
    raise AssertionError(f"the fuzzer's StartPart for {launch.job_id} was not filtered out")


async def test_agent_survives_and_counts() -> None:
    spawn: Spawn = _no_spawn
    refused = 0
    async with running_agent(name="fz-node", spawn=spawn) as run:
        for payload in payloads(BY_NAME["agent_commands"], N):
            try:
                message = decode(payload)
            except WireError:
                refused += 1
            else:
                if isinstance(message, StartPart):
                    continue  # a valid start is a real process: tests/nodeagent covers those
            await run.scheduler.send_raw(payload)
        await settled(run.scheduler)
        stats = run.agent.stats()
    assert refused > N * 0.9
    # Refused payloads, plus valid messages that are no command for an agent.
    assert stats.bad_messages >= refused
    assert stats.parts_running == 0


# -- the job process -----------------------------------------------------------------------


async def test_job_process_survives_and_counts() -> None:
    broker = MemoryBroker()
    launch = Launch(
        agent="fz-node", job_id="fz-1", procs=2, cpus=2, pace=1.0, work=1e6, root=TOPICS.root
    )
    async with broker.client("job-fz") as bus:
        job = SleepJob(launch, bus)
        topic = TOPICS.job_control("fz-1")
        refused = 0
        for payload in payloads(BY_NAME["job_control"], N):
            # An empty payload clears a retained message; the job ignores it.
            refused += _refused(payload) and bool(payload)
            await job._handle(Delivery(topic, payload))
    assert refused > N * 0.9
    assert job.bad_messages >= refused


# -- an MPI-like job's ranks topics ---------------------------------------------------------


async def test_mpi_leader_survives_hostile_rank_frames_and_counts() -> None:
    params = MpiParams(message_bytes=64)
    launch = Launch(
        agent="fz-node",
        job_id="fz-m",
        procs=4,
        cpus=4,
        pace=1.0,
        work=1.0,
        root=TOPICS.root,
        workload="mpi",
        mpi=params,
        ranks=2,
        total_ranks=4,
        part=0,
        parts=2,
    )
    rng = random.Random(10)
    broker = MemoryBroker()
    good = struct.pack("!II", 1, 3) + bytes(64)
    expected_bad = 0
    async with broker.client("job-fz-m") as bus:
        job = MpiJob(launch, bus, [])
        for i in range(N):
            part = rng.choice(("1", "0", "7", "x", "", "1/2"))
            kind = i % 3
            if kind == 0:
                payload = rng.randbytes(rng.randrange(0, 100))
            elif kind == 1:  # a valid frame, mutated
                payload = bytearray(good)
                for _ in range(rng.randrange(1, 4)):
                    payload[rng.randrange(len(payload))] = rng.randrange(256)
                payload = bytes(payload[: rng.randrange(len(payload) + 1)])
            else:
                payload = good
            topic = f"{TOPICS.root}/jobs/fz-m/ranks/{part}"
            expected_bad += _bad_rank_frame(topic, payload, part)
            job._take_remote(Delivery(topic, payload))
    assert job.bad_messages == expected_bad
    assert expected_bad > N * 0.3
    # Only frames of this attempt from part 1 were kept, and only well-formed ones.
    _, data = job._remote[1]
    assert len(data) == 64
    assert set(job._remote) == {1}


def _bad_rank_frame(topic: str, payload: bytes, part: str) -> int:
    """Whether the leader must count this frame as malformed (its documented rules)."""
    if topic.endswith("/ranks/0") or not payload:
        return 0  # its own echo, or a cleared retained frame
    try:
        number = int(topic.rsplit("/ranks/", 1)[1])
        attempt, _ = struct.unpack_from("!II", payload)
    except (ValueError, struct.error):
        return 1
    if attempt != 1 or not 0 <= number < 2:
        return 0  # another start's, or no part of ours: ignored, not malformed
    return int(len(payload) - 8 != 64)
