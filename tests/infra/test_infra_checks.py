"""cdk-nag (AWS Solutions) and cfn-lint over both synthesized variants."""

from __future__ import annotations

import subprocess
import sys

import pytest
from aws_cdk import Validations
from aws_cdk.assertions import Annotations, Match
from cdk_nag import AwsSolutionsChecks

from tests.infra.synth import Synthesized

VARIANTS = ("default", "switched", "bastion", "existing_db", "existing_db_group")

# cfn-lint's exit status is a bit mask: 2 = errors, 4 = warnings, 8 = informational.
CFN_LINT_ERRORS = 2


@pytest.fixture(params=VARIANTS)
def synth(request: pytest.FixtureRequest) -> Synthesized:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


def test_aws_solutions_checks_leave_no_unacknowledged_finding(synth: Synthesized) -> None:
    report = AwsSolutionsChecks(synth.app).validate_scope(synth.stack)
    findings = [
        (
            violation.rule_name,
            violation.severity,
            [r.construct_path or r.resource_logical_id for r in violation.violating_resources],
        )
        for violation in report.violations
    ]
    assert findings == []
    assert report.success


def test_no_aws_solutions_errors_or_warnings_in_annotations(synth: Synthesized) -> None:
    annotations = Annotations.from_stack(synth.stack)
    pattern = Match.string_like_regexp("AwsSolutions-.*")
    assert annotations.find_error("*", pattern) == []
    assert annotations.find_warning("*", pattern) == []


def _acknowledgments(synth: Synthesized) -> list[tuple[str, str, str]]:
    """(construct path, acknowledged id, reason) for every acknowledgment in the stack."""
    key = Validations.ACKNOWLEDGED_RULES_METADATA_KEY
    found: list[tuple[str, str, str]] = []
    for construct in synth.stack.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == key:
                found += [
                    (construct.node.path, rule, reason) for rule, reason in entry.data.items()
                ]
    return found


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_acknowledgment_names_its_rule_and_gives_a_reason(
    variant: str, request: pytest.FixtureRequest
) -> None:
    synth: Synthesized = request.getfixturevalue(variant)
    # Ours; CDK records a few of its own (CloudFormation-Validate) that are not checked here.
    acknowledgments = [
        ack for ack in _acknowledgments(synth) if "AwsSolutions-" in ack[1] or "W3010" in ack[1]
    ]
    assert acknowledgments, "expected the documented acknowledgments"
    for path, rule, reason in acknowledgments:
        assert len(reason) > 60, (path, rule, reason)
        # Never on the whole stack or a whole concern: each sits on the construct it is about.
        assert path.count("/") >= 2, (path, rule)


def test_iam_wildcard_acknowledgments_name_the_finding(default: Synthesized) -> None:
    iam = [rule for _, rule, _ in _acknowledgments(default) if "AwsSolutions-IAM" in rule]
    assert iam
    assert all(rule.endswith("]") and "[" in rule for rule in iam), iam


def test_conditional_acknowledgments_follow_the_switches(
    default: Synthesized, switched: Synthesized
) -> None:
    def rules(synth: Synthesized) -> set[str]:
        return {rule.rsplit("AwsSolutions-", 1)[-1] for _, rule, _ in _acknowledgments(synth)}

    assert not {"RDS3"} & rules(default)
    assert {"RDS3", "RDS10"} <= rules(switched)
    # RDS10 in the default deployment: protection comes from the stack's last resource.
    (reason,) = [
        reason for _, rule, reason in _acknowledgments(default) if rule.endswith("RDS10")
    ]
    assert "last resource" in reason


def test_cfn_lint_reports_no_errors(synth: Synthesized) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cfnlint", "--format", "parseable", str(synth.template_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    errors = [line for line in result.stdout.splitlines() if ":E" in line]
    assert not result.returncode & CFN_LINT_ERRORS, result.stdout + result.stderr
    assert errors == []
