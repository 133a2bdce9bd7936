"""OpenAI's fine-tuning objects as this service answers them (issue 51): the shapes of the
openai SDK's ``FileObject``, ``FineTuningJob``, ``FineTuningJobEvent``,
``FineTuningJobCheckpoint`` and the graders' run/validate answers
(:mod:`akka_optimize.core.openai_ft` builds them)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .common import View


class OpenAIFile(View):
    """An uploaded file: a version of the dataset ``PROJECT/openai-files``."""

    id: str = Field(description="file-PROJECT-vN: version N of PROJECT/openai-files.")
    object: str = Field(description="Always `file`.")
    bytes: int = Field(description="Size of the file as uploaded, bytes.")
    created_at: int = Field(description="When it was registered (Unix seconds).")
    filename: str = Field(description="The uploaded file's name.")
    purpose: str = Field(description="Always `fine-tune`.")
    status: str = Field(description="Always `processed` (checked and registered at upload).")
    expires_at: int | None = Field(None, description="Never set: files do not expire.")
    status_details: str | None = Field(None, description="The rows' format and dataset version.")


class OpenAIFileList(View):
    """A page of files."""

    object: str = Field(description="Always `list`.")
    data: list[OpenAIFile] = Field(description="The files, newest first.")
    first_id: str | None = Field(description="The first file's ID.")
    last_id: str | None = Field(description="The last file's ID (the next page's `after`).")
    has_more: bool = Field(description="Whether more files follow.")


class OpenAIFileDeleted(View):
    """A deleted (hidden) file."""

    id: str = Field(description="The file's ID.")
    object: str = Field(description="Always `file`.")
    deleted: bool = Field(description="Always true.")


class OpenAIJobError(View):
    """Why a job failed."""

    code: str = Field(description="`run_failed`.")
    message: str = Field(description="The run's one-sentence failure reason.")
    param: str | None = Field(description="Always null.")


class OpenAIHyperparameters(View):
    """The resolved hyperparameters (OpenAI's legacy field; a dpo job's beta is in
    `method.dpo.hyperparameters`)."""

    n_epochs: int | None = Field(description="Epochs (training.epochs).")
    batch_size: int | None = Field(description="Rows per update.")
    learning_rate_multiplier: float | None = Field(description="Learning rate / the default.")


class OpenAIMethod(View):
    """The job's method with its resolved hyperparameters (and grader)."""

    type: str = Field(description="`supervised`, `dpo` or `reinforcement`.")
    supervised: dict[str, Any] | None = Field(None, description="{hyperparameters}.")
    reinforcement: dict[str, Any] | None = Field(None, description="{hyperparameters, grader}.")
    dpo: dict[str, Any] | None = Field(
        None,
        description="{hyperparameters} (n_epochs, batch_size, learning_rate_multiplier, beta).",
    )


class OpenAIJob(View):
    """A fine-tuning job: a run of this platform (`training runs get RUN`)."""

    id: str = Field(description="ftjob-RUN.")
    object: str = Field(description="Always `fine_tuning.job`.")
    created_at: int = Field(description="Unix seconds.")
    finished_at: int | None = Field(description="Unix seconds, or null.")
    error: OpenAIJobError | None = Field(description="Set when the job failed.")
    fine_tuned_model: str | None = Field(description="ft:BASE:SUFFIX:RUN once succeeded.")
    hyperparameters: OpenAIHyperparameters = Field(description="Resolved hyperparameters.")
    model: str = Field(description="The base model (a catalog repository).")
    organization_id: str = Field(description="org-PROJECT.")
    result_files: list[str] = Field(description="Always empty.")
    seed: int = Field(description="The seed the run trains with.")
    status: str = Field(description="validating_files, queued, running, paused, succeeded, ...")
    trained_tokens: int | None = Field(description="Tokens trained, once succeeded.")
    training_file: str = Field(description="The training file's ID.")
    validation_file: str | None = Field(description="The validation file's ID.")
    estimated_finish: int | None = Field(description="Always null.")
    integrations: list[Any] = Field(description="Always empty.")
    metadata: dict[str, str] | None = Field(description="The job's metadata.")
    method: OpenAIMethod = Field(description="The method as resolved.")
    user_provided_suffix: str | None = Field(description="The suffix given.")


class OpenAIJobList(View):
    """A page of jobs."""

    object: str = Field(description="Always `list`.")
    data: list[OpenAIJob] = Field(description="Jobs, newest first.")
    first_id: str | None = Field(description="The first job's ID.")
    last_id: str | None = Field(description="The last job's ID.")
    has_more: bool = Field(description="Whether more jobs follow.")


class OpenAIJobEvent(View):
    """One event of a job."""

    id: str = Field(description="The event's ID.")
    object: str = Field(description="Always `fine_tuning.job.event`.")
    created_at: int = Field(description="Unix seconds.")
    level: str = Field(description="info, warn or error.")
    message: str = Field(description="One sentence.")
    data: dict[str, Any] | None = Field(description="A metrics event's values (train_loss...).")
    type: str = Field(description="message or metrics.")


class OpenAIJobEventList(View):
    """A page of events, newest first."""

    object: str = Field(description="Always `list`.")
    data: list[OpenAIJobEvent] = Field(description="Events, newest first.")
    first_id: str | None = Field(description="The first event's ID.")
    last_id: str | None = Field(description="The last event's ID.")
    has_more: bool = Field(description="Whether more events follow.")


class OpenAICheckpoint(View):
    """A snapshot that kept an adapter."""

    id: str = Field(description="ftckpt-RUN-STEP.")
    object: str = Field(description="Always `fine_tuning.job.checkpoint`.")
    created_at: int = Field(description="Unix seconds.")
    fine_tuned_model_checkpoint: str = Field(description="ft:BASE:SUFFIX:RUN:ckpt-step-N.")
    fine_tuning_job_id: str = Field(description="The job's ID.")
    metrics: dict[str, float | int | None] = Field(description="train_loss, valid_loss... at it.")
    step_number: int = Field(description="The update it was saved after.")


class OpenAICheckpointList(View):
    """A page of checkpoints, newest first."""

    object: str = Field(description="Always `list`.")
    data: list[OpenAICheckpoint] = Field(description="Checkpoints, newest first.")
    first_id: str | None = Field(description="The first checkpoint's ID.")
    last_id: str | None = Field(description="The last checkpoint's ID.")
    has_more: bool = Field(description="Whether more checkpoints follow.")


class OpenAIGraderRun(View):
    """A grader's score for one sample (OpenAI's `GraderRunResponse`)."""

    reward: float = Field(description="The score.")
    metadata: dict[str, Any] = Field(description="name, type, errors, execution_time, scores.")
    sub_rewards: dict[str, Any] = Field(description="A multi grader's sub-graders' scores.")
    model_grader_token_usage_per_model: dict[str, Any] = Field(description="Always empty.")


class OpenAIGraderValidate(View):
    """A valid grader, as given."""

    grader: dict[str, Any] = Field(description="The grader object.")
