"""The line's rules about one drop, as pure functions."""

from datetime import UTC, datetime, timedelta

from drops.rules import POLL_MAX_SECONDS, POLL_MIN_SECONDS, line_state, poll_after, units_shown

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def test_a_far_back_buyer_asks_rarely_but_thrice_within_the_checkout_window():
    assert poll_after(10_000, window=600) == POLL_MAX_SECONDS
    assert poll_after(10_000, window=30) == 10  # admitted meanwhile, they learn it with 20 s of hold left
    assert poll_after(1, window=600) == POLL_MIN_SECONDS
    assert poll_after(None, window=10) == 3  # sold out: units may come back for them, within a short window


def test_the_line_is_sold_out_while_units_are_held_and_closed_when_none_can_come_back():
    opened = NOW - timedelta(minutes=1)
    assert line_state(opens_at=NOW + timedelta(seconds=1), now=NOW, free=5, held=0, selling=True) == "not_open"
    assert line_state(opens_at=opened, now=NOW, free=0, held=0, selling=False) == "open"  # waits for the sale
    assert line_state(opens_at=opened, now=NOW, free=0, held=2, selling=True) == "sold_out"
    assert line_state(opens_at=opened, now=NOW, free=0, held=0, selling=True) == "closed"
    assert [units_shown(n) for n in (0, 1, 10, 11)] == ["sold_out", "few", "few", "plenty"]
