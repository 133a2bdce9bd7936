"""tinker-cookbook's reinforcement learning, unmodified, against a live service on the tiny
model (issue 53): the arithmetic environment (``recipes/math_rl/arithmetic_env.py``, in the
package, nothing downloaded), a couple of updates of groups of 4 rollouts each.

``rl.train.main`` with the loop's own default loss (``importance_sampling``) and a chatml
renderer (``qwen3_instruct``: SmolLM2's own turn format, stopping on ``<|im_end|>``) trains.
The math_rl recipe's entry point with its default loss, ``stable_reinforce``, is refused
with the losses the platform trains (its objective is not published); with
``importance_sampling`` and ``role_colon``, whose stop string ``"\\n\\nUser:"`` is four
tokens (issue 53 break 5: stop strings of any length), it trains.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest
from cookbook_kit import RENDERER, cookbook_service, registered_tinker_runs
from tinker_kit import TINY

pytest.importorskip("tinker_cookbook")

GROUP, GROUPS, STEPS = 4, 2, 2


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("cookbook-rl")
    with cookbook_service(tmp) as (svc, tokenizer):
        yield {"svc": svc, "tmp": tmp}


def _metrics(log: Path) -> list[dict[str, Any]]:
    rows = [json.loads(x) for x in (log / "metrics.jsonl").read_text().splitlines() if x]
    return [r for r in rows if "env/all/reward/total" in r]


def test_the_rl_loop_trains_on_arithmetic_with_its_default_loss(world: Any) -> None:
    from tinker_cookbook.recipes.math_rl.arithmetic_env import ArithmeticDatasetBuilder
    from tinker_cookbook.rl import train

    svc, log = world["svc"], world["tmp"] / "loop"
    config = train.Config(
        learning_rate=1e-3,
        dataset_builder=ArithmeticDatasetBuilder(
            batch_size=GROUPS,
            model_name_for_tokenizer=TINY,
            renderer_name="qwen3_instruct",
            n_batches=STEPS,
            group_size=GROUP,
        ),
        model_name=TINY,
        recipe_name="recipe_math_rl",
        renderer_name="qwen3_instruct",
        max_tokens=5,
        log_path=str(log),
        base_url=svc.url,
        lora_rank=4,
        eval_every=0,
        save_every=0,
    )
    assert config.loss_fn == "importance_sampling"  # the loop's default, unchanged
    asyncio.run(train.main(config))

    rows = _metrics(log)
    assert [r["step"] for r in rows] == list(range(STEPS))
    for r in rows:  # reward: 1 for the right sum, minus 0.1 without the stop token
        assert -0.1 <= r["env/all/reward/total"] <= 1.0
        assert r["env/all/total_episodes"] == GROUP * GROUPS
        assert math.isfinite(r["optim/kl_sample_train_v1"])
    (run,) = registered_tinker_runs(svc)  # the final checkpoint is a model version
    assert run["results"]["step"] == STEPS


def _recipe(world: Any, name: str, **fields: Any) -> Any:
    """The math_rl recipe's ``CLIConfig``: its defaults (arithmetic, ``stable_reinforce``)
    but for the tiny model, small groups and ``fields``."""
    from tinker_cookbook.recipes.math_rl import train as recipe

    return recipe.CLIConfig(
        model_name=TINY,
        lora_rank=4,
        group_size=GROUP,
        groups_per_batch=GROUPS,
        max_steps=STEPS,
        log_path=str(world["tmp"] / name),
        base_url=world["svc"].url,
        eval_every=0,
        save_every=0,
        behavior_if_log_dir_exists="delete",
        **fields,
    )


def test_the_math_rl_recipe_s_default_loss_is_refused_naming_the_losses_served(
    world: Any,
) -> None:
    from tinker_cookbook.recipes.math_rl import train as recipe

    import tinker

    cli = _recipe(world, "refused", renderer_name="qwen3_instruct")
    assert (cli.env, cli.loss_fn) == ("arithmetic", "stable_reinforce")
    with pytest.raises(tinker.RequestFailedError) as info:
        asyncio.run(recipe.cli_main(cli))
    text = str(info.value)
    assert "loss_fn 'stable_reinforce'" in text and "importance_sampling" in text, text


def test_the_math_rl_recipe_trains_with_role_colon(world: Any) -> None:
    from tinker_cookbook.recipes.math_rl import train as recipe

    # role_colon: the cookbook's renderer for a base Llama-family model (model_info knows
    # no renderer for an unknown model name); importance_sampling, as the refusal says
    cli = _recipe(world, "recipe", renderer_name=RENDERER, loss_fn="importance_sampling")
    asyncio.run(recipe.cli_main(cli))
    rows = _metrics(world["tmp"] / "recipe")
    assert [r["step"] for r in rows] == list(range(STEPS))
    assert all(r["env/all/total_episodes"] == GROUP * GROUPS for r in rows)
