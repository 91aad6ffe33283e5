"""Operator command (JSON) -> prove the caller -> run it against the database -> output and exit
status. Invoked by `reminders --stack NAME ...` with the operator's IAM credentials. The stack
deploys it twice: STACK-ops-read serves the read commands, STACK-ops-write the write commands
(``REMINDERS_OPS_SERVES``)."""

import os
from typing import Any

from reminders import ops, runtime
from reminders.observability import logger

runtime.at_cold_start()
if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):  # a missing setting fails the cold start
    ops.sts_endpoint_from_env(os.environ)
    ops.serves_from_env(os.environ)


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return ops.handle_invocation(event, context, runtime.current())
