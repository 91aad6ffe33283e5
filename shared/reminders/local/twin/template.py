"""Reading the synthesized template: one error type that names the resource and the property,
and the small readers every part of the twin's plan uses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reminders.local.synth import TemplateError

Resources = Mapping[str, Mapping[str, Any]]


class PlanError(TemplateError):
    """A resource of the template is missing a property, or has one the service would refuse;
    the message starts with the resource's logical id and names the property."""

    def __init__(self, logical_id: str, prop: str, what: str) -> None:
        super().__init__(f"{logical_id}: {prop} {what}")
        self.logical_id = logical_id
        self.prop = prop


def shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 3]}..."


def resources(template: Mapping[str, Any]) -> Resources:
    found = template.get("Resources")
    if not isinstance(found, Mapping) or not found:
        raise TemplateError("the template has no Resources")
    return found


def of_type(template: Mapping[str, Any], resource_type: str) -> dict[str, Mapping[str, Any]]:
    """The resources of ``resource_type``, by logical id, in template order."""
    return {logical_id: resource for logical_id, resource in resources(template).items()
            if resource.get("Type") == resource_type}


def properties(logical_id: str, resource: Mapping[str, Any]) -> Mapping[str, Any]:
    props = resource.get("Properties", {})
    if not isinstance(props, Mapping):
        raise PlanError(logical_id, "Properties", f"must be an object, got {shown(props)}")
    return props


def integer(logical_id: str, prop: str, value: Any, low: int, high: int) -> int:
    """``value`` as CloudFormation takes an integer (a number or its text), within [low, high]."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.strip().lstrip("-").isdigit():
        number = int(value)
    if number is None or not low <= number <= high:
        raise PlanError(logical_id, prop, f"must be an integer {low}-{high}, got {shown(value)}")
    return number


def optional_integer(logical_id: str, props: Mapping[str, Any], prop: str, low: int, high: int,
                     *, path: str | None = None) -> int | None:
    if prop not in props:
        return None
    return integer(logical_id, path or prop, props[prop], low, high)


def number(logical_id: str, prop: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise PlanError(logical_id, prop, f"must be a number, got {shown(value)}")
    try:
        return float(value)
    except ValueError:
        raise PlanError(logical_id, prop, f"must be a number, got {shown(value)}") from None


def boolean(logical_id: str, prop: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise PlanError(logical_id, prop, f"must be true or false, got {shown(value)}")


def required(logical_id: str, props: Mapping[str, Any], prop: str) -> Any:
    if prop not in props:
        raise PlanError(logical_id, prop, "is missing")
    return props[prop]


def text(logical_id: str, prop: str, value: Any, choices: tuple[str, ...] = ()) -> str:
    if not isinstance(value, str) or not value:
        raise PlanError(logical_id, prop, f"must be a string, got {shown(value)}")
    if choices and value not in choices:
        raise PlanError(logical_id, prop, f"must be one of {', '.join(choices)}, got "
                                          f"{shown(value)}")
    return value


def referenced(logical_id: str, prop: str, value: Any, template: Mapping[str, Any],
               resource_type: str, attribute: str | None = None) -> str:
    """The logical id ``value`` refers to (``{"Ref": id}``, or ``{"Fn::GetAtt": [id,
    attribute]}`` when ``attribute`` is given), which must be a ``resource_type`` of the
    template."""
    target: Any = None
    if attribute is None and isinstance(value, Mapping) and set(value) == {"Ref"}:
        target = value["Ref"]
    elif attribute is not None and isinstance(value, Mapping) and set(value) == {"Fn::GetAtt"}:
        got = value["Fn::GetAtt"]
        if isinstance(got, list) and len(got) == 2 and got[1] == attribute:
            target = got[0]
    if not isinstance(target, str):
        form = "a Ref" if attribute is None else f"an Fn::GetAtt of {attribute}"
        raise PlanError(logical_id, prop, f"must be {form} to a {resource_type} of the "
                                          f"template, got {shown(value, 120)}")
    found = resources(template).get(target)
    if found is None or found.get("Type") != resource_type:
        what = "nothing" if found is None else f"a {found.get('Type')}"
        raise PlanError(logical_id, prop, f"names {target}, which is {what}, not a "
                                          f"{resource_type} of the template")
    return target
