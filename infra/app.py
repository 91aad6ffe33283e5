"""Entry point: ``python -m infra.app`` (cdk.json runs this).

Synth is offline: account, region and availability zones come from context defaults, the
code asset is a file copy and the dependency layer is built with pip (PyPI only) when
``build/layer`` is missing. Output goes to ``CDK_OUTDIR`` (set by the CDK CLI) or ``cdk.out``.
"""

from __future__ import annotations

import os

from aws_cdk import App

from infra.layer import build_lock
from infra.nag import attach_checks
from infra.settings import Settings
from infra.stack import RemindersStack


def build_app(context: dict[str, object] | None = None, outdir: str | None = None) -> App:
    app = App(context=context, outdir=outdir)
    settings = Settings.from_node(app.node)
    with build_lock():  # the layer and the code are built, staged and hashed here
        RemindersStack(app, settings.stack_name, settings=settings)
    attach_checks(app)
    return app


def main() -> None:
    outdir = os.environ.get("CDK_OUTDIR", "cdk.out")
    build_app(outdir=outdir).synth()


if __name__ == "__main__":
    main()
