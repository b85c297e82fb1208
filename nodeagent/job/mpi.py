"""The MPI-like workload's leader: one part's job process, serving its ranks.

Theory of operation. The part's job process forks its ranks
(``nodeagent.job.ranks``) and then runs this actor on its bus, the same client
and control topic as the sleep workload (:class:`nodeagent.job.SleepJob`,
whose subscription, control handling, loss detection and reports it
inherits). Per iteration it:

1. gathers one frame from each local rank (their compute phases end there);
2. reduces them locally: the element-wise sum for an ``allreduce``, nothing
   for a ``barrier``;
3. for a job of several parts, exchanges the part's sum with the other parts
   over the bus: it publishes ``attempt, iteration, data`` *retained* on
   ``jobs/<job>/ranks/<part>`` and waits for every other part's frame of the
   same iteration on ``jobs/<job>/ranks/+``. Retained, because a part that
   subscribes late must still find the others' frame; one topic per part and
   not per iteration, because no part can publish iteration ``i + 1`` before
   every part published ``i``, so a retained frame is never overwritten
   before a live subscriber read it, and the broker holds one frame per part,
   not one per iteration. Frames of another attempt or of an earlier
   iteration (retained from an earlier run) are ignored; malformed ones are
   counted in ``bad_messages``;
4. answers every local rank with the job-wide result, releasing it into its
   next compute phase.

Resizes are not the job's business (the agent re-pins the ranks, the job
keeps its ``p`` processes, as in the paper's runtime); a ``ResizePart`` only
updates the rate the reports estimate. Progress reports say the iterations
done (``done`` is that fraction of ``work``) and the CPU utilisation ``u``
measured so far: the ranks' compute wall time over their compute plus
communication wall time.

A rank that exits early fails the part: the leader kills the other ranks,
writes which rank died and how into its failure file (``--failure-file``,
which the agent puts in ``PartFinished.detail``) and exits
:data:`EXIT_RANK_FAILED`. A cancel kills the ranks and reaps them before the
leader exits, so no rank outlives its part.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import struct
from array import array
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from broker.bus import Bus, BusError, Delivery
from broker.codec import encode
from broker.messages import PartProgress
from broker.topics import Topics
from nodeagent.job.ranks import (
    Contribution,
    Rank,
    add_into,
    describe_exit,
    frame,
    parse_contribution,
)
from nodeagent.job.sleep_job import JobSettings, SleepJob
from nodeagent.launch.contract import (
    EXIT_CANCELLED,
    EXIT_DONE,
    EXIT_LOST,
    EXIT_RANK_FAILED,
    Launch,
    MpiParams,
)

log = logging.getLogger(__name__)

_PART_HEAD = struct.Struct("!II")  # attempt, iteration
_T = TypeVar("_T")


class RankFailedError(Exception):
    """A rank left early; the message names it and its exit status."""


@dataclass(slots=True)
class _Streams:
    rank: Rank
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter


class MpiJob(SleepJob):
    """The leader of one part of an MPI-like job (module docstring)."""

    def __init__(
        self,
        launch: Launch,
        bus: Bus,
        ranks: list[Rank],
        *,
        settings: JobSettings | None = None,
        parent_pid: int | None = None,
        on_fenced: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(launch, bus, settings=settings, parent_pid=parent_pid, on_fenced=on_fenced)
        if launch.mpi is None:
            raise ValueError("an MPI-like job needs its parameters")
        self.params: MpiParams = launch.mpi
        self.ranks = ranks
        topics = Topics(launch.root)
        self._mine = topics.job_ranks(launch.job_id, launch.part)
        self._others = topics.all_job_ranks(launch.job_id)
        self._prefix = self._others[:-1]
        # The latest frame of every other part: part -> (iteration, data).
        self._remote: dict[int, tuple[int, bytes]] = {}
        self._remote_changed = asyncio.Event()
        self.iteration = 0
        self.compute_time = 0.0
        self.comm_time = 0.0
        self.failure: str | None = None

    # -- bus --------------------------------------------------------------------------

    async def _subscribed(self) -> bool:
        if self.launch.parts > 1:
            await self._bus.subscribe(self._others)
        return await super()._subscribed()

    async def _read_control(self) -> None:
        """Route rank frames of other parts aside; everything else is a control message."""
        bus_deliveries = self._bus.deliveries()
        try:
            async for delivery in bus_deliveries:
                if delivery.topic.startswith(self._prefix):
                    self._take_remote(delivery)
                else:
                    await self._inbox.put(delivery)
        except BusError as exc:
            self._lost = str(exc)
        else:
            self._lost = "the bus closed"
        self._wake()
        self._remote_changed.set()

    def _take_remote(self, delivery: Delivery) -> None:
        if delivery.topic == self._mine or not delivery.payload:
            return  # our own echo, or a cleared retained frame
        try:
            part = int(delivery.topic[len(self._prefix) :])
            attempt, iteration = _PART_HEAD.unpack_from(delivery.payload)
        except (ValueError, struct.error):
            self.bad_messages += 1
            log.warning("job %s: malformed rank frame on %s", self.launch.job_id, delivery.topic)
            return
        data = delivery.payload[_PART_HEAD.size :]
        if attempt != self.launch.attempt or not 0 <= part < self.launch.parts:
            return  # another start of the job (retained from it), or not a part of ours
        if self.params.doubles and len(data) != 8 * self.params.doubles:
            self.bad_messages += 1
            log.warning("job %s: rank frame of part %d has a bad size", self.launch.job_id, part)
            return
        self._remote[part] = (iteration, data)
        self._remote_changed.set()

    async def _report(self, *, late: float = 0.0) -> None:
        spent = self.compute_time + self.comm_time
        message = PartProgress(
            job_id=self.launch.job_id,
            agent_id=self.launch.agent,
            done=self.done,
            rate=self.rate,
            at=self._clock() - late,
            attempt=self.launch.attempt,
            iteration=self.iteration,
            cpu_util=None if spent <= 0 else min(1.0, self.compute_time / spent),
        )
        await self._bus.publish(self._events, encode(message))

    # -- the iterations ---------------------------------------------------------------

    def _progress(self, now: float) -> float:
        return self.launch.work * self.iteration / self.params.iterations

    async def _work(self) -> int:
        streams = [
            _Streams(rank, *await asyncio.open_connection(sock=rank.sock)) for rank in self.ranks
        ]
        try:
            return await self._iterate(streams)
        except RankFailedError as exc:
            self.failure = str(exc)
            log.error("job %s: %s", self.launch.job_id, exc)
            self._write_failure(str(exc))
            return EXIT_RANK_FAILED
        finally:
            await self._end_ranks()
            for s in streams:
                s.writer.close()

    async def _iterate(self, streams: list[_Streams]) -> int:
        launch = self.launch
        self._changed = self._monotonic()
        await self._report()
        next_report = self._monotonic() + self._settings.report_every
        for iteration in range(self.params.iterations):
            started = self._monotonic()
            got = await self._interruptible(self._gather(streams, iteration))
            if isinstance(got, int):
                return got
            result = self._reduce(got)
            if launch.parts > 1:
                header = _PART_HEAD.pack(launch.attempt, iteration)
                await self._bus.publish(self._mine, header + result, retain=True)
                remote = await self._interruptible(self._exchange(iteration))
                if isinstance(remote, int):
                    return remote
                result = self._combine(result, remote)
            answer = frame(result)
            for s in streams:
                s.writer.write(answer)
            for s in streams:
                await s.writer.drain()
            self.iteration = iteration + 1
            took = self._monotonic() - started
            if took > 0:
                per_iteration = launch.work / self.params.iterations
                self.rate = per_iteration / (took * launch.time_scale)
            self.done = self._progress(0.0)
            if self._monotonic() >= next_report:
                await self._report()
                next_report = self._monotonic() + self._settings.report_every
        finals = await self._interruptible(self._gather(streams, self.params.iterations))
        if isinstance(finals, int):
            return finals
        await self._reap_clean()
        if launch.parts > 1:
            await self._bus.publish(self._mine, b"", retain=True)
        self.done = launch.work
        await self._report()
        return EXIT_DONE

    async def _interruptible(self, awaitable: Coroutine[Any, Any, _T]) -> _T | int:
        """Await ``awaitable``, serving control messages, cancels and loss meanwhile.

        An exit code (int) when the part must stop instead.
        """
        task: asyncio.Task[_T] = asyncio.ensure_future(awaitable)
        try:
            while True:
                if self._cancelled:
                    self.done = self._progress(0.0)
                    await self._report()
                    return EXIT_CANCELLED
                lost = self._lost_why()
                if lost is not None:
                    log.error("job %s: stopping, %s", self.launch.job_id, lost)
                    return EXIT_LOST
                if task.done():
                    return task.result()
                waker = asyncio.ensure_future(self._inbox.get())
                await asyncio.wait(
                    {task, waker}, timeout=self._settings.step, return_when="FIRST_COMPLETED"
                )
                if waker.done():
                    delivery = waker.result()
                    if delivery is not None:
                        await self._handle(delivery)
                else:
                    waker.cancel()
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, RankFailedError):
                    await task

    async def _gather(self, streams: list[_Streams], iteration: int) -> list[Contribution]:
        frames = await asyncio.gather(*(self._read_rank(s) for s in streams))
        for c in frames:
            if c.iteration != iteration:
                raise RankFailedError(f"a rank sent iteration {c.iteration}, not {iteration}")
            self.compute_time += c.compute
            self.comm_time += c.comm
        return frames

    async def _read_rank(self, s: _Streams) -> Contribution:
        try:
            (length,) = struct.unpack("!I", await s.reader.readexactly(4))
            return parse_contribution(await s.reader.readexactly(length))
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            status = await _reap(s.rank.pid)
            raise RankFailedError(
                f"rank {self.launch.rank_offset + s.rank.index} (pid {s.rank.pid}) "
                f"{describe_exit(status)}"
            ) from None

    def _reduce(self, frames: list[Contribution]) -> bytes:
        if not self.params.doubles:
            return b""
        total = array("d", [0.0]) * self.params.doubles
        for c in frames:
            add_into(total, c.data)
        return total.tobytes()

    async def _exchange(self, iteration: int) -> list[bytes]:
        others = [p for p in range(self.launch.parts) if p != self.launch.part]
        while True:
            if all(self._remote.get(p, (-1, b""))[0] == iteration for p in others):
                return [self._remote[p][1] for p in others]
            self._remote_changed.clear()
            await self._remote_changed.wait()

    def _combine(self, local: bytes, remote: list[bytes]) -> bytes:
        if not self.params.doubles:
            return b""
        total = array("d")
        total.frombytes(local)
        for data in remote:
            add_into(total, data)
        return total.tobytes()

    # -- ending -----------------------------------------------------------------------

    async def _reap_clean(self) -> None:
        for rank in self.ranks:
            status = await _reap(rank.pid)
            if status != 0:
                raise RankFailedError(
                    f"rank {self.launch.rank_offset + rank.index} (pid {rank.pid}) "
                    f"{describe_exit(status)}"
                )
        self.ranks = []

    async def _end_ranks(self) -> None:
        """Kill and reap every rank still there (cancel, loss, a sibling's failure)."""
        for rank in self.ranks:
            with contextlib.suppress(ProcessLookupError):
                os.kill(rank.pid, signal.SIGKILL)
        for rank in self.ranks:
            await _reap(rank.pid)
        self.ranks = []

    def _write_failure(self, text: str) -> None:
        path = self.launch.failure_file
        if path is None:
            return
        try:
            with open(path, "w", encoding="utf-8") as out:
                out.write(text[:500])
        except OSError as exc:
            log.warning("job %s: cannot write %s: %s", self.launch.job_id, path, exc)


async def _reap(pid: int) -> int:
    """The wait status of ``pid`` (0 if it was reaped already)."""
    try:
        _, status = await asyncio.to_thread(os.waitpid, pid, 0)
    except ChildProcessError:
        return 0
    return status
