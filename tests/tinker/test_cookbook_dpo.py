"""tinker-cookbook's preference (DPO) training, unmodified, against a live service on the
tiny model (issue 53): ``preference.train_dpo.main`` on a comparisons file
(``ComparisonBuilderFromJsonl`` → ``DPODatasetBuilderFromComparisons``), the path the
cookbook takes on the Tinker primitives alone: ``forward_backward_custom`` (a forward for
the log-probs, the DPO loss in the client, a backward of its gradient) against a reference
that is the step-0 sampler snapshot, scored with ``compute_logprobs`` at every update.

At the first update the policy is the reference, so the DPO loss is exactly ln 2; at the
second, the reference is still step 0's weights (a snapshot keeps its step), so the loss
on the same comparison has fallen below ln 2 and the chosen answer leads.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from cookbook_kit import RENDERER, cookbook_service, recipe_fields, registered_tinker_runs
from tinker_kit import TINY

pytest.importorskip("tinker_cookbook")

COMPARISON = {
    "comparison": {
        "prompt_conversation": [{"role": "user", "content": "What is the capital of France?"}],
        "completion_A": [{"role": "assistant", "content": "Paris."}],
        "completion_B": [{"role": "assistant", "content": "Potatoes are tasty."}],
    },
    "label": "A",
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tinker_cookbook.preference import train_dpo
    from tinker_cookbook.preference.dpo_datasets import DPODatasetBuilderFromComparisons
    from tinker_cookbook.preference.preference_datasets import ComparisonBuilderFromJsonl
    from tinker_cookbook.supervised.types import ChatDatasetBuilderCommonConfig

    tmp = tmp_path_factory.mktemp("cookbook-dpo")
    data = tmp / "comparisons.jsonl"
    data.write_text("".join(json.dumps(COMPARISON) + "\n" for _ in range(4)))
    with cookbook_service(tmp) as (svc, _):
        common = ChatDatasetBuilderCommonConfig(
            model_name_for_tokenizer=TINY, renderer_name=RENDERER, max_length=64, batch_size=2
        )
        config = train_dpo.Config(
            **recipe_fields(tmp / "log", svc),
            recipe_name="recipe_dpo",
            dataset_builder=DPODatasetBuilderFromComparisons(
                common_config=common,
                comparison_builder=ComparisonBuilderFromJsonl(train_path=str(data)),
            ),
            learning_rate=2e-2,
            eval_every=0,
            save_every=0,
        )
        train_dpo.main(config)
        yield {"svc": svc, "log": tmp / "log"}


def test_dpo_trains_against_the_step_0_reference(world: Any) -> None:
    lines = (world["log"] / "metrics.jsonl").read_text().splitlines()
    rows = [r for r in map(json.loads, lines) if "dpo_loss" in r]
    assert [r["step"] for r in rows] == [0, 1]
    first, second = rows
    assert math.isclose(first["dpo_loss"], math.log(2), abs_tol=1e-5), first
    assert abs(first["margin"]) < 1e-5
    assert second["dpo_loss"] < math.log(2) - 1e-3, second
    assert second["margin"] > 0 and second["accuracy"] == 1.0, second


def test_the_final_checkpoint_is_a_model_version(world: Any) -> None:
    (run,) = registered_tinker_runs(world["svc"])
    assert run["results"]["step"] == 2
    saved = [json.loads(x) for x in (world["log"] / "checkpoints.jsonl").read_text().splitlines()]
    assert saved[-1]["name"] == "final" and saved[-1]["sampler_path"].startswith("tinker://")
