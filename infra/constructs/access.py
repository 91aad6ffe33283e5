"""Operator access by SSM port-forward (``-c operatorAccess=bastion``): a minimal instance in the
isolated subnets that Session Manager reaches, and that reaches only the proxy."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra.constructs.database import PORT, Database
from infra.constructs.network import PRIVATE_SUBNETS, Network
from infra.nag import acknowledge

# What the SSM agent calls: Systems Manager, its message channels (sessions) and EC2's.
SSM_ENDPOINTS: dict[str, ec2.InterfaceVpcEndpointAwsService] = {
    "Ssm": ec2.InterfaceVpcEndpointAwsService.SSM,
    "SsmMessages": ec2.InterfaceVpcEndpointAwsService.SSM_MESSAGES,
    "Ec2Messages": ec2.InterfaceVpcEndpointAwsService.EC2_MESSAGES,
}
INSTANCE_TYPE = "t4g.nano"


class PortForwardHost(Construct):
    """No inbound rule, no SSH key, no public address, IMDSv2 only; outbound only to the
    proxy (Postgres) and the interface endpoints (HTTPS). ``aws ssm start-session`` with
    ``AWS-StartPortForwardingSessionToRemoteHost`` forwards a local port to the proxy."""

    def __init__(
        self, scope: Construct, construct_id: str, *, network: Network, database: Database
    ) -> None:
        super().__init__(scope, construct_id)
        assert database.proxy_security_group is not None
        endpoint_group = network.endpoint_security_group
        for name, service in SSM_ENDPOINTS.items():
            network.vpc.add_interface_endpoint(
                f"{name}Endpoint",
                service=service,
                subnets=PRIVATE_SUBNETS,
                security_groups=[endpoint_group],
                private_dns_enabled=True,
                open=False,
            )
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=network.vpc,
            description="Port-forward host: no inbound; out to the proxy and the endpoints",
            allow_all_outbound=False,
        )
        self.security_group.add_egress_rule(
            database.proxy_security_group, ec2.Port.tcp(PORT), "to the proxy"
        )
        self.security_group.add_egress_rule(
            endpoint_group, ec2.Port.tcp(443), "to the SSM interface endpoints"
        )
        database.proxy_security_group.add_ingress_rule(
            self.security_group, ec2.Port.tcp(PORT), "port-forward host to proxy"
        )
        role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description="Reminders port-forward host: Session Manager only",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSSMManagedInstanceCore")
            ],
        )
        self.instance = ec2.Instance(
            self,
            "Instance",
            vpc=network.vpc,
            vpc_subnets=PRIVATE_SUBNETS,
            instance_type=ec2.InstanceType(INSTANCE_TYPE),
            machine_image=ec2.MachineImage.latest_amazon_linux2023(
                cpu_type=ec2.AmazonLinuxCpuType.ARM_64
            ),
            security_group=self.security_group,
            role=role,
            associate_public_ip_address=False,
            block_devices=[
                ec2.BlockDevice(
                    device_name="/dev/xvda",
                    volume=ec2.BlockDeviceVolume.ebs(8, encrypted=True),
                )
            ],
        )
        # IMDSv2 through a launch template of its own: the Instance's require_imdsv2 names its
        # template "InstanceLaunchTemplate" in every stack, so two stacks in one account and
        # region would collide on it.
        template = ec2.LaunchTemplate(
            self,
            "LaunchTemplate",
            launch_template_name=f"{Stack.of(self).stack_name}-port-forward",
            require_imdsv2=True,
        )
        instance = self.instance.node.default_child
        assert isinstance(instance, ec2.CfnInstance)
        instance.launch_template = ec2.CfnInstance.LaunchTemplateSpecificationProperty(
            launch_template_id=template.launch_template_id,
            version=template.latest_version_number,
        )
        acknowledge(
            role,
            "AwsSolutions-IAM4",
            "AmazonSSMManagedInstanceCore is the policy Session Manager documents for a managed "
            "instance (the SSM agent's own calls); the role grants nothing else.",
            "Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSSMManagedInstanceCore",
        )
        acknowledge(
            self.instance,
            "AwsSolutions-EC28",
            "A port-forward host carries no workload to watch: basic monitoring is enough, and "
            "detailed monitoring would only cost money.",
        )
        acknowledge(
            self.instance,
            "AwsSolutions-EC29",
            "Disposable by design (-c operatorAccess= removes it): it holds no data and no "
            "state, so termination protection or an Auto Scaling group would add nothing.",
        )
