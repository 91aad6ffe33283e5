"""EventBridge rate(1 minute) -> lease due deliveries -> publish their IDs."""

from typing import Any

from reminders import runtime, scanner
from reminders.observability import EmfMetrics, logger

runtime.at_cold_start(metrics_factory=EmfMetrics)


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return scanner.tick(runtime.current(metrics_factory=EmfMetrics), context).as_json()
