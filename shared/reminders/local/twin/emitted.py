"""Which metrics a code path emits, and which alarms of the template watch one that nothing
emits.

The service's own metrics (namespace ``Reminders``) are found by reading the code: every call
``<something>.metrics.put(NAME, ...)`` under ``shared/reminders``, NAME a string literal, a
module-level dict's value (``OUTCOME_METRICS[outcome]``) or the loop variable of a ``for`` over
such a dict's ``items()``/``values()``. Each is published with the ``service`` dimension
(reminders.observability) plus the names of its ``dimensions={...}``. A call this scan cannot
read raises, naming its file and line, so a new metric cannot slip past unread. The AWS
namespaces' metrics are what the twin's feeders produce (reminders.local.twin.metrics.FED), for
the functions and queues the twin runs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from reminders.local.twin.alarms import MetricAlarmSpec
from reminders.local.twin.metrics import FED

PACKAGE = Path(__file__).resolve().parents[2]  # shared/reminders
SERVICE_NAMESPACE = "Reminders"
SERVICE_DIMENSIONS = frozenset({"service"})


class ScanError(Exception):
    """A metrics call the scan cannot read; the message names the file and line."""


@dataclass(frozen=True)
class Emitted:
    namespace: str
    name: str
    dimension_names: frozenset[str]
    where: str  # file:line


def service_metrics(root: Path = PACKAGE) -> list[Emitted]:
    """Every metric the service's code publishes, read from the code under ``root``."""
    found: list[Emitted] = []
    for path in sorted(root.rglob("*.py")):
        if "twin" in path.relative_to(root).parts:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        dicts = _module_dicts(tree)
        loops = _loop_sources(tree)
        for node in ast.walk(tree):
            if not _is_metrics_put(node):
                continue
            assert isinstance(node, ast.Call)
            where = f"{path.relative_to(root.parent)}:{node.lineno}"
            if not node.args:
                raise ScanError(f"{where}: metrics.put without a metric name")
            names = _names(node.args[0], dicts, loops, where)
            extra = _dimension_names(node, where)
            found += [Emitted(SERVICE_NAMESPACE, n, SERVICE_DIMENSIONS | extra, where)
                      for n in names]
    return found


def _is_metrics_put(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "put" and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr == "metrics")


def _module_dicts(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level ``NAME = {...: "literal", ...}``: their string values, by name."""
    found: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Dict):
            values = [v.value for v in node.value.values
                      if isinstance(v, ast.Constant) and isinstance(v.value, str)]
            if len(values) == len(node.value.values):
                found[node.targets[0].id] = values
    return found


def _loop_sources(tree: ast.Module) -> dict[str, str]:
    """Loop variables bound by ``for ..., v in D.items()`` / ``for v in D.values()``: the
    dict's name, by variable."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.For) and isinstance(node.iter, ast.Call)
                and isinstance(node.iter.func, ast.Attribute)
                and isinstance(node.iter.func.value, ast.Name)):
            continue
        source, method = node.iter.func.value.id, node.iter.func.attr
        if method == "values" and isinstance(node.target, ast.Name):
            found[node.target.id] = source
        elif method == "items" and isinstance(node.target, ast.Tuple) \
                and len(node.target.elts) == 2 and isinstance(node.target.elts[1], ast.Name):
            found[node.target.elts[1].id] = source
    return found


def _names(arg: ast.expr, dicts: Mapping[str, list[str]], loops: Mapping[str, str],
           where: str) -> list[str]:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if isinstance(arg, ast.Subscript) and isinstance(arg.value, ast.Name) \
            and arg.value.id in dicts:
        return dicts[arg.value.id]
    if isinstance(arg, ast.Name) and arg.id in loops and loops[arg.id] in dicts:
        return dicts[loops[arg.id]]
    raise ScanError(f"{where}: cannot tell which metric {ast.unparse(arg)!r} names (use a "
                    "string literal or a module-level dict of them)")


def _dimension_names(call: ast.Call, where: str) -> frozenset[str]:
    for keyword in call.keywords:
        if keyword.arg != "dimensions":
            continue
        value = keyword.value
        if isinstance(value, ast.Constant) and value.value is None:
            return frozenset()
        if isinstance(value, ast.Dict) and all(isinstance(k, ast.Constant) and
                                               isinstance(k.value, str) for k in value.keys):
            return frozenset(str(k.value) for k in value.keys if isinstance(k, ast.Constant))
        raise ScanError(f"{where}: cannot read the dimension names of "
                        f"{ast.unparse(value)!r} (use a dict literal)")
    return frozenset()


@dataclass(frozen=True)
class Unwatched:
    alarm: str
    why: str


def unwatched(alarms: Iterable[MetricAlarmSpec], emitted: Iterable[Emitted],
              runs: Iterable[str]) -> list[Unwatched]:
    """The alarms that watch a (namespace, metric, dimension names) no code path emits:
    the service's namespace against ``emitted``; AWS/Lambda and AWS/SQS against the feeders,
    whose FunctionName must be a function the twin runs (``runs``: logical ids) and whose
    QueueName a queue of the template; any other namespace is watched by nothing here."""
    service = {(e.name, e.dimension_names) for e in emitted}
    running = set(runs)
    found: list[Unwatched] = []
    for alarm in alarms:
        dims = frozenset(d.name for d in alarm.dimensions)
        if alarm.namespace == SERVICE_NAMESPACE:
            if (alarm.metric_name, dims) not in service:
                by_name = sorted(sorted(d) for n, d in service if n == alarm.metric_name)
                found.append(Unwatched(alarm.logical_id, (
                    f"{alarm.namespace}/{alarm.metric_name} with dimensions {sorted(dims)} is "
                    "emitted by no code path" + (f" (it is, with {by_name})" if by_name else ""))))
            continue
        fed = FED.get(alarm.namespace)
        if fed is None:
            found.append(Unwatched(alarm.logical_id, f"the twin feeds no {alarm.namespace} "
                                                     "metrics"))
            continue
        names, dimension_names = fed
        if alarm.metric_name not in names or dims != dimension_names:
            found.append(Unwatched(alarm.logical_id, (
                f"{alarm.namespace}/{alarm.metric_name} with dimensions {sorted(dims)} is not "
                f"what the twin feeds ({', '.join(names)} by {sorted(dimension_names)})")))
            continue
        for dim in alarm.dimensions:
            if dim.kind == "literal":
                found.append(Unwatched(alarm.logical_id, (
                    f"{dim.name}={dim.value} names no function or queue of the template: "
                    "its metrics come from something the twin does not run")))
            elif dim.kind == "function" and dim.value not in running:
                found.append(Unwatched(alarm.logical_id, f"{dim.name} is {dim.value}, a "
                                                         "function the twin does not run"))
    return found
