"""Synthesize each stack variant once per session; every test reads the same template."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infra.layer import BUILD_DIR, build_layer, build_lock
from tests.infra.synth import Synthesized, synthesize

os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
# The default variant is what synth gives with no context and no CDK CLI around it.
for _name in ("CDK_DEFAULT_ACCOUNT", "CDK_DEFAULT_REGION"):
    os.environ.pop(_name, None)

# A deployment with every switch flipped away from its default.
SWITCHED_CONTEXT: dict[str, object] = {
    "account": "123456789012",
    "region": "eu-west-1",
    "scannerEnabled": "false",
    "webhookEgress": "false",
    "dbMultiAz": "false",
    "dbDeletionProtection": "false",
    "dbConnectionBudget": "20",
    "dbBackupRetentionDays": "14",
    "alarmEmails": "ops@example.com,oncall@example.com",
    "consumerBatchSize": "25",
    "consumerBatchingWindowSeconds": "5",
    "consumerTimeoutSeconds": "45",
    "maxReceiveCount": "8",
    "availabilityZones": "eu-west-1a,eu-west-1b,eu-west-1c",
    "unknownAlarmThreshold": "2",
    "deadAlarmThreshold": "3",
    "failedAlarmThreshold": "25",
    "scannerTimeoutSeconds": "60",
    "publishConcurrency": "16",
    "inflightFactor": "2",
    "sendTimeoutSeconds": "20",
    "invocationMarginSeconds": "8",
    "dbLockTimeoutMs": "2000",
    "dbStatementTimeoutMs": "10000",
    "consumerMemoryMib": "1024",
    "publisherFanOut": "false",
}


@pytest.fixture(scope="session")
def layer_dir() -> Path:
    """Built afresh once per run (PyPI only), then used by every synth below: by the first
    of the run's workers to get here (the others find it built, under build/'s lock)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", f"pid-{os.getpid()}")
    with build_lock():
        stamp = BUILD_DIR / f".layer-built-{run}"
        if stamp.exists():
            return build_layer()
        for old in BUILD_DIR.glob(".layer-built-*"):
            old.unlink()
        built = build_layer(force=True)
        stamp.touch()
        return built


@pytest.fixture(scope="session")
def default(layer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesize(None, tmp_path_factory.mktemp("cdk-default"))


@pytest.fixture(scope="session")
def switched(layer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesize(SWITCHED_CONTEXT, tmp_path_factory.mktemp("cdk-switched"))


# Operator access by SSM port-forward.
BASTION_CONTEXT: dict[str, object] = {"operatorAccess": "bastion"}

# Bring your own database: an existing VPC, subnets and Postgres, nothing looked up.
EXISTING_DB_CONTEXT: dict[str, object] = {
    "existingDbHost": "pg.internal.example.com",
    "existingDbPort": "6432",
    "existingVpcId": "vpc-0123456789abcdef0",
    "existingSubnetIds": "subnet-0123456789abcdef0,subnet-0123456789abcdef1",
    "existingDbSecretArn": "arn:aws:secretsmanager:eu-west-1:111122223333:secret:pg-admin-AbCdEf",
    "dbSchema": "reminders_svc",
}


@pytest.fixture(scope="session")
def bastion(layer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesize(BASTION_CONTEXT, tmp_path_factory.mktemp("cdk-bastion"))


@pytest.fixture(scope="session")
def existing_db(layer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesize(EXISTING_DB_CONTEXT, tmp_path_factory.mktemp("cdk-existing-db"))


@pytest.fixture(scope="session")
def existing_db_group(layer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """Bring your own database and your own security group for the functions."""
    context = {**EXISTING_DB_CONTEXT, "existingSecurityGroupId": "sg-0123456789abcdef0"}
    return synthesize(context, tmp_path_factory.mktemp("cdk-existing-db-group"))
