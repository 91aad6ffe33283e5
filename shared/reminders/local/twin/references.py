"""The template's references resolved to the local resources that stand for them.

A function's ``Environment.Variables`` hold intrinsic functions (``Ref``, ``Fn::GetAtt``,
``Fn::Join``, ``Fn::Sub``, ``Fn::Select``, ``Fn::Split``) and pseudo parameters. On one
machine each logical id the template names maps to what stands for it here: a queue's ``Ref``
is its URL in moto, the proxy's ``Endpoint`` is the pooler's host, the secret attachment's
``Ref`` is a secret's ARN in moto. Unlike an IAM grant (reminders.local.roles, where a resource
the stack lacks resolves to an ARN that allows nothing), a setting has no harmless stand-in:
a reference to anything not mapped is an error naming where it was read and what it named.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reminders.local.roles import LOCAL_RESOURCES, Place, TemplateError

REF = "Ref"  # the attribute name a logical id's Ref is mapped under


class UnresolvedReference(TemplateError):
    """A value names a resource, attribute or function the local stack has nothing for."""


@dataclass(frozen=True)
class LocalValues:
    """What the template's logical ids stand for here: ``values[logical id][attribute]``, with
    ``"Ref"`` for the resource's Ref (a queue's URL, a function's name, a secret's ARN) and
    the attribute names ``Fn::GetAtt`` uses (``Arn``, ``Endpoint``, ``QueueName``)."""

    region: str
    account: str
    values: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    partition: str = "aws"
    stack_name: str = "Reminders"
    # The ARNs reminders.local.roles resolves by LOCAL_RESOURCES name, for Fn::GetAtt ... Arn
    # of a resource ``values`` does not list.
    arns: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_place(cls, place: Place, values: Mapping[str, Mapping[str, str]],
                   stack_name: str = "Reminders") -> LocalValues:
        return cls(region=place.region, account=place.account, values=values,
                   partition=place.partition, stack_name=stack_name, arns=place.arns)

    def pseudo(self, name: str) -> str | None:
        return {"AWS::Region": self.region, "AWS::AccountId": self.account,
                "AWS::Partition": self.partition, "AWS::URLSuffix": "amazonaws.com",
                "AWS::StackName": self.stack_name}.get(name)

    def attribute(self, logical_id: str, attribute: str, where: str) -> str:
        known = self.values.get(logical_id, {})
        if attribute in known:
            return known[attribute]
        if attribute == "Arn":
            for name, pattern in LOCAL_RESOURCES.items():
                if pattern.match(logical_id) and name in self.arns:
                    return self.arns[name]
        what = logical_id if attribute == REF else f"{logical_id}.{attribute}"
        raise UnresolvedReference(f"{where}: names {what}, which nothing stands for here "
                                  f"(known: {', '.join(sorted(self.values)) or 'none'})")


def resolve(value: Any, local: LocalValues, where: str) -> Any:
    """``value`` with every intrinsic function resolved for ``local``; ``where`` names the
    property in every error (``FunctionsScanner0CB5D92D Environment REMINDERS_QUEUE_URL``)."""
    if isinstance(value, list):
        return [resolve(v, local, where) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) != 1:
        return {k: resolve(v, local, where) for k, v in value.items()}
    (name, argument), = value.items()
    if name == "Ref":
        return local.pseudo(argument) or local.attribute(argument, REF, where)
    if name == "Fn::GetAtt":
        logical_id, attribute = (argument.split(".", 1) if isinstance(argument, str)
                                 else argument)
        return local.attribute(logical_id, attribute, where)
    if name == "Fn::Join":
        separator, parts = argument
        return separator.join(str(resolve(p, local, where)) for p in resolve(parts, local,
                                                                              where))
    if name == "Fn::Select":
        index, items = argument
        items = resolve(items, local, where)
        position = int(resolve(index, local, where))
        if not isinstance(items, list) or not 0 <= position < len(items):
            raise UnresolvedReference(f"{where}: Fn::Select {position} of {items!r}")
        return items[position]
    if name == "Fn::Split":
        separator, text = argument
        return str(resolve(text, local, where)).split(separator)
    if name == "Fn::Sub":
        text, variables = (argument, {}) if isinstance(argument, str) else argument
        given = {k: str(resolve(v, local, where)) for k, v in variables.items()}

        def substitute(match: re.Match[str]) -> str:
            ref = match.group(1)
            if ref in given:
                return given[ref]
            if "." in ref:
                logical_id, attribute = ref.split(".", 1)
                return local.attribute(logical_id, attribute, where)
            return str(resolve({"Ref": ref}, local, where))

        return re.sub(r"\$\{([^}!][^}]*)\}", substitute, text)
    if name.startswith("Fn::") or name == "Condition":
        raise UnresolvedReference(f"{where}: {name} is not resolved here")
    return {name: resolve(argument, local, where)}


# Logical ids of what the local stack stands in for, by name: roles.LOCAL_RESOURCES and the
# parts only a function's settings name (the proxy, the master secret, the functions).
LOCAL_IDS: dict[str, re.Pattern[str]] = {
    **LOCAL_RESOURCES,
    "proxy": re.compile(r"^DatabaseInstanceProxy[0-9A-F]{8}$"),
    "master_secret": re.compile(r"^DatabaseInstanceSecretAttachment[0-9A-F]{8}$"),
    **{name: re.compile(rf"^Functions{name.capitalize()}[0-9A-F]{{8}}$")
       for name in ("scanner", "consumer", "redrive", "migrate", "ops", "publisher")},
}


def values_by_name(template: Any, named: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str,
                                                                                       str]]:
    """``named`` (LOCAL_IDS name -> {attribute: local value}) keyed by the template's logical
    ids instead: what :class:`LocalValues` takes. A name the template has no resource for is
    an error (the local stack would stand in for nothing)."""
    resources = template.get("Resources", {}) if isinstance(template, dict) else {}
    found: dict[str, dict[str, str]] = {}
    for name, attributes in named.items():
        pattern = LOCAL_IDS.get(name)
        if pattern is None:
            raise UnresolvedReference(f"{name!r} is none of {', '.join(LOCAL_IDS)}")
        ids = [logical_id for logical_id in resources if pattern.match(logical_id)]
        if not ids:
            raise UnresolvedReference(f"the template has no resource for {name} "
                                      f"({pattern.pattern})")
        for logical_id in ids:
            found[logical_id] = dict(attributes)
    return found


def queue_values(url: str, region: str, account: str) -> dict[str, str]:
    """What a queue's Ref (its URL) and attributes are in moto."""
    name = url.rsplit("/", 1)[1]
    return {REF: url, "QueueUrl": url, "QueueName": name,
            "Arn": f"arn:aws:sqs:{region}:{account}:{name}"}
