"""The end of an assistant turn is learned (behaviours.md 3) and sampling works."""

from __future__ import annotations

from engine_testkit import fp32_config

from akka_optimize.data.types import Example
from akka_optimize.engine.sampling import generate
from akka_optimize.engine.session.training import TrainingSession
from akka_optimize.engine.sft import run_sft

END = 2  # <|im_end|>: SmolLM2's EOS, end of turn and pad token


def _hi_hello(tok) -> tuple[list[int], Example]:
    chat = [{"role": "user", "content": "Hi"}]
    prompt = list(tok.apply_chat_template(chat, add_generation_prompt=True)["input_ids"])
    full = list(
        tok.apply_chat_template(chat + [{"role": "assistant", "content": "Hello"}])["input_ids"]
    )
    assert full[: len(prompt)] == prompt
    answer = full[len(prompt) :]
    end = answer.index(END) + 1  # the answer and its end-of-turn token are supervised
    padding = 6  # padded with pad = EOS; excluded by weight (length), never by id
    ids = prompt + answer[:end] + [END] * padding
    weights = [0.0] * len(prompt) + [1.0] * end + [0.0] * padding
    return prompt, Example(ids, weights, 1)


def test_overfit_hi_hello_then_greedy_stops_by_itself(tiny_model_dir, smollm2_tokenizer, tmp_path):
    prompt, ex = _hi_hello(smollm2_tokenizer)
    assert ex.input_ids.count(END) > 6 and ex.supervised_tokens >= 2
    events: list[dict] = []
    # The tiny model's frozen tied embedding keeps every logit small (hidden 64, init std
    # 0.02), so it can only become confident with an adapter on its output head too.
    targets = ("q_proj", "v_proj", "o_proj", "down_proj", "lm_head")
    cfg = fp32_config(
        lora_rank=8,
        lora_alpha=16,
        learning_rate=1e-2,
        epochs=40,
        scheduler="constant",
        target_modules=targets,
    )
    res = run_sft(cfg, tiny_model_dir, [ex], None, tmp_path, events.append)
    assert res.final_loss < 0.05 < [e["loss"] for e in events if e["type"] == "metrics"][0]

    session = TrainingSession(tiny_model_dir, cfg)
    session.load_state(tmp_path / f"step-{res.step:08d}" / "state")
    out = generate(session.model, smollm2_tokenizer, prompt, 20, stop_ids={END})
    assert out[-1] == END and len(out) < 20
    assert smollm2_tokenizer.decode(out[:-1]).strip() == "Hello"
    assert session.sample([prompt], 20, stop_ids={END}) == [out]


def test_sampling_with_a_seed_repeats(tiny_model_dir):
    session = TrainingSession(tiny_model_dir, fp32_config())
    a = session.sample([[1, 2, 3]], 8, temperature=1.0, top_p=0.9, seed=3)
    b = session.sample([[1, 2, 3]], 8, temperature=1.0, top_p=0.9, seed=3)
    c = session.sample([[1, 2, 3]], 8, temperature=1.0, top_p=0.9, seed=4)
    assert a == b and len(a[0]) == 8 and a != c
