"""The tests run on the Postgres the stack deploys: RDS's engine version in the template
(infra/constructs/database.py) is the server every local run starts
(reminders.local.postgres_binaries), to the minor version. A statement only a newer server
accepts, or a bound only a newer executor keeps (the retention purge written with row
comparisons read 51 buffers on 18, which ends the index range on them, and 624 on 17, which
does not), fails here as it would on RDS."""

from __future__ import annotations

from infra.constructs.database import POSTGRES_VERSION
from reminders import db
from reminders.local import postgres_binaries
from tests.conftest import PgCluster


def test_the_local_server_is_the_deployed_engine_version(pg_cluster: PgCluster) -> None:
    with db.connect(pg_cluster.direct) as conn:
        row = conn.execute("show server_version").fetchone()
    assert row is not None
    running = str(row["server_version"]).split()[0]
    assert running == postgres_binaries.VERSION == POSTGRES_VERSION.postgres_full_version, (
        running, postgres_binaries.VERSION, POSTGRES_VERSION.postgres_full_version)
