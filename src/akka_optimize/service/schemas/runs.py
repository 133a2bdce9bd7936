"""Response schemas of the runs resource (``/v1/training/runs``): a run's view, its
metrics, samples, saves, lineage, loss comparison, sweep and control answers, and the
dry-run report (views in :mod:`akka_optimize.jobs.views`, :mod:`akka_optimize.plan.dryrun`)."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from .common import ProjectFields, Refusal, View, iso_time
from .evals import ComparisonView


class StartCheck(View):
    """One check before the first update (issue 23; ``runs get --checks``)."""

    name: str = Field(description="The check: head, isolation, packing or reference.")
    value: float = Field(description="What it measured (largest absolute difference).")
    bound: float = Field(description="The bound it must not pass.")
    passed: bool = Field(description="Whether value is at most bound.")
    positions: int = Field(description="Token positions the check compared.")
    setting: str = Field(description="The plan field that sets the bound.")


class TrainedAnswers(View):
    """The trained adapter's greedy answers, taken by the worker before saving it."""

    prompts: list[str] = Field(description="The served = trained check's user messages.")
    instructions: str | None = Field(description="The system message put before each.")
    answers: list[str] = Field(
        description="Greedy answers (at most 16 tokens), one per prompt; an endpoint "
        "serving the run's model answers the same at temperature 0."
    )
    tokens: list[list[int]] = Field(
        description="Each answer's token ids (a stop token last when it stopped)."
    )
    logprobs: list[list[float]] = Field(
        description="The log-probability (nats) of each of those tokens, as trained."
    )


class RunResults(View):
    """What a run has produced so far (null members until known)."""

    rewardStart: float | None = Field(description="Mean reward of the first update (rl).")
    rewardFinal: float | None = Field(description="Mean reward of the last update (rl).")
    model: str | None = Field(description="The registered model version, pinned, or null.")
    step: int | None = Field(description="The last finished update.")
    totalSteps: int | None = Field(description="Updates the run will train.")
    lastSavedStep: int | None = Field(description="The newest kept save's update.")
    finalLoss: float | None = Field(description="Loss of the last update (nats per token).")
    meanLoss: float | None = Field(description="Mean loss over the run's updates.")
    validationLoss: float | None = Field(description="The newest validation loss.")
    adaptedModules: Any = Field(description="The modules LoRA adapted (names and counts).")
    warnings: list[Any] | None = Field(description="Sanity warnings the engine raised.")
    tokensPerSecond: float | None = Field(description="Trained tokens per wall second.")
    data: Any = Field(description="Rows and tokens the run trains on, as the worker read them.")
    epochModels: Any = Field(description="Models registered at epoch ends, by epoch.")
    smoke: Any = Field(description="A smoke run's reading (reproduction, threshold…).")
    unrecordedSaves: Any = Field(description="Saves the service could not record.")
    preparing: Any = Field(description="What the worker is preparing before training.")
    checks: list[StartCheck] | None = Field(
        description="The checks before the first update, in the order run."
    )
    checksPassed: bool | None = Field(description="Whether every check passed.")
    ended: str | None = Field(description="Why a Tinker training client's run ended.")
    trainedAnswers: TrainedAnswers | None = Field(
        description="A supervised run's adapter's answers to the served = trained check's "
        "prompts, as trained (null until it finishes, and on several devices)."
    )


class RunCost(View):
    """What a run has cost."""

    device: str | None = Field(description="The device kind (cpu, cuda).")
    gpus: int | None = Field(description="Devices the run holds.")
    wallSeconds: float = Field(description="Seconds from start to end (or now).")
    deviceSeconds: float = Field(description="Wall seconds on an accelerator (0 on cpu).")
    trainedTokens: int | None = Field(description="Tokens trained on.")


class RecipeComputation(View):
    """A recipe run's computation (``method`` ``recipe``; seeds/003) and, once it has
    them, where the claiming worker wrote its outputs (paths on the worker's machine)."""

    strategy: str = Field(description="The strategy (packed-sft, packed-qat, two-stage).")
    computation: str = Field(description="The recipe computation version (12.0.0…).")
    schemaVersion: str = Field(description="The recipe's schema_version.")
    implementation: str = Field(description="The recipe's model.implementation.")
    computationIdentity: str = Field(description="sha256 of the settings the identity binds.")
    updates: int = Field(description="Optimizer updates the plan runs.")
    final: str | None = Field(None, description="The trained weights' folder.")
    export: str | None = Field(None, description="The minifield.ternary.v1 export (QAT).")
    checkpoint: Any = Field(None, description="The newest checkpoint: {step, path}.")
    worker: str | None = Field(None, description="The worker that claimed the last attempt.")


class RecipeClaim(View):
    """A claimed recipe run, as ``minifield-worker supervise`` receives it."""

    run: str = Field(description="The run's ID.")
    project: str = Field(description="The run's project.")
    attempt: int = Field(description="The attempt's number (1-based).")
    token: str = Field(description="The attempt's worker token (for its events only).")
    recipe: dict[str, Any] = Field(description="The recipe as submitted.")
    computation: RecipeComputation = Field(description="What the service computed for it.")
    settings: dict[str, Any] = Field(description="The settings the identity binds.")
    eventsPath: str = Field(description="The attempt's events route.")
    heartbeatSeconds: int = Field(
        description="The run fails after this long without an event "
        "(service.recipeHeartbeatSeconds); send a heartbeat every quarter of it."
    )


class RecipeClaimAnswer(View):
    """The answer to a claim: the claimed run, or null when none came within ``wait``."""

    job: RecipeClaim | None = Field(description="The claimed run, or null.")


class RunView(ProjectFields):
    """A run in three parts: state, results and cost (seeds/001); ``settings`` on request.
    A reinforcement run (``method`` ``rl``) also shows its reward and judge."""

    id: str = Field(description="The run's ID (32 hex digits).")
    method: str = Field(description="sft, rl, or recipe (a minifield recipe run).")
    baseModel: str | None = Field(description="The pinned base-model version.")
    dataset: str | None = Field(description="The pinned training dataset version.")
    validationDataset: str | None = Field(description="The pinned validation dataset.")
    modelName: str | None = Field(description="The name the trained model registers under.")
    configHash: str | None = Field(description="sha256 of the resolved configuration.")
    state: str = Field(description="QUEUED, STARTING, RUNNING, PAUSED, SUCCEEDED, FAILED…")
    phase: str | None = Field(description="What the run is doing now, in words.")
    queueReason: str | None = Field(description="Why a QUEUED run waits; null otherwise.")
    failure: str | None = Field(description="Why the run failed: one sentence.")
    createdAt: str | None = iso_time("When the run was accepted")
    startedAt: str | None = iso_time("When its first attempt started")
    finishedAt: str | None = iso_time("When it ended")
    branchFrom: Any = Field(description="The run and snapshot it branched from, or null.")
    warmStartModelId: str | None = Field(description="The model it warm-started from.")
    claims: Any = Field(description="The devices it claims, by pool.")
    results: RunResults = Field(description="What the run has produced so far.")
    cost: RunCost = Field(description="What the run has cost.")
    reward: str | None = Field(None, description="(rl) The reward's specification.")
    rewardBundle: str | None = Field(None, description="(rl) The pinned scoring bundle.")
    judge: str | None = Field(None, description="(rl) The pinned judge model, for model:.")
    judgeEndpoint: str | None = Field(None, description="(rl) The judge's endpoint ID.")
    graderInstructions: str | None = Field(None, description="(rl) The judge's instructions.")
    instructionsSource: str | None = Field(None, description="(rl) Where they came from.")
    settings: dict[str, Any] | None = Field(
        None, description="The frozen resolved plan (with settings=true)."
    )
    recipe: RecipeComputation | None = Field(
        None, description="(recipe) The strategy, computation and identity; its outputs."
    )


class RunList(View):
    """Newest runs first (at most ``limit``), of the projects the caller sees."""

    runs: list[RunView] = Field(description="The runs, newest first.")


class Measurement(View):
    """One update's measurement: ``step``, ``attempt`` and the values the worker sent
    (``loss``, ``gradNorm``, ``lr``, ``epoch``, ``tokens``, …; reward statistics for rl)."""

    model_config = ConfigDict(extra="allow")
    step: int = Field(description="The update (1-based).")
    attempt: int = Field(description="The attempt that measured it (newest wins).")


class RunMetrics(View):
    """Per-update metrics, validation records and a smoke run's readings."""

    run: str = Field(description="The run's ID.")
    metrics: list[Measurement] = Field(description="One record per update, oldest first.")
    validation: list[Measurement] = Field(description="Validation measurements.")
    smoke: list[Measurement] = Field(description="A smoke run's readings.")
    finalLoss: float | None = Field(description="Loss of the last update.")
    meanLoss: float | None = Field(description="Mean loss over the updates.")
    warnings: list[Any] = Field(description="Sanity warnings the engine raised.")


class RunSamples(View):
    """A reinforcement run's shown samples per update (prompt, completion, reward,
    advantage, error), oldest update first."""

    run: str = Field(description="The run's ID.")
    updates: list[Measurement] = Field(description="Per update: step, attempt, samples.")


class SnapshotBytes(View):
    """Stored bytes of a save."""

    state: int = Field(description="Bytes of the resumable training state.")
    adapter: int = Field(description="Bytes of the kept adapter.")
    total: int = Field(description="state + adapter.")


class SnapshotView(View):
    """One save of a run."""

    run: str = Field(description="The run's ID.")
    step: int = Field(description="The update it was saved after.")
    name: str = Field(description="step-N.")
    epoch: int | None = Field(description="The epoch it was saved in.")
    epochEnd: bool | None = Field(description="Whether it closes an epoch.")
    recoverable: bool = Field(description="Whether a resume can start from it.")
    hasAdapter: bool = Field(description="Whether its adapter is still stored.")
    model: str | None = Field(description="The model version registered from it, or null.")
    bytes: SnapshotBytes = Field(description="Its stored bytes.")
    createdAt: str | None = iso_time("When it was saved")


class SnapshotList(View):
    """A run's saves, oldest first."""

    run: str = Field(description="The run's ID.")
    snapshots: list[SnapshotView] = Field(description="The saves, oldest first.")


class SnapshotRegistration(View):
    """A snapshot registered as a model version."""

    registrationId: str = Field(description="RUN@step-N:NAME.")
    run: str = Field(description="The run's ID.")
    snapshot: str = Field(description="step-N.")
    state: str = Field(description="REGISTERED.")
    model: str = Field(description="The pinned model version.")


class RunFailure(View):
    """Why a run failed: one sentence; the worker's output stays with operators."""

    run: str = Field(description="The run's ID.")
    state: str = Field(description="The run's state.")
    reason: str | None = Field(description="The sentence, or null when it has not failed.")
    hasOperatorDetail: bool = Field(description="Whether operators have the worker's output.")


class TreeNode(View):
    """A run and the runs branched from it, nested."""

    run: str = Field(description="The run's ID.")
    snapshot: str | None = Field(description="The save it branched from (step-N), or null.")
    state: str = Field(description="The run's state.")
    model: str | None = Field(description="Its registered model version, or null.")
    branches: list[TreeNode] = Field(description="Runs branched from it.")


class AncestryStep(View):
    """One run of a lineage."""

    run: str = Field(description="The run's ID.")
    snapshot: str | None = Field(description="The save it branched from, or null (root).")
    state: str = Field(description="The run's state.")


class RunAncestry(View):
    """The run, then each run it branched from, back to the lineage's root."""

    run: str = Field(description="The run's ID.")
    root: str = Field(description="The lineage's first run.")
    ancestry: list[AncestryStep] = Field(
        description="The run first, then each run it branched from."
    )


class LossWindow(View):
    """One window of updates both runs trained."""

    first: int = Field(description="Its first update.")
    last: int = Field(description="Its last update.")
    steps: int = Field(description="Updates in it.")
    full: bool = Field(description="Whether it has ``window`` updates (only full ones judge).")
    runMean: float = Field(description="The run's mean loss.")
    baselineMean: float = Field(description="The baseline's mean loss.")
    meanDifference: float = Field(description="runMean - baselineMean.")


class Spike(View):
    """A gradient norm past ``spikeFactor`` times the median of the window before it."""

    run: str = Field(description="run or baseline.")
    step: int = Field(description="The update.")
    gradNorm: float = Field(description="Its gradient norm.")
    median: float = Field(description="The median of the preceding window.")
    factor: float = Field(description="gradNorm / median.")


class LossComparison(View):
    """A run's training loss against a baseline run of the same configuration."""

    run: str = Field(description="The run's ID.")
    baseline: str = Field(description="The baseline's ID.")
    configHash: str | None = Field(description="The configuration both trained.")
    window: int = Field(description="Updates per window.")
    margin: float = Field(description="Largest mean difference a full window may show.")
    spikeFactor: float = Field(description="The spike threshold, a multiple of the median.")
    comparedSteps: int = Field(description="Updates both runs logged.")
    fullWindows: int = Field(description="Windows judged.")
    windows: list[LossWindow] = Field(description="Every window both runs trained, in order.")
    firstWindowPastMargin: LossWindow | None = Field(description="The first full window past it.")
    spikes: list[Spike] = Field(description="Gradient-norm spikes of either run.")


class SweepPoint(View):
    """One grid point and the branch run started for it."""

    point: dict[str, Any] = Field(description="The settings of this grid point.")
    run: RunView = Field(description="The branch run, as accepted.")


class SweepAnswer(View):
    """The branches of a sweep, one per grid point; with ``compare``, the comparison."""

    source: str = Field(description="The source run's ID.")
    snapshot: str = Field(description="The save the branches start from (step-N).")
    steps: int = Field(description="Updates each branch trains.")
    points: list[SweepPoint] = Field(description="One branch per grid point.")
    comparison: ComparisonView | None = Field(
        None, description="The sweep comparison, queued until every branch has ended (compare)."
    )


class SettingValue(View):
    """One resolved setting of a dry run's line."""

    key: str = Field(description="The setting's name.")
    path: str = Field(description="Its dotted path in the plan.")
    value: Any = Field(description="Its resolved value.")
    stated: bool = Field(description="Whether the plan stated it (else a default).")


class SettingsLine(View):
    """One group of resolved settings, as the dry run prints it."""

    group: str = Field(description="The group (lora, optimizer, data, execution…).")
    text: str = Field(description="The line as text, stated values marked with *.")
    values: list[SettingValue] = Field(description="Each setting of the group.")


class DryRunReport(View):
    """What a run would be (``dryRun=true``); nothing is created."""

    dryRun: bool = Field(description="Always true.")
    accepted: bool = Field(description="False when a start would refuse the plan.")
    configHash: str = Field(description="sha256 of the resolved configuration.")
    project: str = Field(description="The project the run would belong to.")
    baseModel: str = Field(description="The pinned base model.")
    modelName: str = Field(description="The name the trained model would register under.")
    method: str = Field(description="sft or rl.")
    deviceProfile: str = Field(description="The device profile it would run on.")
    pinned: dict[str, Any] = Field(description="Every reference, pinned to its version.")
    stated: list[str] = Field(description="The paths the plan stated.")
    settings: list[SettingsLine] = Field(description="The resolved settings, one line per group.")
    refusals: list[Refusal] = Field(description="Why a start would refuse it (accepted false).")
    findings: dict[str, Any] | None = Field(description="Dataset findings for the pinned data.")
    resolved: dict[str, Any] = Field(description="The resolved plan.")


class WorkerEventAnswer(View):
    """The run's pending control request, answered to each worker event."""

    control: str | None = Field(description="cancel, pause or null.")
