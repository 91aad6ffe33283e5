"""The retry policy of a kind: exponential backoff with full jitter, capped, never earlier than
a receiver's Retry-After, never past the staleness deadline, never further ahead than the
maximum delay, never beyond the budget."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

DEFAULT_MAX_DELAY = timedelta(days=1)

# 2 ** 64 windows are beyond any cap a timedelta can hold, so a larger exponent changes nothing
# but could overflow the float it is multiplied into.
_MAX_DOUBLINGS = 64


@dataclass(frozen=True)
class Policy:
    max_attempts: int
    backoff_base: timedelta
    backoff_cap: timedelta
    stale_after: timedelta | None
    # No retry is scheduled further ahead than this, whatever a receiver's Retry-After asks for
    # (``REMINDERS_MAX_RETRY_DELAY``).
    max_delay: timedelta = DEFAULT_MAX_DELAY

    def __post_init__(self) -> None:
        if self.max_delay <= timedelta(0):
            raise ValueError(f"max_delay must be positive, got {self.max_delay}")


@dataclass(frozen=True)
class Next:
    state: str               # "retrying", "stale" or "dead"
    due_at: datetime | None  # when retrying
    reason: str


def _utc(value: datetime) -> str:
    return value.astimezone(UTC).isoformat()


def _staleness_deadline(policy: Policy, occurrence_at: datetime) -> datetime | None:
    if policy.stale_after is None:
        return None
    try:
        return occurrence_at + policy.stale_after
    except OverflowError:  # a window reaching past year 9999 never closes
        return None


def next_try(policy: Policy, *, attempts_made: int, occurrence_at: datetime, now: datetime,
             retry_after: datetime | None, rng: random.Random) -> Next:
    if attempts_made >= policy.max_attempts:
        return Next("dead", None, f"retry budget spent: {attempts_made} of "
                                  f"{policy.max_attempts} attempts failed")
    doublings = min(_MAX_DOUBLINGS, max(0, attempts_made - 1))
    ceiling = min(policy.backoff_cap.total_seconds(), policy.max_delay.total_seconds(),
                  policy.backoff_base.total_seconds() * 2 ** doublings)
    due = now + timedelta(seconds=max(1.0, rng.uniform(0, ceiling)))
    if retry_after is not None and retry_after > due:
        due = retry_after
    deadline = _staleness_deadline(policy, occurrence_at)
    if deadline is not None and due > deadline:
        return Next("stale", None, f"next try at {_utc(due)} would land after the "
                                   f"staleness deadline {_utc(deadline)}")
    latest = now + policy.max_delay
    if due > latest:
        # Only a Retry-After gets here (the backoff window is within the maximum delay), or a
        # maximum delay under the one-second floor.
        what = f"Retry-After {_utc(due)}" if due == retry_after else "backoff"
        return Next("retrying", latest, f"will retry; {what} capped at the maximum delay of "
                                        f"{policy.max_delay.total_seconds():g}s")
    return Next("retrying", due, "will retry")


# A provider's throttle is retried this many seconds later (uniform, for jitter), or at its
# Retry-After: the channel's bucket, slowed down by the throttle, paces it from there.
THROTTLE_WAIT = (1.0, 2.0)


def after_throttle(policy: Policy, *, occurrence_at: datetime, now: datetime,
                   retry_after: datetime | None, rng: random.Random) -> Next:
    """The next try after a provider's throttle: it spends no attempt, so no budget is
    checked; the staleness deadline and the maximum delay bound it as every retry."""
    due = now + timedelta(seconds=rng.uniform(*THROTTLE_WAIT))
    if retry_after is not None and retry_after > due:
        due = retry_after
    deadline = _staleness_deadline(policy, occurrence_at)
    if deadline is not None and due > deadline:
        return Next("stale", None, f"throttled; next try at {_utc(due)} would land after the "
                                   f"staleness deadline {_utc(deadline)}")
    due = min(due, now + policy.max_delay)
    return Next("retrying", due, "throttled by the provider: will retry, no attempt spent")
