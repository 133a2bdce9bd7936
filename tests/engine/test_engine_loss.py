"""The loss an update reports and the gradients it applies (behaviours.md 1, 2, 5)."""

from __future__ import annotations

import math

import pytest
import torch
from engine_testkit import adapter_grads, fp32_config, random_rows, row

from akka_optimize.data.types import Example, pack_examples
from akka_optimize.engine.errors import EngineError
from akka_optimize.engine.session.training import TrainingSession
from akka_optimize.engine.sft import run_sft, update_passes

ONE = row([11, 12, 13, 14], [15], 1)  # 1 supervised token
NINE = row([21, 22], [31, 32, 33, 34, 35, 36, 37, 38, 39], 2)  # 9 supervised tokens


def _update_grads(model_dir, micro_batch, accumulation):
    cfg = fp32_config(micro_batch=micro_batch, gradient_accumulation=accumulation, shuffle=False)
    session = TrainingSession(model_dir, cfg)
    _, _, passes = update_passes([ONE, NINE], cfg, 1)
    assert len(passes) == accumulation
    res = [session.forward_backward([p]) for p in passes]
    tokens = sum(r.supervised_tokens for r in res)
    loss = sum(r.loss_sum for r in res) / tokens
    grads = {n: g / tokens for n, g in adapter_grads(session).items()}
    metrics = session.optim_step()
    return loss, grads, metrics, session


def test_loss_and_gradients_do_not_depend_on_how_an_update_is_split(tiny_model_dir):
    loss_a, grads_a, m_a, _ = _update_grads(tiny_model_dir, 2, 1)
    loss_b, grads_b, m_b, _ = _update_grads(tiny_model_dir, 1, 2)
    assert m_a["supervisedTokens"] == m_b["supervisedTokens"] == 10
    assert m_a["loss"] == pytest.approx(loss_a, abs=1e-9)
    assert abs(m_a["loss"] - m_b["loss"]) < 1e-6
    assert grads_a.keys() == grads_b.keys() and grads_a
    for n in grads_a:
        assert torch.allclose(grads_a[n], grads_b[n], atol=1e-6, rtol=0), n


def test_loss_is_token_weighted_not_a_mean_of_micro_batch_means(tiny_model_dir):
    session = TrainingSession(tiny_model_dir, fp32_config())
    one = session.forward([pack_examples([ONE])])
    nine = session.forward([pack_examples([NINE])])
    token_weighted = (one.loss_sum + nine.loss_sum) / 10
    mean_of_means = (one.loss_sum / 1 + nine.loss_sum / 9) / 2
    session.forward_backward([pack_examples([ONE])])
    session.forward_backward([pack_examples([NINE])])
    logged = session.optim_step()["loss"]
    assert logged == pytest.approx(token_weighted, abs=1e-6)
    assert abs(logged - mean_of_means) > 1e-4  # the two differ on these rows


def test_validation_loss_does_not_depend_on_the_batch(tiny_model_dir, tmp_path):
    losses = []
    for mb in (1, 2):
        events: list[dict] = []
        cfg = fp32_config(micro_batch=mb, validate_each_epoch=True, learning_rate=1e-9)
        run_sft(cfg, tiny_model_dir, [ONE], [ONE, NINE], tmp_path / f"mb{mb}", events.append)
        losses.append([e["loss"] for e in events if e["type"] == "validation"][0])
    assert abs(losses[0] - losses[1]) < 1e-6


def test_packed_loss_is_the_sum_of_unpacked_losses_and_nothing_leaks(tiny_model_dir):
    session = TrainingSession(tiny_model_dir, fp32_config())
    first = Example([1, 2, 3], [0, 1, 1])
    second = Example([4, 5, 6, 7, 8], [0, 1, 1, 1, 1])
    packed = session.forward([pack_examples([first, second])])
    alone = [session.forward([pack_examples([e])]) for e in (first, second)]
    assert packed.supervised_tokens == 6
    assert abs(packed.loss_sum - sum(a.loss_sum for a in alone)) < 1e-4
    changed = session.forward([pack_examples([Example([900, 901, 902], [0, 1, 1]), second])])
    assert torch.allclose(packed.logprobs[0][3:], changed.logprobs[0][3:], atol=1e-6)
    assert not torch.allclose(packed.logprobs[0][:3], changed.logprobs[0][:3])


def test_chunked_head_gives_the_loss_and_gradients_of_the_full_head(tiny_model_dir):
    rows = random_rows(3, seed=5)
    p = pack_examples(rows)
    chunked = TrainingSession(tiny_model_dir, fp32_config(head_chunk_tokens=3))
    res = chunked.forward_backward([p])
    grads_chunked = adapter_grads(chunked)

    full = TrainingSession(tiny_model_dir, fp32_config())
    ids = torch.tensor([p.input_ids])
    logits = full.model(
        input_ids=ids,
        position_ids=torch.tensor([p.position_ids]),
        attention_mask=None,
        use_cache=False,
    ).logits[0]
    lp = torch.log_softmax(logits.float(), -1)[:-1].gather(1, ids[0, 1:, None]).squeeze(1)
    w = torch.tensor(p.weights[1:])
    loss = -(w * lp).sum()
    loss.backward()
    assert res.supervised_tokens == int((w != 0).sum()) > 3
    assert res.loss_sum == pytest.approx(float(loss.detach()), rel=1e-6)
    n_tok = res.supervised_tokens  # compare the per-token gradients the optimizer applies
    for n, g in adapter_grads(full).items():
        assert torch.allclose(grads_chunked[n] / n_tok, g / n_tok, atol=1e-6, rtol=0), n
    # per-token log-probs are returned aligned to the pass, 0 where nothing is scored
    scored = torch.tensor(p.weights) != 0
    assert torch.allclose(res.logprobs[0][scored], lp.detach()[w != 0], atol=1e-5)
    assert (res.logprobs[0][~scored] == 0).all()


def test_reinforcement_losses_follow_their_formulas(tiny_model_dir):
    session = TrainingSession(tiny_model_dir, fp32_config())
    ex = row([5, 6, 7], [8, 9, 10], 1)
    p = pack_examples([ex])
    lp = session.forward([p]).logprobs[0]
    adv = [0.0, 0.0, 0.0, 1.0, -0.5, 2.0]
    same = {"sampling_logprobs": lp.tolist(), "advantages": adv}  # on-policy: ratio 1
    scored_adv = sum(adv[3:])
    for fn in ("importance_sampling", "ppo"):
        r = session.forward([p], fn, loss_inputs=[same])
        assert r.loss_sum == pytest.approx(-scored_adv, abs=1e-5)
    r = session.forward([p], "cispo", loss_inputs=[same])
    assert r.loss_sum == pytest.approx(-float(sum(lp[3:] * torch.tensor(adv[3:]))), abs=1e-4)
    shifted = {"sampling_logprobs": (lp - 1.0).tolist(), "advantages": adv}  # ratio e ≈ 2.72
    r = session.forward([p], "ppo", loss_inputs=[shifted])
    # positive advantages clip at 1.2, the negative one keeps the unclipped (smaller) term
    assert r.loss_sum == pytest.approx(-(1.2 * 1.0 + math.e * -0.5 + 1.2 * 2.0), abs=1e-4)
    r = session.forward([p], "dro", loss_inputs=[shifted], loss_config={"beta": 0.1})
    expect = -float(sum(lp[3:] * torch.tensor(adv[3:]))) + 0.5 * 0.1 * 3
    assert r.loss_sum == pytest.approx(expect, abs=1e-4)
    with pytest.raises(EngineError, match="advantages"):
        session.forward([p], "ppo", loss_inputs=[{"sampling_logprobs": lp.tolist()}])


def test_no_update_reports_nan_or_a_silent_zero_loss(tiny_model_dir, tmp_path):
    rows = random_rows(6, seed=1)
    events: list[dict] = []
    run_sft(fp32_config(micro_batch=2), tiny_model_dir, rows, None, tmp_path, events.append)
    losses = [e["loss"] for e in events if e["type"] == "metrics"]
    assert len(losses) == 3 and all(math.isfinite(x) and x > 0 for x in losses)
    unsupervised = Example([40, 41, 42], [0, 0, 0], 7)
    with pytest.raises(EngineError, match=r"rows \[7\]"):
        run_sft(
            fp32_config(),
            tiny_model_dir,
            rows + [unsupervised],
            None,
            tmp_path / "x",
            events.append,
        )
    session = TrainingSession(tiny_model_dir, fp32_config())
    session.forward_backward([pack_examples([unsupervised])])
    with pytest.raises(EngineError, match="no supervised token"):
        session.optim_step()


def _reference_update(model_dir, cfg, rows, lr):
    """What one AdamW update over ``rows`` must do, computed without the engine's passes:
    a plain forward per row, the loss summed over supervised tokens and divided by their
    count (behaviours.md 1), torch's ``clip_grad_norm_`` and a fresh ``torch.optim.AdamW``.

    Returns (loss per token, gradient norm before clipping, adapter after the step).
    """
    ref = TrainingSession(model_dir, cfg)  # same seed: the same initial adapter
    total = torch.zeros(())
    tokens = 0
    for r in rows:
        ids = torch.tensor([r.input_ids])
        logits = ref.model(input_ids=ids, use_cache=False).logits[0]
        lp = torch.log_softmax(logits.float(), -1)[:-1].gather(1, ids[0, 1:, None]).squeeze(1)
        w = torch.tensor(r.weights[1:])
        total = total - (w * lp).sum()
        tokens += int((w != 0).sum())
    (total / tokens).backward()
    params = list(ref.params.values())
    max_norm = cfg.max_grad_norm if cfg.max_grad_norm > 0 else math.inf
    norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    opt = torch.optim.AdamW(
        params,
        lr=lr,
        betas=(cfg.adam_beta1, cfg.adam_beta2),
        eps=cfg.adam_epsilon,
        weight_decay=cfg.weight_decay,
    )
    opt.step()
    return (
        float(total.detach()) / tokens,
        norm,
        {n: p.detach().clone() for n, p in ref.params.items()},
    )


@pytest.mark.parametrize("max_grad_norm", [0.0, 1e-3], ids=["unclipped", "clipped"])
def test_optim_step_applies_the_token_mean_gradient_like_adamw(tiny_model_dir, max_grad_norm):
    """``optim_step`` reports the norm of the per-token gradient and applies it (clipped
    to ``maxGradNorm``) with AdamW at the scheduled rate: the adapter after the step equals
    a plain torch reference. A large epsilon keeps Adam's first step sensitive to the
    gradient's scale, so a gradient not divided by the token count moves other weights."""
    cfg = fp32_config(
        max_grad_norm=max_grad_norm, adam_epsilon=1e-3, weight_decay=0.1, learning_rate=1e-2
    )
    session = TrainingSession(tiny_model_dir, cfg)
    session.forward_backward([pack_examples([ONE])])
    session.forward_backward([pack_examples([NINE])])
    got = session.optim_step()
    loss, norm, after = _reference_update(tiny_model_dir, cfg, [ONE, NINE], got["learningRate"])
    assert got["learningRate"] == cfg.learning_rate and got["supervisedTokens"] == 10
    assert got["loss"] == pytest.approx(loss, rel=1e-6)
    assert got["gradNorm"] == pytest.approx(norm, rel=1e-5)
    if max_grad_norm:
        assert norm > 10 * max_grad_norm  # the clip was in force
        assert got["gradClipFactor"] == pytest.approx(max_grad_norm / (norm + 1e-6), rel=1e-5)
    else:
        assert got["gradClipFactor"] == 1.0
    for name, p in session.params.items():
        assert torch.allclose(p.detach(), after[name], atol=1e-5, rtol=0), (
            name,
            float((p.detach() - after[name]).abs().max()),
        )
    assert any(p.abs().max() > 0 for n, p in after.items() if "lora_B" in n)  # B left 0
