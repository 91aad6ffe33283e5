"""The ``publisher_fan_out`` figure: one warm scanner's ticks handing leases over, publishing
itself (SendMessageBatch of 10, ``publishConcurrency`` 10) vs fanning out (one asynchronous
Invoke of the publisher per 1,000 ids), as deployed (``scanBatch`` 1,000).

Real: Postgres, the scanner's ticks, the SigV4 client the functions use (reminders.aws_http)
with their settings, the HTTP requests and the signing. Stand-in: the AWS side, a small HTTP
server in its own process that answers SendMessageBatch as SQS does (every entry successful,
with its MD5) and Invoke with 202, at once. So the figure is the scanner's own cost of handing
over (its CPU and its round trips to a local server), not AWS's latency; the publishers'
SendMessageBatch work is not in the fan-out side (it runs in the publisher functions).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from datetime import timedelta
from typing import Any

from reminders import scanner
from reminders.aws import DEFAULT_LIMITS
from reminders.aws_http import Credentials
from reminders.clock import FixedClock
from reminders.fanout import FanOutPublisher
from reminders.lambdas import EventInvoker
from reminders.local import stack
from reminders.queue import Queue
from tests.bench.support import (
    NOW,
    Cluster,
    MemoryQueue,
    RecordingChannel,
    add_rows,
    backlog,
    fresh_db,
    runtime,
    settle_leased,
)

Figures = dict[str, Any]
SCAN_BATCH = 1000  # the deployed scanBatch and publishChunk
PER_TICK = 10_000  # rows a tick hands over (its in-flight budget)
ROUNDS = 3  # ticks of each kind, interleaved

STUB = r'''
import hashlib, json, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LATENCY = float(sys.argv[2]) / 1000 if len(sys.argv) > 2 else 0.0

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # the headers and the body leave at once

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if LATENCY:
            time.sleep(LATENCY)
        if "/functions/" in self.path:
            self._answer(202, b"")
            return
        target = self.headers.get("X-Amz-Target", "")
        if target.endswith("SendMessageBatch"):
            entries = json.loads(body)["Entries"]
            data = {"Successful": [
                {"Id": e["Id"], "MessageId": "m" + e["Id"],
                 "MD5OfMessageBody": hashlib.md5(e["MessageBody"].encode()).hexdigest()}
                for e in entries], "Failed": []}
        else:
            data = {"Attributes": {"ApproximateNumberOfMessages": "0",
                                   "ApproximateNumberOfMessagesNotVisible": "0",
                                   "ApproximateNumberOfMessagesDelayed": "0"}}
        self._answer(200, json.dumps(data).encode())

    def _answer(self, status, payload):
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
'''


def _client(service: str, endpoint: str) -> Any:
    # What the functions call AWS with (reminders.aws.lean_client), pointed at the stand-in
    # (which checks no signature: any key will do; it is no moto, so there is no administrator).
    return stack.service_client(service, endpoint, DEFAULT_LIMITS,
                                credentials=Credentials("bench", "bench"))


# What an asynchronous Invoke is given to take in the slow stand-in (AWS's answer, estimated in
# capacity.md at 20-30 ms): the hand-over then costs a pass about as much as its lease.
INVOKE_MS = 25


def bench_publisher_fan_out(server: Cluster) -> Figures:
    port, slow_port = stack.free_port(), stack.free_port()
    stub = subprocess.Popen([sys.executable, "-c", STUB, str(port)])
    slow = subprocess.Popen([sys.executable, "-c", STUB, str(slow_port), str(INVOKE_MS)])
    endpoint = f"http://127.0.0.1:{port}"
    slow_endpoint = f"http://127.0.0.1:{slow_port}"
    conn, url = fresh_db(server, "bench_publishing")
    try:
        wait_until_listening(endpoint)
        wait_until_listening(slow_endpoint)
        backlog(conn, due_rows=PER_TICK)
        row = conn.execute("select id from schedules where schedule_key = 'fan-big'").fetchone()
        assert row is not None
        schedule_id, next_recipient = int(row["id"]), PER_TICK
        rt = runtime(url, FixedClock(NOW), MemoryQueue(), {"webhook": RecordingChannel()},
                     scan_batch=SCAN_BATCH, inflight_budget=PER_TICK, publish_concurrency=10,
                     scan_seconds=60)
        queue = Queue(_client("sqs", endpoint), f"{endpoint}/123456789012/deliveries")
        publishers = {
            "stubbed": None, "itself": None,
            "fan_out": FanOutPublisher(EventInvoker("publisher", _client("lambda", endpoint)),
                                       SCAN_BATCH),
            "fan_out_slow": FanOutPublisher(
                EventInvoker("publisher", _client("lambda", slow_endpoint)), SCAN_BATCH)}
        memory = MemoryQueue()
        rt.connection()
        rates: dict[str, list[float]] = {mode: [] for mode in publishers}
        cpu: dict[str, list[float]] = {mode: [] for mode in publishers}
        for round_ in range(ROUNDS + 1):  # the first round warms them up, not counted
            for mode, fanout in publishers.items():
                rt.fanout = fanout
                rt.deliveries = memory if mode == "stubbed" else queue  # type: ignore[assignment]
                wall, process = time.perf_counter(), time.process_time()
                summary = scanner.tick(rt)
                took = time.perf_counter() - wall
                spent = time.process_time() - process
                assert summary.published == summary.leased == PER_TICK, summary
                if round_:
                    rates[mode].append(summary.published / took)
                    cpu[mode].append(1e6 * spent / summary.published)
                memory.clear()
                settle_leased(conn)
                add_rows(conn, tenant="big", schedule_id=schedule_id, count=PER_TICK,
                         due=NOW - timedelta(minutes=1), first=next_recipient)
                next_recipient += PER_TICK
        rt.close()
    finally:
        for child in (stub, slow):
            child.terminate()
            child.wait(10)
        conn.close()
    median = {mode: statistics.median(values) for mode, values in rates.items()}
    return {
        "goal": "the scanner hands over at the lease's pace, not at its own publishing pace",
        "scan_batch": SCAN_BATCH, "publish_chunk": SCAN_BATCH, "rows_per_tick": PER_TICK,
        "rounds": ROUNDS,
        "itself_messages_per_s": median["itself"],
        "fan_out_messages_per_s": median["fan_out"],
        "fan_out_over_itself": median["fan_out"] / median["itself"],
        "itself_messages_per_minute": 60 * median["itself"],
        "fan_out_messages_per_minute": 60 * median["fan_out"],
        "stubbed_messages_per_s": median["stubbed"],
        "invoke_ms_slow": INVOKE_MS,
        "fan_out_slow_messages_per_s": median["fan_out_slow"],
        "fan_out_slow_over_stubbed": median["fan_out_slow"] / median["stubbed"],
        "scanner_cpu_us_per_message": {m: statistics.median(v) for m, v in cpu.items()},
        "runs_messages_per_s": rates,
    }


def wait_until_listening(endpoint: str) -> None:
    import socket

    host, port = endpoint.rsplit(":", 1)
    for _ in range(100):
        try:
            socket.create_connection((host.removeprefix("http://"), int(port)), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"the AWS stand-in at {endpoint} did not start")
