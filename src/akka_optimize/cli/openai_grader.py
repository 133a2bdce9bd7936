"""``--grader openai:FILE.json`` (issue 51 item 3): an OpenAI grader object used by
``training evaluations start``.

The file is checked as OpenAI's ``graders/validate`` checks it
(:func:`akka_optimize.core.openai_ft.grading.check_grader`), written as a scoring bundle
(:func:`akka_optimize.core.openai_ft.bundle.reward_bundle`) and registered as a version of
``PROJECT/openai-grader``; the evaluation then grades with ``bundle:…#reward`` in the grader
sandbox, each row's ``ground_truth`` object being the grader's ``item`` (the rows of an
uploaded reinforcement file have it). A lone ``score_model`` grader is the platform's judge
``model:REF``; a grader holding another model grader is refused (the sandbox has no network).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from ..core.openai_ft.bundle import has_model_grader, reward_bundle
from ..core.openai_ft.grading import GraderError, check_grader
from .context import CliError
from .registry.packing import tar_dir
from .registry.transfer import upload

PREFIX = "openai:"


def grader_spec(spec: str, model: str | None, project: str | None) -> str:
    """The evaluation's ``grader`` for ``openai:FILE.json`` (other specs unchanged).

    The bundle goes to ``--project``, else the namespace of ``--model``.

    Raises:
        CliError: an unreadable file, an invalid grader (naming its field), no project.
    """
    if not spec.startswith(PREFIX):
        return spec
    path = Path(spec.removeprefix(PREFIX))
    try:
        grader = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CliError(f"--grader {spec}: cannot read the grader: {exc}") from None
    try:
        check_grader(grader)
    except GraderError as exc:
        raise CliError(f"--grader {spec}: {exc.param}: {exc.message}") from None
    if grader["type"] == "score_model":
        return f"model:{grader['model']}"
    if has_model_grader(grader):
        raise CliError(
            f"--grader {spec}: a {grader['type']} grader holding a model grader cannot run in the "
            "grader sandbox (it has no network); use a lone score_model grader."
        )
    owner = project or (model.split("/", 1)[0] if model and "/" in model else None)
    if not owner:
        raise CliError(f"--grader {spec}: give --project, where the grader is registered.")
    with tempfile.TemporaryDirectory() as tmp:
        archive = tar_dir(reward_bundle(grader, Path(tmp) / "b"), Path(tmp) / "grader.tar.gz")
        out = upload(f"/v1/registry/bundles/{owner}/openai-grader", archive, {}, None)
    return f"bundle:{owner}/openai-grader:{out['version']}#reward"
