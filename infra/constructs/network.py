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
# (scanner, redrive, the operations function's queue depths), Secrets Manager (every function
# and the rotation functions), SES, SNS and KMS (consumer: it unwraps the data keys of the
# webhook signing secrets), STS (the operations function proves its caller). Nothing calls
# CloudWatch, Logs or X-Ray from the VPC: metrics are EMF lines on stdout, logs go through the
# Lambda service, and trace segments go to the X-Ray daemon Lambda runs beside the function;
# so those endpoints would only cost money.
INTERFACE_ENDPOINTS: dict[str, ec2.InterfaceVpcEndpointAwsService] = {
    "Sqs": ec2.InterfaceVpcEndpointAwsService.SQS,
    "SecretsManager": ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER,
    "Ses": ec2.InterfaceVpcEndpointAwsService.EMAIL,
    "Sns": ec2.InterfaceVpcEndpointAwsService.SNS,
    "Kms": ec2.InterfaceVpcEndpointAwsService.KMS,
    # The operations function sends the caller's presigned GetCallerIdentity to STS to learn
    # who invoked it (reminders.identity).
    "Sts": ec2.InterfaceVpcEndpointAwsService.STS,
}
# With publisher fan-out the scanner calls Lambda's Invoke API from its isolated subnets.
FAN_OUT_ENDPOINTS: dict[str, ec2.InterfaceVpcEndpointAwsService] = {
    "Lambda": ec2.InterfaceVpcEndpointAwsService.LAMBDA_,
}


class Network(Construct):
    """Private subnets for the database and functions; NAT only where webhooks need it.

    With ``webhookEgress`` on, the consumer runs in private subnets routed through a NAT
    gateway; everything else (database, scanner, redrive, migrate) stays in isolated subnets
    that reach AWS only through the interface endpoints.
    """

    vpc: ec2.IVpc
    function_security_group: ec2.ISecurityGroup
    endpoints: dict[str, ec2.InterfaceVpcEndpoint]
    private_subnets: ec2.SubnetSelection
    consumer_subnets: ec2.SubnetSelection

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings) -> None:
        super().__init__(scope, construct_id)
        if settings.existing_database:
            self._existing(settings)
            return
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
        self.endpoints = {
            name: self.vpc.add_interface_endpoint(
                f"{name}Endpoint",
                service=service,
                subnets=PRIVATE_SUBNETS,
                security_groups=[self.endpoint_security_group],
                private_dns_enabled=True,
                open=False,
            )
            for name, service in {
                **INTERFACE_ENDPOINTS,
                **(FAN_OUT_ENDPOINTS if settings.publisher_fan_out else {}),
            }.items()
        }

    def _existing(self, settings: Settings) -> None:
        """Bring your own database: the given VPC and subnets, imported by id (no lookup, so
        synth needs no credentials). Nothing is created in that VPC but the functions'
        security group (unless one is given): its subnets reach SQS, Secrets Manager, SES, SNS,
        KMS and STS through its own NAT or endpoints."""
        subnet_ids = list(settings.existing_subnet_ids)
        zones = settings.azs or [f"zone-of-{subnet}" for subnet in subnet_ids]
        self.vpc = ec2.Vpc.from_vpc_attributes(
            self,
            "Vpc",
            vpc_id=settings.existing_vpc_id,
            availability_zones=zones[: len(subnet_ids)],
            private_subnet_ids=subnet_ids,
        )
        selection = ec2.SubnetSelection(
            subnets=[
                ec2.Subnet.from_subnet_id(self, f"Subnet{index}", subnet_id)
                for index, subnet_id in enumerate(subnet_ids)
            ]
        )
        self.private_subnets = selection
        self.consumer_subnets = selection
        self.endpoints = {}
        if settings.existing_security_group_id:
            self.function_security_group = ec2.SecurityGroup.from_security_group_id(
                self,
                "FunctionsSecurityGroup",
                settings.existing_security_group_id,
                mutable=False,
            )
        else:
            self.function_security_group = ec2.SecurityGroup(
                self,
                "FunctionsSecurityGroup",
                vpc=self.vpc,
                description="Reminders functions: allow this group inbound on the database port",
                allow_all_outbound=True,
            )
