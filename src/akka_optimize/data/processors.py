"""The processor of a multimodal base model's folder, for images, where ``torchvision`` is
missing (seeds/000 "Gemma 4 loads as the multimodal model it is"; F031).

transformers 5.25 picks an image processor's PIL backend by itself when ``torchvision``
cannot be imported (``Gemma4ImageProcessorPil``, ``PixtralImageProcessorPil``), but two of
the catalog's multimodal families still need ``torchvision`` to build their processor:

- Gemma 4's processor takes a video processor, and ``Gemma4VideoProcessor`` is
  torchvision-only. Image rows never use it, so the processor is built with
  :class:`NoVideos` in its place (a video refuses, naming the missing library).
- Ministral 3's ``PixtralProcessor`` module imports a torchvision helper at import time
  (for a token count it gives serving engines, not for encoding rows).
  :class:`ImagesPixtralProcessor` is the same processor for images: the same tokens per
  image (rows of ``[IMG]`` closed by ``[IMG_BREAK]``, the last one by ``[IMG_END]``), the
  same ``pixel_values`` and ``image_sizes``, from the folder's own configuration files.

With ``torchvision`` installed, :func:`load_processor` is ``AutoProcessor``'s own load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transformers import Gemma4Processor, ProcessorMixin
from transformers.utils import is_torchvision_available
from transformers.video_processing_utils import VideoProcessorMixin

PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")
_BY_MODEL_TYPE = {"gemma4": "Gemma4Processor", "mistral3": "PixtralProcessor"}
"""The processor of a ``config.json`` ``model_type`` whose processor files do not name it."""


class NoVideos(VideoProcessorMixin):
    """The video processor of a processor built without ``torchvision``: images and text
    only. Calling it raises ``ImportError`` naming the library."""

    def preprocess(self, videos: Any, **kwargs: Any) -> Any:
        """Refuse a video.

        Raises:
            ImportError: always; video inputs need ``torchvision``.
        """
        raise ImportError("video inputs need torchvision, which is not installed")


class ImagesGemma4Processor(Gemma4Processor):
    """``Gemma4Processor`` whose video processor may be :class:`NoVideos`: transformers
    checks a video processor against a class it cannot import without ``torchvision``.
    Text, images and audio are ``Gemma4Processor``'s own."""

    def check_argument_for_proper_class(self, argument_name: str, argument: Any) -> Any:
        """``NoVideos`` for the video processor; transformers' check for the others."""
        if argument_name == "video_processor" and isinstance(argument, NoVideos):
            return NoVideos
        return super().check_argument_for_proper_class(argument_name, argument)


class ImagesPixtralProcessor(ProcessorMixin):
    """``PixtralProcessor`` (Ministral 3, Pixtral) for text and images, importable without
    ``torchvision``; it reads the same ``processor_config.json``.

    Calling it with ``text`` (placeholders ``image_token``) and ``images`` gives
    ``input_ids`` with each placeholder expanded to ``H/p`` rows of ``W/p`` image tokens
    (``p`` = ``patch_size * spatial_merge_size`` pixels), each row closed by
    ``image_break_token`` and the last by ``image_end_token``; ``pixel_values`` float32
    ``[images, 3, H, W]`` and ``image_sizes`` ``[images, 2]`` (H, W after resizing).
    :meth:`replace_image_token` follows transformers' ``PixtralProcessor`` (Apache-2.0);
    the class name keeps ``PixtralProcessor`` in it so that transformers loads a hub
    checkpoint's tokenizer the way it does for that processor.
    """

    def __init__(
        self,
        image_processor: Any = None,
        tokenizer: Any = None,
        patch_size: int = 16,
        spatial_merge_size: int = 1,
        chat_template: str | None = None,
        image_token: str = "[IMG]",
        image_break_token: str = "[IMG_BREAK]",
        image_end_token: str = "[IMG_END]",
        **kwargs: Any,
    ) -> None:
        super().__init__(image_processor, tokenizer, chat_template=chat_template)
        self.patch_size = patch_size
        self.spatial_merge_size = spatial_merge_size
        self.image_token = image_token
        self.image_break_token = image_break_token
        self.image_end_token = image_end_token
        self.image_token_id = tokenizer.convert_tokens_to_ids(image_token)

    def _process_images(self, images: Any, **images_kwargs: Any) -> Any:
        images_kwargs["patch_size"] = self.patch_size * self.spatial_merge_size
        return super()._process_images(images, **images_kwargs)

    def replace_image_token(self, image_inputs: dict, image_idx: int, **kwargs: Any) -> str:
        """The tokens of image ``image_idx``, as ``PixtralProcessor`` writes them."""
        pixels = self.patch_size * self.spatial_merge_size
        height, width = (int(v) for v in image_inputs["image_sizes"][image_idx])
        row = self.image_token * (width // pixels)
        rows = [row + self.image_break_token] * (height // pixels)
        rows[-1] = row + self.image_end_token
        return "".join(rows)

    @property
    def model_input_names(self) -> list[str]:
        """The tokenizer's and the image processor's inputs, and ``image_sizes``."""
        names = self.tokenizer.model_input_names + self.image_processor.model_input_names
        return [*names, "image_sizes"]


def _processor_class(model_dir: Path) -> str | None:
    """The ``processor_class`` the folder's processor files name, else the one of its
    ``config.json`` ``model_type`` (:data:`_BY_MODEL_TYPE`), else None."""
    for name in (*PROCESSOR_FILES, "config.json"):
        path = model_dir / name
        if path.is_file():
            config = json.loads(path.read_text())
            found = config.get("processor_class") or _BY_MODEL_TYPE.get(config.get("model_type"))
            if found:
                return str(found)
    return None


def load_processor(model_dir: Path) -> Any:
    """The processor saved in ``model_dir`` (``processor_config.json`` or an image
    processor's ``preprocessor_config.json``), or None when the folder has none (a
    text-only model). Without ``torchvision``: Gemma 4's with :class:`NoVideos`,
    Ministral 3's as :class:`ImagesPixtralProcessor`, the image processor's PIL backend.

    Raises:
        ImportError, OSError, ValueError: transformers' own, when a processor is there but
            cannot load.
    """
    if not any((model_dir / n).is_file() for n in PROCESSOR_FILES):
        return None
    from transformers import AutoProcessor

    if is_torchvision_available():
        return AutoProcessor.from_pretrained(str(model_dir))
    name = _processor_class(model_dir)
    if name == "PixtralProcessor":
        return ImagesPixtralProcessor.from_pretrained(str(model_dir))
    if name == "Gemma4Processor":
        return ImagesGemma4Processor.from_pretrained(str(model_dir), video_processor=NoVideos())
    return AutoProcessor.from_pretrained(str(model_dir))
