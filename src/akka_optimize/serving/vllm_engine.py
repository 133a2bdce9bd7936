"""The vLLM serving engine: one base model with LoRA enabled (optional extra, GPU).

Selected by the deployment's ``serving.engine: vllm``. ``vllm`` is imported only
here, when the engine is built, so installations without it never import it.
Adapters are served with ``LoRARequest(name, int_id, path)``; ``max_lora_rank``
and ``max_loras`` come from ``serving.maxLoraRank`` and ``serving.maxAdaptersLoaded``.

This engine uses vLLM's synchronous ``LLM`` API: an answer is produced whole and
then emitted as one delta per answer, so first-token latency on this engine
equals the answer's latency.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .engine import (
    SamplingParams,
    StepEvent,
    logprob_entry,
    read_architecture,
    stop_token_ids,
)
from .schema import OpenAIError


class VLLMEngine:
    """vLLM with LoRA (same interface as :class:`~.transformers_engine.TransformersEngine`).

    Raises:
        RuntimeError: vLLM is not installed (``pip install vllm`` on a GPU machine).
    """

    name = "vllm"

    def __init__(
        self,
        base_dir: Path,
        *,
        max_context: int,
        max_adapters: int,
        max_rank: int,
        progress: Any = None,
    ) -> None:
        try:
            import vllm
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise RuntimeError(
                "serving.engine is vllm but vLLM is not installed; install it on a GPU "
                "machine (pip install vllm) or set serving.engine: transformers."
            ) from exc
        say = progress or (lambda _msg: None)
        say("starting vLLM with LoRA enabled")
        self._vllm = vllm
        self.llm = vllm.LLM(
            model=str(base_dir),
            enable_lora=True,
            max_lora_rank=max_rank,
            max_loras=max_adapters,
            max_model_len=max_context,
        )
        self.tokenizer = self.llm.get_tokenizer()
        self.architecture = read_architecture(base_dir)
        self.max_context = max_context
        self.stop_ids = stop_token_ids(self.tokenizer)
        self._adapters: dict[str, tuple[int, Path]] = {}
        self._next_id = 1

    def load_adapter(self, name: str, path: Path) -> None:
        """Register adapter ``name``; vLLM loads it on its first request."""
        if name not in self._adapters:
            self._adapters[name] = (self._next_id, Path(path))
            self._next_id += 1

    def unload_adapter(self, name: str) -> None:
        """Forget adapter ``name`` and ask vLLM to drop it."""
        entry = self._adapters.pop(name, None)
        if entry is not None:
            try:
                self.llm.llm_engine.remove_lora(entry[0])
            except Exception:  # noqa: BLE001 - not loaded yet is fine
                pass

    def adapter_names(self) -> list[str]:
        """Adapters this engine serves."""
        return list(self._adapters)

    def stream(
        self, prompt_ids: list[int], adapter: str | None, params: SamplingParams
    ) -> Iterator[StepEvent]:
        """Generate ``params.n`` answers; one event per answer (see module docstring)."""
        from vllm.inputs import TokensPrompt
        from vllm.lora.request import LoRARequest

        guided: dict[str, Any] = {}
        if params.choice:
            guided = _guided_choice(params.choice)
        sp = self._vllm.SamplingParams(
            **guided,
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_tokens,
            seed=params.seed,
            stop=params.stop or None,
            stop_token_ids=sorted(self.stop_ids),
            frequency_penalty=params.frequency_penalty,
            presence_penalty=params.presence_penalty,
            logit_bias=params.logit_bias,
            logprobs=params.logprobs,
        )
        lora = None
        if adapter is not None:
            lid, path = self._adapters[adapter]
            lora = LoRARequest(adapter, lid, str(path))
        (res,) = self.llm.generate(
            [TokensPrompt(prompt_token_ids=prompt_ids)], sp, lora_request=lora, use_tqdm=False
        )
        for i, out in enumerate(res.outputs):
            reason = "length" if out.finish_reason == "length" else "stop"
            lps = self._logprobs(out, params.logprobs)
            yield StepEvent(i, out.text, reason, len(out.token_ids), lps)

    def prompt_logprobs(
        self, prompt_ids: list[int], adapter: str | None, top: int
    ) -> list[dict[str, Any]]:
        """Not served on this engine yet.

        Raises:
            OpenAIError: 400 naming ``echo``.
        """

        raise OpenAIError(
            "echo with logprobs (prompt scoring) is served by the transformers engine only; "
            "serve this model with serving.engine: transformers.",
            param="echo",
            code="unsupported_parameter",
        )

    def _logprobs(self, out: Any, top: int | None) -> list[dict[str, Any]]:
        """vLLM's per-token ``{token id: Logprob}`` maps (the chosen token plus the ``top``
        most likely, by ``rank``) as :func:`~.engine.logprob_entry` entries; stop tokens
        are left out, as the transformers engine leaves them out."""
        if top is None or not out.logprobs:
            return []
        entries = []
        for tok, found in zip(out.token_ids, out.logprobs, strict=False):
            if tok in self.stop_ids:
                continue
            best = sorted(
                ((t, lp.logprob) for t, lp in found.items() if lp.rank and lp.rank <= top),
                key=lambda x: -x[1],
            )
            entries.append(logprob_entry(self.tokenizer, tok, found[tok].logprob, best[:top]))
        return entries


def _guided_choice(choice: list[str]) -> dict[str, Any]:
    """vLLM's sampling option that limits an answer to ``choice``: ``structured_outputs``
    (vLLM ≥ 0.10.2) or ``guided_decoding`` (earlier releases).

    Raises:
        RuntimeError: this vLLM has neither.
    """
    try:
        from vllm.sampling_params import StructuredOutputsParams  # type: ignore[attr-defined]

        return {"structured_outputs": StructuredOutputsParams(choice=list(choice))}
    except ImportError:
        pass
    try:
        from vllm.sampling_params import GuidedDecodingParams  # type: ignore[attr-defined]

        return {"guided_decoding": GuidedDecodingParams(choice=list(choice))}
    except ImportError as exc:
        raise RuntimeError(
            "guided_choice needs vLLM's structured outputs, which this vLLM lacks; "
            "upgrade vLLM or serve with serving.engine: transformers."
        ) from exc
