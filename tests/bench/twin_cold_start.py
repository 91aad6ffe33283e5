"""Cold starts on the twin: each service function of the synthesized template as Lambda starts
it, a fresh process of CPython 3.13 running awslambdaric against a local Runtime API, from the
built assets (the code asset, the layer for this machine, the runtime folder), with the
template's settings (the database secret read from moto at init, as in Lambda), through init
and its first invocation: the scanner a tick over an empty database, the consumer and the
redrive function an empty batch.

Beside each, the figure the in-process measure gives on the same assets in the same run (as
``cold_start_lambda_python`` measures: the handler imported in a fresh process, its runtime
built as at init, without the Runtime API client; DATABASE_URL instead of the secret). The
medians of 11, the functions taking turns in every round.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from reminders.clock import iso
from reminders.local import roles, stack
from reminders.local.twin.assets import FunctionAssets, build_assets
from tests.bench.support import Cluster, fresh_db
from tests.twin_helpers import database_secret, scheduled_event, twin_pool

Figures = dict[str, Any]
RUNS = 11
FUNCTIONS = ("scanner", "consumer", "redrive")
EVENTS: dict[str, Any] = {"consumer": {"Records": []}, "redrive": {"Records": []}}


def in_process_ms(assets: FunctionAssets, name: str, env: dict[str, str]) -> float:
    """The handler imported (its runtime built, as at init) in a fresh 3.13 process."""
    timing = ("import time; t = time.perf_counter(); "
              f"import functions.{name}.handler; print((time.perf_counter() - t) * 1000)")
    done = subprocess.run([assets.python, "-s", "-S", "-c", timing], capture_output=True,
                          text=True, check=True, cwd=assets.code, env=env, timeout=60)
    return float(done.stdout)


def bench_cold_start_twin(server: Cluster) -> Figures:
    from infra.layer import build_layer
    from reminders.local.twin.assets import layer_difference

    built = time.perf_counter()
    assets = build_assets()
    template = roles.synthesized_template(roles.SELF_PUBLISHING)
    figures: Figures = {"runs_median_of": RUNS, "python": "3.13", "machine": os.uname().machine,
                        "assets_s": time.perf_counter() - built,
                        "layer_differs_from_shipped": layer_difference(assets.layer,
                                                                       build_layer())}
    with tempfile.TemporaryDirectory(prefix="reminders-twin-") as tmp:
        root = Path(tmp)
        port = stack.free_port()
        moto = stack.start_moto(port, root / "moto.json")
        endpoint = f"http://127.0.0.1:{port}"
        try:
            stack.wait_moto(endpoint, root / "moto.json")
            urls = stack.prepare_aws(endpoint, prefix="twin-bench")
            conn, database_url = fresh_db(server, "twin_cold")
            conn.close()
            secret = database_secret(endpoint, database_url)
            made = roles.local_roles(endpoint, urls, stack.create_secrets_key(endpoint),
                                     functions=FUNCTIONS, app_secret=secret)
            twin: dict[str, list[float]] = {name: [] for name in FUNCTIONS}
            init: dict[str, list[float]] = {name: [] for name in FUNCTIONS}
            inside: dict[str, list[float]] = {name: [] for name in FUNCTIONS}
            for _ in range(RUNS):
                for name in FUNCTIONS:
                    pool = twin_pool(template, name, assets, endpoint=endpoint, urls=urls,
                                     database_url=database_url, secret_arn=secret,
                                     credentials=made[name].credentials, log_dir=root / "logs")
                    event = EVENTS.get(name) or scheduled_event(iso(_now()))
                    try:
                        started = time.perf_counter()
                        result = pool.invoke(event)
                        took = time.perf_counter() - started
                    finally:
                        pool.close()
                    result.raise_for_error()
                    assert result.cold
                    twin[name].append(took * 1000)
                    init[name].append(result.init_seconds * 1000)
                    env = {**pool.environment, "DATABASE_URL": database_url}
                    inside[name].append(in_process_ms(assets, name, env))
        finally:
            moto.terminate()
            moto.wait(10)
    for name in FUNCTIONS:
        twin_ms, in_ms = statistics.median(twin[name]), statistics.median(inside[name])
        figures[f"{name}_twin_cold_start_ms"] = twin_ms
        figures[f"{name}_twin_init_ms"] = statistics.median(init[name])
        figures[f"{name}_in_process_init_ms"] = in_ms
        figures[f"{name}_twin_over_in_process"] = twin_ms / in_ms
    return figures


def _now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)
