"""The service's Lambda functions as the synthesized template declares them.

Each ``AWS::Lambda::Function`` with a logical id ``Functions<Name><hash>`` (the reminders
functions; CDK's own provider functions are not the service's) becomes a :class:`FunctionSpec`:
its ``Handler``, ``Environment`` (references resolved to the local resources), ``Timeout``,
``MemorySize``, ``Layers`` and ``Code``, each checked as Lambda checks it when the stack is
deployed. A property missing or malformed is a :class:`SpecError` naming the resource and the
property, before any process starts.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from reminders.local.roles import TemplateError
from reminders.local.twin.references import LocalValues, UnresolvedReference, resolve

SERVICE_FUNCTION = re.compile(r"^Functions([A-Z][a-z]+)[0-9A-F]{8}$")
# Lambda's own bounds (CreateFunction): seconds, MiB, and the environment's size in bytes.
TIMEOUT_RANGE = (1, 900)
MEMORY_RANGE = (128, 10_240)
ENVIRONMENT_BYTES = 4096
DEFAULT_TIMEOUT = 3
DEFAULT_MEMORY = 128
# Variables Lambda sets itself: a function that declares one is refused at deploy
# ("reserved keys"), so it is refused here.
RESERVED_VARIABLES = frozenset({
    "_HANDLER", "_X_AMZN_TRACE_ID", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_EXECUTION_ENV",
    "AWS_LAMBDA_FUNCTION_NAME", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
    "AWS_LAMBDA_FUNCTION_VERSION", "AWS_LAMBDA_INITIALIZATION_TYPE",
    "AWS_LAMBDA_LOG_GROUP_NAME", "AWS_LAMBDA_LOG_STREAM_NAME", "AWS_ACCESS_KEY",
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
    "AWS_LAMBDA_RUNTIME_API", "LAMBDA_TASK_ROOT", "LAMBDA_RUNTIME_DIR"})
_VARIABLE_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9_]*$")
_HANDLER = re.compile(r"^[^\s]+\.[^\s.]+$")


class SpecError(TemplateError):
    """A function's property is missing or malformed; the message names the resource and the
    property."""

    def __init__(self, logical_id: str, prop: str, problem: str) -> None:
        super().__init__(f"{logical_id} {prop}: {problem}")
        self.logical_id = logical_id
        self.property = prop


@dataclass(frozen=True)
class FunctionSpec:
    """One function as the template declares it, with its environment resolved."""

    logical_id: str
    name: str  # scanner, consumer, ...: the handler's package
    handler: str
    environment: Mapping[str, str]
    timeout_seconds: int
    memory_mib: int
    layers: tuple[str, ...]  # the logical ids of its AWS::Lambda::LayerVersion resources
    code_key: str  # the code asset's S3 key (its content hash and .zip)
    function_name: str | None = None  # FunctionName when the template sets one
    log_format: str = "Text"

    def deployed_name(self, stack_name: str = "Reminders") -> str:
        """The name Lambda knows it by: FunctionName, else the stack's name and logical id
        (as CloudFormation names it, less the random suffix)."""
        return self.function_name or f"{stack_name}-{self.logical_id}"


def function_specs(template: Any, local: LocalValues,
                   only: Collection[str] | None = None) -> dict[str, FunctionSpec]:
    """Every service function of ``template`` by name (``scanner``, ``consumer`` ...), or
    those ``only`` names (whose references alone ``local`` then needs to resolve)."""
    resources = template.get("Resources") if isinstance(template, dict) else None
    if not isinstance(resources, dict):
        raise TemplateError("the template has no Resources")
    specs: dict[str, FunctionSpec] = {}
    for logical_id, resource in resources.items():
        match = SERVICE_FUNCTION.match(logical_id)
        if not match or resource.get("Type") != "AWS::Lambda::Function" or \
                (only is not None and match.group(1).lower() not in only):
            continue
        spec = function_spec(logical_id, resource, resources, local)
        specs[match.group(1).lower()] = spec
    missing = sorted(set(only or ()) - set(specs))
    if missing or not specs:
        raise TemplateError(f"the template has no service function "
                            f"{', '.join(missing) or ''} (AWS::Lambda::Function named "
                            "Functions<Name><hash>)")
    return specs


def function_spec(logical_id: str, resource: Mapping[str, Any],
                  resources: Mapping[str, Any], local: LocalValues) -> FunctionSpec:
    props = resource.get("Properties")
    if not isinstance(props, dict):
        raise SpecError(logical_id, "Properties", "missing")
    name = SERVICE_FUNCTION.match(logical_id)
    return FunctionSpec(
        logical_id=logical_id,
        name=name.group(1).lower() if name else logical_id,
        handler=_handler(logical_id, props),
        environment=_environment(logical_id, props, local),
        timeout_seconds=_bounded(logical_id, props, "Timeout", DEFAULT_TIMEOUT, TIMEOUT_RANGE),
        memory_mib=_bounded(logical_id, props, "MemorySize", DEFAULT_MEMORY, MEMORY_RANGE),
        layers=_layers(logical_id, props, resources),
        code_key=_code(logical_id, props),
        function_name=_optional_text(logical_id, props, "FunctionName"),
        log_format=_log_format(logical_id, props),
    )


def _handler(logical_id: str, props: Mapping[str, Any]) -> str:
    handler = props.get("Handler")
    if handler is None:
        raise SpecError(logical_id, "Handler", "missing")
    if not isinstance(handler, str) or not _HANDLER.match(handler) or len(handler) > 128:
        raise SpecError(logical_id, "Handler",
                        f"{handler!r} is not module.function (at most 128 characters)")
    return handler


def _environment(logical_id: str, props: Mapping[str, Any],
                 local: LocalValues) -> dict[str, str]:
    environment = props.get("Environment", {})
    if not isinstance(environment, dict) or set(environment) - {"Variables"}:
        raise SpecError(logical_id, "Environment", f"expected {{Variables: {{...}}}}, got "
                                                   f"{environment!r}")
    variables = environment.get("Variables", {})
    if not isinstance(variables, dict):
        raise SpecError(logical_id, "Environment", f"Variables is not a map: {variables!r}")
    resolved: dict[str, str] = {}
    for variable, value in variables.items():
        if not isinstance(variable, str) or not _VARIABLE_NAME.match(variable):
            raise SpecError(logical_id, "Environment", f"{variable!r} is not a variable name")
        if variable in RESERVED_VARIABLES:
            raise SpecError(logical_id, "Environment",
                            f"{variable} is reserved (Lambda sets it itself)")
        try:
            given = resolve(value, local, variable)
        except UnresolvedReference as exc:
            raise SpecError(logical_id, "Environment", str(exc)) from None
        if not isinstance(given, str | int | float | bool):
            raise SpecError(logical_id, "Environment", f"{variable} is not a string: {given!r}")
        resolved[variable] = str(given).lower() if isinstance(given, bool) else str(given)
    size = sum(len(k) + len(v) for k, v in resolved.items())
    if size > ENVIRONMENT_BYTES:
        raise SpecError(logical_id, "Environment",
                        f"{size} bytes, over Lambda's {ENVIRONMENT_BYTES}")
    return resolved


def _bounded(logical_id: str, props: Mapping[str, Any], prop: str, default: int,
             bounds: tuple[int, int]) -> int:
    value = props.get(prop, default)
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SpecError(logical_id, prop, f"{value!r} is not a whole number from {low} to "
                                          f"{high}")
    return value


def _layers(logical_id: str, props: Mapping[str, Any],
            resources: Mapping[str, Any]) -> tuple[str, ...]:
    layers = props.get("Layers", [])
    if not isinstance(layers, list):
        raise SpecError(logical_id, "Layers", f"not a list: {layers!r}")
    found: list[str] = []
    for layer in layers:
        ref = layer.get("Ref") if isinstance(layer, dict) and len(layer) == 1 else None
        target = resources.get(ref) if isinstance(ref, str) else None
        if not isinstance(target, dict) or target.get("Type") != "AWS::Lambda::LayerVersion":
            raise SpecError(logical_id, "Layers",
                            f"{layer!r} is not a Ref to a layer of the template")
        found.append(str(ref))
    if len(found) > 5:
        raise SpecError(logical_id, "Layers", f"{len(found)} layers, over Lambda's 5")
    return tuple(found)


def _code(logical_id: str, props: Mapping[str, Any]) -> str:
    code = props.get("Code")
    key = code.get("S3Key") if isinstance(code, dict) else None
    if not isinstance(code, dict) or not isinstance(key, str) or not key.endswith(".zip") or \
            "S3Bucket" not in code:
        raise SpecError(logical_id, "Code", f"not an asset (S3Bucket and S3Key …zip): "
                                            f"{code!r}")
    return key


def _optional_text(logical_id: str, props: Mapping[str, Any], prop: str) -> str | None:
    value = props.get(prop)
    if value is not None and not isinstance(value, str):
        raise SpecError(logical_id, prop, f"not a string: {value!r}")
    return value


def _log_format(logical_id: str, props: Mapping[str, Any]) -> str:
    config = props.get("LoggingConfig", {})
    given = config.get("LogFormat", "Text") if isinstance(config, dict) else None
    if given not in ("Text", "JSON"):
        raise SpecError(logical_id, "LoggingConfig", f"LogFormat {given!r} is not Text or JSON")
    return str(given)
