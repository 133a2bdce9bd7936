"""Concurrent requests share decoding passes without changing any answer."""

from __future__ import annotations

import threading
import time

import pytest

from akka_optimize.serving.engine import SamplingParams
from akka_optimize.serving.transformers_engine import TransformersEngine

PROMPTS = [
    "Hi",
    "What is two plus two? Answer in one short sentence please.",
    "Name a colour.",
    "Write the numbers from one to ten, separated by commas, and then stop.",
]


def _ids(engine: TransformersEngine, text: str) -> list[int]:
    msgs = [{"role": "user", "content": text}]
    return engine.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)[
        "input_ids"
    ]


def _answer(engine: TransformersEngine, ids: list[int], params: SamplingParams) -> list[str]:
    texts = [""] * params.n
    for ev in engine.stream(ids, None, params):
        texts[ev.index] += ev.delta
    return texts


@pytest.mark.parametrize("uneven", [False, True], ids=["same-length", "answers-end-apart"])
def test_batched_answers_equal_answers_alone(tiny_model_dir, uneven) -> None:
    """With ``uneven``, answers end at different steps, so finished ones leave the batch
    (and the KV cache) while the others go on."""
    engine = TransformersEngine(tiny_model_dir, batch_window_s=0.0)
    lengths = [3, 17, 8, 12] if uneven else [12] * 4
    greedy = [SamplingParams(max_tokens=k, temperature=0.0) for k in lengths]
    seeded = SamplingParams(max_tokens=12, temperature=0.9, seed=5, n=2)
    prompts = [_ids(engine, p) for p in PROMPTS]  # different lengths: left padding
    assert len({len(p) for p in prompts}) > 1
    alone = [_answer(engine, p, g) for p, g in zip(prompts, greedy, strict=True)]
    alone.append(_answer(engine, prompts[1], seeded))

    together: dict[int, list[str]] = {}
    jobs = [(i, p, greedy[i]) for i, p in enumerate(prompts)]
    jobs.append((len(prompts), prompts[1], seeded))

    def go(i: int, p: list[int], params: SamplingParams) -> None:
        together[i] = _answer(engine, p, params)

    # Deterministic, no clock: hold the decoding lock, let the batch thread take a first
    # request and block on the lock, queue every job, then release: the jobs wait together.
    engine.lock.acquire()
    first = threading.Thread(target=go, args=(-1, prompts[0], greedy[0]))
    threads = [threading.Thread(target=go, args=job) for job in jobs]
    try:
        first.start()
        _until(lambda: len(engine.batch_sizes) == len(alone) + 1, "the first request is taken")
        for t in threads:
            t.start()
        _until(lambda: len(engine._queue) == len(jobs), "every job is queued")
    finally:
        engine.lock.release()
    for t in [first, *threads]:
        t.join(timeout=120)
        assert not t.is_alive(), "a batched request did not finish within 120 s"
    assert [together[i] for i in range(len(jobs))] == alone
    assert all(a[0] for a in alone)  # every answer produced text
    # Alone, each request is its own batch; queued together, all six answers (four
    # greedy, a seeded n=2) share one decoding loop.
    assert engine.batch_sizes == [1, 1, 1, 1, 2, 1, 6]


def _until(ready, what: str, limit_s: float = 60.0) -> None:
    """Wait for ``ready()`` (a state the test causes, not a duration), at most ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)


def test_an_abandoned_stream_does_not_block_the_next_request(tiny_model_dir) -> None:
    engine = TransformersEngine(tiny_model_dir, batch_window_s=0.0)
    ids = _ids(engine, "Hello there")
    it = engine.stream(ids, None, SamplingParams(max_tokens=50, temperature=0.0))
    next(it)
    it.close()
    out = _answer(engine, ids, SamplingParams(max_tokens=5, temperature=0.0))
    assert out[0]


def test_guided_choice_answers_one_of_the_strings_alone_and_in_a_batch(tiny_model_dir) -> None:
    """``guided_choice`` (a model: judge's score): a random tiny model, which never writes
    a number by itself, answers one of the choices, greedy and sampled, and a guided
    request batched with a free one leaves the free answer as it was alone."""
    from akka_optimize.serving.batching import allowed_tokens

    engine = TransformersEngine(tiny_model_dir, batch_window_s=0.0)
    choices = [str(i) for i in range(11)]
    ids = _ids(engine, PROMPTS[1])
    free = SamplingParams(max_tokens=8, temperature=0.0)
    (unguided,) = _answer(engine, ids, free)
    assert unguided not in choices
    greedy = SamplingParams(max_tokens=4, temperature=0.0, choice=choices)
    sampled = SamplingParams(max_tokens=4, temperature=1.0, seed=3, n=8, choice=choices)
    assert _answer(engine, ids, greedy)[0] in choices
    answers = _answer(engine, ids, sampled)
    assert set(answers) <= set(choices) and len(set(answers)) > 1
    # in one batch with a free request
    out: dict[str, list[str]] = {}
    engine.lock.acquire()
    ts = [
        threading.Thread(target=lambda k=k, p=p: out.__setitem__(k, _answer(engine, ids, p)))
        for k, p in (("free", free), ("guided", greedy))
    ]
    try:
        for t in ts:
            t.start()
        # taken (in a batch blocked on the lock) or still queued: the batch thread may
        # take the first alone or both together, depending on which thread ran first
        _until(lambda: len(engine._queue) + sum(engine.batch_sizes[3:]) >= 2, "both queued")
    finally:
        engine.lock.release()
    for t in ts:
        t.join(timeout=120)
    assert out["free"] == [unguided] and out["guided"][0] in choices
    # the rule itself: "1" may end or go on to "10"; a finished "7" may only stop
    one, ten = [1], [1, 0]
    assert allowed_tokens([], [one, ten, [7]], {99}) == [1, 7]
    assert allowed_tokens([1], [one, ten], {99}) == [0, 99]
    assert allowed_tokens([7], [[7]], {99}) == [99]
