"""Operator command (JSON) -> prove the caller -> run it against the database -> output and exit
status. Invoked by `reminders --stack NAME ...` with the operator's IAM credentials."""

import os
from typing import Any

from reminders import ops, runtime
from reminders.observability import logger

runtime.at_cold_start()
if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):  # a missing STS endpoint fails the cold start
    ops.sts_endpoint_from_env(os.environ)


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return ops.handle_invocation(event, context, runtime.current())
