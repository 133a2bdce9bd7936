"""The rollouts of a reinforcement run on vLLM (issue 52 item 6): on a CUDA device with
vLLM installed, the samples of each update are drawn by one ``vllm.LLM`` holding the
frozen base model, with the adapter of the version that samples loaded as a LoRA.

Versioning (what is sent when):

1. :class:`VLLMRollout` builds ``vllm.LLM(model=base, enable_lora=True,
   max_lora_rank=…, gpu_memory_utilization=execution.rollout.memoryShare, …)`` once per
   run attempt, with the plan's ``rollout.max_num_seqs``,
   ``rollout.max_num_batched_tokens`` and ``rollout.enable_prefix_caching`` (vLLM's own
   engine arguments of those names).
2. After every optimizer step, from the main thread (DATA-AND-TRAINING-RULES.md rule 20),
   :meth:`VLLMRollout.publish` writes the session's adapter in PEFT format
   (``adapter_config.json`` + ``adapter_model.safetensors``) to a folder of its own,
   ``v<step>``: version ``v`` is the adapter after ``v`` updates.
3. :meth:`VLLMRollout.draw` samples an update with version ``v`` through a fresh
   ``LoRARequest("rollout-v<v>", v + 1, <its folder>)``. vLLM caches adapters by their
   integer id, so a new id per version is what makes it load the new weights: reusing one
   id would serve the first adapter forever, silently (veRL issue 7495, TRL issue 5312).
   Versions only grow, so the folders of older versions are removed once a newer one
   sampled.

The sampling parameters are the loop's: ``n`` = ``samplesPerPrompt``, ``max_tokens`` =
``maxNewTokens``, ``temperature``, top-p 1, the run's stop tokens, one seed per group
(from the run's seed, the update and the group, as the lean sampler's generators), and
``logprobs=0`` — the sampled token's log-probability only. The engine is built with
``logprobs_mode="processed_logprobs"`` so that log-probability is ``log_softmax(logits /
temperature)``, the lean sampler's ``log q`` (vLLM's default is the raw logits' log-softmax,
before the temperature). Each completion becomes a :class:`~.rl_settings.Sample` with its
tokens (a final stop token included, as the lean sampler keeps it), those log-probs and
the version, so the gap metrics, the rollout correction and the staleness bound work
unchanged.

``vllm`` is imported only by :func:`load_vllm`; a test passes its own module object with
``LLM``, ``SamplingParams`` and ``LoRARequest``.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from .errors import EngineError
from .rl.settings import RLPrompt, RLSettings, Sample

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ``max_lora_rank`` values vLLM accepts; the run's rank is rounded up to one."""

VLLM_DTYPES = {"torch.bfloat16": "bfloat16", "torch.float16": "float16", "torch.float32": "float32"}


def load_vllm() -> Any | None:
    """vLLM's offline interface (``LLM``, ``SamplingParams``, ``LoRARequest``), or None
    when vLLM is not installed."""
    try:
        import vllm
        from vllm.lora.request import LoRARequest
    except ImportError:
        return None
    return SimpleNamespace(
        LLM=vllm.LLM, SamplingParams=vllm.SamplingParams, LoRARequest=LoRARequest
    )


def group_seed(seed: int, update: int, group: int) -> int:
    """The vLLM seed of one group of 1-based ``update`` (the lean sampler's per-group
    generator seed, :func:`akka_optimize.engine.rl.step.draw`, kept below 2^31)."""
    return ((seed * 1_000_003 + update) * 65_537 + group) % (2**31 - 1)


class VLLMRollout:
    """The run's vLLM sampler (see the module docstring).

    Args:
        api: :func:`load_vllm`'s interface (or a test's).
        session: the training session (its adapter rank, dtype and current step).
        model_dir: the base model's folder (vLLM loads it itself).
        settings: the loop's settings; ``memory_share`` is the share of the device's
            memory vLLM takes (``execution.rollout.memoryShare``; 0.5 when unset).
        work: a folder for the versions' adapters.
        max_model_len: longest prompt plus completion, in tokens (``config.maxSeqLength``).
    """

    def __init__(
        self,
        api: Any,
        session: Any,
        model_dir: Path,
        settings: RLSettings,
        work: Path,
        max_model_len: int | None = None,
    ) -> None:
        rank = int(session.cfg.lora_rank)
        top = [r for r in VLLM_LORA_RANKS if r >= rank]
        if not top:
            raise EngineError(
                f"vLLM serves LoRA ranks up to {VLLM_LORA_RANKS[-1]}; this run trains rank {rank}.",
                field="config.hyperparams.lora.rank",
            )
        self.api, self.session, self.work = api, session, Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        share = settings.memory_share if settings.memory_share is not None else 0.5
        extra = {"max_model_len": max_model_len} if max_model_len else {}
        self.llm = api.LLM(
            model=str(model_dir),
            enable_lora=True,
            max_lora_rank=top[0],
            max_loras=1,
            gpu_memory_utilization=float(share),
            dtype=VLLM_DTYPES.get(str(session.dtype), "auto"),
            seed=settings.seed,
            logprobs_mode="processed_logprobs",
            max_num_seqs=settings.max_num_seqs,
            max_num_batched_tokens=settings.max_num_batched_tokens,
            enable_prefix_caching=settings.prefix_caching,
            **extra,
        )
        self._versions: dict[int, Path] = {}
        self._lock = threading.Lock()

    def publish(self, session: Any) -> Path:
        """Write the session's adapter as version ``session.step`` (call from the main
        thread after the optimizer step); returns its folder."""
        folder = session.save_adapter(self.work / f"v{session.step}")
        with self._lock:
            self._versions[session.step] = folder
        return folder

    def lora(self, version: int) -> Any:
        """The ``LoRARequest`` of ``version``: name ``rollout-v<version>``, integer id
        ``version + 1`` (never reused: vLLM would serve its cached adapter), its folder.

        Raises:
            EngineError: the version was never published.
        """
        with self._lock:
            folder = self._versions.get(version)
        if folder is None:
            raise EngineError(f"adapter version {version} was not published to the sampler.")
        return self.api.LoRARequest(f"rollout-v{version}", version + 1, str(folder))

    def draw(
        self,
        prompts: list[RLPrompt],
        settings: RLSettings,
        stop_ids: set[int],
        update: int,
        version: int,
    ) -> tuple[list[Sample], float]:
        """Step 1 of ``update`` on vLLM: ``samplesPerPrompt`` completions of every prompt
        with the adapter of ``version``, in one ``generate`` call. Returns the samples
        (group ``g`` for ``prompts[g]``) and the seconds it took.

        Raises:
            EngineError: ``version`` unpublished, or vLLM answered without a completion's
                log-probabilities or with another number of completions.
        """
        params = [
            self.api.SamplingParams(
                n=settings.samples_per_prompt,
                max_tokens=settings.max_new_tokens,
                temperature=settings.temperature,
                top_p=1.0,
                stop_token_ids=sorted(stop_ids),
                seed=group_seed(settings.seed, update, g),
                logprobs=0,
            )
            for g in range(len(prompts))
        ]
        lora = self.lora(version)
        t0 = time.perf_counter()
        outs = self.llm.generate(
            [{"prompt_token_ids": list(p.prompt_ids)} for p in prompts],
            params,
            lora_request=lora,
            use_tqdm=False,
        )
        seconds = time.perf_counter() - t0
        samples = [
            Sample(g, *_completion(out), version)
            for g, res in enumerate(outs)
            for out in _outputs(res, settings.samples_per_prompt)
        ]
        self._forget_before(version)
        return samples, seconds

    def _forget_before(self, version: int) -> None:
        """Remove the folders of versions older than ``version`` (never sampled again)."""
        with self._lock:
            old = [v for v in self._versions if v < version]
            folders = [self._versions.pop(v) for v in old]
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)


def _outputs(res: Any, n: int) -> list[Any]:
    """A ``RequestOutput``'s ``n`` completions.

    Raises:
        EngineError: another number of completions.
    """
    outs = list(res.outputs)
    if len(outs) != n:
        raise EngineError(f"vLLM returned {len(outs)} completions of a prompt, not {n}.")
    return outs


def _completion(out: Any) -> tuple[list[int], list[float]]:
    """A ``CompletionOutput``'s tokens and the sampled tokens' log-probs: ``out.logprobs``
    holds one ``{token id: Logprob}`` per token, the sampled token among them.

    Raises:
        EngineError: no log-probabilities, or one missing for a sampled token.
    """
    tokens = [int(t) for t in out.token_ids]
    if out.logprobs is None or len(out.logprobs) != len(tokens):
        raise EngineError("vLLM answered a rollout without its per-token log-probabilities.")
    lps = []
    for tok, found in zip(tokens, out.logprobs, strict=True):
        if tok not in found:
            raise EngineError(f"vLLM gave no log-probability for sampled token {tok}.")
        lps.append(float(found[tok].logprob))
    return tokens, lps


NO_VLLM = (
    "the rollouts of this run are sampled by the training session itself (the lean "
    "sampler): vLLM is not installed on this CUDA machine (pip install vllm) and samples "
    "much faster with the adapter loaded per update"
)
"""The ``warning`` event's message of a run on CUDA without vLLM."""

HIGH_RANK = (
    "the rollouts of this run are sampled by the training session itself (the lean "
    "sampler): its LoRA rank {rank} is above the {top} vLLM serves"
)
"""The ``warning`` event's message of a run on CUDA whose rank vLLM cannot serve."""


def vllm_rollout(
    session: Any,
    settings: RLSettings,
    model_dir: Path,
    work: Path,
    emit: Any,
    max_model_len: int | None = None,
) -> VLLMRollout | None:
    """The run's rollout backend: a :class:`VLLMRollout` on one CUDA device with vLLM
    installed; None (the lean sampler of :mod:`akka_optimize.engine.rollout`) on CPU, on
    several ranks, or on CUDA without vLLM or with a LoRA rank above vLLM's largest — the
    last two emit a ``warning`` event (``code: rollout_without_vllm``, the message says
    which) and the run goes on."""
    if session.device.type != "cuda" or session.world > 1:
        return None
    api = load_vllm()
    rank = int(session.cfg.lora_rank)
    if api is None or rank > VLLM_LORA_RANKS[-1]:
        why = NO_VLLM if api is None else HIGH_RANK.format(rank=rank, top=VLLM_LORA_RANKS[-1])
        emit({"type": "warning", "code": "rollout_without_vllm", "step": 0, "message": why})
        return None
    return VLLMRollout(api, session, model_dir, settings, work, max_model_len)
