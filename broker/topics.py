"""Every topic name of the protocol, under one configurable root.

Layout (``R`` is the root, ``accordion/v3`` by default; the version is part
of the root so two protocol versions can share a broker):

- ``R/scheduler/requests``: clients to the scheduler; SubmitJobs, CancelJob,
  CancelJobs, StatusRequest, HistoryRequest, EventsRequest, DrainMachine.
- ``R/clients/<client>/replies``: the scheduler to one client; SubmitReply,
  CancelReply, CancelJobsReply, StatusReply, HistoryReply, EventsReply, DrainReply,
  ErrorReply.
- ``R/agents/<agent>/state``: an agent's AgentOnline, retained; its Last Will
  and its goodbye are AgentOffline.
- ``R/agents/<agent>/events``: an agent and its job processes to the
  scheduler; Heartbeat, PartStarted, PartProgress, PartFinished.
- ``R/agents/<agent>/commands``: the scheduler to an agent; StartPart,
  CancelPart, ResizePart.
- ``R/jobs/<job>/control``: an agent to its job process; ResizePart, CancelPart.
- ``R/jobs/<job>/ranks/<part>``: a part of an MPI-like job to the job's other
  parts; its latest contribution (raw bytes, see ``nodeagent.job.mpi``), retained.
- ``R/cluster``: ClusterSummary, retained, for anyone.
- ``R/events``: JobEvent, for watchers.

Commands and events use QoS 1; handlers are idempotent (by job id, part and
sequence number), since QoS 1 may deliver twice.

Identity in the topic (for a broker with credentials and ACLs, see
``broker.auth``). A payload cannot be trusted to say who sent it; the topic
can, because the broker's ACL decides who may publish where. These topics
carry the sender's identity in a level the ACL pins to the login:

- ``R/scheduler/requests/<user>``: a user's requests; the scheduler takes the
  user from the topic, not from the payload.
- ``R/scheduler/admin/<admin>``: an admin's requests (may cancel any job).
- ``R/users/<user>/replies/<client>``: the scheduler's replies to one client
  of that user; only that user (and admins) may read ``R/users/<user>/#``.
- ``R/users/<user>/events``: JobEvents of that user's jobs.
- ``R/agents/<agent>/jobs/<job>/control``: an agent to its job's process, under
  the agent's own subtree so no other agent may write it.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Bumped when a peer of the previous version could not read this one's messages:
#: 2 gave job events a kind, refusals a code and messages required fields; 3 gave
#: polite stops, drains, stream numbers on job events and the requests that use them,
#: status filters, pages and totals, bulk cancel and refusals for the limits of a
#: shared cluster (``broker.messages``).
PROTOCOL_VERSION = 3
DEFAULT_ROOT = f"accordion/v{PROTOCOL_VERSION}"


class TopicError(ValueError):
    """A name that cannot be a topic level (empty, or holding ``/ + #``)."""


def _level(name: str) -> str:
    if not name or any(c in name for c in "/+#\0"):
        raise TopicError(f"{name!r} cannot be a topic level (empty, or has / + # or NUL)")
    return name


def valid_level(name: str) -> str:
    """``name`` if it can be one topic level; else :class:`TopicError`."""
    return _level(name)


@dataclass(frozen=True, slots=True)
class Topics:
    """Topic names under ``root``; ``Topics()`` is the default root."""

    root: str = DEFAULT_ROOT

    def __post_init__(self) -> None:
        if not self.root or self.root.endswith("/") or any(c in self.root for c in "+#\0"):
            raise TopicError(f"bad topic root {self.root!r}")

    @property
    def requests(self) -> str:
        return f"{self.root}/scheduler/requests"

    def replies(self, client: str) -> str:
        return f"{self.root}/clients/{_level(client)}/replies"

    def agent_state(self, agent: str) -> str:
        return f"{self.root}/agents/{_level(agent)}/state"

    def agent_events(self, agent: str) -> str:
        return f"{self.root}/agents/{_level(agent)}/events"

    def agent_commands(self, agent: str) -> str:
        return f"{self.root}/agents/{_level(agent)}/commands"

    def job_control(self, job: str) -> str:
        return f"{self.root}/jobs/{_level(job)}/control"

    def job_ranks(self, job: str, part: int) -> str:
        """A part's MPI-like contribution (retained; ``nodeagent.job.mpi``)."""
        return f"{self.root}/jobs/{_level(job)}/ranks/{part}"

    def all_job_ranks(self, job: str) -> str:
        return f"{self.root}/jobs/{_level(job)}/ranks/+"

    @property
    def cluster(self) -> str:
        return f"{self.root}/cluster"

    @property
    def events(self) -> str:
        return f"{self.root}/events"

    # Subscriptions of the scheduler.
    @property
    def all_agent_states(self) -> str:
        return f"{self.root}/agents/+/state"

    @property
    def all_agent_events(self) -> str:
        return f"{self.root}/agents/+/events"

    # Topics with the sender's identity in them (see the module's docstring).
    def user_requests(self, user: str) -> str:
        return f"{self.root}/scheduler/requests/{_level(user)}"

    def admin_requests(self, admin: str) -> str:
        return f"{self.root}/scheduler/admin/{_level(admin)}"

    @property
    def all_user_requests(self) -> str:
        return f"{self.root}/scheduler/requests/+"

    @property
    def all_admin_requests(self) -> str:
        return f"{self.root}/scheduler/admin/+"

    def user_replies(self, user: str, client: str) -> str:
        return f"{self.root}/users/{_level(user)}/replies/{_level(client)}"

    def user_events(self, user: str) -> str:
        return f"{self.root}/users/{_level(user)}/events"

    def user_subtree(self, user: str) -> str:
        """Everything addressed to ``user``: what their clients subscribe to."""
        return f"{self.root}/users/{_level(user)}/#"

    def agent_job_control(self, agent: str, job: str) -> str:
        return f"{self.root}/agents/{_level(agent)}/jobs/{_level(job)}/control"

    def requester_of(self, topic: str) -> tuple[str, bool] | None:
        """``(identity, is_admin)`` of a ``user_requests``/``admin_requests`` topic, else None."""
        for prefix, admin in (
            (f"{self.root}/scheduler/requests/", False),
            (f"{self.root}/scheduler/admin/", True),
        ):
            if topic.startswith(prefix):
                name = topic[len(prefix) :]
                if name and not any(c in name for c in "/+#\0"):
                    return name, admin
        return None

    def agent_of(self, topic: str) -> str | None:
        """The agent id in an ``R/agents/<agent>/...`` topic, else None."""
        prefix = f"{self.root}/agents/"
        if not topic.startswith(prefix):
            return None
        agent, sep, _ = topic[len(prefix) :].partition("/")
        return agent if sep and agent else None


def matches(pattern: str, topic: str) -> bool:
    """MQTT topic filter matching (``+`` one level, ``#`` the rest)."""
    p_levels = pattern.split("/")
    t_levels = topic.split("/")
    for i, p in enumerate(p_levels):
        if p == "#":
            return True
        if i >= len(t_levels):
            return False
        if p not in ("+", t_levels[i]):
            return False
    return len(p_levels) == len(t_levels)
