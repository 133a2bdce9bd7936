"""Rollouts on vLLM (issue 52 item 6), checked on CPU with vLLM's interface faked at its
boundary: a module object whose ``LLM``, ``SamplingParams`` and ``LoRARequest`` record
what the loop sends and answer deterministic completions with per-token log-probs (the
``RequestOutput`` / ``CompletionOutput`` / ``Logprob`` shapes of vLLM's offline API).
The real engine needs a CUDA device with vLLM installed."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch
from engine_testkit import fp32_config
from peft import get_peft_model_state_dict
from safetensors.torch import load_file

from akka_optimize.engine.errors import EngineError
from akka_optimize.engine.rl.loop import RLPrompt, RLSettings, run_rl
from akka_optimize.engine.rollout_vllm import NO_VLLM, VLLMRollout, group_seed, vllm_rollout

PROMPTS = [RLPrompt([1, 2045, 314, 1930, 28, 17]), RLPrompt([1, 45, 14, 190, 28])]
STOP = 2


class FakeLLM:
    """``vllm.LLM``: keeps its keyword arguments and every ``generate`` call, with the
    adapter weights and config read from the LoRA's folder at the time of the call."""

    built: list[FakeLLM] = []

    def __init__(self, **kw: Any) -> None:
        self.kw, self.calls = kw, []
        FakeLLM.built.append(self)

    def generate(self, prompts, params, lora_request=None, use_tqdm=True):  # noqa: ANN001, ANN201
        folder = Path(lora_request.lora_path)
        self.calls.append(
            {
                "lora": lora_request,
                "weights": load_file(folder / "adapter_model.safetensors"),
                "config": json.loads((folder / "adapter_config.json").read_text()),
                "params": params,
                "prompts": prompts,
            }
        )
        return [
            SimpleNamespace(prompt_token_ids=p["prompt_token_ids"], outputs=_completions(sp))
            for p, sp in zip(prompts, params, strict=True)
        ]


def _completions(sp: Any) -> list[Any]:
    """``sp.n`` completions drawn from ``sp.seed``: up to ``max_tokens`` ids, ending after a
    stop token when one is drawn; each token's ``{id: Logprob}`` holds the sampled one."""
    outs = []
    for i in range(sp.n):
        rng = random.Random(sp.seed * 31 + i)
        toks: list[int] = []
        while len(toks) < sp.max_tokens and (not toks or toks[-1] not in sp.stop_token_ids):
            toks.append(rng.choice([STOP, *range(3, 40)]))
        lps = [
            {t: SimpleNamespace(logprob=-1.0 - 0.01 * k - i, rank=1)} for k, t in enumerate(toks)
        ]
        outs.append(SimpleNamespace(token_ids=toks, logprobs=lps, finish_reason="length"))
    return outs


def _fake_vllm() -> SimpleNamespace:
    FakeLLM.built.clear()
    return SimpleNamespace(
        LLM=FakeLLM,
        SamplingParams=lambda **kw: SimpleNamespace(**kw),
        LoRARequest=lambda name, int_id, path: SimpleNamespace(
            lora_name=name, lora_int_id=int_id, lora_path=path
        ),
    )


def _score(_prompts, samples) -> None:
    for s in samples:
        s.reward = float(sum(s.tokens) % 3 == 0)
    if len({s.reward for s in samples}) == 1:
        samples[0].reward = 1.0 - samples[0].reward


def _run(tiny_model_dir: Path, tmp_path: Path, staleness: int, steps: int) -> dict[str, Any]:
    """A run whose rollouts go to the fake vLLM; returns its events, the trainer's adapter
    (PEFT's names) after every update and the fake engine."""
    api, seen, events = _fake_vllm(), {}, []

    def backend(session, settings, model_dir, work, emit, max_len):  # noqa: ANN001, ANN202
        seen["session"] = session
        seen[session.step] = _adapter(session)
        return VLLMRollout(api, session, model_dir, settings, work, max_len)

    def emit(event: dict[str, Any]) -> None:
        events.append(event)
        if event["type"] == "metrics":
            seen[event["step"]] = _adapter(seen["session"])

    settings = RLSettings(
        samples_per_prompt=3, max_new_tokens=5, temperature=0.7, seed=11,
        max_staleness=staleness, memory_share=0.35, max_num_seqs=5, prefix_caching=False,
    )  # fmt: skip
    run_rl(
        fp32_config(learning_rate=2e-2), settings, tiny_model_dir, PROMPTS, steps=steps,
        prompts_per_step=2, score=_score, stop_ids={STOP}, state_dir=tmp_path / "state",
        emit=emit, max_seq_length=64, rollout_backend=backend,
    )  # fmt: skip
    (llm,) = FakeLLM.built
    return {"events": events, "adapters": seen, "llm": llm, "settings": settings}


def _adapter(session: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(session.model).items()}


def test_each_update_samples_a_new_lora_id_holding_the_trainers_adapter(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """On-policy, 3 updates: vLLM is built once with the plan's memory share; update u
    is sampled through LoRA id u (version u − 1) whose folder holds exactly the trainer's
    adapter after u − 1 updates; the sampling parameters are the plan's; each sample
    carries vLLM's tokens, log-probs and the version."""
    got = _run(tiny_model_dir, tmp_path, staleness=0, steps=3)
    llm, adapters = got["llm"], got["adapters"]
    assert llm.kw["model"] == str(tiny_model_dir) and llm.kw["enable_lora"] is True
    assert llm.kw["gpu_memory_utilization"] == 0.35
    assert llm.kw["max_lora_rank"] == 8 and llm.kw["max_model_len"] == 64  # rank 4 → 8
    assert llm.kw["logprobs_mode"] == "processed_logprobs"
    assert (llm.kw["max_num_seqs"], llm.kw["enable_prefix_caching"]) == (5, False)
    assert [c["lora"].lora_int_id for c in llm.calls] == [1, 2, 3]
    assert [c["lora"].lora_name for c in llm.calls] == ["rollout-v0", "rollout-v1", "rollout-v2"]
    for version, call in enumerate(llm.calls):
        assert Path(call["lora"].lora_path).name == f"v{version}"
        assert call["config"]["r"] == 4 and call["config"]["lora_alpha"] == 8
        want = adapters[version]
        assert set(call["weights"]) == set(want)
        assert all(torch.equal(call["weights"][k], want[k]) for k in want)
    assert not all(torch.equal(adapters[2][k], adapters[1][k]) for k in adapters[1])
    for u, call in enumerate(llm.calls, start=1):
        assert [p["prompt_token_ids"] for p in call["prompts"]] == [p.prompt_ids for p in PROMPTS]
        for g, sp in enumerate(call["params"]):
            assert (sp.n, sp.max_tokens, sp.temperature, sp.top_p) == (3, 5, 0.7, 1.0)
            assert sp.stop_token_ids == [STOP] and sp.logprobs == 0
            assert sp.seed == group_seed(11, u, g)
    metrics = [e for e in got["events"] if e["type"] == "metrics"]
    assert [m["weightVersion"] for m in metrics] == [0, 1, 2]
    assert all(m["staleness"] == 0 and m["logprobDiffMax"] > 0 for m in metrics)
    shown = [e for e in got["events"] if e["type"] == "samples"]
    for u, event in enumerate(shown, start=1):
        answered = llm.calls[u - 1]
        for s in event["samples"]:
            out = _completions(answered["params"][s["group"]])
            match = [o for o in out if o.token_ids == s["tokens"]]
            assert match, "a sample's tokens are one of vLLM's completions"
            pairs = zip(s["tokens"], match[0].logprobs, strict=True)
            assert s["logprobs"] == [lp[t].logprob for t, lp in pairs]
            assert s["weightVersion"] == u - 1
    folders = sorted(p.name for p in (tmp_path / "state" / "rollout").iterdir())
    assert folders == ["v2"]  # the older versions' folders are removed once superseded


def test_with_max_staleness_the_version_never_lags_more_than_the_bound(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """maxStaleness 1 over 4 updates: the sampler thread draws update u with version
    max(0, u − 2) through LoRA id version + 1, holding that version's adapter."""
    got = _run(tiny_model_dir, tmp_path, staleness=1, steps=4)
    llm, adapters = got["llm"], got["adapters"]
    versions = [int(c["lora"].lora_name.removeprefix("rollout-v")) for c in llm.calls]
    assert versions == [0, 0, 1, 2]
    assert [c["lora"].lora_int_id for c in llm.calls] == [v + 1 for v in versions]
    for v, call in zip(versions, llm.calls, strict=True):
        assert all(torch.equal(call["weights"][k], adapters[v][k]) for k in adapters[v])
    metrics = [e for e in got["events"] if e["type"] == "metrics"]
    assert [m["weightVersion"] for m in metrics] == versions
    assert [m["staleness"] for m in metrics] == [0, 1, 1, 1]


def _cuda_session(rank: int = 4) -> Any:
    return SimpleNamespace(
        device=torch.device("cuda"), world=1, step=0, dtype=torch.bfloat16,
        cfg=SimpleNamespace(lora_rank=rank),
    )  # fmt: skip


def test_the_backend_is_vllm_on_one_cuda_device_with_vllm_and_the_lean_sampler_else(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = RLSettings(samples_per_prompt=2, max_new_tokens=3, memory_share=0.6)
    events: list[dict[str, Any]] = []
    cpu = SimpleNamespace(device=torch.device("cpu"), world=1)
    assert vllm_rollout(cpu, settings, tmp_path, tmp_path, events.append) is None and not events
    monkeypatch.setitem(sys.modules, "vllm", None)  # not installed
    assert vllm_rollout(_cuda_session(), settings, tmp_path, tmp_path, events.append) is None
    assert events == [
        {"type": "warning", "code": "rollout_without_vllm", "step": 0, "message": NO_VLLM}
    ]
    fake, lora, request = ModuleType("vllm"), ModuleType("vllm.lora"), ModuleType("r")
    api = _fake_vllm()
    fake.LLM, fake.SamplingParams, request.LoRARequest = (
        api.LLM,
        api.SamplingParams,
        api.LoRARequest,
    )
    for name, mod in (("vllm", fake), ("vllm.lora", lora), ("vllm.lora.request", request)):
        monkeypatch.setitem(sys.modules, name, mod)
    two = SimpleNamespace(device=torch.device("cuda"), world=2)
    assert vllm_rollout(two, settings, tmp_path, tmp_path, events.append) is None
    got = vllm_rollout(_cuda_session(), settings, tmp_path, tmp_path / "w", events.append)
    assert isinstance(got, VLLMRollout) and len(events) == 1
    assert got.llm.kw["gpu_memory_utilization"] == 0.6 and got.llm.kw["dtype"] == "bfloat16"
    assert vllm_rollout(_cuda_session(600), settings, tmp_path, tmp_path, events.append) is None
    assert "LoRA rank 600 is above the 512 vLLM serves" in events[-1]["message"]
    with pytest.raises(EngineError, match="rank 600"):
        VLLMRollout(api, _cuda_session(600), tmp_path, settings, tmp_path / "w")


def test_an_answer_without_logprobs_or_an_unpublished_version_is_refused(tmp_path: Path) -> None:
    api = _fake_vllm()
    settings = RLSettings(samples_per_prompt=2, max_new_tokens=3)
    session = _cuda_session()
    rollout = VLLMRollout(api, session, tmp_path, settings, tmp_path / "w")
    with pytest.raises(EngineError, match="version 0 was not published"):
        rollout.draw(PROMPTS, settings, {STOP}, 1, 0)
    session.save_adapter = lambda d: d  # a folder the fake never reads below
    rollout.publish(session)
    rollout.llm.generate = lambda prompts, params, **kw: (
        [SimpleNamespace(outputs=[SimpleNamespace(token_ids=[5], logprobs=None)] * 2)]
        * len(prompts)
    )
    with pytest.raises(EngineError, match="without its per-token log-probabilities"):
        rollout.draw(PROMPTS, settings, {STOP}, 1, 0)
