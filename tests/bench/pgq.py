"""PgQueuer's dequeue, a reference for the scanner's rate: the same server through the same
PgBouncer, batches of 100, through asyncpg as PgQueuer runs (its statement cache off, as asyncpg
needs behind a transaction pooler). PgQueuer and asyncpg come from the ``bench`` extra, which only
``make bench`` installs; without them this reference is skipped and says so."""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
import random
import uuid
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any, TypeVar

from psycopg.conninfo import conninfo_to_dict

T = TypeVar("T")
ENTRYPOINT = "bench"


def missing() -> str | None:
    """Why PgQueuer cannot be measured here, or None when it can."""
    try:
        importlib.import_module("asyncpg")
        importlib.import_module("pgqueuer.queries")
    except ImportError as exc:
        return f"not installed ({exc}); `make bench` installs the `bench` extra"
    return None


def versions() -> dict[str, str]:
    return {name: importlib.metadata.version(name) for name in ("pgqueuer", "asyncpg")}


class PgQueuer:
    """One asyncpg connection and PgQueuer's ``Queries`` on it, driven from synchronous code
    (one event loop, run for each call), so its batches can alternate with the scanner's."""

    def __init__(self, url: str) -> None:
        asyncpg = importlib.import_module("asyncpg")
        queries = importlib.import_module("pgqueuer.queries")
        params = conninfo_to_dict(url)
        self._loop = asyncio.new_event_loop()
        self.conn: Any = self._run(asyncpg.connect(
            host=params.get("host"), port=int(params.get("port") or 5432),
            user=params.get("user"), password=params.get("password") or None,
            database=params.get("dbname"),
            # Behind a transaction pooler: no named prepared statements (the next transaction
            # may run on another server connection, reset by DISCARD ALL).
            statement_cache_size=0))
        self.queries: Any = queries.Queries.from_asyncpg_connection(self.conn)
        self._entrypoints = {ENTRYPOINT: queries.EntrypointExecutionParameter(
            concurrency_limit=0)}
        self._manager = uuid.uuid4()

    def _run(self, work: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(work)

    def fill(self, jobs: int, chunk: int = 10_000, spread: timedelta | None = None) -> None:
        """Install PgQueuer's schema and queue ``jobs`` jobs, all due now; with ``spread``,
        each due at random over that time before now (its ``execute_after``: all are due)."""
        self._run(self.queries.install())
        rng = random.Random(25)
        for start in range(0, jobs, chunk):
            n = min(chunk, jobs - start)
            after = None if spread is None else [-spread * rng.random() for _ in range(n)]
            self._run(self.queries.enqueue([ENTRYPOINT] * n, [None] * n, [0] * n, after))
        self._run(self.conn.execute("vacuum analyze"))

    def dequeue(self, batch: int = 100) -> int:
        """One ``Queries.dequeue`` (no concurrency limits: PgQueuer's plain pick-and-claim)."""
        jobs = self._run(self.queries.dequeue(
            batch_size=batch, entrypoints=self._entrypoints, queue_manager_id=self._manager,
            global_concurrency_limit=None, heartbeat_timeout=timedelta(seconds=30)))
        return len(jobs)

    def close(self) -> None:
        self._run(self.conn.close())
        self._loop.close()
