"""The preference loss and its gradients equal TRL ``DPOTrainer``'s (issue 50 "Correctness"):
the same tiny model, the same adapter weights and the same tokens (TRL's own tokenization
and completion masks of conversational pairs), fp32, for ``sigmoid``, ``ipo``, their
weighted sum, and ``sigmoid`` with label smoothing.

TRL 1.16's ``sigmoid`` has no label smoothing (its ``label_smoothing`` feeds ``robust``,
``exo_pair`` and ``aot``), so smoothed DPO is checked through its definition: with ε the
loss is ``(1−ε)·sigmoid(c over r) + ε·sigmoid(r over c)``, two TRL runs with the sides
swapped, weighed (gradients are linear in the same combination).

TRL is in the ``bench`` extra (``pip install trl==1.16.0``); without it the test skips
saying so.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from engine_testkit import fp32_config

from akka_optimize.data.types import Example, PreferencePair
from akka_optimize.engine.dpo.loss import DpoSettings
from akka_optimize.engine.dpo.update import run_pairs
from akka_optimize.engine.session.training import TrainingSession

trl = pytest.importorskip(
    "trl", reason="TRL is not installed: it is in the bench extra (pip install trl==1.16.0)"
)

TARGETS = ("q_proj", "v_proj", "o_proj", "down_proj")
ROWS = [
    ("What is 2+2?", "2+2 is 4.", "It is 5, I think."),
    ("Name a colour.", "Blue.", "A colour is a number."),
    ("Say hello.", "Hello there!", "Goodbye."),
]


def _rows(swap: bool) -> list[dict[str, Any]]:
    out = []
    for q, good, bad in ROWS:
        c, r = (bad, good) if swap else (good, bad)
        out.append(
            {
                "prompt": [{"role": "user", "content": q}],
                "chosen": [{"role": "assistant", "content": c}],
                "rejected": [{"role": "assistant", "content": r}],
            }
        )
    return out


def _trl(tiny_model_dir, tokenizer, adapter, s: DpoSettings, swap: bool, tmp_path):
    """TRL's loss, adapter gradients and batch for the pairs (sides swapped with ``swap``)."""
    from datasets import Dataset
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=list(TARGETS))
    model = get_peft_model(base, lora)  # a fresh adapter: TRL copies it as its reference
    args = trl.DPOConfig(
        output_dir=str(tmp_path / f"trl-{swap}"),
        beta=s.beta,
        loss_type=list(s.loss_types),
        loss_weights=list(s.loss_weights),
        per_device_train_batch_size=len(ROWS),
        report_to="none",
        use_cpu=True,
        bf16=False,
        max_length=None,
        dataloader_num_workers=0,
    )
    trainer = trl.DPOTrainer(
        model=model, args=args, train_dataset=Dataset.from_list(_rows(swap)),
        processing_class=tokenizer,
    )  # fmt: skip
    loaded = trainer.model.load_state_dict(adapter, strict=False)  # then the policy's weights
    assert not loaded.unexpected_keys
    batch = next(iter(trainer.get_train_dataloader()))
    trainer.model.train()
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}  # fmt: skip
    return float(loss), grads, batch


def _pairs_of(batch: dict[str, torch.Tensor], swap: bool) -> list[PreferencePair]:
    """TRL's batch ([chosen…, rejected…], right-padded) as our pairs, same tokens and masks."""
    ids, att, comp = batch["input_ids"], batch["attention_mask"], batch["completion_mask"]
    n = ids.shape[0] // 2
    seqs = []
    for i in range(2 * n):
        length = int(att[i].sum())
        seqs.append(Example(ids[i, :length].tolist(), comp[i, :length].float().tolist(), i))
    pairs = [PreferencePair(seqs[i], seqs[n + i], i) for i in range(n)]
    if swap:
        pairs = [PreferencePair(p.rejected, p.chosen, p.row) for p in pairs]
    return pairs


@pytest.mark.parametrize(
    "settings",
    [
        DpoSettings(0.1),
        DpoSettings(0.5, ("ipo",)),
        DpoSettings(0.2, ("sigmoid", "ipo"), (1.0, 0.5)),
        DpoSettings(0.1, label_smoothing=0.1),
    ],
    ids=["sigmoid", "ipo", "sigmoid+ipo", "sigmoid-label-smoothing"],
)
def test_loss_and_gradients_equal_trl_dpo_trainer(
    tiny_model_dir, smollm2_tokenizer, tmp_path, settings: DpoSettings
) -> None:
    cfg = fp32_config(target_modules=TARGETS, lora_rank=4, lora_alpha=8, lora_dropout=0.0)
    session = TrainingSession(tiny_model_dir, cfg)
    torch.manual_seed(5)
    with torch.no_grad():  # an adapter away from its zero start, so policy != reference
        for p in session.params.values():
            p.add_(torch.randn_like(p) * 0.05)
    adapter = {n: p.detach().clone() for n, p in session.params.items()}
    eps = settings.label_smoothing
    trl_settings = DpoSettings(settings.beta, settings.loss_types, settings.loss_weights)
    want_loss, want, batch = _trl(tiny_model_dir, smollm2_tokenizer, adapter, trl_settings, False, tmp_path)  # fmt: skip
    if eps:
        loss2, grads2, _ = _trl(tiny_model_dir, smollm2_tokenizer, adapter, trl_settings, True, tmp_path)  # fmt: skip
        want_loss = (1 - eps) * want_loss + eps * loss2
        want = {n: (1 - eps) * g + eps * grads2[n] for n, g in want.items()}
    pairs = _pairs_of(batch, swap=False)
    assert all(p.chosen.supervised_tokens and p.rejected.supervised_tokens for p in pairs)
    session.model.train()
    got_loss = run_pairs(session, pairs, settings, backward=True).loss / len(pairs)
    assert abs(got_loss - want_loss) < 1e-5, (got_loss, want_loss)
    got = {n: p.grad for n, p in session.params.items()}
    assert set(got) == set(want)
    for name, g in want.items():
        assert float((got[name] / len(pairs) - g).abs().max()) < 1e-5, name
