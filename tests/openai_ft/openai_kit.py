"""Shared set-up of the OpenAI fine-tuning tests: a live service with project ``demo``, the
tiny model selected, a project token, and the unmodified openai SDK pointed at it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import openai
import yaml

from helpers import LiveService, free_port

TINY = "akka-optimize/tiny-smollm2"
QUESTIONS = ["Capital of France?", "Capital of Italy?", "Capital of Spain?", "Capital of Peru?"]
ANSWERS = ["Paris", "Rome", "Madrid", "Lima"]


def jsonl(rows: list[dict[str, Any]]) -> bytes:
    """Rows as JSONL bytes."""
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def sft_rows() -> bytes:
    """Four chat rows in OpenAI's supervised format."""
    return jsonl(
        [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
         for q, a in zip(QUESTIONS, ANSWERS, strict=True)]
    )  # fmt: skip


def rl_rows() -> bytes:
    """Four prompt rows in OpenAI's reinforcement format, the answer a reference field."""
    return jsonl(
        [{"messages": [{"role": "user", "content": q}], "answer": a}
         for q, a in zip(QUESTIONS, ANSWERS, strict=True)]
    )  # fmt: skip


def dpo_rows() -> bytes:
    """Four pairs in OpenAI's DPO format: the right capital preferred over the next one."""
    wrong = ANSWERS[1:] + ANSWERS[:1]
    return jsonl(
        [{"input": {"messages": [{"role": "user", "content": q}]},
          "preferred_output": [{"role": "assistant", "content": a}],
          "non_preferred_output": [{"role": "assistant", "content": w}]}
         for q, a, w in zip(QUESTIONS, ANSWERS, wrong, strict=True)]
    )  # fmt: skip


def setup(svc: LiveService, project: str = "demo") -> openai.OpenAI:
    """Project, tiny model, and an SDK client with a token of the project (only base_url and
    api_key set; retries enough to outlast an endpoint's start, each waiting Retry-After)."""
    svc.cli("training", "projects", "create", project, check=True)
    svc.cli("training", "base-models", "select", TINY, "--wait", check=True)
    return client(svc, svc.create_token(project))


def client(svc: LiveService, token: str) -> openai.OpenAI:
    """The unmodified SDK against the service."""
    return openai.OpenAI(base_url=svc.url + "/v1", api_key=token, max_retries=60, timeout=600)


def poll(get: Callable[[], Any], done: Callable[[Any], bool], timeout: float = 600) -> Any:
    """``get()`` until ``done`` holds (every 0.2 s; fails past ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while True:
        got = get()
        if done(got):
            return got
        assert time.monotonic() < deadline, f"not done in {timeout}s: {got}"
        time.sleep(0.2)


def finished(job: Any) -> bool:
    """Whether a job has ended."""
    return job.status in ("succeeded", "failed", "cancelled")


def live_service(tmp: Path) -> Iterator[LiveService]:
    """A started service whose deployment keeps the tests short: reinforcement jobs sample 6
    tokens, 2 per prompt (``openaiFineTuning``), and a grader call has 3 s (``graders``)."""
    (tmp / "home").mkdir(parents=True)
    dep = yaml.safe_load(resources.files("akka_optimize").joinpath("deployment.yaml").read_text())
    dep["openaiFineTuning"] = {"maxNewTokens": 6, "samplesPerPrompt": 2}
    dep["graders"].update(cpuSeconds=3, wallSeconds=3)
    (tmp / "home" / "deployment.yaml").write_text(yaml.safe_dump(dep))
    with LiveService(
        home=tmp / "home", config_dir=tmp / "config", port=free_port()
    ).running() as svc:
        yield svc
