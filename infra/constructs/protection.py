"""Deletion protection for the database, turned on as the stack's last step."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Stack
from aws_cdk import aws_rds as rds
from aws_cdk import custom_resources as cr
from constructs import Construct, IDependable

from infra.nag import acknowledge

# The construct id CDK gives the AwsCustomResource singleton function (aws-cdk-lib).
AWS_CUSTOM_RESOURCE_SINGLETON = "AWS679f53fac002430cb0da5b7982bd2287"


class DeletionProtection(Construct):
    """``ModifyDBInstance DeletionProtection=true`` once everything else exists.

    CloudFormation cannot delete a deletion-protected instance, so an instance created
    protected turns a failed first deploy into ROLLBACK_FAILED and the retry into hand
    cleanup. The instance is created unprotected and this resource, which depends on every
    other part of the stack, protects it last: a deploy that fails before it rolls the
    instance back (with a final snapshot) and can simply be retried. Deleting this resource
    leaves protection on (it has no delete call), so deleting the stack still needs the
    operator to turn protection off first.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        instance: rds.DatabaseInstance,
        after: Sequence[IDependable],
    ) -> None:
        super().__init__(scope, construct_id)
        call = cr.AwsSdkCall(
            service="RDS",
            action="modifyDBInstance",
            parameters={
                "DBInstanceIdentifier": instance.instance_identifier,
                "DeletionProtection": True,
                "ApplyImmediately": True,
            },
            physical_resource_id=cr.PhysicalResourceId.of(instance.instance_identifier),
        )
        self.resource = cr.AwsCustomResource(
            self,
            "Protect",
            on_create=call,
            on_update=call,
            policy=cr.AwsCustomResourcePolicy.from_sdk_calls(
                resources=[instance.instance_arn]
            ),
            install_latest_aws_sdk=False,
        )
        for dependency in after:
            self.resource.node.add_dependency(dependency)
        # The function behind every AwsCustomResource of the stack (one, a singleton).
        provider = Stack.of(self).node.try_find_child(AWS_CUSTOM_RESOURCE_SINGLETON)
        assert provider is not None
        acknowledge(
            provider.node.find_child("ServiceRole"),
            "AwsSolutions-IAM4",
            "CDK's AwsCustomResource function uses the AWS managed basic execution policy "
            "(CloudWatch Logs only); its one SDK call is granted separately on this "
            "database instance only.",
            "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        )
