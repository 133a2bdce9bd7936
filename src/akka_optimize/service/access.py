"""Who may see and change what: the one place the service decides access (issue 14 item 1).

A caller is a :class:`~akka_optimize.service.auth.Principal`:

- an **admin** (the development token, or a token issued without ``--project``) acts in
  every project;
- a **project token** (``server token create --project P``) acts only in ``P``.

For a project token:

- objects of other projects are invisible: a run, endpoint, project, registry version or
  image of another project answers the same 404 as one that does not exist, and lists
  leave them out;
- writes that name another project or registry namespace (a plan's ``project``, an
  endpoint's ``project``, ``registry … register B/NAME``, an alias or annotation of
  ``B/NAME``) and creating a project are refused with 403;
- base models (registry models of ``source="base"``) are shared: every token reads them.

For every token, work never links two projects: a branch, a warm start, an endpoint's
model and a comparison stay inside one project (403 otherwise).

Every 403 names its action, ``optimize.training.projects.<action>`` (:data:`ACTIONS`), in
its sentence and in ``error.details.action``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import exists, or_, select
from sqlalchemy.orm import Session

from ..db.models.jobs import Run
from ..db.models.projects import Project
from ..db.models.registry import (
    RegistryImage,
    RegistryImageProject,
    RegistryName,
    RegistryVersion,
)
from ..errors import Forbidden, InvalidRequest, NotFound
from ..refs import parse_ref
from .auth import Principal

PREFIX = "optimize.training.projects"
ACTIONS: dict[str, str] = {
    "create": "create a training project",
    "runs.start": "start or dry-run a run in a project (also each branch of a sweep)",
    "runs.branch": "branch a run from a snapshot of another project's run",
    "runs.warmStart": "warm-start a run from a model of another project",
    "runs.compare": "compare runs of two projects",
    "snapshots.register": "register a snapshot's adapter as a model version of a project",
    "endpoints.create": "create an endpoint in a project, or serve another project's model",
    "evaluations.create": "start an evaluation in a project, or score another project's model",
    "evaluations.cancel": "cancel an evaluation of a project",
    "comparisons.create": "start a comparison in a project, or of another project's model",
    "comparisons.cancel": "cancel a comparison of a project",
    "evaluations.settings": "set a project's evaluation settings",
    "curations.create": "start a curation in a project, or register its output in a namespace",
    "curations.cancel": "cancel a curation of a project",
    "pipelines.start": "start or dry-run a pipeline in a project",
    "pipelines.control": "cancel or resume a pipeline of a project",
    "datasets.register": "register a dataset version in a namespace",
    "bundles.register": "register a scoring-bundle version in a namespace",
    "models.register": "register a model version in a namespace",
    "aliases.set": "point an alias of a named artifact at a version",
    "annotations.set": "annotate a version of a named artifact",
}
_LABEL = {"dataset": "Dataset", "bundle": "Scoring bundle", "model": "Model"}


def action_name(action: str) -> str:
    """The full name ``optimize.training.projects.<action>``. Raises KeyError if unknown."""
    ACTIONS[action]
    return f"{PREFIX}.{action}"


def refusal(action: str, message: str, field: str | None = None) -> Forbidden:
    """A 403 naming ``action`` in its sentence and in ``details.action``."""
    full = action_name(action)
    return Forbidden(f"{message} (action {full}).", field=field, details={"action": full})


def scope(principal: Principal | None) -> str | None:
    """The one project a caller acts in, or None for an admin (every project).

    ``None`` as the principal is the service acting on its own behalf (an admin).
    """
    if principal is None or principal.kind == "dev" or principal.project is None:
        return None
    return principal.project.lower()


def _scoped_phrase(project: str) -> str:
    return f"this token acts only in training project {project!r}"


# -- projects ----------------------------------------------------------------------
def project_not_found(key: str) -> NotFound:
    """The 404 of a project that does not exist, or that the caller cannot see."""
    return NotFound(
        f"No training project {key!r}; create it with `training projects create NAME`.",
        field="project",
    )


def can_see_project(principal: Principal | None, name: str) -> bool:
    """Whether the caller sees the project called ``name``."""
    mine = scope(principal)
    return mine is None or name.lower() == mine


def check_create_project(principal: Principal | None, name: str) -> None:
    """Only an admin creates projects. Raises Forbidden (``create``)."""
    mine = scope(principal)
    if mine is not None:
        raise refusal(
            "create",
            f"Creating training project {name!r} needs an admin token; {_scoped_phrase(mine)}",
            field="name",
        )


def check_project_write(
    principal: Principal | None, project: Any, action: str, field: str = "project"
) -> None:
    """Refuse (403, naming ``action``) work a project token asks for in another project.

    A ``project`` that is not a string is left to the request's own validation.
    """
    mine = scope(principal)
    if mine is not None and isinstance(project, str) and project.strip().lower() != mine:
        raise refusal(
            action,
            f"{field} {project!r} is another training project; {_scoped_phrase(mine)}",
            field=field,
        )


def check_project_key_write(
    principal: Principal | None, session: Session, key: str, action: str, field: str = "project"
) -> None:
    """As :func:`check_project_write` for a project named by name or ID; any key that is
    not the caller's own project is refused alike, whether that project exists or not."""
    if scope(principal) is None:
        return
    q = select(Project.name).where(or_(Project.name == key.strip().lower(), Project.id == key))
    check_project_write(principal, session.scalar(q) or key, action, field)


def list_scope(principal: Principal | None, requested: str | None) -> tuple[bool, str | None]:
    """``(anything_visible, project_filter)`` for a list filtered by ``requested``.

    An admin gets ``(True, requested)``; a project token ``(True, its project)`` unless it
    asked for another project, which lists nothing: ``(False, None)``.
    """
    mine = scope(principal)
    if mine is None:
        return True, requested
    if requested and requested.lower() != mine:
        return False, None
    return True, mine


def project_id(principal: Principal | None, session: Session) -> str | None:
    """The ID of the caller's project (None for an admin; ``""`` when it does not exist)."""
    mine = scope(principal)
    if mine is None:
        return None
    return session.scalar(select(Project.id).where(Project.name == mine)) or ""


# -- runs --------------------------------------------------------------------------
def find_run(principal: Principal | None, session: Session, run_id: str) -> Run:
    """The run with this ID or unambiguous ID prefix among the runs the caller sees.

    Raises:
        NotFound: (field ``run``) no such run, or only other projects' runs match.
        InvalidRequest: (field ``run``) the prefix matches several visible runs.
    """
    mine = scope(principal)
    run = session.get(Run, run_id)
    if run is not None and (mine is None or run.project.lower() == mine):
        return run
    q = select(Run).where(Run.id.startswith(run_id.lower(), autoescape=True)).limit(3)
    if mine is not None:
        q = q.where(Run.project == mine)
    matches = session.scalars(q).all()
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise NotFound(f"No run {run_id!r}.", field="run")
    raise InvalidRequest(
        f"The run ID prefix {run_id!r} matches several runs; give more of it.", field="run"
    )


def check_branch(principal: Principal | None, session: Session, plan: dict[str, Any]) -> None:
    """A plan's ``branchFrom.run`` must be a visible run of the plan's own project.

    Raises:
        InvalidRequest: (``branchFrom.run``) the caller sees no such run (the sentence a
            missing run gets).
        Forbidden: (``runs.branch``) the run belongs to another project.
    """
    ref = plan.get("branchFrom")
    if not isinstance(ref, dict) or not ref.get("run"):
        return
    try:
        source = find_run(principal, session, str(ref["run"]))
    except NotFound as exc:
        raise InvalidRequest(f"branchFrom.run: {exc.message}", field="branchFrom.run") from exc
    project = str(plan.get("project", "")).lower()
    if source.project.lower() != project:
        raise refusal(
            "runs.branch",
            f"branchFrom.run {source.id} belongs to training project {source.project!r}, not "
            f"to the plan's project {project!r}; a branch stays in its source's project",
            field="branchFrom.run",
        )


def check_warm_start(plan: dict[str, Any]) -> None:
    """A resolved plan's ``warmStartModelId`` must name a model of the plan's project.

    Raises:
        Forbidden: (``runs.warmStart``) the model's namespace is another project's.
    """
    ref = plan.get("warmStartModelId")
    if not ref:
        return
    project = str(plan.get("project", "")).lower()
    r = parse_ref(str(ref), project, field="warmStartModelId")
    if r.namespace != project:
        raise refusal(
            "runs.warmStart",
            f"warmStartModelId {ref!r} is a model of namespace {r.namespace!r}, not of the "
            f"plan's project {project!r}; a run warm-starts only from its own project's models",
            field="warmStartModelId",
        )


def check_compare(run: Run, baseline: Run) -> None:
    """Two compared runs must belong to one project. Raises Forbidden (``runs.compare``)."""
    if run.project.lower() != baseline.project.lower():
        raise refusal(
            "runs.compare",
            f"Run {run.id} belongs to training project {run.project!r} and baseline "
            f"{baseline.id} to {baseline.project!r}; compare runs of one project",
            field="baseline",
        )


# -- registry ----------------------------------------------------------------------
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
    from ..registry import resolve as registry_resolve

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
            f"Namespace {namespace!r} belongs to another project; {_scoped_phrase(mine)}",
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


def find_project(session: Session, key: str, principal: Principal | None = None) -> Project:
    """The project named ``key`` (case-insensitive) or with ID ``key``, among those
    ``principal`` sees (every project when None).

    Raises:
        NotFound: (field ``project``) no such project, or one the caller does not see; the
            message says how to create it.
    """
    p = session.scalars(
        select(Project).where(or_(Project.name == key.lower(), Project.id == key))
    ).first()
    if p is None or not can_see_project(principal, p.name):
        raise project_not_found(key)
    return p


def project_of_model(
    principal: Principal | None,
    session: Session,
    model: Any,
    project: Project | None,
    action: str,
    *,
    work: str,
    field: str = "modelId",
) -> Project:
    """The project of ``work`` on ``model`` (a resolved model version), e.g. an evaluation
    or an endpoint: an adapter's own project when ``project`` is None; a base model needs
    ``project``, since it belongs to none.

    Args:
        work: what the work does with the model, for the sentence ("an evaluation of
            project P scores").

    Raises:
        Forbidden: (``action``, ``field``) ``project`` is not the adapter's project.
        InvalidRequest: (``project``) a base model without a project.
    """
    if model.source == "adapter":
        if project is None:
            return find_project(session, model.namespace, principal)
        if project.name != model.namespace:
            raise refusal(
                action,
                f"{model.repo} is a model of project {model.namespace!r}; "
                f"{work.format(project=repr(project.name))} only that project's models and "
                "base models",
                field=field,
            )
        return project
    if project is None:
        raise InvalidRequest(
            f"{model.repo} is a base model, which belongs to no project; name one with --project.",
            field="project",
        )
    return project
