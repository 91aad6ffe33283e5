"""DLQ batch -> re-check -> replay through Postgres, or drop with a reason, or park."""

from typing import Any

from reminders import redrive, runtime
from reminders.observability import EmfMetrics, logger

runtime.at_cold_start(metrics_factory=EmfMetrics)


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return redrive.process_batch(event, runtime.current(metrics_factory=EmfMetrics), context)
