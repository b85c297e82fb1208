"""Fair-share's parameters: bad values are refused with a message naming them; the
source is a frozen, hashable value.
"""

from __future__ import annotations

import pytest

from scheduler.priority.fairshare import FairShare
from tests.scheduler.priority.fairshare_fixtures import (
    JACK_JILL,
)

# -- validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"decay": 1.5}, "decay"),
        ({"decay": float("nan")}, "decay"),
        ({"window": 0}, "window"),
        ({"by": "account"}, "'by'"),
        ({"shares": (("a", 0.5), ("a", 0.2))}, "twice"),
        ({"shares": (("a", -0.1),)}, "share of 'a'"),
        ({"shares": (("", 0.1),)}, "non-empty"),
        ({"shares": (("a", 0.6), ("b", 0.6))}, "sum to"),
    ],
)
def test_bad_parameters_are_rejected(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FairShare(**kwargs)  # type: ignore[arg-type]


def test_shares_written_as_decimals_may_sum_to_one() -> None:
    FairShare(shares=(("a", 0.1), ("b", 0.2), ("c", 0.7)))


def test_the_source_is_frozen_and_hashable() -> None:
    assert hash(JACK_JILL) == hash(FairShare(shares=(("jack", 0.25), ("jill", 0.75))))
