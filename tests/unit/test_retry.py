"""The retry policy: full jitter, capped, Retry-After honoured, staleness and budget respected."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from reminders.retry import Next, Policy, next_try

NOW = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
OCCURRENCE = datetime(2027, 3, 1, 8, 55, tzinfo=UTC)
BASE = timedelta(seconds=30)
CAP = timedelta(hours=1)


def policy(
    *,
    max_attempts: int = 100,
    stale_after: timedelta | None = None,
    base: timedelta = BASE,
    cap: timedelta = CAP,
    max_delay: timedelta = timedelta(days=1),
) -> Policy:
    return Policy(
        max_attempts=max_attempts, backoff_base=base, backoff_cap=cap, stale_after=stale_after,
        max_delay=max_delay,
    )


def delay_of(result: Next) -> float:
    assert result.state == "retrying"
    assert result.due_at is not None
    return (result.due_at - NOW).total_seconds()


def backoff_delays(attempts_made: int, rng: random.Random, draws: int) -> list[float]:
    """Seconds until the next try, drawn ``draws`` times with no Retry-After."""
    return [
        delay_of(next_try(policy(), attempts_made=attempts_made, occurrence_at=OCCURRENCE,
                          now=NOW, retry_after=None, rng=rng))
        for _ in range(draws)
    ]


@pytest.mark.parametrize(
    ("attempts_made", "ceiling"),
    [
        (1, 30.0),
        (2, 60.0),
        (3, 120.0),
        (4, 240.0),
        (5, 480.0),
        (6, 960.0),
        (7, 1920.0),
        (8, 3600.0),
        (9, 3600.0),
    ],
)
def test_full_jitter_stays_within_one_second_and_the_exponential_ceiling(
    attempts_made: int, ceiling: float
) -> None:
    rng = random.Random(1234)
    delays = backoff_delays(attempts_made, rng, 2000)
    assert min(delays) >= 1.0
    assert max(delays) <= ceiling
    # Full jitter spreads over the whole window, not around a fixed point.
    assert min(delays) < 1.0 + ceiling * 0.01
    assert max(delays) > ceiling * 0.99
    below_half = sum(1 for d in delays if d < ceiling / 2)
    assert 850 < below_half < 1150


def test_the_delay_is_one_uniform_draw_over_the_window_floored_at_one_second() -> None:
    rng, twin = random.Random(99), random.Random(99)
    for attempts_made in range(1, 12):
        got = next_try(
            policy(),
            attempts_made=attempts_made,
            occurrence_at=OCCURRENCE,
            now=NOW,
            retry_after=None,
            rng=rng,
        )
        ceiling = min(3600.0, 30.0 * 2 ** (attempts_made - 1))
        expected = NOW + timedelta(seconds=max(1.0, twin.uniform(0, ceiling)))
        assert got == Next("retrying", expected, "will retry")


def test_a_tiny_window_still_waits_at_least_one_second() -> None:
    rng = random.Random(5)
    for _ in range(200):
        got = next_try(
            policy(base=timedelta(milliseconds=100)),
            attempts_made=1,
            occurrence_at=OCCURRENCE,
            now=NOW,
            retry_after=None,
            rng=rng,
        )
        assert got.due_at == NOW + timedelta(seconds=1)


def test_retry_after_later_than_the_backoff_wins() -> None:
    later = NOW + timedelta(hours=5)
    got = next_try(
        policy(),
        attempts_made=1,
        occurrence_at=OCCURRENCE,
        now=NOW,
        retry_after=later,
        rng=random.Random(3),
    )
    assert got == Next("retrying", later, "will retry")


def test_retry_after_earlier_than_the_backoff_is_ignored() -> None:
    rng, twin = random.Random(11), random.Random(11)
    expected = NOW + timedelta(seconds=max(1.0, twin.uniform(0, 240.0)))
    got = next_try(
        policy(),
        attempts_made=4,
        occurrence_at=OCCURRENCE,
        now=NOW,
        retry_after=NOW + timedelta(milliseconds=500),
        rng=rng,
    )
    assert got.due_at == expected


def test_never_earlier_than_retry_after_over_many_draws() -> None:
    rng = random.Random(21)
    for attempts_made in range(1, 10):
        for seconds in (1, 17, 45, 300, 2000, 7200):
            retry_after = NOW + timedelta(seconds=seconds)
            got = next_try(
                policy(),
                attempts_made=attempts_made,
                occurrence_at=OCCURRENCE,
                now=NOW,
                retry_after=retry_after,
                rng=rng,
            )
            assert got.state == "retrying"
            assert got.due_at is not None and got.due_at >= retry_after


def test_stale_when_the_next_try_lands_after_the_staleness_deadline() -> None:
    stale_after = timedelta(minutes=10)
    deadline = OCCURRENCE + stale_after  # 09:05
    got = next_try(
        policy(stale_after=stale_after),
        attempts_made=1,
        occurrence_at=OCCURRENCE,
        now=NOW,
        retry_after=deadline + timedelta(microseconds=1),
        rng=random.Random(1),
    )
    assert got.state == "stale"
    assert got.due_at is None
    assert got.reason == (
        "next try at 2027-03-01T09:05:00.000001+00:00 would land after the "
        "staleness deadline 2027-03-01T09:05:00+00:00"
    )


def test_a_try_exactly_at_the_staleness_deadline_is_still_made() -> None:
    stale_after = timedelta(minutes=10)
    deadline = OCCURRENCE + stale_after
    got = next_try(
        policy(stale_after=stale_after),
        attempts_made=1,
        occurrence_at=OCCURRENCE,
        now=NOW,
        retry_after=deadline,
        rng=random.Random(1),
    )
    assert got == Next("retrying", deadline, "will retry")


def test_backoff_alone_can_make_it_stale() -> None:
    # The window for attempt 8 is up to an hour; the deadline is 6 s away, so almost every draw
    # lands after it.
    stale_after = timedelta(minutes=5, seconds=6)
    rng = random.Random(8)
    outcomes = [
        next_try(
            policy(stale_after=stale_after),
            attempts_made=8,
            occurrence_at=OCCURRENCE,
            now=NOW,
            retry_after=None,
            rng=rng,
        )
        for _ in range(500)
    ]
    for got in outcomes:
        if got.state == "retrying":
            assert got.due_at is not None
            assert got.due_at <= OCCURRENCE + stale_after
        else:
            assert got.state == "stale" and got.due_at is None
    assert 480 < sum(1 for o in outcomes if o.state == "stale") < 500


def test_no_staleness_window_means_never_stale() -> None:
    far = NOW + timedelta(days=400)
    got = next_try(
        policy(stale_after=None, max_delay=timedelta(days=400)),
        attempts_made=1,
        occurrence_at=OCCURRENCE,
        now=NOW,
        retry_after=far,
        rng=random.Random(2),
    )
    assert got == Next("retrying", far, "will retry")


@pytest.mark.parametrize("attempts_made", [4, 5, 40])
def test_dead_once_the_budget_is_spent(attempts_made: int) -> None:
    rng = random.Random(4)
    state_before = rng.getstate()
    got = next_try(
        policy(max_attempts=4, stale_after=timedelta(hours=1)),
        attempts_made=attempts_made,
        occurrence_at=OCCURRENCE,
        now=NOW,
        retry_after=NOW + timedelta(days=3),
        rng=rng,
    )
    assert got == Next("dead", None, f"retry budget spent: {attempts_made} of 4 attempts failed")
    assert rng.getstate() == state_before  # no draw is spent on a dead delivery


def test_one_attempt_short_of_the_budget_still_retries() -> None:
    got = next_try(
        policy(max_attempts=4),
        attempts_made=3,
        occurrence_at=OCCURRENCE,
        now=NOW,
        retry_after=None,
        rng=random.Random(4),
    )
    assert got.state == "retrying"


@pytest.mark.parametrize("attempts_made", [13, 30, 64, 99])
def test_the_cap_holds_for_large_attempt_numbers(attempts_made: int) -> None:
    rng, twin = random.Random(attempts_made), random.Random(attempts_made)
    delays = backoff_delays(attempts_made, rng, 500)
    expected = [
        timedelta(seconds=max(1.0, twin.uniform(0, 3600.0))).total_seconds() for _ in range(500)
    ]
    assert delays == expected
    assert max(delays) <= 3600.0
    assert max(delays) > 3600.0 * 0.99


# --- the maximum delay ----------------------------------------------------------------------

DAY = timedelta(days=1)


def test_the_maximum_delay_defaults_to_one_day() -> None:
    made = Policy(max_attempts=3, backoff_base=BASE, backoff_cap=CAP, stale_after=None)
    assert made.max_delay == DAY


@pytest.mark.parametrize("max_delay", [timedelta(0), timedelta(seconds=-1)])
def test_the_maximum_delay_must_be_positive(max_delay: timedelta) -> None:
    with pytest.raises(ValueError, match="max_delay must be positive"):
        policy(max_delay=max_delay)


def test_a_retry_after_thousands_of_years_ahead_is_capped_at_the_maximum_delay() -> None:
    # The incident: one 503 asked for a retry ~3,000 years later and the delivery vanished.
    absurd = datetime(5027, 3, 1, 9, 0, tzinfo=UTC)
    got = next_try(
        policy(), attempts_made=1, occurrence_at=OCCURRENCE, now=NOW, retry_after=absurd,
        rng=random.Random(7),
    )
    assert got == Next(
        "retrying",
        NOW + DAY,
        "will retry; Retry-After 5027-03-01T09:00:00+00:00 capped at the maximum delay of 86400s",
    )


def test_a_retry_after_at_datetime_max_is_capped() -> None:
    got = next_try(
        policy(max_delay=timedelta(hours=6)), attempts_made=2, occurrence_at=OCCURRENCE, now=NOW,
        retry_after=datetime.max.replace(tzinfo=UTC), rng=random.Random(7),
    )
    assert (got.state, got.due_at) == ("retrying", NOW + timedelta(hours=6))
    assert "capped at the maximum delay of 21600s" in got.reason


def test_a_retry_after_exactly_at_the_maximum_delay_is_kept() -> None:
    got = next_try(
        policy(), attempts_made=1, occurrence_at=OCCURRENCE, now=NOW, retry_after=NOW + DAY,
        rng=random.Random(7),
    )
    assert got == Next("retrying", NOW + DAY, "will retry")


def test_the_staleness_deadline_beats_the_cap() -> None:
    # Capping would bring the try back inside the window, but the receiver asked for a time
    # after the deadline: the reminder has missed its window.
    stale_after = timedelta(days=2)
    got = next_try(
        policy(stale_after=stale_after), attempts_made=1, occurrence_at=OCCURRENCE, now=NOW,
        retry_after=NOW + timedelta(days=3), rng=random.Random(7),
    )
    assert got == Next(
        "stale",
        None,
        "next try at 2027-03-04T09:00:00+00:00 would land after the staleness deadline "
        "2027-03-03T08:55:00+00:00",
    )


def test_a_capped_retry_after_inside_a_long_window_retries() -> None:
    got = next_try(
        policy(stale_after=timedelta(days=30)), attempts_made=1, occurrence_at=OCCURRENCE,
        now=NOW, retry_after=NOW + timedelta(days=10), rng=random.Random(7),
    )
    assert (got.state, got.due_at) == ("retrying", NOW + DAY)
    assert got.reason.endswith("capped at the maximum delay of 86400s")


def test_the_staleness_deadline_is_named_in_utc() -> None:
    # Postgres hands timestamps back in the session's zone; the reason still speaks UTC.
    from zoneinfo import ZoneInfo

    berlin = OCCURRENCE.astimezone(ZoneInfo("Europe/Berlin"))
    got = next_try(
        policy(stale_after=timedelta(minutes=10)), attempts_made=1, occurrence_at=berlin,
        now=NOW.astimezone(ZoneInfo("America/New_York")), retry_after=NOW + timedelta(hours=1),
        rng=random.Random(1),
    )
    assert got == Next(
        "stale",
        None,
        "next try at 2027-03-01T10:00:00+00:00 would land after the staleness deadline "
        "2027-03-01T09:05:00+00:00",
    )


def test_a_backoff_cap_above_the_maximum_delay_jitters_within_the_maximum_delay() -> None:
    rng = random.Random(17)
    got = [
        next_try(
            policy(cap=timedelta(days=10), max_delay=timedelta(hours=1)), attempts_made=30,
            occurrence_at=OCCURRENCE, now=NOW, retry_after=None, rng=rng,
        )
        for _ in range(1000)
    ]
    delays = [delay_of(g) for g in got]
    assert {g.reason for g in got} == {"will retry"}
    assert max(delays) <= 3600.0
    assert max(delays) > 3600.0 * 0.99  # still full jitter, not a pile-up at the cap
    assert 400 < sum(1 for d in delays if d < 1800.0) < 600


def test_a_maximum_delay_under_a_second_still_holds() -> None:
    got = next_try(
        policy(max_delay=timedelta(milliseconds=250)), attempts_made=1, occurrence_at=OCCURRENCE,
        now=NOW, retry_after=None, rng=random.Random(3),
    )
    assert got.due_at == NOW + timedelta(milliseconds=250)


def test_every_retry_is_within_the_maximum_delay_and_the_deadline() -> None:
    rng = random.Random(2027)
    max_delay = timedelta(hours=2)
    for stale_after in (None, timedelta(minutes=30), timedelta(hours=5), timedelta(days=3)):
        for attempts_made in (1, 3, 9, 40):
            for wait in (None, 1, 600, 7199, 7200, 7201, 86_400 * 365 * 3000):
                retry_after = None if wait is None else NOW + timedelta(seconds=wait)
                got = next_try(
                    policy(stale_after=stale_after, cap=timedelta(days=1), max_delay=max_delay),
                    attempts_made=attempts_made, occurrence_at=OCCURRENCE, now=NOW,
                    retry_after=retry_after, rng=rng,
                )
                if got.state == "stale":
                    continue
                assert got.state == "retrying" and got.due_at is not None
                assert NOW < got.due_at <= NOW + max_delay
                if stale_after is not None:
                    assert got.due_at <= OCCURRENCE + stale_after


def test_huge_attempt_numbers_and_windows_do_not_overflow() -> None:
    got = next_try(
        policy(max_attempts=1_000_000, stale_after=timedelta.max), attempts_made=5000,
        occurrence_at=OCCURRENCE, now=NOW, retry_after=None, rng=random.Random(6),
    )
    assert got.state == "retrying"
    assert got.due_at is not None and got.due_at <= NOW + CAP
