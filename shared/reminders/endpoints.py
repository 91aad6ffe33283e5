"""Webhook endpoints' signing secrets: registering, rotating with an overlap, converting rows
still in plaintext, and choosing the secrets a send signs with.

A rotation keeps the new secret beside the current one. Until ``overlap_until`` (compared with
the injected clock) every send carries both signatures; from then on only the new one's. Ending
the rotation (``finish``, or the next rotation) makes the new secret the current one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from reminders import db
from reminders.errors import InvalidInput, NotFound
from reminders.secret_box import Sealed, SecretBox, SecretUnavailable

# `encrypt-secrets`: rows per batch and batches per run, at most.
MAX_ENCRYPT_BATCH = 1000
MAX_ENCRYPT_BATCHES = 10_000


def _sealed(row: db.Row, prefix: str) -> Sealed | None:
    ciphertext = row[f"{prefix}secret_ciphertext"]
    if ciphertext is None:
        return None
    return Sealed(bytes(ciphertext), bytes(row[f"{prefix}secret_data_key"]),
                  str(row[f"{prefix}secret_key_id"]))


def signing_secrets(row: db.Row, now: datetime, box: SecretBox | None) -> tuple[str, ...]:
    """The secrets a send to this endpoint signs with: the current one; during a rotation's
    overlap, the current and the next; after it, the next only. ``row`` is a ``recheck_load``
    row. Raises SecretUnavailable when a sealed secret cannot be opened."""
    tenant, url = row["endpoint_tenant"], row["destination"]
    following = _sealed(row, "next_")
    overlapping = following is not None and now < row["overlap_until"]
    chosen: list[str] = []
    if following is None or overlapping:
        plaintext = row["endpoint_secret"]  # a row not yet encrypted (or written by old code)
        current = _sealed(row, "")
        if plaintext is not None:
            chosen.append(str(plaintext))
        elif current is not None:
            chosen.append(_open(box, current, tenant, url))
    if following is not None:
        chosen.append(_open(box, following, tenant, url))
    return tuple(chosen)


def _open(box: SecretBox | None, sealed: Sealed, tenant: str | None, url: str) -> str:
    if box is None:
        raise SecretUnavailable("the webhook secret is encrypted and this process has no "
                                "KMS client to open it")
    return box.open(sealed, tenant, url)


def _columns(sealed: Sealed | None, prefix: str) -> dict[str, Any]:
    return {f"{prefix}ciphertext": sealed.ciphertext if sealed else None,
            f"{prefix}data_key": sealed.data_key if sealed else None,
            f"{prefix}key_id": sealed.key_id if sealed else None}


def register(conn: db.Connection, box: SecretBox, *, tenant: str | None, url: str,
             secret: str, now: datetime) -> db.Row:
    """Add an endpoint, or replace a registered one's secret at once (ending any rotation)."""
    sealed = box.seal(secret, tenant, url)
    row = db.fetch_one(conn, "endpoint_add", {"tenant": tenant, "url": url, "now": now,
                                              **_columns(sealed, "")})
    assert row is not None
    return row


@dataclass(frozen=True)
class Rotation:
    row: db.Row
    overlap_until: datetime | None  # None: the new secret replaced the old one at once


def _locked(conn: db.Connection, tenant: str | None, url: str) -> db.Row:
    row = db.fetch_one(conn, "endpoint_lock", {"tenant": tenant, "url": url})
    if row is None:
        whose = f"tenant {tenant}" if tenant else "every tenant (no --tenant)"
        raise NotFound(f"no endpoint {url} registered for {whose}")
    return row


def rotate(conn: db.Connection, box: SecretBox, *, tenant: str | None, url: str, secret: str,
           overlap: timedelta, now: datetime) -> Rotation:
    """Give an endpoint a new secret. With an overlap, sends carry the old and the new
    signature until ``now + overlap``; with none, the new secret replaces the old one now. A
    rotation still in its overlap must be finished first."""
    if overlap < timedelta(0):
        raise InvalidInput("--overlap must not be negative")
    with db.transaction(conn):
        row = _locked(conn, tenant, url)
        following = _sealed(row, "next_")
        if following is not None and now < row["overlap_until"]:
            raise InvalidInput(
                f"a rotation of {url} is in its overlap until {row['overlap_until'].isoformat()};"
                " end it first with `reminders endpoints rotate-secret URL --finish`")
        new = box.seal(secret, tenant, url)
        current: Sealed | None = new
        until: datetime | None = None
        if overlap == timedelta(0):
            following = None
        else:
            if following is not None:  # the last rotation's overlap is over: its secret stays
                current = following
            elif row["secret"] is not None:  # still in plaintext: sealed now
                current = box.seal(str(row["secret"]), tenant, url)
            else:
                current = _sealed(row, "")
            following, until = new, now + overlap
        written = db.fetch_one(conn, "endpoint_set_secrets", {
            "id": row["id"], "now": now, "overlap_until": until,
            **_columns(current, ""), **_columns(following, "next_")})
    assert written is not None
    return Rotation(written, until)


def finish(conn: db.Connection, *, tenant: str | None, url: str, now: datetime) -> db.Row:
    """End a rotation now: the new secret becomes the only one."""
    with db.transaction(conn):
        row = _locked(conn, tenant, url)
        following = _sealed(row, "next_")
        if following is None:
            raise InvalidInput(f"no rotation of {url} to finish: it has one secret")
        written = db.fetch_one(conn, "endpoint_set_secrets", {
            "id": row["id"], "now": now, "overlap_until": None,
            **_columns(following, ""), **_columns(None, "next_")})
    assert written is not None
    return written


def encrypt_plaintext(conn: db.Connection, box: SecretBox, *, batch: int, max_batches: int,
                      now: datetime) -> dict[str, int]:
    """Seal the secrets still stored in plaintext, ``batch`` rows per transaction, for at most
    ``max_batches`` transactions. Returns how many were sealed and how many remain."""
    if not 1 <= batch <= MAX_ENCRYPT_BATCH:
        raise InvalidInput(f"--batch must be from 1 to {MAX_ENCRYPT_BATCH}, got {batch}")
    if not 1 <= max_batches <= MAX_ENCRYPT_BATCHES:
        raise InvalidInput(f"--max-batches must be from 1 to {MAX_ENCRYPT_BATCHES}, "
                           f"got {max_batches}")
    sealed_count = batches = 0
    for _ in range(max_batches):
        with db.transaction(conn):
            rows = db.fetch_all(conn, "endpoints_plaintext_batch", {"limit": batch})
            if not rows:
                break
            sealed = [box.seal(str(r["secret"]), r["tenant"], r["url"]) for r in rows]
            done = db.fetch_all(conn, "endpoints_encrypt", {
                "ids": [r["id"] for r in rows], "secrets": [r["secret"] for r in rows],
                "ciphertexts": [s.ciphertext for s in sealed],
                "data_keys": [s.data_key for s in sealed],
                "key_ids": [s.key_id for s in sealed], "now": now})
        batches += 1
        sealed_count += len(done)
        if len(rows) < batch:
            break
    remaining = db.fetch_one(conn, "endpoints_plaintext_count")
    assert remaining is not None
    return {"encrypted": sealed_count, "batches": batches, "remaining": int(remaining["n"])}
