"""cdk-nag (v3) wiring: the rule pack attached once, and narrowly scoped acknowledgments.

cdk-nag v3 acknowledges findings through CDK's ``Validations.of(construct).acknowledge``.
Findings that carry a detail (IAM wildcards) are acknowledged one by one as
``RuleId[Detail]``, the v3 form of v2's ``appliesTo``.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct


def attach_checks(app: IConstruct) -> AwsSolutionsChecks:
    """Register the AWS Solutions pack once, on the app; synth fails on an open finding."""
    checks = AwsSolutionsChecks(app, verbose=True)
    Validations.of(app).add_plugins(checks)
    return checks


def acknowledge(scope: IConstruct, rule_id: str, reason: str, *details: str) -> None:
    """Acknowledge ``rule_id`` on ``scope`` only; with details, only those findings."""
    ids = [f"{rule_id}[{detail}]" for detail in details] if details else [rule_id]
    Validations.of(scope).acknowledge(*(Acknowledgment(id=i, reason=reason) for i in ids))
