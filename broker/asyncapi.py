"""The wire contract as an AsyncAPI 3.0 document, built from the types that enforce it.

Theory of operation. A client written in another language, a Node-RED flow
or ``mosquitto_sub`` piped into a msgpack decoder needs three things to talk
to a cluster: the topics and who may use each, the shape of every message,
and the rules of the exchange (QoS, retained topics, where replies go, what
makes a request idempotent). :func:`document` puts all three in one AsyncAPI
document, and takes each from where the runtime takes it:

- the addresses from :class:`~broker.topics.Topics` (each parameter a
  placeholder level such as ``{user}``);
- who may publish and read each topic from :func:`broker.auth.grants`, the
  function that writes Mosquitto's ACL file, matched against the address;
- every message's JSON Schema from its msgspec struct
  (:func:`msgspec.json.schema_components`): field names, types, bounds,
  patterns, defaults and the ``kind`` tag;
- the payload limit from :data:`broker.codec.MAX_PAYLOAD` and the version
  from :data:`broker.topics.PROTOCOL_VERSION`.

What no type can say (what a channel is for, its QoS and retain flag, which
side sends what) is the table :data:`CHANNELS` below, next to the code that
names the topics. The document describes the *scheduler*: ``send`` is what
the scheduler publishes, ``receive`` what it reads; a client does the
opposite. Agent-to-job channels have no operation of the scheduler's.

``docgen`` writes it as YAML and JSON and renders it in the documentation
site; a test fails when the committed files differ from what this builds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

import msgspec

from broker import messages as m
from broker.auth import ROLES, Account, Role, grants
from broker.codec import MAX_PAYLOAD, REASONS
from broker.limits import MAX_REPLY_BYTES
from broker.topics import DEFAULT_ROOT, PROTOCOL_VERSION, Topics, matches

#: The media type of every payload (msgpack; https://msgpack.org).
CONTENT_TYPE: Final = "application/msgpack"

Action = Literal["send", "receive"]

#: Placeholder levels of the addresses, with what each stands for.
PARAMETERS: Final[dict[str, str]] = {
    "user": "A user's name: the identity its login speaks for (`alice` for the logins "
    "`alice` and `alice~2`).",
    "admin": "An admin's name.",
    "client": "The `reply_to` of a request: an id the client chose (letters, digits, "
    "`_ . : @ -`, at most 128).",
    "agent": "A machine's id, as its agent registered it.",
    "job": "A job's id.",
    "part": "A part's index within its job, from 0.",
}

#: Every message of one group of requests, and the replies they get.
_REQUESTS: Final = (m.SubmitJobs, m.CancelJob, m.CancelJobs, m.StatusRequest, m.HistoryRequest)
_REPLIES: Final = (
    m.SubmitReply,
    m.CancelReply,
    m.CancelJobsReply,
    m.StatusReply,
    m.HistoryReply,
    m.ErrorReply,
)


@dataclass(frozen=True, slots=True)
class Channel:
    """One topic of the protocol: its address, what it carries and how."""

    key: str
    address: str
    summary: str
    messages: tuple[type[m.Message], ...]
    #: QoS its publisher uses; a subscriber should ask for at least this.
    qos: Literal[0, 1]
    retained: bool
    #: What the scheduler does on it (None: agents and job processes only).
    action: Action | None
    #: A reply's channel, for a request channel.
    reply: str | None = None
    #: Raw bytes instead of a message (MPI-like ranks' data).
    raw: bool = False
    note: str = ""


def channels(topics: Topics) -> tuple[Channel, ...]:
    """The protocol's channels under ``topics.root``, in the order a reader meets them."""
    return (
        Channel(
            "userRequests",
            topics.user_requests("{user}"),
            "A logged-in user's requests to the scheduler. The requester is the topic's "
            "last level (the broker's ACL lets only that user publish here), never a field "
            "of the payload: a submitted job's `user` is replaced by it.",
            _REQUESTS,
            qos=1,
            retained=False,
            action="receive",
            reply="userReplies",
        ),
        Channel(
            "adminRequests",
            topics.admin_requests("{admin}"),
            "An admin's requests: like a user's, and an admin may cancel any job and "
            "submit jobs for any user (the spec's `user` is kept).",
            _REQUESTS,
            qos=1,
            retained=False,
            action="receive",
            reply="userReplies",
        ),
        Channel(
            "userReplies",
            topics.user_replies("{user}", "{client}"),
            "The scheduler's answer to one request of a logged-in user (or admin), on "
            "`{client}` = the request's `reply_to`. Only that user and admins may read "
            "`users/{user}/#`. Subscribe before you publish the request.",
            _REPLIES,
            qos=1,
            retained=False,
            action="send",
        ),
        Channel(
            "userEvents",
            topics.user_events("{user}"),
            "Every event of the jobs `{user}` owns (published when the broker has logins).",
            (m.JobEvent,),
            qos=1,
            retained=False,
            action="send",
        ),
        Channel(
            "requests",
            topics.requests,
            "Requests on a broker without logins (identity-less). Under the ACL no login "
            "may publish here.",
            _REQUESTS,
            qos=1,
            retained=False,
            action="receive",
            reply="clientReplies",
        ),
        Channel(
            "clientReplies",
            topics.replies("{client}"),
            "Replies to requests made on the identity-less `requests` topic.",
            _REPLIES,
            qos=1,
            retained=False,
            action="send",
        ),
        Channel(
            "events",
            topics.events,
            "Every job's events, for watchers (admins, or anyone on a broker without logins).",
            (m.JobEvent,),
            qos=1,
            retained=False,
            action="send",
        ),
        Channel(
            "cluster",
            topics.cluster,
            "The cluster at a glance, retained: a new subscriber gets the latest at once. "
            "Republished when it changes (at most every few seconds), at QoS 0: it is "
            "news, the `StatusReply` is the authority.",
            (m.ClusterSummary,),
            qos=0,
            retained=True,
            action="send",
        ),
        Channel(
            "agentState",
            topics.agent_state("{agent}"),
            "An agent's registration, retained while it lives; its Last Will and its "
            "goodbye (`AgentOffline`) replace it.",
            (m.AgentOnline, m.AgentOffline),
            qos=1,
            retained=True,
            action="receive",
        ),
        Channel(
            "agentEvents",
            topics.agent_events("{agent}"),
            "An agent's heartbeats and its parts' reports.",
            (m.Heartbeat, m.PartStarted, m.PartProgress, m.PartFinished),
            qos=1,
            retained=False,
            action="receive",
        ),
        Channel(
            "agentCommands",
            topics.agent_commands("{agent}"),
            "The scheduler's commands to one agent.",
            (m.StartPart, m.ResizePart, m.CancelPart),
            qos=1,
            retained=False,
            action="send",
        ),
        Channel(
            "jobControl",
            topics.job_control("{job}"),
            "An agent to its job process (relayed over the agent's own connection): the "
            "latest resize or cancel, retained, cleared (an empty payload) when the part "
            "starts and ends.",
            (m.ResizePart, m.CancelPart),
            qos=1,
            retained=True,
            action=None,
        ),
        Channel(
            "jobRanks",
            topics.job_ranks("{job}", 0).removesuffix("/0") + "/{part}",
            "An MPI-like job's part to its other parts: the part's latest contribution, "
            "raw bytes (not msgpack; see `nodeagent.job.mpi`), retained, cleared at the end.",
            (),
            qos=1,
            retained=True,
            action=None,
            raw=True,
        ),
        Channel(
            "agentJobControl",
            topics.agent_job_control("{agent}", "{job}"),
            "Reserved under the agent's own subtree for its job processes; no process of "
            "this version publishes here.",
            (),
            qos=1,
            retained=False,
            action=None,
            raw=True,
        ),
    )


# -- who may do what ---------------------------------------------------------------------


def _sample(role: Role) -> Account:
    """An account of ``role`` whose identity is the address placeholder of its kind."""
    identity = {"scheduler": "scheduler", "agent": "{agent}", "user": "{user}", "admin": "{admin}"}
    login = {"agent": "agent-{agent}"}.get(role, identity[role])
    return Account(login, role, identity[role], "-")


def access(address: str, topics: Topics) -> dict[str, list[str]]:
    """Who may publish and who may read ``address``, from the ACL's grants.

    A role reaches a channel "own" when the matching grant names its identity
    (a user on ``users/{user}/#``: that user only), "any" when it does not.
    """
    out: dict[str, list[str]] = {"publish": [], "read": []}
    for role in ROLES:
        account = _sample(role)
        # An admin is also a user under its own name (it may request as one).
        seen = address.replace("{user}", account.identity) if role == "admin" else address
        own = account.identity if account.identity.startswith("{") else None
        for verb, wanted in (("publish", "write"), ("read", "read")):
            scopes = {
                "own" if own is not None and own in pattern else "any"
                for how, pattern in grants(account, topics)
                if how in (wanted, "readwrite") and matches(pattern, seen)
            }
            if scopes:
                scope = "any" if "any" in scopes else "own"
                out[verb].append(role if scope == "any" else f"{role} (own)")
    return out


# -- the document ---------------------------------------------------------------------------


def _message_key(cls: type[m.Message]) -> str:
    return cls.__name__


def _tag(cls: type[m.Message]) -> str:
    tag = msgspec.inspect.type_info(cls)
    assert isinstance(tag, msgspec.inspect.StructType)
    return str(tag.tag)


def _operation_key(channel: Channel) -> str:
    return f"{channel.action}{channel.key[0].upper()}{channel.key[1:]}"


def _channel(channel: Channel, topics: Topics) -> dict[str, Any]:
    who = access(channel.address, topics)
    params = [p for p in PARAMETERS if "{" + p + "}" in channel.address]
    out: dict[str, Any] = {
        "address": channel.address,
        "title": channel.key,
        "summary": channel.summary,
    }
    if channel.raw:
        out["description"] = "Carries raw bytes, not a message of this document."
    out["messages"] = {
        _message_key(cls): {"$ref": f"#/components/messages/{_message_key(cls)}"}
        for cls in channel.messages
    }
    if params:
        out["parameters"] = {p: {"description": PARAMETERS[p]} for p in params}
    out["bindings"] = {"mqtt": {"bindingVersion": "0.2.0"}}
    out["x-qos"] = channel.qos
    out["x-retained"] = channel.retained
    out["x-acl"] = who
    return out


def _operation(channel: Channel) -> dict[str, Any]:
    assert channel.action is not None
    ref = f"#/channels/{channel.key}"
    out: dict[str, Any] = {
        "action": channel.action,
        "channel": {"$ref": ref},
        "summary": channel.summary.split(". ")[0].rstrip(".") + ".",
        "messages": [{"$ref": f"{ref}/messages/{_message_key(cls)}"} for cls in channel.messages],
        "bindings": {
            "mqtt": {"qos": channel.qos, "retain": channel.retained, "bindingVersion": "0.2.0"}
        },
    }
    if channel.reply is not None:
        out["reply"] = {
            "address": {
                "description": "The request's `reply_to` is the last level of the reply topic.",
                "location": "$message.payload#/reply_to",
            },
            "channel": {"$ref": f"#/channels/{channel.reply}"},
        }
    return out


def _messages(schemas: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for cls in _all_messages():
        name = _message_key(cls)
        doc = (cls.__doc__ or "").strip()
        out[name] = {
            "name": _tag(cls),
            "title": name,
            "summary": " ".join(doc.split()) if doc else f"`kind` = `{_tag(cls)}`.",
            "contentType": CONTENT_TYPE,
            "payload": {"$ref": f"#/components/schemas/{name}"},
        }
        assert name in schemas
    return out


def _all_messages() -> tuple[type[m.Message], ...]:
    """Every kind of :data:`broker.messages.AnyMessage`, in its declared order."""
    info = msgspec.inspect.type_info(m.AnyMessage)
    assert isinstance(info, msgspec.inspect.UnionType)
    found: list[type[m.Message]] = []
    for t in info.types:
        assert isinstance(t, msgspec.inspect.StructType)
        assert issubclass(t.cls, m.Message)
        found.append(t.cls)
    return tuple(found)


def schemas() -> dict[str, Any]:
    """The JSON Schema of every message and of the structs inside them, by name."""
    _, components = msgspec.json.schema_components(
        _all_messages(), ref_template="#/components/schemas/{name}"
    )
    return dict(sorted(components.items()))


#: Field notes the types cannot carry yet: what a string field's values are.
FIELD_NOTES: Final[dict[tuple[str, str], str]] = {
    ("JobEvent", "event"): (
        "`finished`, `failed` and `cancelled` are final: no event of the job follows. "
        "`queued` is published only by a scheduler run with `--job-events all`; by "
        "default a job's first event is `running`."
    ),
    ("JobStatus", "state"): "Only `queued` or `running`: status lists the jobs not yet final.",
    ("StatusReply", "next_cursor"): "The next page's `StatusRequest.cursor`; none on the last.",
    ("CancelJobs", "patterns"): "Shell patterns over job ids: `*`, `?`, `[...]`, `[!...]`.",
    ("SubmitResult", "reason"): "Why a job was refused, in words; None when accepted.",
    ("ErrorReply", "error"): "What was wrong with the request, in words.",
}


def _with_notes(components: dict[str, Any]) -> dict[str, Any]:
    for (struct, field), note in FIELD_NOTES.items():
        components[struct]["properties"][field]["description"] = note
    return components


RULES: Final = f"""\
The live runtime's wire contract: what a client in any language needs to \
submit, follow and cancel jobs, and what the scheduler and its agents say to \
each other. This document describes the scheduler: `send` is what it \
publishes, `receive` what it reads; a client does the opposite.

**Encoding.** Every payload is one msgpack map (`{CONTENT_TYPE}`) whose keys \
are the field names of its schema. The field `kind` (the tag) names the \
message; `v` is the sender's protocol version ({PROTOCOL_VERSION}; a \
message of another version is refused). Unknown fields are refused, so is \
a payload over {MAX_PAYLOAD:,} bytes. A field left out takes its default. \
Times are seconds (floats). What the scheduler publishes is dated in cluster \
seconds since its journal's epoch (wall seconds times the cluster's time \
scale K); a job's `walltime`, `work` and `deadline` are cluster seconds too. \
Fields named `*_seconds` and `lease` are wall seconds; `issued` is a Unix time.

**Topics.** Every address starts with the root `{DEFAULT_ROOT}` (the \
protocol version is part of it; a cluster may use another root). A level in \
braces is a parameter.

**Logins.** On a broker with logins (the default of `accordion up` with \
Mosquitto) each channel's `x-acl` lists the roles that may publish and read \
it (`own`: only on its own identity's topics); the broker, not the payload, \
says who sent a message. The client id is the login \
(`use_username_as_clientid`), so one login holds one connection at a time.

**What a client must do.**

1. Subscribe to its reply topic (`users/{{user}}/replies/{{client}}`, QoS 1) \
*before* publishing a request, with `{{client}}` an id of its own choosing; \
to follow jobs, also to `users/{{user}}/events` (QoS 1).
2. Publish each request at QoS 1 on `scheduler/requests/{{user}}`, with a \
fresh `request_id` and `reply_to` = `{{client}}`. The reply carries the same \
`request_id`.
3. Expect duplicates (QoS 1 may deliver twice): requests are idempotent. A \
`SubmitJobs` sent again with the same job id and the same spec is accepted \
again as a `duplicate` and starts nothing new; the same id with another spec \
is refused. A submission whose reply did not come may be sent again unchanged.
4. A request that cannot be read is answered with an `ErrorReply` (when its \
`request_id` and `reply_to` can be read) and counted, never acted on.
5. Each job's events carry `seq`, 1, 2, ... without gaps. A watcher that sees \
a jump asks for the missing ones with a `HistoryRequest`. Events are \
published after they are durable in the scheduler's journal; a job ends with \
`finished`, `failed` or `cancelled`. The scheduler's `--job-events` says \
which it publishes: `lifecycle` (the default) all but `queued`, so a job's \
first event is `running`; `all`; or `none`.
6. `cluster` and agents' `state` are retained: a subscriber gets the latest \
at once. An empty retained payload clears a topic and is not a message.
7. A `StatusReply` is one page: at most `limit` jobs and at most \
{MAX_REPLY_BYTES:,} bytes. When `next_cursor` is set, send the same request \
with `cursor` set to it for the next page. Its `totals` count every page.
8. Never publish more than {MAX_PAYLOAD:,} bytes: the broker drops it unseen \
(Mosquitto's `message_size_limit`), and a larger packet closes the connection.

Bad payloads are counted by reason ({", ".join(f"`{r}`" for r in REASONS)}) \
in the receiver's metrics and dropped: no input ends a process.
"""


def document(topics: Topics | None = None) -> dict[str, Any]:
    """The AsyncAPI 3.0 document of the protocol under ``topics`` (the default root)."""
    topics = topics or Topics()
    table = channels(topics)
    components = _with_notes(schemas())
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "Accordion wire contract",
            "version": str(PROTOCOL_VERSION),
            "description": RULES,
            "license": {"name": "Apache-2.0"},
        },
        "defaultContentType": CONTENT_TYPE,
        "servers": {
            "local": {
                "host": "127.0.0.1:1883",
                "protocol": "mqtt",
                "protocolVersion": "3.1.1",
                "description": "A broker of `accordion up` (its port is printed at start). "
                "MQTT 3.1.1 or 5: correlation travels in the payload, not in MQTT 5 "
                "properties.",
            }
        },
        "channels": {c.key: _channel(c, topics) for c in table},
        "operations": {_operation_key(c): _operation(c) for c in table if c.action is not None},
        "components": {"messages": _messages(components), "schemas": components},
    }
