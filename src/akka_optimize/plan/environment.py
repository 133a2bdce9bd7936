"""What resolution needs from the world, as a Protocol the service (or a test) provides.

:func:`akka_optimize.plan.resolve.resolve_plan` reads the deployment file, asks whether
the project exists, pins registry references and reads the base model's catalog entry
through this interface, so ``plan/`` imports neither HTTP nor database code (DESIGN.md
"Layout"). :mod:`akka_optimize.core.plans` implements it over the registry and the
catalog.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ..deployment import Deployment

GEMMA4_FLEX_VARIANTS = frozenset({"E2B", "E4B", "12B"})
"""Gemma 4 sizes that may use flex_attention (seeds/001 "Flex attention for Gemma 4")."""
LIGER_VERIFIED_VARIANTS = frozenset({"E2B", "E4B"})
"""Gemma 4 sizes verified for Liger RMSNorm and GeGLU (seeds/001; 12B is not)."""


@dataclass(frozen=True)
class CatalogEntryView:
    """What plan resolution reads from a base model's catalog entry.

    Attributes:
        repository: the hub repository as the catalog spells it (``google/gemma-4-E4B-it``).
        family: the model family in lower case (``gemma4``, ``gemma3``, ``ministral``,
            ``llama``, ``smollm2`` …).
        variant: the size within the family as the catalog names it (``E2B``, ``E4B``,
            ``12B``, ``135M`` …), or None; with ``family`` it decides the Gemma 4 rules.
        max_context_tokens: the longest sequence the model takes (caps ``maxSeqLength``),
            or None when the catalog does not say.
        qualified_tokens: per device-profile name, the token limit of one pass on one
            device the entry was qualified at (caps ``tokensPerGpu`` and a flex_attention
            run's padded pass). A profile that is absent has no qualified limit.
        measured: whether the envelope was measured by a run (False: an estimate).
    """

    repository: str
    family: str
    variant: str | None = None
    max_context_tokens: int | None = None
    qualified_tokens: Mapping[str, int] = field(default_factory=dict)
    measured: bool = False

    @property
    def is_gemma4(self) -> bool:
        """Whether this is a Gemma 4 model."""
        return self.family.lower().replace("-", "").replace("_", "") == "gemma4"

    @property
    def flex_attention_allowed(self) -> bool:
        """Gemma 4 E2B, E4B or 12B (seeds/001 "Flex attention for Gemma 4")."""
        return self.is_gemma4 and (self.variant or "").upper() in GEMMA4_FLEX_VARIANTS

    @property
    def liger_verified(self) -> bool:
        """Gemma 4 E2B or E4B (seeds/001 "Set the training engine's settings directly")."""
        return self.is_gemma4 and (self.variant or "").upper() in LIGER_VERIFIED_VARIANTS

    def qualified_limit(self, profile: str) -> int | None:
        """The qualified token limit on device profile ``profile`` (case-insensitive)."""
        for name, limit in self.qualified_tokens.items():
            if name.lower() == profile.lower():
                return int(limit)
        return None


@runtime_checkable
class PlanEnvironment(Protocol):
    """The world a plan resolves against.

    Attributes:
        deployment: the deployment file in force.
        cuda_available: whether this machine has a CUDA device (picks the default device
            profile when the deployment names none).
    """

    deployment: Deployment
    cuda_available: bool

    def project_exists(self, name: str) -> bool:
        """Whether the training project ``name`` (lower case) exists."""
        ...

    def resolve_dataset(self, ref: str, project: str) -> str:
        """Pin a dataset reference in ``project`` to ``ns/name:vN@sha256:…``.

        Raises:
            NotFound: no such dataset or version. InvalidRequest: a malformed reference.
        """
        ...

    def resolve_artifact(self, kind: str, ref: str, project: str) -> str:
        """Pin a ``model`` or ``bundle`` reference in ``project`` (as :meth:`resolve_dataset`)."""
        ...

    def catalog_entry(self, repository: str) -> CatalogEntryView | None:
        """The catalog entry of ``repository`` (case-insensitive), or None when the
        deployment's catalog does not allow it."""
        ...
