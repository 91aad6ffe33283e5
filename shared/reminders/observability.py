"""Logging and metrics: structured keys, never f-string messages; one metrics port."""

from __future__ import annotations

import logging
import sys
from typing import Any, Protocol

from aws_lambda_powertools import Logger

# JSON logs on stderr (CloudWatch takes both streams); stdout stays for EMF metrics and for
# the command line's JSON answers. LOG_LEVEL sets the level.
logger = Logger(service="reminders", logger_handler=logging.StreamHandler(sys.stderr))

NAMESPACE = "Reminders"


class Metrics(Protocol):
    def put(self, name: str, value: float, unit: str = "Count",
            dimensions: dict[str, str] | None = None) -> None:
        """Record a value; ``dimensions`` are added to ``service`` for this value alone."""
        ...

    def flush(self) -> None:
        """Publish what was put since the last flush (one EMF record in Lambda)."""
        ...


class NoMetrics:
    def put(self, name: str, value: float, unit: str = "Count",
            dimensions: dict[str, str] | None = None) -> None:
        return None

    def flush(self) -> None:
        return None


class EmfMetrics:
    """In Lambda: CloudWatch embedded metric format on stdout, no API call, no extra grant."""

    def __init__(self) -> None:
        from aws_lambda_powertools import Metrics as PowertoolsMetrics

        self._metrics = PowertoolsMetrics(namespace=NAMESPACE, service="reminders")

    def put(self, name: str, value: float, unit: str = "Count",
            dimensions: dict[str, str] | None = None) -> None:
        if dimensions:  # its own EMF record, with the extra dimensions
            from aws_lambda_powertools.metrics import MetricUnit, single_metric

            with single_metric(name=name, unit=MetricUnit(unit), value=value, namespace=NAMESPACE,
                               default_dimensions={"service": "reminders", **dimensions}):
                return
        self._metrics.add_metric(name=name, unit=unit, value=value)

    def flush(self) -> None:
        self._metrics.flush_metrics()


class CloudWatchMetrics:
    """Locally: PutMetricData to the CloudWatch endpoint (moto's, on one machine)."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def put(self, name: str, value: float, unit: str = "Count",
            dimensions: dict[str, str] | None = None) -> None:
        self._client.put_metric_data(Namespace=NAMESPACE, MetricData=[{
            "MetricName": name, "Value": value, "Unit": unit,
            "Dimensions": [{"Name": k, "Value": v} for k, v in
                           {"service": "reminders", **(dimensions or {})}.items()]}])

    def flush(self) -> None:
        return None
