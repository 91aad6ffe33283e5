"""The retry policy of a kind: exponential backoff with full jitter, capped, never earlier than
a receiver's Retry-After, never past the staleness deadline, never beyond the budget."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class Policy:
    max_attempts: int
    backoff_base: timedelta
    backoff_cap: timedelta
    stale_after: timedelta | None


@dataclass(frozen=True)
class Next:
    state: str               # "retrying", "stale" or "dead"
    due_at: datetime | None  # when retrying
    reason: str


def next_try(policy: Policy, *, attempts_made: int, occurrence_at: datetime, now: datetime,
             retry_after: datetime | None, rng: random.Random) -> Next:
    if attempts_made >= policy.max_attempts:
        return Next("dead", None, f"retry budget spent: {attempts_made} of "
                                  f"{policy.max_attempts} attempts failed")
    ceiling = min(policy.backoff_cap.total_seconds(),
                  policy.backoff_base.total_seconds() * 2 ** max(0, attempts_made - 1))
    due = now + timedelta(seconds=max(1.0, rng.uniform(0, ceiling)))
    if retry_after is not None and retry_after > due:
        due = retry_after
    if policy.stale_after is not None:
        deadline = occurrence_at + policy.stale_after
        if due > deadline:
            return Next("stale", None, f"next try at {due.isoformat()} would land after the "
                                       f"staleness deadline {deadline.isoformat()}")
    return Next("retrying", due, "will retry")
