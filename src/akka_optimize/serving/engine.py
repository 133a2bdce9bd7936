"""Serving engines behind one interface (issue 8 "Serving engines").

An engine holds one resident base model and any number of LoRA adapters of it,
and generates for one request at a time with the base model or a named adapter:

- :class:`TransformersEngine` (default, CPU and GPU): PEFT multi-adapter —
  ``load_adapter`` per adapter name, ``set_adapter`` per request, and the base
  model under ``disable_adapter()``; a KV-cached decoding loop so answers stream.
- :class:`~akka_optimize.serving.vllm_engine.VLLMEngine`: vLLM with LoRA enabled,
  imported only when ``serving.engine`` is ``vllm``.

The stop set is the tokenizer's EOS ids plus the chat template's end-of-turn
marker (:func:`stop_token_ids`).
"""

from __future__ import annotations

import inspect
import json
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

#: End-of-turn markers of common chat templates; the ones a template writes count as stops.
END_OF_TURN_MARKERS = (
    "<|im_end|>",
    "<|eot_id|>",
    "<end_of_turn>",
    "<|end|>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "</s>",
)


@dataclass
class SamplingParams:
    """How to sample one request.

    ``temperature`` 0 is greedy (argmax); ``top_p`` in (0, 1] keeps the smallest set
    of tokens whose probability reaches it; ``seed`` makes sampling repeatable;
    ``n`` answers are sampled in one batch; generation of an answer ends at a stop
    token, at a ``stop`` string (not included in the text) or after ``max_tokens``.
    """

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    n: int = 1
    stop: list[str] = field(default_factory=list)


@dataclass
class StepEvent:
    """What one decoding step produced for answer ``index``: new text and, at the
    end, ``finish_reason`` (``stop`` or ``length``)."""

    index: int
    delta: str
    finish_reason: str | None = None
    n_tokens: int = 0


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


def stop_token_ids(tokenizer: Any, generation_config: dict[str, Any] | None = None) -> set[int]:
    """The stop set: EOS ids of the tokenizer and generation config, plus the
    end-of-turn marker the chat template writes (issue 8 "stop set")."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    eos = (generation_config or {}).get("eos_token_id")
    for e in eos if isinstance(eos, list) else [eos]:
        if isinstance(e, int):
            ids.add(e)
    template = getattr(tokenizer, "chat_template", None) or ""
    if isinstance(template, dict):
        template = " ".join(template.values())
    vocab = tokenizer.get_vocab()
    for marker in END_OF_TURN_MARKERS:
        if marker in template and marker in vocab:
            ids.add(int(vocab[marker]))
    return ids


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


class TransformersEngine:
    """A transformers model plus PEFT adapters on one device.

    Args:
        base_dir: a Hugging Face model folder (config, safetensors, tokenizer).
        max_context: the longest prompt + answer served, in tokens (capped by the
            model's ``max_position_embeddings``).
        max_adapters: adapters resident at once; the least recently used one is
            unloaded (and reloaded from its folder on its next request).
        device: ``cuda`` when available, else ``cpu``, unless given; weights are
            bf16 on CUDA and fp32 on CPU.
    """

    name = "transformers"

    def __init__(
        self,
        base_dir: Path,
        *,
        max_context: int = 8192,
        max_adapters: int = 8,
        device: str | None = None,
        progress: Any = None,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        say = progress or (lambda _msg: None)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.bfloat16 if self.device == "cuda" else torch.float32
        say("loading the tokenizer")
        self.tokenizer = AutoTokenizer.from_pretrained(base_dir)
        say("loading the base model weights")
        model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=dtype)
        self.model: Any = model.to(self.device).eval()
        self.base = self.model
        self.architecture = read_architecture(base_dir)
        limit = getattr(model.config, "max_position_embeddings", None) or max_context
        self.max_context = min(int(max_context), int(limit))
        gen = model.generation_config.to_dict() if model.generation_config else {}
        self.stop_ids = stop_token_ids(self.tokenizer, gen)
        self.max_adapters = max_adapters
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._paths: dict[str, Path] = {}
        self._loaded: OrderedDict[str, None] = OrderedDict()
        self.lock = threading.Lock()

    # adapters -------------------------------------------------------------------
    def load_adapter(self, name: str, path: Path) -> None:
        """Register adapter ``name`` from a PEFT folder and make it resident."""
        with self.lock:
            self._paths[name] = Path(path)
            self._ensure_loaded(name)

    def _ensure_loaded(self, name: str) -> None:
        from peft import PeftModel

        if name in self._loaded:
            self._loaded.move_to_end(name)
            return
        path = self._paths[name]
        if self.model is self.base:
            self.model = PeftModel.from_pretrained(self.base, str(path), adapter_name=name)
            self.model.eval()
        else:
            self.model.load_adapter(str(path), adapter_name=name)
        self._loaded[name] = None
        while len(self._loaded) > self.max_adapters:
            old = next(iter(self._loaded))
            self.model.set_adapter(name)
            self.model.delete_adapter(old)
            del self._loaded[old]

    def unload_adapter(self, name: str) -> None:
        """Forget adapter ``name`` (a no-op when unknown)."""
        with self.lock:
            self._paths.pop(name, None)
            if name in self._loaded:
                rest = [a for a in self._loaded if a != name]
                if rest:
                    self.model.set_adapter(rest[0])
                    self.model.delete_adapter(name)
                else:
                    self.model = self.model.unload()
                    self.base = self.model
                del self._loaded[name]

    def adapter_names(self) -> list[str]:
        """Adapters this engine serves (resident or reloadable)."""
        return list(self._paths)

    def resident_adapters(self) -> list[str]:
        """Adapters in memory now, least recently used first."""
        return list(self._loaded)

    # generation ---------------------------------------------------------------
    def stream(
        self, prompt_ids: list[int], adapter: str | None, params: SamplingParams
    ) -> Iterator[StepEvent]:
        """Generate ``params.n`` answers to ``prompt_ids`` with ``adapter`` (None: the
        base model), yielding text deltas as tokens are chosen.

        Holds the engine lock until the generator is exhausted or closed.
        """
        import contextlib

        with self.lock:
            if adapter is not None:
                self._ensure_loaded(adapter)
                self.model.set_adapter(adapter)
                ctx: Any = contextlib.nullcontext()
            elif self.model is not self.base:
                ctx = self.model.disable_adapter()
            else:
                ctx = contextlib.nullcontext()
            with ctx:
                yield from self._decode(prompt_ids, params)

    def _decode(self, prompt_ids: list[int], params: SamplingParams) -> Iterator[StepEvent]:
        import torch

        n = params.n
        gen = torch.Generator(device=self.device)
        gen.manual_seed(params.seed if params.seed is not None else torch.seed())
        ids = torch.tensor([prompt_ids] * n, dtype=torch.long, device=self.device)
        texts = [""] * n
        tokens: list[list[int]] = [[] for _ in range(n)]
        sent = [0] * n
        done = [False] * n
        hold = max((len(s) for s in params.stop), default=1) - 1
        past = None
        with torch.inference_mode():
            for step in range(params.max_tokens):
                kw = {self._cache_kw: past} if past is not None else {}
                out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1, **kw)
                past = out.cache if self._cache_kw == "cache" else out.past_key_values
                nxt = self._pick(out.logits[:, -1, :].float(), params, gen)
                last = step == params.max_tokens - 1
                for i in range(n):
                    if done[i]:
                        continue
                    tok = int(nxt[i])
                    reason = None
                    if tok in self.stop_ids:
                        reason = "stop"
                    else:
                        tokens[i].append(tok)
                        texts[i] = self.tokenizer.decode(tokens[i], skip_special_tokens=True)
                        cut = _first_stop(texts[i], params.stop)
                        if cut is not None:
                            texts[i], reason = texts[i][:cut], "stop"
                        elif last:
                            reason = "length"
                    if reason:
                        done[i] = True
                        used = len(tokens[i]) + (reason == "stop" and tok in self.stop_ids)
                        yield StepEvent(i, texts[i][sent[i] :], reason, int(used))
                        sent[i] = len(texts[i])
                    else:
                        safe = len(texts[i]) - hold
                        if texts[i].endswith("\ufffd"):
                            safe = min(safe, len(texts[i]) - 1)
                        if safe > sent[i]:
                            yield StepEvent(i, texts[i][sent[i] : safe])
                            sent[i] = safe
                if all(done):
                    return
                ids = nxt.view(n, 1)

    @staticmethod
    def _pick(logits: Any, params: SamplingParams, gen: Any) -> Any:
        import torch

        if params.temperature == 0:
            return logits.argmax(dim=-1)
        probs = torch.softmax(logits / params.temperature, dim=-1)
        if params.top_p < 1.0:
            sp, si = probs.sort(dim=-1, descending=True)
            keep = sp.cumsum(dim=-1) - sp < params.top_p
            sp = sp * keep
            probs = torch.zeros_like(probs).scatter(-1, si, sp)
        return torch.multinomial(probs, 1, generator=gen).view(-1)


def _first_stop(text: str, stops: list[str]) -> int | None:
    hits = [text.find(s) for s in stops if s and s in text]
    return min(hits) if hits else None


def make_engine(
    engine: str,
    base_dir: Path,
    *,
    max_context: int,
    max_adapters: int,
    max_rank: int,
    progress: Any = None,
) -> ServingEngine:
    """The engine named by the deployment's ``serving.engine``.

    Raises:
        RuntimeError: ``vllm`` was asked for and is not installed.
    """
    if engine == "vllm":
        from .vllm_engine import VLLMEngine

        return VLLMEngine(
            base_dir,
            max_context=max_context,
            max_adapters=max_adapters,
            max_rank=max_rank,
            progress=progress,
        )
    return TransformersEngine(
        base_dir, max_context=max_context, max_adapters=max_adapters, progress=progress
    )
