"""tinker-cookbook's on-policy distillation, unmodified, against a live service on the tiny
model (issue 53): the teacher is another model the platform registered and serves (an
adapter trained here through the SDK, saved with ``save_weights_for_sampler``: a model
version, sampled by its own sampling client), the student a fresh LoRA client.
``distillation.train_on_policy.main`` samples the student, scores each sample with the
teacher's ``compute_logprobs`` and trains on the reverse KL as the advantage.

The cookbook's own prompt sets (``PromptOnlyDatasetBuilder``: DeepMath, Tulu 3) are hub
downloads it cannot skip offline: that builder fails with the cookbook's ``DataError``.
Any ``RLDatasetBuilder`` gives the prompts instead (README's workaround); the cookbook's
in-package arithmetic one does here.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import pytest
from cookbook_kit import cookbook_service, registered_tinker_runs
from tinker_kit import TINY, answer_datum, created

pytest.importorskip("tinker_cookbook")

CHATML = "qwen3_instruct"  # SmolLM2's own turn format; stops on <|im_end|>
STEPS = 2


def _train_teacher(url: str, tokenizer: Any) -> str:
    """A few supervised updates on one answer; the sampler save's ``tinker://`` path."""
    import tinker
    from tinker import types

    client = tinker.ServiceClient(base_url=url)
    trainer = created(client.create_lora_training_client(base_model=TINY, rank=4, seed=7))
    prompt = tokenizer.encode("<|im_start|>user\nWhat is 4 + 5?<|im_end|>\n<|im_start|>assistant\n")
    datum = answer_datum(prompt, tokenizer.encode("9<|im_end|>"))
    for _ in range(3):
        trainer.forward_backward([datum], "cross_entropy").result()
        trainer.optim_step(types.AdamParams(learning_rate=3e-2)).result()
    path = trainer.save_weights_for_sampler("teacher").result().path
    client.close("success").result()
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tinker_cookbook.distillation import train_on_policy
    from tinker_cookbook.distillation.datasets import DistillationDatasetConfig, TeacherConfig
    from tinker_cookbook.recipes.math_rl.arithmetic_env import ArithmeticDatasetBuilder

    tmp = tmp_path_factory.mktemp("cookbook-distill")
    with cookbook_service(tmp, devices=3) as (svc, tokenizer):
        teacher = _train_teacher(svc.url, tokenizer)
        prompts = ArithmeticDatasetBuilder(
            batch_size=2,
            model_name_for_tokenizer=TINY,
            renderer_name=CHATML,
            n_batches=STEPS,
            group_size=2,
        )
        config = train_on_policy.Config(
            learning_rate=1e-3,
            dataset_configs=[
                DistillationDatasetConfig(
                    dataset_builder=prompts,
                    teacher_config=TeacherConfig(base_model=TINY, load_checkpoint_path=teacher),
                    groups_per_batch=2,
                )
            ],
            model_name=TINY,
            recipe_name="recipe_distillation",
            renderer_name=CHATML,
            max_tokens=5,
            lora_rank=4,
            log_path=str(tmp / "log"),
            base_url=svc.url,
            eval_every=0,
            save_every=0,
        )
        asyncio.run(train_on_policy.main(config))
        yield {"svc": svc, "log": tmp / "log", "teacher": teacher}


def test_the_student_trains_on_the_registered_teacher_s_log_probs(world: Any) -> None:
    lines = (world["log"] / "metrics.jsonl").read_text().splitlines()
    rows = [r for r in map(json.loads, lines) if "teacher_kl" in r]
    assert [r["step"] for r in rows] == list(range(STEPS))
    assert all(math.isfinite(r["teacher_kl"]) for r in rows)
    runs = registered_tinker_runs(world["svc"])  # the teacher's version, the student's final
    saves = {r["results"]["model"].split(":")[0] for r in runs}
    assert len(saves) == 2, runs
    assert sorted(r["results"]["step"] for r in runs) == [STEPS, 3]  # student, teacher


def test_the_cookbook_s_prompt_sets_are_hub_downloads(world: Any) -> None:
    from tinker_cookbook.distillation.datasets import PromptOnlyDatasetBuilder
    from tinker_cookbook.exceptions import DataError

    builder = PromptOnlyDatasetBuilder(
        dataset_name="tulu3",
        groups_per_batch=2,
        group_size=2,
        model_name_for_tokenizer=TINY,
        renderer_name=CHATML,
    )
    with pytest.raises(DataError, match="Could not load train split for tulu3"):
        asyncio.run(builder())
