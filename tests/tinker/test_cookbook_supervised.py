"""tinker-cookbook's supervised recipe, unmodified, against a live service on the tiny model
(issue 53, "the cookbook as the acceptance test"): ``supervised.train.main`` on the
cookbook's own conversation file (``FromConversationFileBuilder``, its
``example_data/conversations.jsonl``) with a held-out split, evaluated and checkpointed
every other update; the final sampler checkpoint is a registered model version that an
endpoint serves, answering as a sampling client of the same checkpoint does.
"""

from __future__ import annotations

import asyncio
import json
import math
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import pytest
from cookbook_kit import RENDERER, cookbook_service, recipe_fields, registered_tinker_runs
from tinker_kit import TINY

pytest.importorskip("tinker_cookbook")

STEPS = 3


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tinker_cookbook.renderers import TrainOnWhat
    from tinker_cookbook.supervised import train
    from tinker_cookbook.supervised.data import FromConversationFileBuilder
    from tinker_cookbook.supervised.types import ChatDatasetBuilderCommonConfig

    tmp = tmp_path_factory.mktemp("cookbook-sl")
    with cookbook_service(tmp) as (svc, tokenizer):
        conversations = resources.files("tinker_cookbook") / "example_data" / "conversations.jsonl"
        common = ChatDatasetBuilderCommonConfig(
            model_name_for_tokenizer=TINY,
            renderer_name=RENDERER,
            max_length=128,
            batch_size=4,
            train_on_what=TrainOnWhat.ALL_ASSISTANT_MESSAGES,
        )
        config = train.Config(
            **recipe_fields(tmp / "log", svc),
            recipe_name="recipe_sl_basic",
            dataset_builder=FromConversationFileBuilder(
                common_config=common, file_path=str(conversations), test_size=4
            ),
            learning_rate=1e-2,
            max_steps=STEPS,
            eval_every=2,
            save_every=2,
        )
        asyncio.run(train.main(config))
        yield {"svc": svc, "tokenizer": tokenizer, "log": tmp / "log"}


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_recipe_trains_its_updates_with_held_out_loss(world: Any) -> None:
    rows = _jsonl(world["log"] / "metrics.jsonl")
    steps = [r for r in rows if "train_mean_nll" in r]
    assert [r["step"] for r in steps] == list(range(STEPS))
    assert all(math.isfinite(r["train_mean_nll"]) and r["train_mean_nll"] > 0 for r in steps)
    held_out = [r for r in rows if "test/nll" in r]  # steps 0 and 2: before and after training
    assert [r["step"] for r in held_out] == [0, 2]
    assert held_out[1]["test/nll"] < held_out[0]["test/nll"], held_out


def test_checkpoints_are_the_service_s_and_the_final_one_is_registered(world: Any) -> None:
    svc = world["svc"]
    saved = _jsonl(world["log"] / "checkpoints.jsonl")
    assert [c["name"] for c in saved][-1] == "final"
    periodic = [c for c in saved if c["name"] != "final"]
    assert periodic and all(c["state_path"].startswith("tinker://") for c in periodic)
    final = saved[-1]["sampler_path"]
    assert final.endswith("/sampler_weights/final")
    (run,) = registered_tinker_runs(svc)
    assert run["state"] == "SUCCEEDED" and run["results"]["step"] == STEPS
    # every sampler save is a model version; the run's model is its newest one, the final
    ns, name = run["results"]["model"].split(":")[0].split("/")
    versions = svc.api("GET", f"/v1/registry/models/{ns}/{name}/versions").json()["items"]
    assert [v["metadata"]["tinkerName"] for v in versions][-1] == "final"
    assert versions[-1]["metadata"]["step"] == STEPS and versions[-1]["runId"] == run["id"]
    assert run["results"]["model"] == versions[-1]["ref"]
    world.update(final=final, version=f"{ns}/{name}:{versions[-1]['version']}")


def test_the_final_checkpoint_is_served_through_an_endpoint(world: Any) -> None:
    import tinker
    from tinker import types

    svc, tokenizer = world["svc"], world["tokenizer"]
    prompt = "User: What is the capital of France?\n\nAssistant:"
    client = tinker.ServiceClient(base_url=svc.url)
    sampler = client.create_sampling_client(model_path=world["final"]).result()
    greedy = types.SamplingParams(max_tokens=6, temperature=0.0)
    got = sampler.sample(types.ModelInput.from_ints(tokenizer.encode(prompt)), 1, greedy).result()
    client.close("success").result()
    trained = tokenizer.decode(got.sequences[0].tokens)

    out = svc.cli(
        "training", "endpoints", "create", "--model", world["version"], "--wait", "-o", "json"
    )
    assert out.returncode == 0, out.stderr
    ep = json.loads(out.stdout[out.stdout.index("{") :])
    try:
        r = httpx.post(
            f"{svc.url}/v1/training/endpoints/{ep['id']}/openai/v1/completions",
            headers={"Authorization": f"Bearer {svc.token}"},
            json={"model": world["version"], "prompt": prompt, "max_tokens": 6, "temperature": 0},
            timeout=120,
        )
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == trained
    finally:
        svc.cli("training", "endpoints", "delete", ep["id"], check=True)
