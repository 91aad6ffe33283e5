"""Pacing: each channel (``email``, ``sms``) and each webhook endpoint sends at most at its rate,
summed over every consumer, give or take its burst.

The bucket lives in Postgres (``channel_rates``, ``rate_shards``, migration 0027), in shards: a
consumer's batch takes the tokens its sends need from one shard it can lock at once (SKIP
LOCKED), inside the transaction that starts those sends, so tokens are spent only by sends
that start and no consumer ever waits behind another. Each shard refills at rate / shards up
to burst / shards: together they never give more than ``burst + rate * T`` in any ``T``.

A send that finds no token is not attempted: its delivery is released due at its shard's
next free slot (fenced on its lease, as a paused tenant's release), spending no attempt, and
the consumer moves on. A provider's throttle (SES, SNS, HTTP 429) spends no attempt either and
halves the bucket's rate in force (at most once a second); the rate climbs back by
``RECOVER_PER_SECOND`` of the set rate a second (AIMD), so a rate set too high converges.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from reminders import db
from reminders.clock import iso
from reminders.errors import InvalidInput

CHANNELS = ("email", "sms")
# AIMD: a throttle halves the rate in force (never under FLOOR of the set rate); it climbs back
# by RECOVER_PER_SECOND of the set rate each second after the last throttle.
FLOOR = 1 / 64
RECOVER_PER_SECOND = 0.01
MAX_SHARDS = 16
# A shard gives a batch at most burst / shards tokens: a batch of ten sends takes its tokens
# from one shard, and a shard is visited often enough that its tokens never overflow its size.
TOKENS_PER_SHARD = 10.0
MAX_RATE = 100_000.0
_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*/\s*(s|sec|second|m|min|minute|h|hour)\s*$")
_PER = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600,
        "hour": 3600}


def parse_rate(text: str, flag: str = "--rate") -> float:
    """``14/s``, ``600/m``, ``1000/h``: sends a second."""
    match = _RATE.match(text)
    if match is None:
        raise InvalidInput(f"{flag} must be a count per unit, e.g. 14/s, 600/m or 1000/h; "
                           f"got {text!r}")
    rate = float(match.group(1)) / _PER[match.group(2)]
    if not 0 < rate <= MAX_RATE:
        raise InvalidInput(f"{flag} must be more than 0 and at most {MAX_RATE:g}/s, got {text!r}")
    return rate


def check_burst(burst: float | None, rate: float, flag: str = "--burst") -> float:
    """The bucket's size: the rate's one second by default, at least one send."""
    value = max(1.0, math.ceil(rate)) if burst is None else burst
    if not 1 <= value <= 1_000_000:
        raise InvalidInput(f"{flag} must be between 1 and 1000000 sends, got {burst}")
    return float(value)


def shards_for(burst: float) -> int:
    return max(1, min(MAX_SHARDS, int(burst // TOKENS_PER_SHARD)))


def channel_key(channel: str) -> str:
    if channel not in CHANNELS:
        raise InvalidInput(f"channel must be one of {', '.join(CHANNELS)} (a webhook endpoint's "
                           f"rate is set with `endpoints set URL --rate`), got {channel!r}")
    return channel


def endpoint_key(url: str) -> str:
    return f"webhook {url}"


def row_key(row: db.Row) -> str:
    """The bucket a delivery's send would take from (paced or not)."""
    if row["channel"] == "webhook":
        return endpoint_key(row["destination"])
    return str(row["channel"])


def set_rate(conn: db.Connection, key: str, rate: float, burst: float | None, now: datetime, *,
             source: str = "set") -> db.Row | None:
    """Set a key's rate (one transaction); the row if it changed, its bucket reset full."""
    size = check_burst(burst, rate)
    shards = shards_for(size)
    with db.transaction(conn):
        row = db.fetch_one(conn, "rate_set", {"key": key, "rate": rate, "burst": size,
                                              "shards": shards, "source": source, "now": now})
        if row is not None:
            db.execute(conn, "rate_shards_reset", {"key": key, "burst": size, "shards": shards,
                                                   "now": now})
    return row


_ACCOUNT_RATE_READ: set[str] = set()  # databases this process read the SES quota for


def account_default(conn: db.Connection, channel: Any, database_url: str,
                    now: datetime) -> db.Row | None:
    """Once a process (a cold start): pace e-mail at the SES account's MaxSendRate unless an
    operator set a rate; the row when that changed the setting."""
    if database_url in _ACCOUNT_RATE_READ:
        return None
    _ACCOUNT_RATE_READ.add(database_url)
    rate = channel.max_send_rate()
    if rate is None:
        return None
    return set_rate(conn, "email", min(rate, MAX_RATE), None, now, source="account")


def remove_rate(conn: db.Connection, key: str) -> bool:
    return bool(db.fetch_all(conn, "rate_remove", {"key": key}))


def rates(conn: db.Connection, now: datetime) -> list[db.Row]:
    return db.fetch_all(conn, "rates_list", {"now": now, "recover": RECOVER_PER_SECOND})


@dataclass(frozen=True)
class Grant:
    """What a batch got from one key's bucket: ``taken`` sends may go; the others are due
    again at ``slots`` (one each, in order)."""

    key: str
    taken: int
    slots: tuple[datetime, ...]


def submit_take(conn: db.Connection, wanted: Counter[str], now: datetime,
                rng: random.Random) -> db.Pending:
    keys = sorted(wanted)
    return db.submit(conn, "pace_take", {
        "keys": keys, "counts": [wanted[k] for k in keys], "now": now,
        "recover": RECOVER_PER_SECOND, "spin": rng.randrange(MAX_SHARDS)})


def grants(rows: Iterable[db.Row], wanted: Counter[str], now: datetime,
           rng: random.Random) -> dict[str, Grant]:
    """Each paced key's grant from ``pace_take``'s rows. A key whose every shard another
    consumer held gets no token: its sends are due again a little later, spread over the time
    the bucket takes to refill them."""
    out: dict[str, Grant] = {}
    for row in rows:
        key, n, rate = str(row["key"]), wanted[row["key"]], float(row["shard_rate"])
        taken = int(row["taken"])
        if row["shard"] is None:
            slots = tuple(now + timedelta(seconds=rng.uniform(1, 2) * (i + 1) / rate)
                          for i in range(n))
        else:
            base: datetime = row["slot_base"]
            slots = tuple(base + timedelta(seconds=(i + 1) / rate) for i in range(n - taken))
        out[key] = Grant(key, taken, slots)
    return out


def wait_reason(key: str, due: datetime) -> str:
    return f"paced: no {key} token free; due again {iso(due)}"


THROTTLE_SLOTS = 8  # rate_throttles' slots a minute (migration 0031)


def submit_throttled(conn: db.Connection, throttled: Counter[str], now: datetime) -> None:
    """A batch's sends its providers throttled, by paced key: each bucket's rate in force
    halved (AIMD, at most once a second), and every one counted in this minute's row
    (``status``'s provider throttles in the last hour)."""
    keys = sorted(throttled)
    db.submit(conn, "pace_throttled", {"keys": keys, "now": now, "floor": FLOOR,
                                       "recover": RECOVER_PER_SECOND})
    db.submit(conn, "pace_throttles_count", {
        "keys": keys, "counts": [throttled[k] for k in keys], "now": now,
        "slot": random.randrange(THROTTLE_SLOTS)})  # spreads the writers (no secret)


def describe(row: dict[str, Any]) -> dict[str, Any]:
    """A key's settings and use, as ``channels list --json`` shows them."""
    key = str(row["key"])
    channel, _, url = key.partition(" ")
    return {"key": key, "channel": channel, "endpoint": url or None,
            "rate_per_second": row["rate"], "burst": row["burst"], "shards": row["shards"],
            "source": row["source"], "rate_in_force_per_second": round(row["rate_now"], 3),
            "throttles": row["throttles"], "last_throttled_at": row["throttled_at"],
            "used_last_minute": row["used_last_minute"],
            "used_this_minute": row["used_this_minute"], "updated_at": row["updated_at"]}
