"""A receiver's Keep-Alive header: how long the webhook channel may keep its connection idle.
Whatever the header holds, the answer is a duration, 0 (not kept) or None (the channel's own
limit); nothing raises."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from reminders.channels.webhook import KEEP_ALIVE_MARGIN, receiver_keep_alive


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], None),
        (["timeout=2"], 1.0),
        (["timeout=5, max=1000"], 4.0),
        (["Timeout = 7 ,  MAX = 3"], 6.0),
        (['timeout="3"'], 2.0),
        (["timeout=1"], 0.0),
        (["timeout=0"], 0.0),
        (["max=1"], 0.0),
        (["max=0, timeout=30"], 0.0),
        (["max=2"], None),
        (["timeout=3", "timeout=9"], 2.0),
        (["timeout=9, timeout=3"], 2.0),
        (["timeout=abc"], None),
        (["timeout=-3"], None),
        (["timeout=2.5"], None),
        (["timeout=\u00b3"], None),
        (["timeout=" + "9" * 5000], None),
        (["timeout"], None),
        ([",,=,timeout==2"], None),
        (["max=abc, timeout=4"], 3.0),
    ],
)
def test_the_receivers_keep_alive_is_read(values: list[str], expected: float | None) -> None:
    assert receiver_keep_alive(values) == expected


@given(st.lists(st.text(max_size=200), max_size=3))
@example(["timeout=" + "1" * 100_000])
def test_no_header_makes_it_raise(values: list[str]) -> None:
    said = receiver_keep_alive(values)
    assert said is None or said >= 0
    if said is not None and said > 0:
        assert said <= 999_999_999 - KEEP_ALIVE_MARGIN
