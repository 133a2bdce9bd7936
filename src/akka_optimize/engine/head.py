"""The output head, computed only where a token is scored, in chunks.

A causal LM spends ``T × vocabulary`` multiply-adds per pass on its output head and
keeps ``T × vocabulary`` logits for backward. Only positions whose *next* token is
scored need them, so the engine runs the model's body, gathers those S hidden states,
and projects ``head.chunk_tokens`` of them at a time (seeds/001 "head.chunk_tokens").
With gradients, each chunk's loss is back-propagated into the gathered hidden states
straight away, so at most one chunk of logits is alive; the body then receives the
summed hidden-state gradient in one backward. The loss is a sum of per-token terms,
so chunking changes neither the loss nor the gradients (tests/engine: chunked == full).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn


def body_and_head(causal_lm: nn.Module) -> tuple[nn.Module, nn.Module, float | None]:
    """Split a transformers causal LM into (body, output head, final-logit softcap).

    Raises:
        ValueError: the model has no ``.model`` body or no output embeddings.
    """
    body = getattr(causal_lm, "model", None)
    head = causal_lm.get_output_embeddings()
    if body is None or head is None:
        raise ValueError(f"{type(causal_lm).__name__} has no separate body and output head")
    return body, head, final_logit_softcap(causal_lm, body, head)


def final_logit_softcap(
    causal_lm: nn.Module, body: nn.Module | None = None, head: nn.Module | None = None
) -> float | None:
    """The ``final_logit_softcapping`` the model's own forward applies, or None.

    The top-level config (Gemma 2, Gemma 3 text) is what its class reads. A cap kept only
    in ``text_config`` is read by some multimodal classes (Gemma 4) and not by others
    (Gemma 3 4B in this transformers release), so with ``body`` and ``head`` given it is
    decided by one 4-token forward: the cap is used when it brings ``head(body(x))``
    closer to ``model(x).logits``. The engine then scores what the model scores.
    """
    config = causal_lm.config
    cap = getattr(config, "final_logit_softcapping", None)
    if cap is not None:
        return cap
    get_text = getattr(config, "get_text_config", None)
    text = get_text() if callable(get_text) else None
    cap = getattr(text, "final_logit_softcapping", None) if text is not None else None
    if cap is None or body is None or head is None:
        return cap
    ids = torch.arange(4, device=head.weight.device)[None]
    was_training = causal_lm.training
    causal_lm.eval()
    try:
        with torch.no_grad():
            logits = causal_lm(input_ids=ids, use_cache=False).logits.float()
            raw = head(body(input_ids=ids, use_cache=False).last_hidden_state).float()
    finally:
        causal_lm.train(was_training)
    capped = torch.tanh(raw / cap) * cap
    return cap if (logits - capped).abs().max() < (logits - raw).abs().max() else None


def head_logprobs(
    head: nn.Module, hidden_SH: Tensor, targets_S: Tensor, cap: float | None
) -> Tensor:
    """log p(targetᵢ | hiddenᵢ) for S positions: float32 tensor of shape [S]."""
    logits_SV = head(hidden_SH).float()
    if cap:
        logits_SV = torch.tanh(logits_SV / cap) * cap
    return torch.log_softmax(logits_SV, dim=-1).gather(1, targets_S[:, None]).squeeze(1)


def chunked_loss(
    head: nn.Module,
    hidden_SH: Tensor,
    targets_S: Tensor,
    cap: float | None,
    chunk: int,
    loss_of: Callable[[Tensor, slice], Tensor],
    *,
    backward: bool,
) -> tuple[float, Tensor]:
    """Sum ``loss_of(logprobs_chunk, slice)`` over chunks of ``chunk`` positions.

    Args:
        hidden_SH: gathered hidden states [S, H] (still attached to the body's graph
            when ``backward``).
        targets_S: int64 target ids [S].
        loss_of: maps a chunk's log-probs (float64, so sums over many tokens keep
            float32 precision per token) and its slice of [0, S) to a scalar sum.
        backward: back-propagate through the head and then into the body.

    Returns:
        (loss sum as a Python float, detached float32 log-probs [S]).
    """
    leaf = hidden_SH.detach().requires_grad_(backward)
    total = torch.zeros((), dtype=torch.float64, device=hidden_SH.device)
    parts: list[Tensor] = []
    for start in range(0, hidden_SH.shape[0], chunk):
        sl = slice(start, start + chunk)
        lp = head_logprobs(head, leaf[sl], targets_S[sl], cap).double()  # sums kept in float64
        loss = loss_of(lp, sl)
        if backward:
            loss.backward()
        total = total + loss.detach()
        parts.append(lp.detach().float())
    if backward and leaf.grad is not None:
        hidden_SH.backward(leaf.grad)
    return float(total), torch.cat(parts) if parts else torch.zeros(0)
