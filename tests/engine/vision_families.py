"""Processors of the multimodal catalog families for their tiny models (tests/engine/
families.py), built from local pieces: the byte-level tokenizer of ``helpers.
byte_tokenizer`` with the family's image tokens at the tiny config's ids, and the
family's image processor at the tiny vision tower's image size. The chat template is
ChatML (``helpers.CHATML``, written for this project's tests, under its licence): image
parts reach it as the processor's placeholder text (src/akka_optimize/data/vision.py).

Gemma 4's and Ministral 3's are saved as a real checkpoint names them
(``processor_class`` ``Gemma4Processor`` / ``PixtralProcessor``, video processor
``Gemma4VideoProcessor``) and load through ``akka_optimize.data.processors.load_processor``,
without torchvision where it is missing, as a real checkpoint's do.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from families import VOCAB

from helpers import byte_tokenizer

GEMMA3_TOKENS = {"<end_of_image>": VOCAB - 3, "<start_of_image>": VOCAB - 2,
                 "<image_soft_token>": VOCAB - 1}  # fmt: skip


def gemma3_processor(dest: Path) -> None:
    """Save Gemma 3's processor (4 image tokens, 28×28 images) into model folder ``dest``."""
    from transformers import Gemma3Processor
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    names = dict(zip(("eoi_token", "boi_token", "image_token"), GEMMA3_TOKENS, strict=True))
    fast = byte_tokenizer(None, GEMMA3_TOKENS, names)
    images = Gemma3ImageProcessorPil(size={"height": 28, "width": 28})
    processor = Gemma3Processor(image_processor=images, tokenizer=fast, image_seq_length=4)
    processor.save_pretrained(dest)


GEMMA4_TOKENS = {"<|video|>": VOCAB - 7, "<audio|>": VOCAB - 6, "<|audio>": VOCAB - 5,
                 "<|audio|>": VOCAB - 4, "<image|>": VOCAB - 3, "<|image>": VOCAB - 2,
                 "<|image|>": VOCAB - 1}  # fmt: skip
MISTRAL3_TOKENS = {"[IMG_BREAK]": VOCAB - 3, "[IMG_END]": VOCAB - 2, "[IMG]": VOCAB - 1}


def _as_checkpoint(dest: Path, processor_class: str, video: str | None = None) -> None:
    """Name the processor's classes in ``dest/processor_config.json`` as the hub's
    checkpoint does (the test saved this project's torchvision-free stand-ins)."""
    path = dest / "processor_config.json"
    config = json.loads(path.read_text())
    config["processor_class"] = processor_class
    if video:
        config["video_processor"]["video_processor_type"] = video
    path.write_text(json.dumps(config, indent=2))


def gemma4_processor(dest: Path) -> None:
    """Save Gemma 4's processor (70 soft tokens: 56×56 images become 384×384, 24×24
    patches of 16 pooled 3×3 into 64 image tokens) into model folder ``dest``."""
    from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor
    from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

    from akka_optimize.data.processors import ImagesGemma4Processor, NoVideos

    roles = ("audio_token", "boa_token", "eoa_token", "image_token", "boi_token", "eoi_token")
    tokens = ("<|audio|>", "<|audio>", "<audio|>", "<|image|>", "<|image>", "<image|>")
    fast = byte_tokenizer(None, GEMMA4_TOKENS, dict(zip(roles, tokens, strict=True)))
    processor = ImagesGemma4Processor(
        feature_extractor=Gemma4AudioFeatureExtractor(),
        image_processor=Gemma4ImageProcessorPil(max_soft_tokens=70),
        tokenizer=fast,
        video_processor=NoVideos(),
        image_seq_length=70,
    )
    processor.save_pretrained(dest)
    _as_checkpoint(dest, "Gemma4Processor", "Gemma4VideoProcessor")


def ministral3_processor(dest: Path) -> None:
    """Save Ministral 3's processor (56×56 images: 4×4 patches of 14 merged 2×2 into 2
    rows of 2 ``[IMG]``) into model folder ``dest``."""
    from transformers.models.pixtral.image_processing_pil_pixtral import (
        PixtralImageProcessorPil,
    )

    from akka_optimize.data.processors import ImagesPixtralProcessor

    images = PixtralImageProcessorPil(size={"longest_edge": 56}, patch_size=14)
    processor = ImagesPixtralProcessor(
        image_processor=images,
        tokenizer=byte_tokenizer(None, MISTRAL3_TOKENS),
        patch_size=14,
        spatial_merge_size=2,
    )
    processor.save_pretrained(dest)
    _as_checkpoint(dest, "PixtralProcessor")


@dataclass(frozen=True)
class VisionFamily:
    """A multimodal family's processor for its tiny model and what an image becomes."""

    name: str
    """The name in tests/engine/families.py."""
    save: Callable[[Path], None]
    image_tokens: list[str]
    """The tokens one test image becomes, in order."""
    vision_keys: set[str]
    """The processor's outputs besides ``input_ids`` and ``attention_mask``."""
    pixels: tuple[int, ...]
    """The shape of ``pixel_values`` for one image."""


VISION_FAMILIES = [
    VisionFamily("gemma3", gemma3_processor,
                 ["<start_of_image>", *["<image_soft_token>"] * 4, "<end_of_image>"],
                 {"pixel_values", "token_type_ids"}, (1, 3, 28, 28)),
    VisionFamily("gemma4", gemma4_processor, ["<|image>", *["<|image|>"] * 64, "<image|>"],
                 {"pixel_values", "image_position_ids", "mm_token_type_ids"}, (1, 630, 768)),
    VisionFamily("ministral3", ministral3_processor,
                 ["[IMG]", "[IMG]", "[IMG_BREAK]", "[IMG]", "[IMG]", "[IMG_END]"],
                 {"pixel_values", "image_sizes"}, (1, 3, 56, 56)),
]  # fmt: skip


def png(seed: int, size: int = 28) -> bytes:
    """A ``size``×``size`` RGB PNG of seeded noise."""
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()
