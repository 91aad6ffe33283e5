"""SQS batch -> re-check -> deliver -> record; answers with partial batch failures."""

from typing import Any

from reminders import consumer, runtime
from reminders.observability import EmfMetrics, logger

runtime.at_cold_start(metrics_factory=EmfMetrics)


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return consumer.process_batch(event, runtime.current(metrics_factory=EmfMetrics), context)
