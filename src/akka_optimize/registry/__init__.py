"""The artifact registry: datasets, scoring bundles, models and images, with versions,
aliases and digests (seeds/001 "Datasets/Scoring bundles/Models live in the registry").

Submodules: :mod:`.core` (names, versions, aliases, resolution), :mod:`.datasets`
(datasets and images), :mod:`.bundles` (scoring bundles), :mod:`.models` (base models and
trained adapters). Every later issue pins a reference at acceptance with :func:`resolve`
and records ``ResolvedVersion.pinned``.
"""

from .bundles import download_bundle, register_bundle
from .core import (
    KINDS,
    ResolvedVersion,
    annotate,
    list_names,
    list_versions,
    parse_version,
    resolve,
    set_alias,
)
from .datasets import (
    dataset_rows_view,
    is_prepared,
    load_dataset_rows,
    load_prepared_examples,
    open_object,
    push_image,
    register_dataset,
)
from .models import download_model_files, register_adapter, register_base_model

__all__ = [
    "KINDS",
    "ResolvedVersion",
    "annotate",
    "dataset_rows_view",
    "download_bundle",
    "download_model_files",
    "list_names",
    "list_versions",
    "is_prepared",
    "load_dataset_rows",
    "load_prepared_examples",
    "open_object",
    "parse_version",
    "push_image",
    "register_adapter",
    "register_base_model",
    "register_bundle",
    "register_dataset",
    "resolve",
    "set_alias",
]
