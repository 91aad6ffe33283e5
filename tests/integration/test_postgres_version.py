"""The tests run on the Postgres the stack deploys: RDS's engine version in the template
(infra/constructs/database.py) is the server every local run starts
(reminders.local.postgres_binaries), to the minor version. A statement only a newer server
accepts, or a bound only a newer executor keeps (the retention purge written with row
comparisons read 51 buffers on 18, which ends the index range on them, and 624 on 17, which
does not), fails here as it would on RDS."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.constructs.database import POSTGRES_VERSION
from reminders import db
from reminders.local import postgres_binaries, stack
from tests.conftest import PgCluster


def test_the_local_server_is_the_deployed_engine_version(pg_cluster: PgCluster) -> None:
    with db.connect(pg_cluster.direct) as conn:
        row = conn.execute("show server_version").fetchone()
    assert row is not None
    running = str(row["server_version"]).split()[0]
    assert running == postgres_binaries.VERSION == POSTGRES_VERSION.postgres_full_version, (
        running, postgres_binaries.VERSION, POSTGRES_VERSION.postgres_full_version)


def test_a_data_directory_of_another_major_version_is_refused_with_the_fix(
        tmp_path: Path) -> None:
    pgdata = tmp_path / "data"
    pgdata.mkdir()
    (pgdata / "PG_VERSION").write_text("18\n")
    with pytest.raises(stack.StackError, match=r"made by Postgres 18; the local stack runs "
                                               r"Postgres 17\.9.*remove it"):
        stack.start_postgres(pgdata, keep_running=False)
    assert sorted(p.name for p in pgdata.iterdir()) == ["PG_VERSION"]  # nothing started in it


def test_unpinned_binaries_are_refused_naming_the_override(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(postgres_binaries, "platform_name", lambda: "plan9-mips")
    with pytest.raises(postgres_binaries.BinariesUnavailable,
                       match=r"no Postgres 17\.9 binaries are pinned for plan9-mips.*"
                             r"REMINDERS_POSTGRES_BIN"):
        postgres_binaries.install(tmp_path / "target")
    assert not (tmp_path / "target").exists()
