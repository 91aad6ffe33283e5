"""A synthesized stack variant and small readers over its template."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_cdk import App, assertions

from infra.app import build_app
from infra.stack import RemindersStack


@dataclass(frozen=True)
class Synthesized:
    app: App
    stack: RemindersStack
    template: assertions.Template
    template_path: Path
    json: Mapping[str, Any]

    def resources(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {
            logical_id: resource
            for logical_id, resource in self.json["Resources"].items()
            if resource["Type"] == resource_type
        }

    def function(self, name: str) -> tuple[str, dict[str, Any]]:
        """The function ``name`` (scanner, ..., ops-read, ops-write)."""
        from reminders.local.roles import is_function

        for logical_id, resource in self.resources("AWS::Lambda::Function").items():
            if is_function(resource, name):
                return logical_id, resource
        raise AssertionError(f"no function {name}")


def synthesize(context: dict[str, object] | None, outdir: Path) -> Synthesized:
    app = build_app(context=context, outdir=str(outdir))
    # Synth runs the cdk-nag plugin; an unacknowledged finding makes it raise here.
    assembly = app.synth()
    stack = next(child for child in app.node.children if isinstance(child, RemindersStack))
    artifact = assembly.get_stack_artifact(stack.artifact_id)
    template_path = Path(assembly.directory) / artifact.template_file
    data = json.loads(template_path.read_text())
    return Synthesized(
        app=app,
        stack=stack,
        template=assertions.Template.from_json(data),
        template_path=template_path,
        json=data,
    )
