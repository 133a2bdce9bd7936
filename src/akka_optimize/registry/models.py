"""Models in the registry (seeds/001 "Models live in the registry", "Registered names").

Two kinds of model version share the ``model`` kind:

- a base model (``source="base"``), named by its hub repository in lower case
  (``Qwen/Qwen3-0.6B`` → ``qwen/qwen3-0.6b``), one version per repository commit;
- a trained adapter (``source="adapter"``), a version of a named model in a project's
  namespace, recording its base-model version, the model a reinforcement run started from
  and the producing run. Its files are stored as blobs; the digest is over the manifest
  of relative paths and file digests, so the same files give the same version.

Name guards: a trained model is refused under a name that holds base-model versions, or
that holds versions trained on another base model (another repository).
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.models.registry import RegistryName, RegistryVersion
from ..errors import Conflict, InvalidRequest
from ..refs import Ref, parse_ref, repository_ref, validate_name
from ..store import BlobStore, content_key
from .core import ResolvedVersion, check_alias, find_name, register_version, resolve, sha256_json
from .datasets import store_file


def _sources(s: Session, n: RegistryName) -> list[tuple[str | None, str | None]]:
    return list(
        s.execute(
            select(RegistryVersion.source, RegistryVersion.base_model).where(
                RegistryVersion.name_id == n.id
            )
        ).all()
    )


def register_base_model(
    session: Session, repository: str, *, commit: str | None, metadata: dict[str, Any]
) -> ResolvedVersion:
    """Register a selected base model as a version of ``owner/repo`` (lower case).

    Registering the same repository and commit again returns the existing version; a new
    commit gives the next version (seeds/001: "Selecting a base model in the catalog
    registers it … qwen/qwen3-0.6b:v2").

    Args:
        repository: the hub repository, any case (``Qwen/Qwen3-0.6B``).
        commit: the weights' revision, or None when unknown.
        metadata: extra facts to record (family, source, sizes…); stored with
            ``repository`` (original case) and ``commit``.

    Raises:
        InvalidRequest: (field ``repository``) the registry cannot name the repository.
        Conflict: the name already holds trained-model versions.
    """
    ref = repository_ref(repository)
    identity = {"repository": ref.repo, "commit": commit}

    def check(s: Session, n: RegistryName) -> None:
        if any(src == "adapter" for src, _ in _sources(s, n)):
            raise Conflict(
                f"Model {ref.repo} holds trained-model versions, so base model {repository} "
                "cannot be registered under that name.",
                field="repository",
            )

    meta = {**metadata, "repository": repository, "commit": commit}
    rv, _ = register_version(
        session, "model", ref, sha256_json(identity), check=check, metadata_=meta, source="base"
    )
    return rv


def _adapter_files(adapter_dir: Path) -> list[tuple[str, Path]]:
    if not adapter_dir.is_dir():
        raise InvalidRequest(f"Adapter folder {adapter_dir} does not exist.", field="adapter_dir")
    out = []
    for root, dirs, files in os.walk(adapter_dir):
        dirs.sort()
        for f in sorted(files):
            p = Path(root) / f
            if p.is_symlink():
                raise InvalidRequest(f"Adapter file {p} is a symbolic link.", field="adapter_dir")
            out.append((p.relative_to(adapter_dir).as_posix(), p))
    if not out:
        raise InvalidRequest(f"Adapter folder {adapter_dir} holds no files.", field="adapter_dir")
    return out


def _base_repo(pinned: str | None) -> str | None:
    return parse_ref(pinned).repo if pinned else None


def _name_refusal(
    sources: list[tuple[str | None, str | None]], repo: str, base_repo: str
) -> Conflict | None:
    for src, other in sources:
        if src == "base":
            return Conflict(
                f"Model {repo} holds base-model versions, so a trained model cannot be "
                f"registered under it. Set modelName to give the trained model its own name.",
                field="modelName",
                code="model_name_taken",
            )
        if src == "adapter" and _base_repo(other) != base_repo:
            return Conflict(
                f"Model {repo} holds versions trained on {_base_repo(other)}, not "
                f"{base_repo}. Set modelName to give the models separate names.",
                field="modelName",
                code="model_name_taken",
            )
    return None


def trained_name_refusal(
    session: Session, namespace: str, name: str, base_model: str
) -> Conflict | None:
    """The refusal a trained model under ``namespace/name`` would meet (F049), or None.

    A run checks this when it is submitted, so a name that holds base-model versions, or
    versions trained on another base model, is refused before any training (seeds/001
    "Registered names"); :func:`register_adapter` applies the same rule when it registers.

    Args:
        base_model: the run's base model, a repository (``Qwen/Qwen3-0.6B``) or a
            registry reference of a base-model version (``qwen/qwen3-0.6b:v1``).

    Returns:
        A :class:`Conflict` (``code`` ``model_name_taken``, field ``modelName``) or None.
    """

    n = find_name(session, "model", namespace.lower(), name.lower())
    if n is None:
        return None
    return _name_refusal(
        _sources(session, n), f"{namespace}/{name}".lower(), _base_repo(base_model)
    )


def register_adapter(
    session: Session,
    store: BlobStore,
    namespace: str,
    name: str,
    adapter_dir: Path,
    *,
    base_model: str,
    run_id: str | None,
    metadata: dict[str, Any],
    parent_model: str | None = None,
    alias: str | None = None,
) -> ResolvedVersion:
    """Register a trained adapter folder as the next version of ``namespace/name``.

    Args:
        adapter_dir: a PEFT adapter folder (``adapter_config.json``, weights…); every file
            is stored as a content-addressed blob.
        base_model: a reference to the base-model version it was trained on (pinned
            ``owner/repo:vN@sha256:…`` preferred); resolved and recorded pinned.
        run_id: the producing run.
        metadata: facts to record (method, steps, metrics…).
        parent_model: the model version a reinforcement run started from.
        alias: an alias to point at the version (``candidate``…).

    Returns:
        The version (an existing one when the same files were registered before).

    Raises:
        Conflict: (field ``modelName``) the name holds base-model versions, or versions
            trained on another base model (seeds/001 "Registered names").
        NotFound: ``base_model`` or ``parent_model`` is not in the registry.
    """
    ref = Ref(validate_name(namespace, "namespace"), validate_name(name, "modelName"))
    if alias:
        check_alias(alias)  # before any blob is stored
    base = resolve(session, "model", base_model, field="baseModel")
    if base.source != "base":
        raise InvalidRequest(
            f"{base_model} is not a base model version; name the base model it was trained on.",
            field="baseModel",
        )
    parent = resolve(session, "model", parent_model, field="parentModel") if parent_model else None

    def check(s: Session, n: RegistryName) -> None:
        refusal = _name_refusal(_sources(s, n), ref.repo, base.repo)
        if refusal is not None:
            raise refusal

    files: dict[str, Any] = {}
    for rel, p in _adapter_files(adapter_dir):
        digest, size = store_file(store, p)
        files[rel] = {"digest": digest, "size": size}
    digest = sha256_json({k: v["digest"] for k, v in files.items()})
    rv, _ = register_version(
        session,
        "model",
        ref,
        digest,
        alias=alias,
        check=check,
        size=sum(v["size"] for v in files.values()),
        files=files,
        metadata_=dict(metadata),
        source="adapter",
        base_model=base.pinned,
        parent_model=parent.pinned if parent else None,
        run_id=run_id,
    )
    return rv


def download_model_files(store: BlobStore, resolved: ResolvedVersion, dest: Path) -> Path:
    """Materialise a version's files (an adapter folder) under ``dest``. Returns ``dest``.

    Raises:
        InvalidRequest: the version has no stored files (a base model: its weights live in
            the weights cache, not the registry).
        NotFound: a blob is missing from the store.
    """
    if not resolved.files:
        raise InvalidRequest(
            f"{resolved.kind.capitalize()} {resolved.pinned} has no stored files; base-model weights "
            "come from the weights cache.",
            field="ref",
        )
    dest = Path(dest)
    for rel, info in resolved.files.items():
        p = PurePosixPath(rel)
        if p.is_absolute() or ".." in p.parts:
            raise InvalidRequest(f"Stored file {rel!r} escapes the model folder.", field="ref")
        out = dest / p
        out.parent.mkdir(parents=True, exist_ok=True)
        store.get_file(content_key(info["digest"].removeprefix("sha256:")), out)
    return dest
