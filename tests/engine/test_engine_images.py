"""Image rows train on each multimodal family through its own processor (F031; seeds/001
"Datasets live in the registry"; seeds/000 "Gemma 4 loads as the multimodal model it is").

The tiny Gemma 3, Gemma 4 and Ministral 3 of tests/engine/families.py with their
processors (tests/engine/vision_families.py; Gemma 4's and Ministral 3's load without
torchvision): the image's tokens are in the rendered sequence, only the answer trains, the
vision tower is frozen (no gradient, not in the adapter) and the adapter is on the language
model; a text-only model refuses the row naming row and model.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from engine_testkit import fp32_config
from families import FAMILIES, build
from vision_families import VISION_FAMILIES, png

from akka_optimize.catalog import load_catalog
from akka_optimize.data.masks import check_trainable, prepare_examples
from akka_optimize.data.packing import pack
from akka_optimize.data.policy import LossPolicy
from akka_optimize.data.processors import load_processor
from akka_optimize.data.render import RenderError
from akka_optimize.data.vision import ImageInputs

IMAGES = {"sha256:cat": png(1, 56), "sha256:dog": png(2, 56)}
ROWS = [
    {
        "messages": [
            {"role": "user", "content": [
                {"type": "image", "image": f"sha256:{name}"},
                {"type": "text", "text": "What is it?"},
            ]},
            {"role": "assistant", "content": f"A {name}"},
        ]
    }
    for name in ("cat", "dog")
]  # fmt: skip
VISION = {v.name: v for v in VISION_FAMILIES}


@pytest.fixture(scope="module", params=sorted(VISION))
def family_dir(request, tmp_path_factory):
    family = next(f for f in FAMILIES if f.name == request.param)
    folder = build(family, tmp_path_factory.mktemp(family.name) / "model")
    VISION[family.name].save(folder)
    return family, folder


@pytest.fixture(scope="module")
def gemma3_dir(tmp_path_factory):
    folder = build(next(f for f in FAMILIES if f.name == "gemma3"), tmp_path_factory.mktemp("g3"))
    VISION["gemma3"].save(folder)
    return folder


def _inputs(folder, name: str = "gemma3") -> tuple[object, ImageInputs]:
    processor = load_processor(folder)
    return processor.tokenizer, ImageInputs(
        f"test/tiny-{name}", lambda: processor, IMAGES.__getitem__
    )


def test_the_image_tokens_are_in_the_sequence_and_only_the_answer_trains(family_dir) -> None:
    family, folder = family_dir
    vision = VISION[family.name]
    tokenizer, inputs = _inputs(folder, family.name)
    prepared = prepare_examples(tokenizer, ROWS, LossPolicy(), 256, images=inputs)
    assert [e.row for e in prepared.examples] == [1, 2]
    ex = prepared.examples[0]
    image = tokenizer.convert_tokens_to_ids(vision.image_tokens)
    start = ex.input_ids.index(image[0])
    assert ex.input_ids[start : start + len(image)] == image
    assert set(ex.vision) == vision.vision_keys
    assert ex.vision["pixel_values"].shape == vision.pixels
    trained = [t for t, w in zip(ex.input_ids, ex.weights, strict=True) if w]
    assert tokenizer.decode(trained) == "A cat<|im_end|>"
    assert all(w == 0 for t, w in zip(ex.input_ids, ex.weights, strict=True) if t in image)
    # the dry run's count: both rows train
    assert check_trainable(tokenizer, ROWS, LossPolicy(), 256, images=inputs) == 2


def test_without_torchvision_each_processor_loads_for_images(
    family_dir, tmp_path, monkeypatch
) -> None:
    import json
    import shutil

    from akka_optimize.data import processors

    family, folder = family_dir
    monkeypatch.setattr(processors, "is_torchvision_available", lambda: False)
    expected = {"gemma3": "Gemma3Processor", "gemma4": "ImagesGemma4Processor",
                "ministral3": "ImagesPixtralProcessor"}[family.name]  # fmt: skip
    processor = load_processor(folder)
    assert type(processor).__name__ == expected
    assert type(processor.image_processor).__name__.endswith("ImageProcessorPil")
    if family.name == "gemma4":
        with pytest.raises(ImportError, match="video inputs need torchvision"):
            processor.video_processor(videos=[[png(3)]])
    # processor files that do not name the processor: the model type chooses it
    copy = shutil.copytree(folder, tmp_path / "copy")
    config = json.loads((copy / "processor_config.json").read_text())
    del config["processor_class"]
    (copy / "processor_config.json").write_text(json.dumps(config))
    assert type(load_processor(copy)).__name__ == expected


def test_a_text_only_model_refuses_an_image_row_naming_row_and_model(gemma3_dir) -> None:
    tokenizer, _ = _inputs(gemma3_dir)
    text_only = ImageInputs("demo/smollm2", lambda: None, IMAGES.__getitem__)
    rows = [
        {
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"},
            ]
        },
        *ROWS,
    ]
    with pytest.raises(RenderError) as err:
        check_trainable(tokenizer, rows, LossPolicy(), 128, images=text_only)
    assert err.value.row == 2 and "demo/smollm2 is text-only" in err.value.message
    assert err.value.message.startswith("row 2: the row has images (messages[0].content)")


def test_an_image_in_an_answer_or_a_missing_image_is_refused(gemma3_dir) -> None:
    tokenizer, inputs = _inputs(gemma3_dir)
    answer = {"messages": [
        {"role": "user", "content": "Draw"},
        {"role": "assistant", "content": [{"type": "image", "image": "sha256:cat"}]},
    ]}  # fmt: skip
    with pytest.raises(RenderError, match="row 1: messages.1. is an assistant turn with an image"):
        check_trainable(tokenizer, [answer], LossPolicy(), 128, images=inputs)
    missing = {"messages": [{**ROWS[0]["messages"][0], "content": [{"type": "image", "image": "sha256:none"}]},
                            ROWS[0]["messages"][1]]}  # fmt: skip
    with pytest.raises(RenderError, match="row 1: the image 'sha256:none' cannot be read"):
        check_trainable(tokenizer, [missing], LossPolicy(), 128, images=inputs)


def test_a_processor_that_cannot_load_refuses_image_rows_only(gemma3_dir) -> None:
    tokenizer, _ = _inputs(gemma3_dir)

    def loader():
        raise ImportError("Gemma4VideoProcessor requires the Torchvision library")

    broken = ImageInputs("google/gemma-4-e2b-it", loader, IMAGES.__getitem__)
    text = {
        "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    }
    assert check_trainable(tokenizer, [text], LossPolicy(), 128, images=broken) == 1
    with pytest.raises(RenderError) as err:
        check_trainable(tokenizer, [text, ROWS[0]], LossPolicy(), 128, images=broken)
    assert err.value.message == (
        "row 2: the processor of base model google/gemma-4-e2b-it cannot load: "
        "Gemma4VideoProcessor requires the Torchvision library"
    )


def test_image_rows_train_the_language_model_with_the_vision_tower_frozen(
    family_dir, tmp_path
) -> None:
    from akka_optimize.engine.reference import reference_check
    from akka_optimize.engine.session.training import TrainingSession
    from akka_optimize.engine.sft import run_sft

    family, folder = family_dir
    tokenizer, inputs = _inputs(folder, family.name)
    examples = prepare_examples(tokenizer, ROWS, LossPolicy(), 256, images=inputs).examples
    entry = load_catalog(None).get(family.repository)
    cfg = fp32_config(target_modules=entry.target_modules(), auto_class=entry.auto_class,
                      micro_batch=2, epochs=3, learning_rate=0.05)  # fmt: skip
    session = TrainingSession(folder, cfg)
    passes = pack(examples, 512)
    assert [p.rows for p in passes] == [[1], [2]]  # an image row is a pass of its own
    result = session.forward_backward(passes)
    assert result.supervised_tokens == 12  # "A cat<|im_end|>" and "A dog<|im_end|>", 6 tokens each
    named = dict(session.model.named_parameters())
    towers = (".vision_tower.", ".multi_modal_projector.", ".embed_vision.")
    tower = {n: p for n, p in named.items() if any(t in n for t in towers)}
    assert tower and all(p.grad is None and not p.requires_grad for p in tower.values())
    grads = {n for n, p in named.items() if p.grad is not None}
    assert grads and all(".language_model." in n and "lora_" in n for n in grads)
    # without the image the same answers score otherwise: the pixels reach the model
    blank = [
        type(p)(p.input_ids, p.weights, p.position_ids, p.cu_seqlens, p.rows, None) for p in passes
    ]
    session.optimizer.zero_grad()
    assert session.forward(blank).loss_sum != pytest.approx(result.loss_sum, abs=1e-6)
    # the engine scores what the model's own forward scores with the image (fp32)
    check = reference_check(session, passes, examples)
    assert check.positions == 12 and check.max_error < 1e-5

    events: list[dict] = []
    bounds = {"head": 1e-5, "isolation": 1e-5, "packing": None, "reference": 1e-4}
    res = run_sft(
        replace(cfg, start_checks=bounds), folder, examples, None, tmp_path, events.append
    )
    losses = [e["loss"] for e in events if e["type"] == "metrics"]
    assert res.step == 3 and losses[-1] < losses[0], losses
    assert [c["name"] for c in res.checks if c["passed"]] == [
        "head",
        "isolation",
        "packing",
        "reference",
    ]
    assert len(res.adapted_modules) == 14  # q k v o gate up down of 2 layers
    assert all(m.startswith("model.language_model.layers.") for m in res.adapted_modules)
