"""``broker.local.free_port``: ports for a cluster's processes, never one handed out twice."""

from __future__ import annotations

from broker.local import _FIRST, _ephemeral_low, free_port


def test_a_port_handed_out_already_is_never_picked_again() -> None:
    # Every port of the range below the ephemeral one is taken by the caller's
    # earlier picks: the answer must come from elsewhere (the kernel's choice).
    low = _ephemeral_low()
    avoid = range(_FIRST, low)
    port = free_port(avoid=avoid)
    assert port not in avoid


def test_picks_below_the_ephemeral_range_when_free() -> None:
    assert _FIRST <= free_port() < _ephemeral_low()
