"""What one SendMessageBatch call costs the caller's CPU: the SigV4 client the functions use
(``reminders.aws_http``) against boto3's, both sending the same ten-entry batches to one local
HTTP server that answers at once with SQS's success shape (``publishing.STUB``; no moto: its own
work would be timed with the client's, and the server runs in another process). CPU is the
calling thread's (``time.thread_time``); the server's is not counted."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

from reminders import aws_http
from reminders.aws import DEFAULT_LIMITS, boto_config
from reminders.local.stack import free_port
from tests.bench.publishing import STUB, wait_until_listening

Figures = dict[str, Any]
CALLS = 300
ENTRIES = [{"Id": str(i), "MessageBody": '{"delivery_id":1234567,"lease_token":'
            '"8d1c6a8e-2f37-4c55-9a63-0c8f2d1e7b41"}'} for i in range(10)]


def per_call(send: Any) -> tuple[float, float]:
    """Milliseconds of this thread's CPU, and of wall time, per call (after a warm-up)."""
    for _ in range(20):
        send()
    cpu, wall = time.thread_time(), time.perf_counter()
    for _ in range(CALLS):
        send()
    return ((time.thread_time() - cpu) * 1000 / CALLS,
            (time.perf_counter() - wall) * 1000 / CALLS)


def bench_aws_calls() -> Figures:
    import boto3

    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", STUB, str(port)])
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_until_listening(endpoint)
        env = {"AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1"}
        lean = aws_http.client("sqs", DEFAULT_LIMITS, env,
                               lambda: aws_http.Credentials("bench", "bench"))
        boto: Any = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1",
                            aws_access_key_id="bench", aws_secret_access_key="bench",
                            config=boto_config(DEFAULT_LIMITS))
        url = f"{endpoint}/123456789012/deliveries"
        rounds: dict[str, list[tuple[float, float]]] = {"lean": [], "boto3": []}
        for _ in range(3):  # taking turns, so a neighbour's load slows both alike
            rounds["lean"].append(per_call(
                lambda: lean.send_message_batch(QueueUrl=url, Entries=ENTRIES)))
            rounds["boto3"].append(per_call(
                lambda: boto.send_message_batch(QueueUrl=url, Entries=ENTRIES)))
    finally:
        server.terminate()
        server.wait()
    best = {name: (min(c for c, _ in runs), min(w for _, w in runs))
            for name, runs in rounds.items()}
    return {
        "calls": CALLS, "entries_per_call": len(ENTRIES),
        "lean_cpu_ms_per_call": best["lean"][0], "boto3_cpu_ms_per_call": best["boto3"][0],
        "lean_wall_ms_per_call": best["lean"][1], "boto3_wall_ms_per_call": best["boto3"][1],
        "lean_cpu_over_boto3": best["lean"][0] / best["boto3"][0],
    }
