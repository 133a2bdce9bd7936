"""The transformers serving engine: one base model plus PEFT adapters on one device.

The default engine (CPU and GPU), behind :class:`akka_optimize.serving.engine.ServingEngine`;
concurrent requests for one adapter share a KV-cached decoding loop
(:mod:`akka_optimize.serving.batching`).
"""

from __future__ import annotations

import inspect
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .batching import Request, decode_batch, token_logprobs
from .engine import (
    SamplingParams,
    StepEvent,
    logprob_entry,
    read_architecture,
    stop_token_ids,
)

#: ``serving.precision`` values (:class:`TransformersEngine`'s ``precision``).
PRECISIONS = ("auto", "bf16", "fp32")


class TransformersEngine:
    """A transformers model plus PEFT adapters on one device.

    Args:
        base_dir: a Hugging Face model folder (config, safetensors, tokenizer).
        max_context: the longest prompt + answer served, in tokens (capped by the
            model's ``max_position_embeddings``).
        max_adapters: adapters resident at once; the least recently used one is
            unloaded (and reloaded from its folder on its next request).
        device: ``cuda`` when available, else ``cpu``, unless given.
        precision: the base weights' dtype and the dtype decoding computes in
            (``serving.precision``): ``bf16``, ``fp32``, or ``auto`` (bf16 on CUDA, fp32
            on CPU). bf16 halves the bytes each decoding step reads (on a CPU with
            bf16 instructions about 2× the fp32 tokens/s); answers then follow bf16
            rounding.
        batch_window_s: how long the batch thread waits after a request arrives
            for others to join its batch (seconds).
        max_batch_rows: most answers decoded in one batch.
        merge_adapters: fold the adapter of the batch being decoded into the base
            weights (``W + scaling · B·A``, PEFT's ``merge``) so decoding with an adapter
            costs what decoding the base model costs, instead of two extra small matrix
            products per adapted module per token. The untouched base weights of the
            adapted modules are kept in a copy and copied back (exactly) before another
            adapter or the base model is served; switching costs one merge. Answers
            equal the unmerged ones up to float rounding (the post-deploy check allows
            for a rounding tie, :mod:`akka_optimize.serving.check`). Costs memory for
            that copy (about the size of the adapted modules' weights).
        lean_decode: decode the tokens after the prompt with
            :class:`~akka_optimize.engine.lean_decode.LeanDecoder` where the
            architecture allows (same answers, less overhead per token).

    Raises:
        ValueError: ``precision`` is not ``auto``, ``bf16`` or ``fp32``.
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
        batch_window_s: float = 0.02,
        max_batch_rows: int = 32,
        merge_adapters: bool = True,
        precision: str = "auto",
        lean_decode: bool = True,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        say = progress or (lambda _msg: None)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
        if precision == "auto":
            precision = "bf16" if self.device == "cuda" else "fp32"
        self.precision = precision
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        self.lean_decode = lean_decode
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
        self._cv = threading.Condition()
        self._queue: list[Request] = []
        self._thread: threading.Thread | None = None
        self.batch_window_s = batch_window_s
        self.max_batch_rows = max_batch_rows
        self.batch_sizes: list[int] = []
        """Answers (rows) decoded together, per batch, in order: what batching achieved."""
        self.lean_batches = 0
        """Batches decoded by the lean steps (:mod:`akka_optimize.engine.lean_decode`)."""
        self.merge_adapters = merge_adapters
        self.merged: str | None = None
        self._pristine: dict[int, tuple[Any, Any, Any]] = {}

    # adapters -------------------------------------------------------------------
    def load_adapter(self, name: str, path: Path) -> None:
        """Register adapter ``name`` from a PEFT folder and make it resident."""
        with self.lock:
            self._restore()
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
            self._restore()
            self._paths.pop(name, None)
            if name in self._loaded:
                rest = [a for a in self._loaded if a != name]
                if rest:
                    self.model.set_adapter(rest[0])
                    self.model.delete_adapter(name)
                else:
                    self.model = self.model.unload()
                    self.base = self.model
                    self._pristine.clear()
                del self._loaded[name]

    def adapter_names(self) -> list[str]:
        """Adapters this engine serves (resident or reloadable)."""
        return list(self._paths)

    def resident_adapters(self) -> list[str]:
        """Adapters in memory now, least recently used first."""
        return list(self._loaded)

    # merging ------------------------------------------------------------------
    def _lora_layers(self) -> list[Any]:
        from peft.tuners.lora import LoraLayer

        return [m for m in self.model.modules() if isinstance(m, LoraLayer)]

    def _restore(self) -> None:
        """Copy the untouched base weights back into every merged module (exact)."""
        if self.merged is None:
            return
        for layer in self._lora_layers():
            saved = self._pristine.get(id(layer))
            if saved is not None and layer.merged_adapters:
                base, weight, bias = saved
                base.weight.data.copy_(weight)
                if bias is not None:
                    base.bias.data.copy_(bias)
                layer.merged_adapters.clear()
        self.merged = None

    def _merge(self, adapter: str) -> None:
        """Fold ``adapter`` into the base weights (after :meth:`_restore`)."""
        for layer in self._lora_layers():
            if adapter not in layer.lora_A:
                continue
            if id(layer) not in self._pristine:
                base = layer.get_base_layer()
                bias = getattr(base, "bias", None)
                self._pristine[id(layer)] = (
                    base,
                    base.weight.detach().clone(),
                    bias.detach().clone() if bias is not None else None,
                )
            layer.merge(adapter_names=[adapter])
        self.merged = adapter

    def _select(self, adapter: str | None) -> Any:
        """Make the model compute with ``adapter`` (None: the base model); returns the
        context to decode in. Call with :attr:`lock` held."""
        import contextlib

        if self.merge_adapters:
            if self.merged != adapter:
                self._restore()
                if adapter is not None:
                    self._ensure_loaded(adapter)
                    self.model.set_adapter(adapter)  # before merging: PEFT unmerges after
                    self._merge(adapter)
            elif adapter is not None:
                self._loaded.move_to_end(adapter)
        elif adapter is not None:
            self._ensure_loaded(adapter)
            self.model.set_adapter(adapter)
        if adapter is None and self.model is not self.base:
            return self.model.disable_adapter()
        return contextlib.nullcontext()

    # generation ---------------------------------------------------------------
    def stream(
        self, prompt_ids: list[int], adapter: str | None, params: SamplingParams
    ) -> Iterator[StepEvent]:
        """Generate ``params.n`` answers to ``prompt_ids`` with ``adapter`` (None: the
        base model), yielding text deltas as tokens are chosen.

        The request joins the next batch for the same adapter (see
        :mod:`akka_optimize.serving.batching`); closing the iterator early cancels it.
        """
        req = Request(list(prompt_ids), adapter, params)
        with self._cv:
            self._queue.append(req)
            self._cv.notify()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._batch_loop, daemon=True)
                self._thread.start()
        try:
            while True:
                item = req.out.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            req.cancelled = True

    def prompt_logprobs(
        self, prompt_ids: list[int], adapter: str | None, top: int
    ) -> list[dict[str, Any]]:
        """The log probability of each prompt token after the first given the tokens
        before it, with its ``top`` most likely alternatives (one
        :func:`~.engine.logprob_entry` per token from the second on): one forward pass of
        ``adapter`` (None: the base model) over the prompt, log-softmax in float32."""
        import torch

        ids = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
        with self.lock, self._select(adapter), torch.inference_mode():
            logits = self.model(input_ids=ids).logits[0, :-1].float()
        found = token_logprobs(logits, ids[0, 1:], top)
        return [
            logprob_entry(self.tokenizer, t, mine, alts)
            for t, (mine, alts) in zip(prompt_ids[1:], found, strict=True)
        ]

    def _next_batch(self) -> list[Request]:
        with self._cv:
            while not self._queue:
                self._cv.wait()
        time.sleep(self.batch_window_s)  # let requests sent together join one batch
        with self._cv:
            first = self._queue[0]
            batch, rows = [], 0
            for r in list(self._queue):
                if r.adapter == first.adapter and (
                    not batch or rows + r.params.n <= self.max_batch_rows
                ):
                    batch.append(r)
                    rows += r.params.n
                    self._queue.remove(r)
            return batch

    def _batch_loop(self) -> None:
        while True:
            batch = self._next_batch()
            adapter = batch[0].adapter
            self.batch_sizes.append(sum(r.params.n for r in batch))
            try:
                with self.lock:
                    with self._select(adapter):
                        lean = decode_batch(
                            self.model,
                            self.tokenizer,
                            self.stop_ids,
                            self._cache_kw,
                            self.device,
                            batch,
                            lean=self.lean_decode,
                        )
                    self.lean_batches += int(lean)
            except BaseException as exc:  # every waiting request hears about it
                for r in batch:
                    r.out.put(exc)
            for r in batch:
                r.out.put(None)
