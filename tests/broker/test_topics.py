"""Topic names under a root, MQTT filter matching, and the levels refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.topics import DEFAULT_ROOT, PROTOCOL_VERSION, TopicError, Topics, matches


def test_default_root_carries_the_protocol_version() -> None:
    assert Topics().root == DEFAULT_ROOT == f"accordion/v{PROTOCOL_VERSION}"


def test_every_name_under_the_root() -> None:
    t = Topics("test/v1")
    assert t.requests == "test/v1/scheduler/requests"
    assert t.replies("cli-1") == "test/v1/clients/cli-1/replies"
    assert t.agent_state("node-1") == "test/v1/agents/node-1/state"
    assert t.agent_events("node-1") == "test/v1/agents/node-1/events"
    assert t.agent_commands("node-1") == "test/v1/agents/node-1/commands"
    assert t.job_control("job.7") == "test/v1/jobs/job.7/control"
    assert t.cluster == "test/v1/cluster"
    assert t.events == "test/v1/events"
    assert t.all_agent_states == "test/v1/agents/+/state"
    assert t.all_agent_events == "test/v1/agents/+/events"


def test_scheduler_subscriptions_match_what_agents_publish() -> None:
    t = Topics()
    assert matches(t.all_agent_states, t.agent_state("node-1"))
    assert matches(t.all_agent_events, t.agent_events("node-1"))
    assert not matches(t.all_agent_events, t.agent_state("node-1"))
    assert not matches(t.all_agent_states, t.agent_commands("node-1"))


# Beside MQTT's wildcards and separator: what Mosquitto refuses in a topic (it drops the
# connection of a client that publishes one), e.g. a fuzzed reply_to holding a DEL.
@pytest.mark.parametrize(
    "bad",
    ["", "a/b", "+", "#", "a+", "x#y", "nul\0", "fu\x7fzmr", "tab\t", "c1\x85", "\ufffe", "\ufdd0"],
)
def test_bad_levels_are_refused(bad: str) -> None:
    t = Topics()
    for name in (t.replies, t.agent_state, t.agent_events, t.agent_commands, t.job_control):
        with pytest.raises(TopicError, match="cannot be a topic level"):
            name(bad)


@pytest.mark.parametrize("root", ["", "a/", "a/+/b", "a/#", "nul\0", "del\x7f/v3"])
def test_bad_roots_are_refused(root: str) -> None:
    with pytest.raises(TopicError, match="bad topic root"):
        Topics(root)


def test_agent_of() -> None:
    t = Topics("r/v1")
    assert t.agent_of("r/v1/agents/node-1/state") == "node-1"
    assert t.agent_of("r/v1/agents/node-1/events") == "node-1"
    assert t.agent_of("r/v1/agents/node-1") is None  # no level after the id
    assert t.agent_of("r/v1/agents//state") is None
    assert t.agent_of("r/v1/jobs/j/control") is None
    assert t.agent_of("other/v1/agents/node-1/state") is None
    assert t.agent_of("r/v1/agentsX/node-1/state") is None


@pytest.mark.parametrize(
    ("pattern", "topic", "expected"),
    [
        ("a/b/c", "a/b/c", True),
        ("a/b/c", "a/b", False),
        ("a/b", "a/b/c", False),
        ("a/+/c", "a/b/c", True),
        ("a/+/c", "a/b/d", False),
        ("a/+/c", "a/b/x/c", False),
        ("a/+", "a/", True),  # + matches an empty level
        ("+/+", "a/b", True),
        ("+", "a/b", False),
        ("a/#", "a/b/c", True),
        ("a/#", "a/b", True),
        ("a/#", "a", True),  # # also matches the parent level
        ("a/#", "b/c", False),
        ("#", "anything/at/all", True),
        ("a/+/#", "a/b/c/d", True),
        ("a/+/#", "a", False),
        ("accordion/v1/agents/+/state", "accordion/v1/agents/n1/state", True),
        ("accordion/v1/agents/+/state", "accordion/v2/agents/n1/state", False),
    ],
)
def test_matches(pattern: str, topic: str, expected: bool) -> None:
    assert matches(pattern, topic) is expected


levels = st.lists(st.text("abc", min_size=1, max_size=3), min_size=1, max_size=5)


@given(levels)
def test_a_topic_matches_itself_hash_and_its_plus_masks(parts: list[str]) -> None:
    topic = "/".join(parts)
    assert matches(topic, topic)
    assert matches("#", topic)
    assert matches("/".join("+" for _ in parts), topic)
    assert matches(f"{parts[0]}/#", topic)


@given(levels, levels)
def test_exact_patterns_match_only_equal_topics(a: list[str], b: list[str]) -> None:
    assert matches("/".join(a), "/".join(b)) is (a == b)
