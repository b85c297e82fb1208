"""Hostile payloads for every topic family: seeded random bytes and mutants of valid messages.

A :class:`Family` is what one receiver listens to (the scheduler's requests,
an agent's state and events, an agent's commands, a job's control topic),
with valid seed messages of the kinds that travel there. :func:`payloads`
yields ``n`` payloads for a family from a seeded ``random.Random``, so a
failure names a reproducible index: a third random bytes (any length up to
300), two thirds mutants of an encoded seed (bytes flipped, set to 0xff or
0xc1, truncated, spliced, inserted, a string's UTF-8 broken, nesting
deepened). Most do not decode; some do, and receivers must handle those too.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from broker import messages as m
from broker.codec import encode
from tests.builders import spec

JOB = spec("fz-1", 2, walltime=100.0, work=10.0, user="alice")

# Poison payloads: an invalid UTF-8 string, bare and as a map's value (msgspec lets a
# UnicodeDecodeError escape on them, which the codec must turn into a WireError).
POISON = (bytes.fromhex("a1ff"), bytes.fromhex("81a46b696e64a1ff"))


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    seeds: tuple[bytes, ...]


FAMILIES = (
    Family(
        "requests",
        tuple(
            encode(msg)
            for msg in (
                m.SubmitJobs(request_id="r1", reply_to="fuzzer", jobs=(JOB,)),
                m.CancelJob(request_id="r2", reply_to="fuzzer", job_id="fz-1"),
                m.StatusRequest(request_id="r3", reply_to="fuzzer"),
            )
        ),
    ),
    Family(
        "agent_state",
        tuple(
            encode(msg)
            for msg in (
                m.AgentOnline(
                    machine=m.MachineSpec(id="fz-node", cpus=4),
                    incarnation="i1",
                    running=(m.RunningPart(job_id="fz-1", cpus=2, started=1.0),),
                ),
                m.AgentOffline(agent_id="fz-node", incarnation="i1", reason="lost"),
            )
        ),
    ),
    Family(
        "agent_events",
        tuple(
            encode(msg)
            for msg in (
                m.Heartbeat(
                    agent_id="fz-node",
                    seq=3,
                    running=(m.RunningPart(job_id="fz-1", cpus=1, started=0.0, attempt=1),),
                ),
                m.PartStarted(job_id="fz-1", agent_id="fz-node", pid=1, at=1.0),
                m.PartProgress(job_id="fz-1", agent_id="fz-node", done=1.0, rate=1.0, at=2.0),
                m.PartFinished(
                    job_id="fz-1", agent_id="fz-node", at=3.0, exit_code=0, reason="done"
                ),
            )
        ),
    ),
    Family(
        "agent_commands",
        tuple(
            encode(msg)
            for msg in (
                m.StartPart(job=JOB, cpus=2),
                m.ResizePart(job_id="fz-1", cpus=1, pace=0.5),
                m.CancelPart(job_id="fz-1"),
            )
        ),
    ),
    Family(
        "job_control",
        tuple(
            encode(msg)
            for msg in (m.ResizePart(job_id="fz-1", cpus=1, pace=0.5), m.CancelPart(job_id="fz-1"))
        ),
    ),
)
BY_NAME = {f.name: f for f in FAMILIES}


def _mutate(rng: random.Random, seed: bytes) -> bytes:
    b = bytearray(seed)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(8)
        i = rng.randrange(len(b)) if b else 0
        if op == 0 and b:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and b:
            b[i] = rng.choice((0xFF, 0xC1, 0x00, 0x7F, 0x80, 0xDC, 0xDF))
        elif op == 2:
            del b[rng.randrange(len(b) + 1) :]
        elif op == 3:
            b[i:i] = rng.randbytes(rng.randint(1, 8))
        elif op == 4:
            # Break a string: 0xa1 0xff is a one-byte str holding invalid UTF-8.
            b[i:i] = b"\xa1\xff"
        elif op == 5 and b:
            j = rng.randrange(len(b))
            b[i], b[j] = b[j], b[i]
        elif op == 6:
            # Wrap in deep arrays (msgspec's recursion limit) or a huge claimed length.
            b = bytearray(b"\x91" * rng.choice((1, 50, 5000)) + b)
        else:
            b[i:i] = rng.choice((b"\xdd\xff\xff\xff\xff", b"\xdf\x7f\xff\xff\xff", b"\xdb\xff\xff"))
    return bytes(b)


def payloads(family: Family, n: int, *, seed: int = 0) -> Iterator[bytes]:
    """``n`` hostile payloads for ``family``, the same for the same ``seed``."""
    rng = random.Random(f"{family.name}-{seed}")
    yield from POISON
    for _ in range(n - len(POISON)):
        if rng.random() < 1 / 3:
            yield rng.randbytes(rng.randint(0, 300))
        else:
            yield _mutate(rng, rng.choice(family.seeds))
