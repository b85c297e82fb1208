"""The CPU kernel the MPI-like ranks burn, and the benchmark that measures a machine with it.

Theory of operation. :func:`spin` is a fixed chunk of pure-Python floating
point work (a damped recurrence, so the interpreter cannot skip it). A rank's
compute phase (:func:`burn`) spins chunks until its own CPU time
(``time.process_time``) has grown by the phase's CPU-seconds: the phase costs
the same CPU whatever else runs, and when two ranks share a core its wall
time stretches, which is what the MPL-2 measurements look at.

The benchmark (:func:`benchmark`, ``--speed auto``) spins the same chunk for
``rounds`` rounds of about ``round_seconds`` wall seconds each and scores the
median chunks per *wall* second against :data:`REFERENCE_CHUNKS_PER_SECOND`,
so a machine (or a container) with a CPU quota shows its real, throttled
speed. The reference machine is this project's development VM (2 vCPUs,
CPython 3.11; 14,300 to 15,000 chunks per second measured with
:func:`benchmark` at a load average of 2): a score of 1.0 is that
machine's speed, 2.0 a machine twice as fast. The spread is
``(max - min) / median`` of the rounds: a large one says the machine was
busy while it was measured.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

CHUNK = 2_000
"""Recurrence steps per chunk: about 0.1 ms of CPU on the reference machine."""

REFERENCE_CHUNKS_PER_SECOND = 15_000.0
"""Chunks per wall second of the reference machine (module docstring)."""


def spin(steps: int = CHUNK) -> float:
    """One chunk of the kernel: ``steps`` multiply-adds of a damped recurrence."""
    x = 0.5
    for _ in range(steps):
        x = x * 0.999_999 + 0.000_001
    return x


def burn(cpu_seconds: float, *, cpu_clock: Callable[[], float] = time.process_time) -> int:
    """Spin until this process has used ``cpu_seconds`` more CPU; the chunks spun."""
    end = cpu_clock() + cpu_seconds
    chunks = 0
    while cpu_clock() < end:
        spin()
        chunks += 1
    return chunks


@dataclass(frozen=True, slots=True)
class Score:
    """A benchmark's result: speed relative to the reference, and its spread."""

    score: float
    spread: float
    chunks_per_second: float


def benchmark(
    *,
    rounds: int = 5,
    round_seconds: float = 0.06,
    clock: Callable[[], float] = time.perf_counter,
) -> Score:
    """Measure this machine with the ranks' kernel (module docstring); about 0.3 s."""
    if rounds < 1 or not round_seconds > 0:
        raise ValueError("a benchmark needs rounds >= 1 and round_seconds > 0")
    rates: list[float] = []
    for _ in range(rounds):
        start = clock()
        chunks = 0
        while (elapsed := clock() - start) < round_seconds:
            spin()
            chunks += 1
        rates.append(chunks / elapsed)
    median = statistics.median(rates)
    return Score(
        score=median / REFERENCE_CHUNKS_PER_SECOND,
        spread=(max(rates) - min(rates)) / median,
        chunks_per_second=median,
    )
