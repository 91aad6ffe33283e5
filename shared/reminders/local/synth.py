"""The synthesized template the local stack is read from: ``python -m infra.app`` run once in a
process of its own and kept under ``build/``, and the logical ids of the resources the local
stack has. Apart from the roles (``roles``) and the queues (``twin.resources``), so that the
stack, which reads the template, imports neither of them back."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[3]
# The variant whose scanner publishes to the queue itself, as a runtime without a fan-out does.
SELF_PUBLISHING = {"publisherFanOut": "false"}
# Template logical ids (CDK's construct path and a hash) of the resources the local stack has.
LOCAL_RESOURCES = {
    "deliveries": re.compile(r"^QueuesDeliveries[0-9A-F]{8}$"),
    "dlq": re.compile(r"^QueuesDeadLetter[0-9A-F]{8}$"),
    "parking": re.compile(r"^QueuesParking[0-9A-F]{8}$"),
    "secrets_key": re.compile(r"^SecretsKey[0-9A-F]{8}$"),
    "app_secret": re.compile(r"^DatabaseAppSecretAttachment[0-9A-F]{8}$"),
    "master_secret": re.compile(r"^DatabaseInstanceSecretAttachment[0-9A-F]{8}$"),
    "publisher": re.compile(r"^FunctionsPublisher[0-9A-F]{8}$"),
}


class TemplateError(Exception):
    """The template does not have what a role is read from; the message says what."""


def synthesized_template(context: Mapping[str, str], cache_dir: Path | None = None) -> Any:
    """The template ``python -m infra.app`` gives with ``context``: synthesized once in a
    process of its own (the CDK runs in node), then kept under ``build/`` until a file of
    ``infra/`` or ``cdk.json`` changes."""
    infra = REPO_ROOT / "infra"
    if not infra.is_dir():
        raise TemplateError(f"no infra/ beside {Path(__file__).parent}: the template (what the "
                            "roles are read from) is synthesized from the checkout")
    digest = hashlib.sha256(json.dumps(dict(sorted(context.items()))).encode())
    for path in sorted([*infra.rglob("*.py"), REPO_ROOT / "cdk.json"]):
        digest.update(path.relative_to(REPO_ROOT).as_posix().encode())
        digest.update(path.read_bytes())
    cache = (cache_dir or REPO_ROOT / "build" / "templates") / f"{digest.hexdigest()[:16]}.json"
    if not cache.exists():
        import importlib.util

        if importlib.util.find_spec("aws_cdk") is None:  # `make demo` installs no CDK
            raise TemplateError("the CDK is not installed here (the `infra` extra, which "
                                "`make test` installs), so no template to read the roles from")
        cache.parent.mkdir(parents=True, exist_ok=True)
        script = ("import json, sys\n"
                  "from infra.app import build_app\n"
                  "app = build_app(context=json.loads(sys.argv[1]), outdir=sys.argv[2])\n"
                  "assembly = app.synth()\n"
                  "stack = assembly.stacks[0]\n"
                  "open(sys.argv[3], 'w').write(json.dumps(stack.template))\n")
        outdir = cache.with_suffix(".out")
        partial = cache.with_suffix(".partial")
        try:
            subprocess.run([sys.executable, "-c", script, json.dumps(dict(context)),
                            str(outdir), str(partial)], cwd=REPO_ROOT, check=True,
                           stdout=subprocess.DEVNULL, env=_synth_env())
        except subprocess.CalledProcessError as exc:
            raise TemplateError(f"synthesizing the template failed (exit {exc.returncode}); "
                                "`make synth` shows why") from None
        partial.replace(cache)
    return json.loads(cache.read_text())


def _synth_env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items()
           if k not in ("CDK_DEFAULT_ACCOUNT", "CDK_DEFAULT_REGION")}
    env["JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT / "shared"), str(REPO_ROOT),
                                         env.get("PYTHONPATH", "")])
    return env
