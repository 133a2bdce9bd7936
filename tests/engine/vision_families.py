"""Processors of the multimodal catalog families for their tiny models (tests/engine/
families.py), built from local pieces: the byte-level tokenizer of ``helpers.
byte_tokenizer`` with the family's image tokens at the tiny config's ids, and the
family's image processor at the tiny vision tower's image size. The chat template is
ChatML (``helpers.CHATML``, written for this project's tests, under its licence): image
parts reach it as the processor's placeholder text (src/akka_optimize/data/vision.py).

Gemma 4 and Ministral 3 processors need torchvision in transformers 5.25 (Gemma 4's video
processor, Pixtral's image processor); where it cannot be imported they are skipped with
that reason.
"""

from __future__ import annotations

import io
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


def png(seed: int, size: int = 28) -> bytes:
    """A ``size``×``size`` RGB PNG of seeded noise."""
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()
