"""`reminders demo`, the main job, as a new user runs it: the stack comes up, the mix runs to
completion on the simulated clock, every reminder ends as it should, and the stack goes down."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path


def test_demo_runs_the_whole_mix_to_completion() -> None:
    # Outside pytest's tmp dirs, as tests/integration/test_local_stack.py's homes: the embedded
    # Postgres runs as a user of its own, which cannot enter pytest's private tmp directory.
    root = Path(tempfile.mkdtemp(prefix="reminders-demo-"))
    try:
        _demo_runs_the_whole_mix_to_completion(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _demo_runs_the_whole_mix_to_completion(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "REMINDERS_"))}
    env["REMINDERS_HOME"] = str(tmp_path / "home")
    done = subprocess.run([sys.executable, "-m", "reminders.cli", "demo", "--json"], env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["all_as_expected"] is True
    # The template's functions in processes of their own, its mappings and rule (the CDK is
    # installed where the tests run, so the template is there)
    assert report["functions"] == "twin"
    assert report["totals"] == {"scheduled": 1, "sent": 23, "failed": 1, "suppressed": 4,
                                "stale": 1}
    assert report["receiver"] == {"effects": 9, "keys_with_duplicates": {}, "bad_signatures": 0}
    # The paced burst: 12 e-mails at 2/s (a bucket of 2) take at least 5 s of the clock, never
    # more than 4 in a second; the reminder due at 06:00 in Sao Paulo went at its window's 06:20.
    paced = report["paced_burst"]
    assert (paced["sent"], paced["rate_per_second"]) == (12, 2.0), paced
    assert paced["seconds"] >= (12 - 2) / 2 and paced["most_in_one_second"] <= 4, paced
    held = report["held_by_window"]
    assert (held["due_at"], held["sent_local"]) == ("2027-03-01T09:00:00Z", "06:20"), held
    assert held["sent_at"] == "2027-03-01T09:20:00Z" and held["held"], held
    states = {(d["case"], d["recipient"]): d["state"] for d in report["deliveries"]
              if d["reason"] != "rescheduled"}
    assert states[("endpoint answers 429, Retry-After 120s", "alice")] == "sent"
    assert states[("endpoint answers 410 Gone", "alice")] == "failed"
    assert states[("missed its window (stale after 1h)", "alice")] == "stale"
    assert [p["reason"] for p in report["parked_messages"]] == [
        "unparseable: body is not JSON: '{not json'"]
    # The alarms that fired are the ones its scenarios provoke: the unreadable message reached
    # the dead-letter queue and stays parked. The rule fired every simulated minute, so the
    # scanner was never silent.
    assert [line.split(" fired at ")[0] for line in report["alarms"]] == [
        "ParkingQueueNotEmpty", "DeadLetterArrivals"], report["alarms"]
    assert report["alarms"][0].endswith("still in ALARM")
    assert report["rounds"] >= report["simulated_minutes"]
    assert not (tmp_path / "home" / "local.json").exists()  # it stopped what it started
    # The report names the one command that opens the console on the demo's own database, at
    # the demo's simulated time; it starts the local stack again (its Postgres kept the data).
    assert report["console"] == "reminders console --demo"
    from reminders.local import stack

    port = stack.free_port()
    server = subprocess.Popen([sys.executable, "-m", "reminders.cli", "console", "--demo",
                               "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    try:
        stack.wait_http(f"http://127.0.0.1:{port}/static/console.css", seconds=120)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/deliveries?limit=200",
                                    timeout=30) as answer:
            page = answer.read().decode()
    finally:
        server.terminate()
        server.wait(10)
        subprocess.run([sys.executable, "-m", "reminders.cli", "local", "down"], env=env,
                       capture_output=True, timeout=60)
    keys = re.findall(r'class="delivery-row" data-key="([^"]+)"', page)
    assert sorted(html.unescape(k) for k in keys) == sorted(
        d["delivery_key"] for d in report["deliveries"])


def test_console_demo_before_any_demo_says_to_run_one(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "REMINDERS_"))}
    env["REMINDERS_HOME"] = str(tmp_path / "home")
    done = subprocess.run([sys.executable, "-m", "reminders.cli", "console", "--demo"], env=env,
                          capture_output=True, text=True, timeout=60)
    path = tmp_path / "home" / "last-demo.json"
    assert (done.returncode, done.stdout, done.stderr) == (2, "", (
        f"reminders: error: console --demo: no demo has run here ({path} is missing or "
        "unreadable): run `make demo` (or `reminders demo`) first\n"))
