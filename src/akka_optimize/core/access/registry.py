"""Access to registry artifacts and images (:mod:`akka_optimize.core.access.rules`): a
project token sees its own namespace and the shared base models, writes only into its own
namespace, and reads only its project's images."""

from __future__ import annotations

from typing import Any

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from ...db.models.registry import RegistryImage, RegistryImageProject, RegistryName, RegistryVersion
from ...errors import NotFound
from ...refs import parse_ref
from ...registry import resolve as registry_resolve
from ..auth import Principal
from .scope import refusal, scope, scoped_phrase

_LABEL = {"dataset": "Dataset", "bundle": "Scoring bundle", "model": "Model"}


def _is_base_model(session: Session, kind: str, namespace: str, name: str) -> bool:
    if kind != "model":
        return False
    q = select(RegistryVersion.id).join(RegistryName, RegistryName.id == RegistryVersion.name_id)
    q = q.where(
        RegistryName.kind == "model",
        RegistryName.namespace == namespace,
        RegistryName.name == name,
        RegistryVersion.source == "base",
    )
    return session.scalar(q.limit(1)) is not None


def can_see_artifact(
    principal: Principal | None, session: Session, kind: str, namespace: str, name: str
) -> bool:
    """Whether the caller sees ``kind`` ``namespace/name``: an admin sees all; a project
    token sees its namespace and the base models."""
    mine = scope(principal)
    ns, nm = namespace.lower(), name.lower()
    return mine is None or ns == mine or _is_base_model(session, kind, ns, nm)


def check_visible_ref(
    principal: Principal | None,
    session: Session,
    kind: str,
    ref: str,
    project: str | None = None,
    field: str = "ref",
) -> None:
    """Raise the 404 a missing artifact gets when the caller cannot see ``ref``.

    Raises:
        InvalidRequest: ``ref`` is malformed (as :func:`akka_optimize.refs.parse_ref`).
        NotFound: (``field``) ``ref`` is in a namespace the caller does not see.
    """
    r = parse_ref(ref, project, field=field)
    if not can_see_artifact(principal, session, kind, r.namespace, r.name):
        raise NotFound(f"{_LABEL[kind]} {r.repo} is not in the registry.", field=field)


def resolve(
    principal: Principal | None,
    session: Session,
    kind: str,
    ref: str,
    project: str | None = None,
    *,
    field: str = "ref",
) -> Any:
    """:func:`akka_optimize.registry.resolve` among the artifacts the caller sees."""

    check_visible_ref(principal, session, kind, ref, project, field)
    return registry_resolve(session, kind, ref, project, field=field)


def check_namespace_write(
    principal: Principal | None, namespace: str, action: str, field: str = "namespace"
) -> None:
    """A project token writes only into its own namespace. Raises Forbidden (``action``)."""
    mine = scope(principal)
    if mine is not None and namespace.strip().lower() != mine:
        raise refusal(
            action,
            f"Namespace {namespace!r} belongs to another project; {scoped_phrase(mine)}",
            field=field,
        )


def filter_names(
    principal: Principal | None, session: Session, kind: str, items: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The entries of a registry list (``{"name": "NS/NAME", …}``) the caller sees."""
    if scope(principal) is None:
        return items
    return [
        i for i in items if can_see_artifact(principal, session, kind, *i["name"].split("/", 1))
    ]


# -- images ------------------------------------------------------------------------
def can_read_image(principal: Principal | None, session: Session, digest: str) -> bool:
    """Whether ``digest`` is an image the caller may read: a registered image (never any
    other blob), and for a project token one that belongs to its project."""
    if session.get(RegistryImage, digest) is None:
        return False
    mine = scope(principal)
    if mine is None:
        return True
    q = select(
        exists().where(RegistryImageProject.digest == digest, RegistryImageProject.project == mine)
    )
    return bool(session.scalar(q))


def record_images(session: Session, project: str | None, digests: list[str]) -> None:
    """Record that ``digests`` belong to ``project`` (nothing for an admin's push)."""
    if not project:
        return
    project = project.lower()
    for digest in set(digests):
        if session.get(RegistryImageProject, (digest, project)) is None:
            session.add(RegistryImageProject(digest=digest, project=project))
    session.flush()
