"""`make demo` installs no CDK: where no template can be synthesized, the local stack's
functions run with the command's own credentials, and the demo says so, instead of failing."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from reminders.local import roles


def test_without_the_cdk_no_template_is_synthesized_and_the_error_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "aws_cdk" else real(name, *a))
    with pytest.raises(roles.TemplateError, match="the CDK is not installed here"):
        roles.synthesized_template({"no": "such"}, cache_dir=tmp_path)


def test_the_functions_keep_the_command_s_credentials_when_no_role_can_be_made(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def no_template(*args: Any, **kwargs: Any) -> Any:
        raise roles.TemplateError("the CDK is not installed here")

    monkeypatch.setattr(roles, "local_roles", no_template)
    rt = SimpleNamespace(functions=None, settings=None)
    why = roles.as_their_roles(rt, "http://127.0.0.1:1", None, "arn:key")
    assert why == "the CDK is not installed here" and rt.functions is None
