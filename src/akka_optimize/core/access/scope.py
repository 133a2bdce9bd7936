"""The terms every access decision is made in (:mod:`akka_optimize.core.access.rules`):
the actions a 403 names (:data:`ACTIONS`), the refusal itself, and the one project a
caller acts in (:func:`scope`)."""

from __future__ import annotations

from ...errors import Forbidden
from ..auth import Principal

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
    "recipes.submit": "submit a minifield recipe run to a project",
    "pipelines.start": "start or dry-run a pipeline in a project",
    "pipelines.control": "cancel or resume a pipeline of a project",
    "datasets.register": "register a dataset version in a namespace",
    "bundles.register": "register a scoring-bundle version in a namespace",
    "models.register": "register a model version in a namespace",
    "aliases.set": "point an alias of a named artifact at a version",
    "annotations.set": "annotate a version of a named artifact",
    "metrics.read": "read the service's Prometheus metrics (they name every project's runs)",
}


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


def scoped_phrase(project: str) -> str:
    return f"this token acts only in training project {project!r}"
