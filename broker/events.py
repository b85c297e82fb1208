"""What everyone may hear: each job's events (``JobEvent``, on the scheduler-wide
stream and its owner's) and the cluster's summary (``ClusterSummary``, retained).
``broker.messages`` says the rules every message follows.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from broker.fields import Cpus, ExitStatus, Message, PartSpec, Seq, Signal
from broker.vocabulary import JobEventKind, JobState


class ClusterSummary(Message, tag="cluster_summary", frozen=True, kw_only=True):
    now: float
    machines: Annotated[int, msgspec.Meta(ge=0)]
    cpus: Annotated[int, msgspec.Meta(ge=0)]
    free: Annotated[int, msgspec.Meta(ge=0)]
    queued: Annotated[int, msgspec.Meta(ge=0)]
    running: Annotated[int, msgspec.Meta(ge=0)]
    policy: str


class JobEvent(Message, tag="job_event", frozen=True, kw_only=True):
    """One thing that happened to a job (``event``), journalled before it is published
    (QoS 1). ``seq`` counts a job's events from 1 without gaps, so a watcher that
    sees a jump knows it missed some and asks for them (``HistoryRequest``).
    ``stream`` numbers the events of the stream it is published on, from 1 without
    gaps: every job's on ``events``, one user's on ``users/<user>/events``; a
    watcher that sees a jump there (or reconnects) missed events of jobs it may
    not know yet, and asks for them by number (``EventsRequest``)."""

    job_id: str
    event: JobEventKind
    at: float
    seq: Seq
    detail: str = ""
    #: A ``resized`` event's CPUs of the job (all parts) before and after; None on
    #: other events and from an older sender.
    cpus_before: Cpus | None = None
    cpus_after: Cpus | None = None
    #: A command job's final event: its command's exit status, or the signal that
    #: ended it, when its agent could tell; None otherwise.
    exit_status: ExitStatus | None = None
    signal: Signal | None = None
    #: A ``running`` or ``resized`` event's parts of the job from then on (where it
    #: runs, for a chart of the schedule); empty on the other kinds, which place
    #: nothing.
    parts: Annotated[tuple[PartSpec, ...], msgspec.Meta(max_length=65_536)] = ()
    #: None from an older sender; in a ``HistoryReply``, the scheduler-wide number.
    stream: Annotated[int, msgspec.Meta(ge=1)] | None = None

    @property
    def state(self) -> JobState:
        """The job's state once the event happened (a function of its kind)."""
        return self.event.state


def in_stream(event: JobEvent, stream: int | None) -> JobEvent:
    """``event`` as it is published on another stream: with that stream's number."""
    return msgspec.structs.replace(event, stream=stream)
