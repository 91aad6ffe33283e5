"""The functions' IAM roles on one machine, as the synthesized template grants them.

The template is the source of truth: for each service function, the statements of the
``AWS::IAM::Policy`` documents attached to its role, and the Allow statements of resource
policies (a KMS key policy) that name the role as principal, with every reference resolved to
the local resource it stands for (a queue's ARN in moto, the secrets key's ARN, the region,
account and partition). A reference to something the local stack does not have (a log group,
the database secret when the URL is given whole) resolves to an ARN no resource has, so that
grant allows nothing here. Each role is made in moto with exactly those statements; its
credentials come from ``sts:AssumeRole``, as Lambda's do (a session token with every call).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reminders.aws_http import Credentials
from reminders.local.synth import (
    LOCAL_RESOURCES,
    REPO_ROOT,
    SELF_PUBLISHING,
    TemplateError,
    synthesized_template,
)

# Its own and, for its callers, the template's (from synth).
__all__ = ["LOCAL_RESOURCES", "REPO_ROOT", "SELF_PUBLISHING", "SERVICE_FUNCTIONS", "FunctionRole",
           "Place", "TemplateError", "as_their_roles", "create_roles", "function_clients",
           "granted_actions", "granted_statements", "is_function", "local_roles",
           "policy_document", "resolve", "synthesized_template"]


SERVICE_FUNCTIONS = ("scanner", "consumer", "redrive", "ops-read", "ops-write", "publisher")


@dataclass(frozen=True)
class Place:
    """Where the template's references resolve to on this stack."""

    region: str
    account: str
    arns: Mapping[str, str]  # LOCAL_RESOURCES name -> the local resource's ARN
    partition: str = "aws"

    def arn_of(self, logical_id: str) -> str:
        for name, pattern in LOCAL_RESOURCES.items():
            if pattern.match(logical_id) and name in self.arns:
                return self.arns[name]
        # Not here (a log group, a subnet, the master secret): an ARN no resource has.
        return f"arn:{self.partition}:unresolved:{self.region}:{self.account}:{logical_id}"


def resolve(value: Any, place: Place) -> Any:
    """``value`` with its intrinsic functions (Ref, Fn::GetAtt …Arn, Fn::Join, Fn::Sub)
    resolved for ``place``."""
    pseudo = {"AWS::Region": place.region, "AWS::AccountId": place.account,
              "AWS::Partition": place.partition, "AWS::URLSuffix": "amazonaws.com"}
    if isinstance(value, list):
        return [resolve(v, place) for v in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"Ref"}:
        return pseudo.get(value["Ref"]) or place.arn_of(value["Ref"])
    if set(value) == {"Fn::GetAtt"}:
        logical_id, attribute = value["Fn::GetAtt"]
        if attribute != "Arn":
            raise TemplateError(f"a policy names {logical_id}.{attribute}, not an ARN")
        return place.arn_of(logical_id)
    if set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        return separator.join(str(resolve(p, place)) for p in parts)
    if set(value) == {"Fn::Sub"}:
        text = value["Fn::Sub"]
        if not isinstance(text, str):
            raise TemplateError(f"Fn::Sub with variables is not read here: {value}")
        return re.sub(r"\$\{([^}]+)\}", lambda m: str(resolve({"Ref": m.group(1)}, place)),
                      text)
    return {k: resolve(v, place) for k, v in value.items()}


def is_function(resource: Any, name: str) -> bool:
    """Whether a template resource is the function ``name``: by its handler
    (``functions.NAME.handler.handler``), and for ``ops-read`` and ``ops-write`` (one code,
    deployed twice) the operations handler serving that kind of command."""
    module, _, serves = name.partition("-") if name.startswith("ops-") else (name, "", "")
    if resource.get("Type") != "AWS::Lambda::Function":
        return False
    props = resource.get("Properties", {})
    if props.get("Handler") != f"functions.{module}.handler.handler":
        return False
    variables = (props.get("Environment") or {}).get("Variables") or {}
    return not serves or variables.get("REMINDERS_OPS_SERVES") == serves


def _function(template: Any, name: str) -> tuple[str, dict[str, Any]]:
    """Function ``name``'s resource: by its logical id (``Functions<Name><hash>``, so a copy
    of the template with another Handler still has the function's role), else by handler."""
    by_id = re.compile(rf"^Functions{name.capitalize()}[0-9A-F]{{8}}$")
    for logical_id, resource in template["Resources"].items():
        if by_id.match(logical_id) and resource["Type"] == "AWS::Lambda::Function":
            return logical_id, resource
    for logical_id, resource in template["Resources"].items():
        if is_function(resource, name):
            return logical_id, resource
    raise TemplateError(f"the template has no function {name}")


def _names_role(principal: Any, role_id: str) -> bool:
    aws = principal.get("AWS") if isinstance(principal, dict) else None
    entries = aws if isinstance(aws, list) else [aws]
    return {"Fn::GetAtt": [role_id, "Arn"]} in entries


def granted_statements(template: Any, name: str) -> list[dict[str, Any]]:
    """What function ``name``'s role is granted, unresolved, in template order: its IAM
    policies' statements, then the resource policies' Allow statements that name the role
    (their Resource "*" stands for the resource that holds the policy)."""
    _, function = _function(template, name)
    role_ref = function["Properties"]["Role"]
    if set(role_ref) != {"Fn::GetAtt"}:
        raise TemplateError(f"{name}'s role is not a role of the template: {role_ref}")
    role_id = role_ref["Fn::GetAtt"][0]
    role = template["Resources"][role_id]["Properties"]
    if role.get("ManagedPolicyArns") or role.get("Policies"):
        raise TemplateError(f"{name}'s role has managed or inline policies; read them here")
    statements: list[dict[str, Any]] = []
    for resource in template["Resources"].values():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in props["Roles"]:
            statements += props["PolicyDocument"]["Statement"]
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] != "AWS::KMS::Key":
            continue
        for statement in resource["Properties"]["KeyPolicy"]["Statement"]:
            if statement["Effect"] == "Allow" and _names_role(statement["Principal"], role_id):
                statement = {k: v for k, v in statement.items() if k != "Principal"}
                statement["Resource"] = {"Fn::GetAtt": [logical_id, "Arn"]}
                statements.append(statement)
    return statements


def policy_document(template: Any, name: str, place: Place) -> dict[str, Any]:
    """Function ``name``'s grants as one IAM policy document, resolved for ``place``."""
    return {"Version": "2012-10-17",
            "Statement": [resolve(s, place) for s in granted_statements(template, name)]}


def granted_actions(document: Mapping[str, Any]) -> set[str]:
    """The actions a policy document allows (as written: a wildcard stays a wildcard)."""
    actions: set[str] = set()
    for statement in document["Statement"]:
        if statement["Effect"] == "Allow":
            action = statement["Action"]
            actions.update(action if isinstance(action, list) else [action])
    return actions


@dataclass(frozen=True)
class FunctionRole:
    function: str
    arn: str
    document: Mapping[str, Any]
    credentials: Credentials


def create_roles(iam: Any, sts: Any, template: Any, place: Place, administrator_arn: str,
                 functions: tuple[str, ...] = SERVICE_FUNCTIONS,
                 prefix: str = "reminders") -> dict[str, FunctionRole]:
    """One role per function in moto (``iam``, ``sts``: the administrator's clients), with
    the template's grants for it; the administrator may assume them (Lambda does, in AWS)."""
    trust = json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": administrator_arn},
         "Action": "sts:AssumeRole"}]})
    roles: dict[str, FunctionRole] = {}
    for name in functions:
        try:
            document = policy_document(template, name, place)
        except TemplateError:
            if name == "publisher":  # a variant without a fan-out has no publisher
                continue
            raise
        role_name = f"{prefix}-{name}-{uuid.uuid4().hex[:8]}"
        arn = iam.create_role(RoleName=role_name, AssumeRolePolicyDocument=trust)["Role"]["Arn"]
        iam.put_role_policy(RoleName=role_name, PolicyName="template",
                            PolicyDocument=json.dumps(document))
        answer = sts.assume_role(RoleArn=arn, RoleSessionName=name, DurationSeconds=43_200)
        given = answer["Credentials"]
        roles[name] = FunctionRole(name, arn, document, Credentials(
            given["AccessKeyId"], given["SecretAccessKey"], given["SessionToken"]))
    return roles


def local_roles(endpoint_url: str, urls: Any, secrets_key_arn: str, *,
                functions: tuple[str, ...] = SERVICE_FUNCTIONS, prefix: str | None = None,
                **resources: str) -> dict[str, FunctionRole]:
    """Roles in the moto server at ``endpoint_url`` (whose administrator is registered with
    the stack module) for ``functions``, granted what the template (the variant whose scanner
    publishes itself) grants them on these queues (``urls``: a config.QueueUrls), the secrets
    key and ``resources`` (more local ARNs by LOCAL_RESOURCES name: ``app_secret``). New roles
    every call; the prefix defaults to the deliveries queue's."""
    from reminders.local import stack
    from reminders.local.moto_server import ACCOUNT

    template = synthesized_template(SELF_PUBLISHING)
    arns = {name: f"arn:aws:sqs:{stack.REGION}:{ACCOUNT}:{url.rsplit('/', 1)[1]}"
            for name, url in (("deliveries", urls.deliveries), ("dlq", urls.dlq),
                              ("parking", urls.parking))}
    place = Place(region=stack.REGION, account=ACCOUNT,
                  arns={**arns, "secrets_key": secrets_key_arn, **resources})
    admin_arn = stack.aws_client("sts", endpoint_url).get_caller_identity()["Arn"]
    return create_roles(
        stack.aws_client("iam", endpoint_url), stack.aws_client("sts", endpoint_url), template,
        place, admin_arn, functions=functions,
        prefix=prefix or urls.deliveries.rsplit("/", 1)[1].removesuffix("-deliveries"))


def as_their_roles(rt: Any, endpoint_url: str, urls: Any, secrets_key_arn: str,
                   **kwargs: Any) -> str | None:
    """Give ``rt`` each function's clients as its role (the template's grants) on the moto
    server at ``endpoint_url``. Where no template can be had (the CDK not installed, as after
    `make demo`'s set-up), the functions keep ``rt``'s own credentials (moto's administrator):
    returns why, to say so, or None when they run as their roles."""
    try:
        made = local_roles(endpoint_url, urls, secrets_key_arn, **kwargs)
    except TemplateError as exc:
        return str(exc)
    rt.functions = function_clients(endpoint_url, rt.settings, urls, made)
    return None


def function_clients(endpoint_url: str, settings: Any, urls: Any,
                     function_roles: Mapping[str, FunctionRole]) -> dict[str, Any]:
    """Each function's own AWS clients on the moto server at ``endpoint_url`` (queues, channels
    and secret box, as its role): what ``Runtime.functions`` holds on one machine."""
    from reminders.local import stack
    from reminders.queue import Queue
    from reminders.runtime import FunctionClients, build_channels, secret_box

    def clients(credentials: Credentials) -> FunctionClients:
        def client(service: str, client_config: Any = None) -> Any:
            return stack.service_client(service, endpoint_url, client_config,
                                        credentials=credentials)

        sqs = client("sqs")
        return FunctionClients(deliveries=Queue(sqs, urls.deliveries), dlq=Queue(sqs, urls.dlq),
                               parking=Queue(sqs, urls.parking),
                               channels=build_channels(settings, client),
                               secret_box=secret_box(settings, client))

    return {name: clients(role.credentials) for name, role in function_roles.items()}
