"""The consumer's SQS event source: standard mode with maximum concurrency, or provisioned mode
with event pollers (``-c sqsPollers=MIN-MAX``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from infra.settings import Settings, SettingsError
from tests.infra.synth import Synthesized, synthesize


def _mapping_for(synth: Synthesized, function: str) -> dict[str, Any]:
    function_id, _ = synth.function(function)
    for mapping in synth.resources("AWS::Lambda::EventSourceMapping").values():
        if mapping["Properties"]["FunctionName"] == {"Ref": function_id}:
            return mapping["Properties"]  # type: ignore[no-any-return]
    raise AssertionError(f"no event source mapping for {function}")


def test_standard_mode_keeps_the_maximum_concurrency_and_no_pollers(default: Synthesized) -> None:
    consumer = _mapping_for(default, "consumer")
    assert consumer["ScalingConfig"]["MaximumConcurrency"] == 36
    assert "ProvisionedPollerConfig" not in consumer
    _, function = default.function("consumer")
    assert "ReservedConcurrentExecutions" not in function["Properties"]


def test_provisioned_mode_sets_the_pollers_and_keeps_the_connection_budget(
        layer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    synth = synthesize({"sqsPollers": "4-40"}, tmp_path_factory.mktemp("cdk-pollers"))
    consumer = _mapping_for(synth, "consumer")
    assert consumer["ProvisionedPollerConfig"] == {"MinimumPollers": 4, "MaximumPollers": 40}
    # Mutually exclusive with provisioned mode (AWS): the budget moves to reserved concurrency.
    assert "ScalingConfig" not in consumer
    _, function = synth.function("consumer")
    assert function["Properties"]["ReservedConcurrentExecutions"] == 36
    # The redrive's mapping is unchanged.
    assert _mapping_for(synth, "redrive")["ScalingConfig"]["MaximumConcurrency"] == 2


@pytest.mark.parametrize("value, words", [
    ("20", "must be MIN-MAX"), ("1-10", "2 to 200 minimum pollers"),
    ("10-5", "a maximum from the minimum to 2000"), ("2-2001", "to 2000"),
    ("201-300", "2 to 200 minimum"),
])
def test_bad_pollers_are_refused_naming_the_setting(value: str, words: str) -> None:
    with pytest.raises(SettingsError, match=f"sqsPollers.*{words}"):
        Settings(sqs_pollers=value).validate()
