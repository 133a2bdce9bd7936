"""``minifield-worker run``: a direct recipe from file to checkpoints, final weights and export.

Order of work: validate the recipe (strategy dispatch), serialize the rows, compute the
computation identity, plan and check every microbatch, check the output folder (a resume
is verified before anything loads), write ``generation.json``, then load the model and
train. Everything a recipe can be refused for is refused before the first update.

Output folder (``--output``; default ``<recipe folder>/<recipe stem>-<identity[:12]>``, so
a changed computation lands in a new run's folder)::

    generation.json      the packing plan (plan.plan_record)
    events.jsonl         one JSON object per event (start, step, checkpoint, end)
    checkpoints/         step-NNNNNNNN/ every limits.checkpoint_every_steps updates
    final/               the trained FP32 master weights (Hugging Face layout) + minifield.json
    export/model.minifield   packed QAT only: the minifield.ternary.v1 export
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from akka_optimize.data import strictjson
from akka_optimize.engine.attention import implementation_for, register, supports_packed
from akka_optimize.engine.head import body_and_head

from . import checkpoint
from .export import write_export
from .identity import computation_settings, identity_of
from .plan import build_plan, plan_record
from .recipe import QatTraining, Recipe, TwoStageTraining
from .registry import RecipeError, Strategy, select
from .rows import load_examples
from .step import Net, Trainer
from .ternary import make_ternary, resolve_rule

Emit = Callable[[dict[str, Any]], None]


def read_recipe(path: Path) -> tuple[Strategy, Recipe]:
    """Read and dispatch a recipe file.

    Raises:
        RecipeError: unreadable, not JSON, or refused by :func:`registry.select`.
    """
    try:
        doc = strictjson.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RecipeError(f"Recipe {path} cannot be read as JSON: {exc}", field=str(path)) from None
    return select(doc)


def _resolve(base: Path, value: str, field: str) -> Path:
    p = Path(value)
    p = p if p.is_absolute() else base / p
    if not p.exists():
        raise RecipeError(f"{field} {value!r} does not exist (looked at {p}).", field=field)
    return p


def _tokenizer(model_dir: Path):
    """The model folder's fast tokenizer with a chat template.

    Raises:
        RecipeError: the folder has no loadable tokenizer, or one without a chat template.
    """
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(model_dir)
    except (OSError, ValueError) as exc:
        raise RecipeError(
            f"model.path {model_dir} is not a Hugging Face model folder with a tokenizer "
            f"({str(exc).splitlines()[0]}).",
            field="model.path",
        ) from None
    if not getattr(tok, "chat_template", None) or not getattr(tok, "is_fast", False):
        raise RecipeError(
            f"model.path {model_dir}: the tokenizer must be a fast tokenizer with a chat "
            "template (minifield.action.v1 renders prompts with it).",
            field="model.path",
        )
    return tok


def pick_device(name: str) -> torch.device:
    """``cuda`` when asked or (``auto``) available, else ``cpu``.

    Raises:
        RecipeError: ``cuda`` asked on a machine without one.
    """
    if name == "cuda" and not torch.cuda.is_available():
        raise RecipeError("--device cuda: no CUDA device is visible.", field="--device")
    cuda = name == "cuda" or (name == "auto" and torch.cuda.is_available())
    return torch.device("cuda" if cuda else "cpu")


def load_net(model_dir: Path, device: torch.device) -> tuple[torch.nn.Module, Net]:
    """Load a causal LM in FP32 with per-conversation attention where the model allows it."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir)
    packed = supports_packed(config)
    impl = implementation_for(config, register() if packed else "sdpa")
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation=impl
    ).to(device)
    body, head, cap = body_and_head(model)
    return model, Net(body, head, cap, packed)


def tied_embedding(model: torch.nn.Module) -> torch.nn.Parameter | None:
    """The shared embedding / LM-head parameter, or None when the model does not tie them."""
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    return emb if head is not None and head.weight is emb else None


def build_trainer(
    strategy: Strategy, recipe: Recipe, model_dir: Path, device: torch.device
) -> Trainer:
    """The model, its frozen parts, the teacher (QAT) and AdamW for a strategy.

    Raises:
        RecipeError: the strategy needs a tied embedding and the model has none.
    """
    model, net = load_net(model_dir, device)
    tied = tied_embedding(model)
    if strategy.needs_tied_embedding and tied is None:
        raise RecipeError(
            f"model.path {model_dir} does not tie its embedding and LM head "
            f"(tie_word_embeddings is false); {strategy.name} needs a tied embedding.",
            field="model.path",
        )
    t = recipe.training
    teacher = None
    if isinstance(t, QatTraining):
        if t.qat.distillation_weight:
            tmodel = copy.deepcopy(model).eval().requires_grad_(False)
            body, head, cap = body_and_head(tmodel)
            teacher = Net(body, head, cap, net.packed_attention)
        with torch.no_grad():  # frozen at its BF16 value, which is what the export stores
            tied.copy_(tied.to(torch.bfloat16).float())  # type: ignore[union-attr]
        make_ternary(model, resolve_rule(t.qat.scale_rule))
    if not strategy.trains_embedding and tied is not None:
        tied.requires_grad_(False)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    o = t.optimizer
    opt = torch.optim.AdamW(
        params,
        lr=o.learning_rate,
        betas=(o.beta1, o.beta2),
        eps=o.epsilon,
        weight_decay=o.weight_decay,
    )
    return Trainer(model, net, teacher, opt, params, t, isinstance(t, TwoStageTraining), device)


class Worker:
    """One direct run of a recipe file (see the module docstring)."""

    def __init__(
        self,
        recipe_path: Path,
        out: Path | None = None,
        emit: Emit | None = None,
        device: str = "auto",
    ):
        self.recipe_path = recipe_path
        self.device = pick_device(device)
        self.strategy, self.recipe = read_recipe(recipe_path)
        base = recipe_path.parent
        self.model_dir = _resolve(base, self.recipe.model.path, "model.path")
        self.data_path = _resolve(base, self.recipe.data.path, "data.path")
        tokenizer = _tokenizer(self.model_dir)
        t = self.recipe.training
        self.examples = load_examples(self.data_path, tokenizer, t.sequence_length)
        self.settings = computation_settings(
            self.strategy, self.recipe, self.model_dir, self.data_path, tokenizer
        )
        self.identity = identity_of(self.settings)
        updates = t.updates if isinstance(t, TwoStageTraining) else None
        self.plan = build_plan(self.examples, t, updates, self.recipe.limits.max_steps)
        self.out = out or base / f"{recipe_path.stem}-{self.identity[:12]}"
        self._emit = emit

    def header(self) -> dict[str, Any]:
        """The identifiers every record of this run carries."""
        return {
            "strategy": self.strategy.name,
            "computation": self.strategy.computation,
            "schema_version": self.recipe.schema_version,
            "implementation": self.recipe.model.implementation,
            "computation_identity": self.identity,
        }

    def resolved(self) -> dict[str, Any]:
        """The recipe with every default filled in (optimizer included), as JSON."""
        return self.recipe.model_dump(mode="json")

    def emit(self, event: dict[str, Any]) -> None:
        """Append an event to ``events.jsonl`` and pass it to the caller's callback."""
        with open(self.out / "events.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(event, sort_keys=True) + "\n")
        if self._emit:
            self._emit(event)

    def _start_state(self, resume: bool, attempt: str) -> tuple[int, list[str], Path | None]:
        found = checkpoint.latest(self.out)
        if found is None and resume:
            raise RecipeError(
                f"--resume: {self.out} holds no checkpoint to resume.", field="--resume"
            )
        if found is not None and not resume:
            raise RecipeError(
                f"{self.out} already holds checkpoint {found.name} of a run; pass --resume to "
                "continue it with a new attempt, or choose another output folder.",
                field="--output",
            )
        if found is None:
            return 0, [attempt], None
        state = checkpoint.verify(found, self.identity, self.settings)
        if attempt in state.get("attempts", []):
            raise RecipeError(
                f"Attempt identity {attempt!r} already ran this computation; a resume needs a "
                "new attempt identity.",
                field="--attempt",
            )
        step = int(state["step"])
        if step > len(self.plan.updates):
            raise RecipeError(
                f"Checkpoint {found.name} is after update {step} but the plan has "
                f"{len(self.plan.updates)} updates (limits.max_steps "
                f"{self.recipe.limits.max_steps}); raise limits.max_steps to resume it.",
                field="limits.max_steps",
            )
        return step, list(state.get("attempts", [])) + [attempt], found

    def run(self, resume: bool = False, attempt: str | None = None) -> dict[str, Any]:
        """Train the plan (or its rest, when resuming); returns the ``end`` event.

        Raises:
            RecipeError: anything the recipe, its data or the output folder is refused for.
        """
        attempt = attempt or uuid.uuid4().hex
        start, attempts, found = self._start_state(resume, attempt)
        self.out.mkdir(parents=True, exist_ok=True)
        t = self.recipe.training
        head = {"format": "minifield.generation.v1"} | self.header() | {"recipe": self.resolved()}
        record = plan_record(self.plan, t, head)
        (self.out / "generation.json").write_text(json.dumps(record, indent=1))
        trainer = build_trainer(self.strategy, self.recipe, self.model_dir, self.device)
        if found is not None:
            checkpoint.load(found, trainer.model, trainer.optimizer)
        head = self.header() | {"attempt": attempt, "device": self.device.type}
        self.emit(head | {"event": "start", "step": start, "updates": len(self.plan.updates)})
        every = self.recipe.limits.checkpoint_every_steps
        state = head | {"attempts": attempts, "settings": self.settings}
        for step in range(start + 1, len(self.plan.updates) + 1):
            metrics = trainer.update(self.plan, self.plan.updates[step - 1])
            lr = t.optimizer.learning_rate
            self.emit({"event": "step", "step": step, "learning_rate": lr} | metrics)
            if step % every == 0:
                where = checkpoint.save(self.out, step, trainer.model, trainer.optimizer, state)
                self.emit({"event": "checkpoint", "step": step, "path": str(where)})
        end = self._finish(trainer, head)
        self.emit(end)
        return end

    def _finish(self, trainer: Trainer, head: dict[str, Any]) -> dict[str, Any]:
        final = self.out / "final"
        trainer.model.save_pretrained(final)
        meta = self.header() | {
            "recipe": self.resolved(),
            "settings": self.settings,
            "updates": len(self.plan.updates),
        }
        (final / "minifield.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
        end: dict[str, Any] = head | {
            "event": "end",
            "step": len(self.plan.updates),
            "final": str(final),
        }
        t = self.recipe.training
        if isinstance(t, QatTraining):
            path = self.out / "export" / "model.minifield"
            end["export"] = str(
                write_export(path, trainer.model, self.header(), resolve_rule(t.qat.scale_rule))
            )
        return end
