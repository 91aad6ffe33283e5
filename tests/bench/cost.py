"""The marginal AWS cost per million webhook reminders: counted calls per reminder times list
prices, with the log bytes and the consumer's duration measured here.

The handlers run in-process as Lambda runs them (``functions.*.handler.handler`` with a Lambda
context, Powertools' Logger at INFO with the context injected, metrics as EMF on stdout): the
scanner leases and publishes (into the in-memory queue), then the consumer takes batches of the
deployed ``consumerBatchSize`` through the real webhook channel over HTTPS (a handshake per
send; with ``BENCH_KEEP_ALIVE=1`` the receiver keeps its connections, and a first batch that
opens them is not counted) to a receiver answering in 200 ms, in a process of its own; the
consumer runs on one CPU (its time is billed at the price of two vCPUs, an upper bound).
Every byte the handlers write is counted; Lambda's own two platform lines per invocation (JSON
log format) are added from their documented shape.
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from reminders import runtime as runtime_module
from reminders.channels.signing import new_secret
from reminders.clock import FixedClock
from reminders.observability import EmfMetrics, logger
from tests.bench.support import (
    HOOK_HOST,
    NOW,
    Cluster,
    MemoryQueue,
    add_schedule,
    fresh_db,
    keep_alive_requested,
    one_cpu,
    receivers,
    runtime,
    sqs_event,
    tls_webhook_channel,
)
from tests.certs import self_signed

Figures = dict[str, Any]
last_output = ""  # what the last invocation wrote, for a look at the lines themselves

# The deployed defaults (infra/settings.py; tests/infra/test_infra_settings.py holds them equal).
CONSUMER_BATCH = 300          # consumerBatchSize
CONSUMER_MEMORY_MIB = 3538    # consumerMemoryMib: two vCPUs
CONSUMER_INSTANCES = 36       # the consumer's maximum concurrency: dbConnectionBudget 40 - 4
DEPLOYED_PREPARE = "off"      # REMINDERS_DB_PREPARE in every function (RDS Proxy)
SCANNER_MEMORY_MIB = 1769     # scannerMemoryMib
SCAN_BATCH = 1000             # scanBatch
SQS_BATCH = 10                # SendMessageBatch, ReceiveMessage and DeleteMessageBatch: 10 a call
# Not measurable here: publishing through SQS. capacity.md's estimate for one scanner (10
# SendMessageBatch calls in flight at 10-20 ms each), its low end.
SCANNER_ROWS_PER_S = 4000

# List prices, USD, us-east-1 (eu-west-1 differs for logs: 0.57 per GB).
PRICES = {
    "lambda_per_million_gb_seconds_arm64": 13.3334,
    "lambda_per_million_requests": 0.20,
    "sqs_per_million_requests": 0.40,   # standard queue, a request per 64 KB
    "logs_per_gb_ingested": 0.50,       # CloudWatch Logs, standard class
    "xray_per_million_traces": 5.00,
}

# Lambda's platform lines per invocation in the JSON log format (the documented shape; the
# report carries the trace when active tracing is on).
PLATFORM_LINES = (
    '{"time":"2027-03-01T09:00:00.000Z","type":"platform.start","record":{"requestId":'
    '"6d68ca91-49c9-448d-89b8-7ca3e6dc66aa","version":"$LATEST"}}\n'
    '{"time":"2027-03-01T09:00:00.250Z","type":"platform.report","record":{"requestId":'
    '"6d68ca91-49c9-448d-89b8-7ca3e6dc66aa","metrics":{"durationMs":250.123,'
    '"billedDurationMs":251,"memorySizeMB":3538,"maxMemoryUsedMB":112},"tracing":{"spanId":'
    '"53995c3f42cd8ad8","type":"X-Amzn-Trace-Id","value":"Root=1-5759e988-bd862e3fe1be46a99427'
    '2793;Parent=53995c3f42cd8ad8;Sampled=1"},"status":"success"}}\n')
TRACE_ID = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"


class LambdaContext:
    def __init__(self, name: str, memory_mib: int, timeout_s: int) -> None:
        self.function_name = f"Reminders-{name}"
        self.function_version = "$LATEST"
        self.invoked_function_arn = (f"arn:aws:lambda:us-east-1:123456789012:function:"
                                     f"Reminders-{name}")
        self.memory_limit_in_mb = memory_mib
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/Reminders-{name}"
        self.log_stream_name = "2027/03/01/[$LATEST]0123456789abcdef"
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return int(1000 * (self._deadline - time.monotonic()))


@contextlib.contextmanager
def captured() -> Any:
    """Everything the handlers write: the Logger's stream (stderr) and EMF (stdout)."""
    handler = logger.registered_handler
    stream = io.StringIO()
    level, old_stream = logger.log_level, handler.stream  # type: ignore[attr-defined]
    handler.setStream(stream)  # type: ignore[attr-defined]
    logger.setLevel("INFO")
    os.environ["_X_AMZN_TRACE_ID"] = TRACE_ID
    try:
        with contextlib.redirect_stdout(stream):
            yield stream
    finally:
        os.environ.pop("_X_AMZN_TRACE_ID", None)
        logger.setLevel(level)
        handler.setStream(old_stream)  # type: ignore[attr-defined]


def invoke(name: str, event: dict[str, Any], rt: Any, memory_mib: int,
           timeout_s: int) -> tuple[Any, int, float]:
    """One invocation of a deployed handler: (its answer, bytes written, seconds)."""
    module = __import__(f"functions.{name}.handler", fromlist=["handler"])
    runtime_module.install(rt)
    try:
        with captured() as stream:
            start = time.perf_counter()
            answer = module.handler(event, LambdaContext(name, memory_mib, timeout_s))
            took = time.perf_counter() - start
    finally:
        runtime_module.install(None)
    global last_output
    last_output = stream.getvalue()
    return answer, len(last_output.encode()), took


def bench_cost(server: Cluster) -> Figures:
    batches = 3
    keep_alive = keep_alive_requested()
    # With kept connections the first batch opens them, so it only warms up.
    warm_up = 1 if keep_alive else 0
    secret = new_secret()
    with tempfile.TemporaryDirectory(prefix="reminders-tls-") as tmp:
        cert, key = self_signed(Path(tmp), HOOK_HOST)
        with receivers(secret, cert, key, keep_alive) as (_, tls_port, finish):
            conn, url = fresh_db(server, "bench_cost")
            hook = f"https://{HOOK_HOST}:{tls_port}/hooks/cost?delay=0.2"
            # A plaintext row (no KMS in the benchmark); sealed ones cost a Decrypt a process.
            conn.execute("insert into endpoints (url, secret) values (%s, %s)", (hook, secret))
            add_schedule(conn, tenant="acme", key="cost", due=NOW, url=hook,
                         recipients=[f"p{i}"
                                     for i in range((warm_up + batches) * CONSUMER_BATCH)])
            queue = MemoryQueue()
            scan_rt = runtime(url, FixedClock(NOW), queue, {}, scan_batch=SCAN_BATCH,
                              inflight_budget=100_000)
            scan_rt.metrics = EmfMetrics()
            summary, scan_bytes, _ = invoke("scanner", {}, scan_rt, SCANNER_MEMORY_MIB, 120)
            scan_rt.close()
            assert summary["leased"] == (warm_up + batches) * CONSUMER_BATCH, summary
            rt = runtime(url, FixedClock(NOW + timedelta(seconds=1)), queue, {},
                         send_concurrency=CONSUMER_BATCH, db_prepare=DEPLOYED_PREPARE)
            rt.channels = {"webhook": tls_webhook_channel(rt.settings, cert)}
            rt.metrics = EmfMetrics()
            spent: list[float] = []
            written: list[int] = []
            with one_cpu():
                for i in range(warm_up + batches):
                    answer, size, took = invoke("consumer",
                                                sqs_event(queue.take(CONSUMER_BATCH)), rt,
                                                CONSUMER_MEMORY_MIB, 60)
                    assert answer == {"batchItemFailures": []}, answer
                    if i >= warm_up:
                        spent.append(took)
                        written.append(size)
            rt.close()
            conn.close()
            effects = finish()
    assert effects == (warm_up + batches) * CONSUMER_BATCH, effects
    return {"kept_connections": keep_alive,
            **cost_figures(consumer_s=statistics.median(spent),
                           consumer_bytes=statistics.median(written),
                           scanner_bytes=scan_bytes)}


def cost_figures(*, consumer_s: float, consumer_bytes: float, scanner_bytes: int) -> Figures:
    """Counted calls per million reminders times PRICES. The scanner's tick (its lines, its
    GetQueueAttributes, EventBridge's invocation) happens every minute with or without
    reminders: a fixed cost, apart from its draining time, counted here."""
    million = 1_000_000
    invocations = million / CONSUMER_BATCH
    platform = len(PLATFORM_LINES.encode())
    consumer_gb = CONSUMER_MEMORY_MIB / 1024
    billed_s = -(-consumer_s * 1000 // 1) / 1000  # Lambda bills whole milliseconds
    counts = {
        "sqs_send_message_batch": million / SQS_BATCH,
        "sqs_receive_message": million / SQS_BATCH,  # the event source receives 10 a call
        "sqs_delete_message_batch": million / SQS_BATCH,
        "consumer_invocations": invocations,
        "consumer_gb_seconds": invocations * billed_s * consumer_gb,
        "scanner_gb_seconds": million / SCANNER_ROWS_PER_S * SCANNER_MEMORY_MIB / 1024,
        "log_bytes": invocations * (consumer_bytes + platform),
        # at most every consumer invocation sampled (Lambda samples the first request each
        # second and 5 % of the rest: all of them at low rates)
        "xray_traces_at_most": invocations,
    }
    usd = {
        "sqs": (counts["sqs_send_message_batch"] + counts["sqs_receive_message"]
                + counts["sqs_delete_message_batch"]) / million
        * PRICES["sqs_per_million_requests"],
        "lambda_requests": invocations / million * PRICES["lambda_per_million_requests"],
        "lambda_duration": (counts["consumer_gb_seconds"] + counts["scanner_gb_seconds"])
        / million * PRICES["lambda_per_million_gb_seconds_arm64"],
        "logs": counts["log_bytes"] / 1e9 * PRICES["logs_per_gb_ingested"],
        "xray": counts["xray_traces_at_most"] / million * PRICES["xray_per_million_traces"],
    }
    total = sum(usd.values())
    return {
        "goal": "usd_per_million <= 0.30",
        "consumer_batch": CONSUMER_BATCH, "consumer_memory_mib": CONSUMER_MEMORY_MIB,
        "consumer_batch_ms_at_200ms_webhooks": 1000 * consumer_s,
        "consumer_log_bytes_per_batch": consumer_bytes,
        "platform_log_bytes_per_invocation": platform,
        "scanner_log_bytes_per_tick": scanner_bytes,
        "scanner_rows_per_s_assumed": SCANNER_ROWS_PER_S,
        "per_million": counts, "usd_per_million_by_part": usd,
        "usd_per_million": total,
        "usd_per_million_without_xray": total - usd["xray"],
        "prices_usd": PRICES,
    }

