"""VPC, subnets, security groups and the interface endpoints the functions call."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.nag import acknowledge
from infra.settings import Settings, retention_days

VPC_CIDR = "10.40.0.0/16"
PRIVATE_SUBNETS = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)
EGRESS_SUBNETS = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)

# Every AWS API a function calls from inside the VPC, reached without the internet: SQS
# (scanner, redrive), Secrets Manager (every function and the rotation functions), SES, SNS and
# KMS (consumer: it unwraps the data keys of the webhook signing secrets). Nothing calls
# CloudWatch, Logs or X-Ray from the VPC: metrics are EMF lines on
# stdout, logs go through the Lambda service, and trace segments go to the X-Ray daemon Lambda
# runs beside the function; so those endpoints would only cost money.
INTERFACE_ENDPOINTS: dict[str, ec2.InterfaceVpcEndpointAwsService] = {
    "Sqs": ec2.InterfaceVpcEndpointAwsService.SQS,
    "SecretsManager": ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER,
    "Ses": ec2.InterfaceVpcEndpointAwsService.EMAIL,
    "Sns": ec2.InterfaceVpcEndpointAwsService.SNS,
    "Kms": ec2.InterfaceVpcEndpointAwsService.KMS,
}


class Network(Construct):
    """Private subnets for the database and functions; NAT only where webhooks need it.

    With ``webhookEgress`` on, the consumer runs in private subnets routed through a NAT
    gateway; everything else (database, scanner, redrive, migrate) stays in isolated subnets
    that reach AWS only through the interface endpoints.
    """

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings) -> None:
        super().__init__(scope, construct_id)
        subnets = [
            ec2.SubnetConfiguration(
                name="isolated", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED, cidr_mask=22
            )
        ]
        if settings.webhook_egress:
            subnets += [
                ec2.SubnetConfiguration(
                    name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=26
                ),
                ec2.SubnetConfiguration(
                    name="egress", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=22
                ),
            ]
        flow_log_group = logs.LogGroup(
            self,
            "FlowLogs",
            retention=retention_days(settings.log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(VPC_CIDR),
            max_azs=settings.zone_count,
            nat_gateways=settings.nat_gateways if settings.webhook_egress else 0,
            subnet_configuration=subnets,
            restrict_default_security_group=True,
            flow_logs={
                "All": ec2.FlowLogOptions(
                    destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_log_group),
                    traffic_type=ec2.FlowLogTrafficType.ALL,
                )
            },
        )
        acknowledge(
            self.vpc,
            "CloudFormation-Validate::W3010",
            "Availability zones come from context (-c availabilityZones=...) on purpose: synth "
            "runs offline without credentials, so it must not look them up.",
        )
        self.private_subnets = PRIVATE_SUBNETS
        self.consumer_subnets = EGRESS_SUBNETS if settings.webhook_egress else PRIVATE_SUBNETS

        self.function_security_group = ec2.SecurityGroup(
            self,
            "FunctionsSecurityGroup",
            vpc=self.vpc,
            description="Reminders functions: outbound to the proxy, endpoints and webhooks",
            allow_all_outbound=True,
        )
        self.endpoint_security_group = ec2.SecurityGroup(
            self,
            "EndpointsSecurityGroup",
            vpc=self.vpc,
            description="Interface endpoints: HTTPS from inside the VPC",
            allow_all_outbound=False,
        )
        self.endpoint_security_group.add_ingress_rule(
            ec2.Peer.ipv4(VPC_CIDR), ec2.Port.tcp(443), "HTTPS from the VPC"
        )
        self.endpoints: dict[str, ec2.InterfaceVpcEndpoint] = {
            name: self.vpc.add_interface_endpoint(
                f"{name}Endpoint",
                service=service,
                subnets=PRIVATE_SUBNETS,
                security_groups=[self.endpoint_security_group],
                private_dns_enabled=True,
                open=False,
            )
            for name, service in INTERFACE_ENDPOINTS.items()
        }
