"""``python -m tests.console_screenshots`` (``make screenshots``): the console's pages as PNGs in
docs/, taken by Debian's Chromium (apt: chromium) against a local stack of their own (in a
temporary REMINDERS_HOME, so a running `reminders local up` is left alone) after the demo-like
traffic of ``tests/console_traffic.py``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

DOCS = Path(__file__).resolve().parent.parent / "docs"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def main() -> int:
    home = Path(tempfile.mkdtemp(prefix="reminders-shots-"))
    os.environ["REMINDERS_HOME"] = str(home)
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    for key in ("DATABASE_URL", "REMINDERS_QUEUE_URL", "REMINDERS_DLQ_URL",
                "REMINDERS_PARKING_QUEUE_URL", "REMINDERS_NOW"):
        os.environ.pop(key, None)
    from reminders import runtime
    from reminders.clock import FixedClock, iso
    from reminders.local import operator_access, stack
    from reminders.observability import logger
    from tests import console_traffic

    logger.setLevel("CRITICAL")
    local = stack.up()
    server: subprocess.Popen[bytes] | None = None
    try:
        # The traffic is made with moto's administrator's hands (as a test's are); the console
        # runs as an operator holding the operator-direct policy on these queues.
        env = {**local.env(), **stack.credentials_env(stack.administrator(local.endpoint_url))}
        env["DATABASE_URL"] = local.new_database("console_shots")
        urls = stack.prepare_aws(local.endpoint_url, prefix="shots")
        env.update({"REMINDERS_QUEUE_URL": urls.deliveries, "REMINDERS_DLQ_URL": urls.dlq,
                    "REMINDERS_PARKING_QUEUE_URL": urls.parking})
        arns = {name: operator_access.queue_arn(url, stack.REGION) for name, url in
                (("deliveries", urls.deliveries), ("dlq", urls.dlq), ("parking", urls.parking))}
        viewer = operator_access.grant(
            stack.aws_client("iam", local.endpoint_url), "shots-operator",
            operator_access.direct_policy(arns, local.secrets_key_id))
        for key, value in env.items():
            os.environ.setdefault(key, value)
        clock = FixedClock(console_traffic.T0)
        rt = runtime.from_env(env, clock=clock)
        conn = rt.connection()
        receiver = SimpleNamespace(url=local.receiver_url, secret=local.receiver_secret)
        end = console_traffic.build(rt, conn, clock, receiver)
        rt.close()
        port = stack.free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "reminders.cli", "console", "--port", str(port)],
            env={**os.environ, **env, **stack.credentials_env(viewer), "REMINDERS_NOW": iso(end)},
            stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        stack.wait_http(f"{base}/static/console.css")
        shoot(base)
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        stack.down()
        shutil.rmtree(home, ignore_errors=True)
    return 0


def shoot(base: str) -> None:
    """Every page of ``tests/console_pages.py``, in its order, full height."""
    from playwright.sync_api import sync_playwright

    from tests.console_pages import PAGES

    DOCS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        for shot in PAGES:
            page.goto(base + shot.path)
            if shot.then is not None:
                shot.then(page)
            page.screenshot(path=str(DOCS / f"console-{shot.name}.png"), full_page=True)
        browser.close()
    for shot in PAGES:
        path = DOCS / f"console-{shot.name}.png"
        print(f"{path.relative_to(DOCS.parent)}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    raise SystemExit(main())
