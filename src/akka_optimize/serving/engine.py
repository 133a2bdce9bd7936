"""The serving engine interface and its types (issue 8 "Serving engines").

An engine holds one resident base model and any number of LoRA adapters of it,
and generates for one request at a time with the base model or a named adapter
(:class:`ServingEngine`). The engines live beside this module and import only it:

- :class:`~akka_optimize.serving.transformers_engine.TransformersEngine` (default, CPU
  and GPU): PEFT multi-adapter — ``load_adapter`` per adapter name, ``set_adapter`` per
  request, and the base model under ``disable_adapter()``; a KV-cached decoding loop so
  answers stream.
- :class:`~akka_optimize.serving.vllm_engine.VLLMEngine`: vLLM with LoRA enabled,
  imported only when ``serving.engine`` is ``vllm``.

:func:`akka_optimize.serving.engine_factory.make_engine` picks one. The stop set is the
tokenizer's EOS ids plus the chat template's end-of-turn marker (:func:`stop_token_ids`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..engine.check_prompts import stop_token_ids as stop_token_ids


@dataclass
class SamplingParams:
    """How to sample one request.

    ``temperature`` 0 (or below 1e-5, as in vLLM) is greedy (argmax); ``top_p`` in (0, 1] keeps the smallest set
    of tokens whose probability reaches it; ``seed`` makes sampling repeatable;
    ``n`` answers are sampled in one batch; generation of an answer ends at a stop
    token, at a ``stop`` string (not included in the text) or after ``max_tokens``.
    ``choice`` (the request's ``guided_choice``, vLLM's name for it) limits every answer
    to one of the given strings: each step may only pick a token that continues the
    tokenization of one of them, and a finished one ends the answer.
    ``frequency_penalty`` and ``presence_penalty`` lower each token's logit by
    ``count · frequency_penalty + (count > 0) · presence_penalty`` (``count``: how often
    the answer already holds the token; OpenAI's definition) and ``logit_bias`` adds its
    value to the logit of each token id it names, all before temperature and top-p.
    ``logprobs`` (None: off) asks for each chosen token's log probability and that many
    most likely alternatives (0 to 20), from the model's own logits (log-softmax before
    penalties, bias and temperature: vLLM's default ``raw_logprobs``).
    """

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    n: int = 1
    stop: list[str] = field(default_factory=list)
    choice: list[str] | None = None
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: dict[int, float] | None = None
    logprobs: int | None = None


@dataclass
class StepEvent:
    """What one decoding step produced for answer ``index``: new text and, at the
    end, ``finish_reason`` (``stop`` or ``length``). With ``logprobs`` asked,
    ``logprobs`` holds one :func:`logprob_entry` per token chosen since the last event."""

    index: int
    delta: str
    finish_reason: str | None = None
    n_tokens: int = 0
    logprobs: list[dict[str, Any]] = field(default_factory=list)


def logprob_entry(
    tokenizer: Any, token_id: int, logprob: float, top: list[tuple[int, float]]
) -> dict[str, Any]:
    """One token of OpenAI's ``logprobs.content``: ``{"token", "logprob", "bytes",
    "top_logprobs": [{"token", "logprob", "bytes"}, …]}``.

    Args:
        token_id: the chosen token; its text is ``tokenizer.decode([token_id])`` and
            ``bytes`` that text's UTF-8 bytes.
        logprob: its natural-log probability.
        top: (token id, log probability) of the alternatives, most likely first.
    """

    def one(tok: int, lp: float) -> dict[str, Any]:
        text = tokenizer.decode([tok])
        return {"token": text, "logprob": float(lp), "bytes": list(text.encode("utf-8"))}

    return {**one(token_id, logprob), "top_logprobs": [one(t, lp) for t, lp in top]}


class ServingEngine(Protocol):
    """What the worker needs from an engine."""

    name: str
    architecture: str
    max_context: int
    tokenizer: Any

    def load_adapter(self, name: str, path: Path) -> None: ...

    def unload_adapter(self, name: str) -> None: ...

    def adapter_names(self) -> list[str]: ...

    def stream(
        self, prompt_ids: list[int], adapter: str | None, params: SamplingParams
    ) -> Iterator[StepEvent]: ...

    def prompt_logprobs(
        self, prompt_ids: list[int], adapter: str | None, top: int
    ) -> list[dict[str, Any]]: ...


def read_architecture(model_dir: Path) -> str:
    """``config.json``'s first architecture, such as ``LlamaForCausalLM``."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    archs = cfg.get("architectures") or [cfg.get("model_type", "unknown")]
    return str(archs[0])


def adapter_rank(adapter_dir: Path) -> int:
    """The LoRA rank ``r`` in a PEFT ``adapter_config.json``.

    Raises:
        ValueError: the folder has no readable adapter config.
    """
    p = Path(adapter_dir) / "adapter_config.json"
    try:
        cfg = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{p} is not a readable PEFT adapter config: {exc}") from exc
    return int(cfg.get("r", 0))
