"""The liveness deadlines: one lazy entry per agent, handed out in registration order."""

from __future__ import annotations

from scheduler.live.liveness import Deadlines


def test_agents_come_due_once_in_registration_order() -> None:
    d = Deadlines()
    d.watch("b", 5.0)
    d.watch("a", 3.0)
    d.watch("c", 9.0)
    assert d.due(2.0) == []
    # Both due by 6: listed as registered (b before a), not by deadline.
    assert d.due(6.0) == ["b", "a"]
    assert d.due(6.0) == []  # taken off: the check watches again those that need it
    assert len(d) == 1
    assert d.next_due() == 9.0


def test_a_later_deadline_is_absorbed_and_an_earlier_one_wins() -> None:
    d = Deadlines()
    d.watch("a", 5.0)
    d.watch("a", 8.0)  # later (a heartbeat): the entry at 5 stays, the check looks then
    assert d.next_due() == 5.0
    d.watch("a", 2.0)  # earlier (heard again after a suspicion): a second entry
    assert d.due(2.0) == ["a"]
    assert d.due(10.0) == []  # the superseded entry at 5 is skipped
    assert len(d) == 0
    assert d.next_due() is None


def test_a_deadline_that_is_due_exactly_now_is_due() -> None:
    d = Deadlines()
    d.watch("a", 4.0)
    assert d.due(4.0) == ["a"]
