"""Generated Tinker requests on the SDK's own types (issue 47 §2, "the same for Tinker
requests"): ``SamplingParams``, ``forward_backward``'s loss names (the SDK's ``LossFnType``
literal) with their ``loss_fn_inputs`` and ``loss_fn_config``, and ``AdamParams``, sent by
the official ``tinker==0.38.0`` SDK to a live service on the tiny model.

``LoraConfig`` is drawn without a service, against the function the create request calls
(each ``create_lora_training_client`` would hold the CI's one CPU device).

Each call either succeeds and its fields visibly took effect (``max_tokens`` bounds the
sample, a stop token or string ends it, a seed reproduces it; ``weights`` scale the cross-entropy
loss; a zero learning rate leaves the weights as they were), or is refused with a sentence
naming a field the request set: never a 5xx, a hang or Python exception text. One training
client serves every example (on the CI's one CPU device a second would queue behind it).
Each example prints itself before it runs, so a failure is rerun from the printed values
(no shrinking: each example is a round trip).
"""

from __future__ import annotations

import math
import typing
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from tinker_kit import TINY, created, tinker_service

tinker = pytest.importorskip("tinker")
from tinker.types import datum as datum_types  # noqa: E402

from akka_optimize.catalog import load_catalog  # noqa: E402
from akka_optimize.errors import InvalidRequest  # noqa: E402
from akka_optimize.tinker.kind import ATTN, MLP, UNEMBED, lora_config, lora_targets  # noqa: E402
from tinker import types  # noqa: E402

CATALOG = load_catalog(None)
PROMPT = [1, 504, 3180, 314, 1345, 30, 2, 2016, 314]
SEQ = [1, 504, 3180, 314, 1345, 30, 2, 2016, 314, 480, 12, 42]
LOSSES = typing.get_args(types.LossFnType)
INPUT_KEYS = tuple(datum_types._KEY_TO_TYPE)  # the keys the SDK's Datum can carry
CONFIG_KEYS = ("clip_low_threshold", "clip_high_threshold", "beta", "temperature")
BUDGET = settings(
    max_examples=24,
    deadline=None,
    derandomize=True,  # the same examples in every run: CI never fails at random
    database=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("tinker-generated")
    with tinker_service(tmp) as (svc, keys):
        client = tinker.ServiceClient(base_url=svc.url, api_key=keys["demo"])
        trainer = created(client.create_lora_training_client(base_model=TINY, rank=4, seed=3))
        yield {"svc": svc, "client": client, "trainer": trainer}


def refused(error: BaseException, fields: list[str]) -> None:
    """``error`` is the SDK's refusal (not a 5xx) and its text names one of ``fields``."""
    assert isinstance(error, tinker.TinkerError), repr(error)
    assert not isinstance(error, tinker.InternalServerError), str(error)
    status = getattr(error, "status_code", None)
    assert status is None or status < 500, (status, str(error))
    text = str(error)
    assert "Traceback" not in text and "failed in the worker" not in text, text
    assert any(f in text for f in fields), (fields, text)


def attempt(call: Any) -> tuple[Any, BaseException | None]:
    try:
        return call(), None
    except Exception as e:  # the SDK's error, or whatever leaked: judged by refused()
        return None, e


# Sampling ---------------------------------------------------------------------------
finite = st.floats(-2.0, 3.0, allow_nan=False)
odd = st.sampled_from([1e30, -1e30, 1e-30])  # the SDK cannot send NaN or ±inf in JSON
stops = st.one_of(
    st.none(),
    st.sampled_from(["\n", ".", " the", "zebra zebra", ""]),
    st.lists(st.sampled_from(["\n", ".", ",", " the"]), max_size=3),
    st.lists(st.integers(-3, 49_200), max_size=3),
)


@st.composite
def sampling_params(draw: st.DrawFn) -> dict[str, Any]:
    """Keyword arguments of ``types.SamplingParams``: each field left out or drawn."""
    fields = {
        "max_tokens": st.one_of(st.none(), st.integers(-3, 20)),
        "temperature": st.one_of(finite, odd, st.just(0.0)),
        "top_p": st.one_of(st.floats(-0.5, 1.5, allow_nan=False), odd),
        "top_k": st.one_of(st.sampled_from([-1, 0]), st.integers(-3, 60)),
        "seed": st.one_of(st.none(), st.integers(-5, 2**40), st.sampled_from([2**64, -(2**70)])),
        "stop": stops,
    }
    chosen = draw(st.lists(st.sampled_from(sorted(fields)), unique=True, max_size=4))
    return {k: draw(fields[k]) for k in chosen}


def _ends(tok: Any, stop: Any, tokens: list[int]) -> bool:
    """Whether ``tokens`` end on a stop as SamplingParams.stop documents it: None is EOS,
    [] nothing, else EOS plus the token ids plus the strings on the decoded text."""
    items = [] if stop is None else [stop] if isinstance(stop, str) else list(stop)
    ids = {s for s in items if isinstance(s, int)}
    if stop is None or items:
        ids.add(tok.eos_token_id)
    strings = [s for s in items if isinstance(s, str)]
    return bool(tokens) and (tokens[-1] in ids or any(s in tok.decode(tokens) for s in strings))


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Any) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@BUDGET
@example(kw={"max_tokens": 0}, n=1)
@example(kw={"temperature": -1.0, "seed": 3}, n=1)
@example(kw={"top_p": 0.0, "temperature": 1.0}, n=1)
@example(kw={"stop": "zebra zebra"}, n=1)
@example(kw={"stop": ["\n\nUser:"], "temperature": 0.0}, n=1)
@example(kw={"stop": [], "max_tokens": 5}, n=1)
@example(kw={"stop": [-1]}, n=1)
@example(kw={"temperature": 5e-324}, n=1)
@given(kw=sampling_params(), n=st.sampled_from([1, 1, 2, 3, 0]))
def test_generated_sampling_params_are_honoured_or_refused_naming_them(
    world: Any, tokenizer: Any, kw: dict[str, Any], n: int
) -> None:
    print(f"sampling example: num_samples={n} SamplingParams(**{kw!r})")
    try:
        params = types.SamplingParams(**kw)
    except ValueError:
        return  # the SDK's own type refuses it before anything is sent
    sampler = created(world["trainer"].save_weights_and_get_sampling_client())
    prompt = types.ModelInput.from_ints(PROMPT)
    got, error = attempt(lambda: sampler.sample(prompt, n, params).result())
    print(f"  -> {error or [s.tokens for s in got.sequences]}")
    if error is not None:
        refused(error, [*kw, "num_samples"])
        return
    assert len(got.sequences) == n
    limit = kw.get("max_tokens")
    stop = kw.get("stop")
    for s in got.sequences:
        assert limit is None or len(s.tokens) <= limit, (limit, s.tokens)
        assert len(s.logprobs) == len(s.tokens) and all(lp <= 0 for lp in s.logprobs)
        assert not _ends(tokenizer, stop, s.tokens[:-1]), s.tokens  # the first stop ends it
        assert (s.stop_reason == "stop") == _ends(tokenizer, stop, s.tokens), s
    if n and kw.get("seed") is not None:
        again = sampler.sample(prompt, n, params).result()
        assert [s.tokens for s in again.sequences] == [s.tokens for s in got.sequences]


def test_a_stop_string_of_several_tokens_ends_the_sample_on_its_text(
    world: Any, tokenizer: Any
) -> None:
    """Break 5 of issue 53: a stop string of several tokens (as the cookbook's role_colon
    renderer's "\\n\\nUser:") ends a greedy sample after the token that completes it in
    the decoded text, that token kept, with one log-prob per returned token (the same as
    the unstopped sample's), and stop_reason "stop"."""
    sampler = created(world["trainer"].save_weights_and_get_sampling_client())
    prompt = types.ModelInput.from_ints(PROMPT)

    def greedy(stop: Any) -> Any:
        params = types.SamplingParams(max_tokens=12, temperature=0.0, stop=stop)
        return sampler.sample(prompt, 1, params).result().sequences[0]

    full = greedy([])  # no stop at all, EOS included: runs to max_tokens
    assert len(full.tokens) == 12 and full.stop_reason == "length"
    text = tokenizer.decode(full.tokens[3:6])
    assert len(tokenizer.encode(text, add_special_tokens=False)) >= 2, text
    cut = next(k for k in range(1, 13) if text in tokenizer.decode(full.tokens[:k]))
    got = greedy([text])
    assert got.tokens == full.tokens[:cut] and got.stop_reason == "stop", (text, got)
    assert got.logprobs == pytest.approx(full.logprobs[:cut], abs=1e-4)
    role_colon = greedy("\n\nUser:")  # accepted; ends on it or on EOS or at max_tokens
    ended = _ends(tokenizer, "\n\nUser:", role_colon.tokens)
    assert (role_colon.stop_reason == "stop") == ended


# forward_backward --------------------------------------------------------------------
NEEDS = {
    "cross_entropy": ("target_tokens", "weights"),
    "gspo": ("target_tokens", "logprobs", "advantages", "sequence_ratio_mask"),
}
"""Tinker's documented inputs per loss (the other reinforcement losses: tokens, sampler
log-probs and advantages); drawn most often, so most examples get past the first refusal."""


def _gspo(out: list[float], inputs: dict[str, list[float]], config: dict[str, float]) -> float:
    """Tinker's GSPO-token loss worked out in plain floats from the returned log-probs."""
    pairs = zip(out, inputs["logprobs"], inputs["sequence_ratio_mask"], strict=True)
    kept = [lp - q for lp, q, m in pairs if m != 0]
    s = math.exp(sum(kept) / len(kept))
    lo, hi = config.get("clip_low_threshold", 0.8), config.get("clip_high_threshold", 1.2)
    clipped = min(max(s, lo), hi)
    return -sum(min(s * a, clipped * a) for a in inputs["advantages"])


@st.composite
def loss_requests(draw: st.DrawFn) -> tuple[str, dict[str, list[float]], dict[str, float]]:
    """A loss name from the SDK's ``LossFnType``, ``loss_fn_inputs`` for one datum over
    :data:`SEQ` (the loss's documented keys, then maybe one dropped and one of the SDK's
    other keys added, each at the right length or one off), and a ``loss_fn_config``."""
    n = len(SEQ) - 1
    loss = draw(st.sampled_from(LOSSES))
    keys = list(NEEDS.get(loss, ("target_tokens", "logprobs", "advantages")))
    if draw(st.booleans()):
        keys.remove(draw(st.sampled_from(keys)))
    if draw(st.booleans()):
        keys.append(draw(st.sampled_from(INPUT_KEYS)))
    inputs: dict[str, list[float]] = {}
    for key in dict.fromkeys(keys):
        size = n + draw(st.sampled_from([0, 0, 0, 0, -1, 1]))
        if key == "target_tokens":
            inputs[key] = (SEQ[1:] + [7])[:size]
        else:
            lo, hi = (-5.0, 0.0) if key == "logprobs" else (-2.0, 2.0)
            inputs[key] = draw(st.lists(st.floats(lo, hi), min_size=size, max_size=size))
    config_keys = draw(st.lists(st.sampled_from(CONFIG_KEYS), unique=True, max_size=2))
    config = {k: draw(st.floats(-1.0, 3.0)) for k in config_keys if draw(st.booleans())}
    return loss, inputs, config


GSPO = {
    "target_tokens": SEQ[1:],
    "logprobs": [-9.0, -8.0, -7.0, -6.0, -5.0, -4.0, -3.0, -2.0, -9.5, -4.5, -3.5],
    "advantages": [0.0] * 8 + [1.0, -0.5, 2.0],
    "sequence_ratio_mask": [0.0] * 8 + [1.0] * 3,  # the "sampled" tokens
}


@BUDGET
@example(req=("gspo", GSPO, {}))
@example(req=("gspo", GSPO, {"clip_low_threshold": 0.5, "clip_high_threshold": 1e4}))
@given(req=loss_requests())
def test_generated_forward_backward_is_honoured_or_refused_naming_a_field(
    world: Any, req: tuple[str, dict[str, list[float]], dict[str, float]]
) -> None:
    loss, inputs, config = req
    print(f"forward_backward example: loss_fn={loss!r} inputs={inputs!r} config={config!r}")
    datum = types.Datum(model_input=types.ModelInput.from_ints(SEQ[:-1]), loss_fn_inputs=inputs)
    call = lambda: world["trainer"].forward_backward([datum], loss, config or None).result()  # noqa: E731
    got, error = attempt(call)
    print(f"  -> {error or got.metrics}")
    if error is not None:
        refused(error, ["loss_fn", *inputs, *config])
        return
    out = got.loss_fn_outputs[0]["logprobs"].tolist()
    assert len(out) == len(SEQ) - 1 and all(lp <= 0 for lp in out)
    assert all(math.isfinite(v) for v in got.metrics.values()), got.metrics
    if loss == "cross_entropy":  # the weights took effect: loss = -Σ wᵢ·log pᵢ
        weights = inputs.get("weights", [1.0] * len(out))
        want = -sum(w * lp for w, lp in zip(weights, out, strict=True))
        assert math.isclose(got.metrics["loss:sum"], want, rel_tol=1e-4, abs_tol=1e-4)
    if loss == "gspo":  # the sequence ratio over the masked tokens, clipped as configured
        want = _gspo(out, inputs, config)
        assert math.isclose(got.metrics["loss:sum"], want, rel_tol=1e-3, abs_tol=1e-3)


def test_losses_the_platform_cannot_compute_are_refused_with_the_list_it_serves(
    world: Any,
) -> None:
    """Break 6 of issue 53: stable_reinforce (the cookbook's RL default, whose objective is
    not published) and server-side custom are refused naming why and every loss served."""
    n = len(SEQ) - 1
    inputs = {"target_tokens": SEQ[1:], "logprobs": [-1.0] * n, "advantages": [1.0] * n}
    datum = types.Datum(model_input=types.ModelInput.from_ints(SEQ[:-1]), loss_fn_inputs=inputs)
    for loss in ("stable_reinforce", "custom"):
        _, error = attempt(lambda: world["trainer"].forward_backward([datum], loss).result())  # noqa: B023
        refused(error, [f"loss_fn {loss!r}"])
        served = "cispo, cross_entropy, dro, gspo, importance_sampling, ppo"
        assert served in str(error), str(error)


# optim_step --------------------------------------------------------------------------
@st.composite
def adam_params(draw: st.DrawFn) -> dict[str, Any]:
    """Keyword arguments of ``types.AdamParams``: each field left out or drawn."""
    value = st.one_of(st.floats(-0.5, 1.5), st.just(0.0), st.sampled_from([1e-12, 1e-2]))
    chosen = draw(
        st.lists(st.sampled_from(sorted(types.AdamParams.model_fields)), unique=True, max_size=4)
    )
    return {k: draw(value) for k in chosen}


@BUDGET
@example(kw={"learning_rate": 0.0, "weight_decay": 0.5})
@example(kw={"learning_rate": 0.05, "eps": 1e-8})
@example(kw={"beta2": 0.0, "eps": 4.4013380680208994e-276})  # 0 in float32: refused (was NaN)
@given(kw=adam_params())
def test_generated_adam_params_are_honoured_or_refused_naming_them(
    world: Any, kw: dict[str, Any]
) -> None:
    print(f"optim_step example: AdamParams(**{kw!r})")
    try:
        params = types.AdamParams(**kw)
    except ValueError:
        return
    trainer = world["trainer"]
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(SEQ[:-1]),
        loss_fn_inputs={"target_tokens": SEQ[1:], "weights": [1.0] * (len(SEQ) - 1)},
    )
    before = trainer.forward([datum], "cross_entropy").result()
    trainer.forward_backward([datum], "cross_entropy").result()  # a gradient to step with
    got, error = attempt(lambda: trainer.optim_step(params).result())
    print(f"  -> {error or 'stepped'}")
    if error is not None:
        refused(error, ["adam_params", *kw])
        return
    after = trainer.forward([datum], "cross_entropy").result()
    old = before.loss_fn_outputs[0]["logprobs"].tolist()
    new = after.loss_fn_outputs[0]["logprobs"].tolist()
    lr = kw.get("learning_rate", 1e-4)
    if lr == 0:  # AdamW's decay is scaled by the learning rate too
        assert new == pytest.approx(old, abs=1e-6)
    elif lr >= 1e-2 and kw.get("eps", 1e-12) <= 1e-6:
        assert new != pytest.approx(old, abs=1e-6)


# LoraConfig --------------------------------------------------------------------------
@st.composite
def lora_configs(draw: st.DrawFn) -> dict[str, Any]:
    """``types.LoraConfig`` as the SDK sends it: ``rank`` drawn around its range, each
    other field its default or drawn."""
    kw: dict[str, Any] = {"rank": draw(st.integers(-2, 600))}
    for key in ("seed", "train_attn", "train_mlp", "train_unembed"):
        if draw(st.booleans()):
            kw[key] = draw(st.integers(-5, 99)) if key == "seed" else draw(st.booleans())
    return types.LoraConfig(**kw).model_dump()  # every field, as the SDK's create sends


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(lora=lora_configs(), repo=st.sampled_from([e.repository for e in CATALOG.entries]))
def test_generated_lora_configs_become_targets_or_are_refused_naming_them(
    lora: dict[str, Any], repo: str
) -> None:
    """Without a service (each ``create_lora_training_client`` would hold the one CPU
    device): the function the create request calls either maps the options onto each
    catalog entry's targets, each switch visibly kept or dropped, or refuses naming one."""
    print(f"lora example: {repo} LoraConfig {lora!r}")
    entry = CATALOG.get(repo)
    try:
        checked = lora_config(lora)
        targets = lora_targets(entry, checked)
    except InvalidRequest as e:
        assert e.field and e.field.startswith("lora_config") and e.field in e.message, e.message
        assert e.field == "lora_config" or e.field.removeprefix("lora_config.") in lora
        return
    assert 1 <= checked["rank"] <= 512 and targets
    if isinstance(entry.lora_target_modules, str):
        return
    want = {k: lora.get(k, True) for k in ("train_attn", "train_mlp", "train_unembed")}
    assert want["train_attn"] == bool(set(targets) & set(ATTN))
    assert want["train_mlp"] == bool(set(targets) & set(MLP))
    assert want["train_unembed"] == (UNEMBED in targets)
