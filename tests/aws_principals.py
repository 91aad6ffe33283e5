"""The AWS principals the tests run as, made once per moto server (a module of its own: pytest
may import conftest.py twice, once as ``conftest`` and once as ``tests.conftest``, and each
copy would cache its own)."""

from __future__ import annotations

import functools

from reminders import config
from reminders.local import roles, stack
from reminders.local.moto_server import ACCOUNT


@functools.cache
def secrets_key(endpoint: str) -> str:
    """The KMS key (in the moto server at ``endpoint``) the tests seal webhook secrets with."""
    return stack.create_secrets_key(endpoint)


@functools.cache
def function_roles(endpoint: str, urls: config.QueueUrls) -> dict[str, roles.FunctionRole]:
    """Each service function's role in the moto server at ``endpoint``, granted what the
    template (the variant whose scanner publishes itself, as the tests' runtime does) grants
    it, on these queues and the tests' secrets key."""
    template = roles.synthesized_template(roles.SELF_PUBLISHING)
    arns = {name: f"arn:aws:sqs:{stack.REGION}:{ACCOUNT}:{url.rsplit('/', 1)[1]}"
            for name, url in (("deliveries", urls.deliveries), ("dlq", urls.dlq),
                              ("parking", urls.parking))}
    place = roles.Place(region=stack.REGION, account=ACCOUNT,
                        arns={**arns, "secrets_key": secrets_key(endpoint)})
    admin_arn = stack.aws_client("sts", endpoint).get_caller_identity()["Arn"]
    prefix = urls.deliveries.rsplit("/", 1)[1].removesuffix("-deliveries")
    return roles.create_roles(stack.aws_client("iam", endpoint),
                              stack.aws_client("sts", endpoint), template, place, admin_arn,
                              prefix=prefix)

