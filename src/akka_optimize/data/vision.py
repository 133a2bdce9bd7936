"""Image rows on a multimodal base model: its own processor puts the image tokens in the
rendered sequence (seeds/001 "Datasets live in the registry", F031; seeds/000 "Gemma 4
loads as the multimodal model it is").

A row names an image in a content part (``{"type": "image", "image": "sha256:…"}`` or
``{"type": "image_url", "image_url": {"url": …}}``); registration stored it and rewrote
the path to its digest (:mod:`akka_optimize.registry.images`). Training such a row:

1. Each image part becomes a text part holding the processor's image placeholder
   (``<start_of_image>`` for Gemma 3, ``<|image|>`` for Gemma 4, ``[IMG]`` for Ministral
   3), never trained, at its place in the content (:func:`with_placeholders`). The row is
   then text, so the chat template renders it and the loss mask comes from character
   offsets as for every row (:mod:`akka_optimize.data.render`).
2. The processor expands the rendered text (each placeholder to the image's tokens) and
   gives the vision tower's inputs (``pixel_values`` and what the family needs besides:
   ``token_type_ids`` for Gemma 3, ``image_position_ids`` and ``mm_token_type_ids`` for
   Gemma 4, ``image_sizes`` for Ministral 3) (:func:`expand`). The processor is the one in
   the model's folder (:func:`akka_optimize.data.processors.load_processor`, which loads
   Gemma 4's and Ministral 3's without ``torchvision``).
3. The weights follow the tokens: the two token sequences are aligned, tokens the
   processor inserted weigh 0, and every supervised token must come through unchanged,
   otherwise the row is refused naming it. Image tokens and the prompt never train.

A text-only base model (no processor in its folder) refuses an image row naming the row
and the model; the dry run and the start ask the same question
(:func:`akka_optimize.data.masks.encode_rows`). An image in an assistant turn is refused:
an answer is text.
"""

from __future__ import annotations

import base64
import difflib
import functools
import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from akka_optimize.data.sentinels import RenderError
from akka_optimize.data.types import Example

IMAGE_PART_TYPES = ("image", "image_url")


@dataclass(frozen=True)
class ImageInputs:
    """What encoding needs to train image rows on one base model.

    Attributes:
        model: the base model's reference, named in refusals.
        loader: ``loader()`` gives the model's Hugging Face processor (tokenizer + image
            processor), or None for a text-only model, which refuses image rows (as does
            a processor without an ``image_token``). Called
            at the first image row only, so text rows never load a processor.
        load: ``load(location) -> bytes`` of an image a row names (a ``sha256:`` digest in
            the registry); raises ``KeyError`` when it is not stored.
    """

    model: str
    loader: Callable[[], Any]
    load: Callable[[str], bytes]

    @functools.cached_property
    def processor(self) -> Any:
        """The processor (None: a text-only model).

        Raises:
            RenderError: (row 0) the processor is there but cannot load; the caller names
                the row.
        """
        try:
            return self.loader()
        except Exception as exc:  # e.g. a processor that needs torchvision where it is missing
            raise RenderError(
                0, f"the processor of base model {self.model} cannot load: {exc}"
            ) from exc

    @property
    def placeholder(self) -> str:
        """The string the processor expands into an image's tokens."""
        return str(self.processor.image_token)


def image_parts(row: dict[str, Any]) -> list[tuple[int, str]]:
    """``(message index, location)`` of every image part of a normalised row, in order."""
    out = []
    for i, m in enumerate(row.get("messages") or []):
        content = m.get("content")
        for part in content if isinstance(content, list) else ():
            if part.get("type") == "image":
                out.append((i, part["image"]))
            elif part.get("type") == "image_url":
                out.append((i, part["image_url"]["url"]))
    return out


def text_only_refusal(row_number: int, row: dict[str, Any], model: str) -> RenderError:
    """The refusal of an image row on a text-only base model, naming row and model."""
    where = sorted({f"messages[{i}].content" for i, _ in image_parts(row)})
    return RenderError(
        row_number,
        f"the row has images ({', '.join(where)}) and the base model {model} is text-only "
        "(its folder has no image processor). Train image rows on a multimodal base model "
        "(Gemma 3 4B and larger, Gemma 4, Ministral 3) or remove the images",
        [f"images ({w})" for w in where],
    )


def with_placeholders(row: dict[str, Any], row_number: int, placeholder: str) -> dict[str, Any]:
    """``row`` with each image part replaced by an untrained text part ``placeholder``.

    Raises:
        RenderError: an image in an assistant turn (an answer is text).
    """
    messages = []
    for i, m in enumerate(row["messages"]):
        content = m.get("content")
        if not isinstance(content, list) or all(p["type"] not in IMAGE_PART_TYPES for p in content):
            messages.append(m)
            continue
        if m["role"] == "assistant":
            raise RenderError(
                row_number,
                f"messages[{i}] is an assistant turn with an image; an answer is text, so "
                "put images in user (or system) messages",
            )
        parts = [
            {"type": "text", "text": placeholder, "train": False}
            if p["type"] in IMAGE_PART_TYPES
            else p
            for p in content
        ]
        messages.append({**m, "content": parts})
    return {**row, "messages": messages}


def _open(inputs: ImageInputs, location: str, row_number: int) -> Any:
    from PIL import Image

    try:
        if location.startswith("data:"):
            data = base64.b64decode(location.split(",", 1)[1])
        elif location.startswith("sha256:"):
            data = inputs.load(location)
        else:
            raise KeyError(location)
        return Image.open(io.BytesIO(data)).convert("RGB")
    except Exception as exc:
        raise RenderError(
            row_number,
            f"the image {location[:80]!r} cannot be read ({type(exc).__name__}); training reads "
            "images the registry stores (register the dataset with its images, or push them "
            "with `registry images push` and name them by digest) or data: URIs",
        ) from exc


def expand(inputs: ImageInputs, row: dict[str, Any], text: str, example: Example) -> Example:
    """The example of an image row with the processor's image tokens and vision inputs.

    Args:
        row: the normalised row (with its image parts).
        text: the rendered text (placeholders in place of the images).
        example: ``text``'s tokens and weights (the text tokenizer's).

    Returns:
        An :class:`Example` whose ``input_ids`` are the processor's (length L', image
        tokens included), whose weights are ``example``'s on the same tokens and 0 on the
        tokens the processor inserted, and whose ``vision`` holds the processor's other
        outputs as numpy arrays with batch dimension 1 (``pixel_values`` float32
        ``[1|images, 3, H, W]`` or patches, per family).

    Raises:
        RenderError: an image cannot be read, the processor refuses the row, or a
            supervised token does not come through the processor unchanged.
    """
    n = example.row
    images = [_open(inputs, loc, n) for _, loc in image_parts(row)]
    try:
        out = inputs.processor(text=[text], images=[images], return_tensors="np")
    except Exception as exc:
        raise RenderError(n, f"the base model's processor refuses the row: {exc}") from exc
    ids = [int(t) for t in out["input_ids"][0]]
    weights = [0.0] * len(ids)
    old = example.input_ids
    matcher = difflib.SequenceMatcher(None, old, ids, autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            weights[b0:b1] = example.weights[a0:a1]
        elif any(example.weights[a0:a1]):
            raise RenderError(
                n,
                "the base model's processor changes supervised tokens (tokens "
                f"{a0}..{a1 - 1} of the rendered row) while inserting the image tokens",
            )
    weights[0] = 0.0
    vision = {k: v for k, v in out.items() if k not in ("input_ids", "attention_mask")}
    return Example(ids, weights, n, vision=vision)


def _processor(inputs: ImageInputs, row_number: int) -> Any:
    try:
        return inputs.processor
    except RenderError as err:
        raise RenderError(row_number, err.message.split(": ", 1)[1]) from err


def text_rows(
    rows: list[dict[str, Any]],
    numbers: list[int],
    inputs: ImageInputs | None,
    errors: list[RenderError] | None,
) -> tuple[list[dict[str, Any]], list[int]]:
    """Rows and numbers to render: image rows with placeholders (step 1), the rows that
    cannot train images left out (appended to ``errors``, or the first raised). With
    ``inputs`` None (a caller that knows no model) the rows are as given, and
    :func:`akka_optimize.data.render.render_rows` refuses image rows."""
    if inputs is None:
        return rows, numbers
    out_rows, out_numbers = [], []
    for row, n in zip(rows, numbers, strict=True):
        kept = _kept(errors, _with_placeholders, inputs, row, n) if image_parts(row) else row
        if kept is not None:
            out_rows.append(kept)
            out_numbers.append(n)
    return out_rows, out_numbers


def _with_placeholders(inputs: ImageInputs, row: dict[str, Any], n: int) -> dict[str, Any]:
    processor = _processor(inputs, n)
    if processor is None or not getattr(processor, "image_token", None):
        raise text_only_refusal(n, row, inputs.model)
    return with_placeholders(row, n, inputs.placeholder)


def _kept(errors: list[RenderError] | None, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, or None with its :class:`RenderError` appended to ``errors`` (raised
    when ``errors`` is None)."""
    try:
        return fn(*args)
    except RenderError as err:
        if errors is None:
            raise
        errors.append(err)
        return None


def expand_all(
    inputs: ImageInputs | None,
    rows: dict[int, dict[str, Any]],
    encoded: list[Any],
    errors: list[RenderError] | None,
) -> list[Any]:
    """``encoded`` (:class:`akka_optimize.data.masks.Encoded`) with each image row's
    example through :func:`expand` (step 2-3); ``rows`` by row number are the original
    rows. Rows it refuses are left out (appended to ``errors``, or the first raised)."""
    if inputs is None:
        return encoded
    out = []
    for enc in encoded:
        row = rows[enc.example.row]
        if image_parts(row):
            enc.example = _kept(errors, expand, inputs, row, enc.rendered.text, enc.example)
        if enc.example is not None:
            out.append(enc)
    return out
