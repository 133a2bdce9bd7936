"""The loss policy: which tokens of a conversation the loss covers (seeds/000 ``loss``).

Resolved once per run from ``config.loss`` (STYLE.md 3: a named policy, not a guess from
the dataset's columns) and applied at tokenization time by ``data.masks``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from akka_optimize.errors import InvalidRequest

AssistantTurns = Literal["all", "last"]


@dataclass(frozen=True)
class LossPolicy:
    """Which tokens train.

    Attributes:
        assistant_turns: ``"all"`` trains every assistant turn, ``"last"`` only the final
            one (``config.loss.assistantTurns``).
        train_on_tool_calls: the tool-call text of a trained assistant turn trains
            (``config.loss.trainOnToolCalls``). When false, a turn that calls tools trains
            its content (if any) but neither the calls nor its end-of-turn marker.
        train_on_tool_results: the content of ``tool`` messages trains
            (``config.loss.trainOnToolResults``).

    Rules applied with the policy (DATA-AND-TRAINING-RULES.md §1.1 A–B, §2.1–2.2): the
    end-of-turn marker of a trained assistant turn trains, so the model learns to stop;
    a content or reasoning part with its own ``train``/``weight`` flag follows the flag
    (on any message), a part without one inherits its turn's decision; system and user
    text never trains unless a part says so.
    """

    assistant_turns: AssistantTurns = "all"
    train_on_tool_calls: bool = True
    train_on_tool_results: bool = False

    def __post_init__(self) -> None:
        if self.assistant_turns not in ("all", "last"):
            raise InvalidRequest(
                f'loss.assistantTurns must be "all" or "last", not {self.assistant_turns!r}',
                field="config.loss.assistantTurns",
            )

    @classmethod
    def from_config(cls, loss: dict[str, Any] | None) -> LossPolicy:
        """Build from a plan's ``config.loss`` object (camelCase keys; missing keys take defaults).

        Raises:
            InvalidRequest: an unknown key or a value of the wrong type, naming the field.
        """
        loss = dict(loss or {})
        names = {
            "assistantTurns": "assistant_turns",
            "trainOnToolCalls": "train_on_tool_calls",
            "trainOnToolResults": "train_on_tool_results",
        }
        kwargs: dict[str, Any] = {}
        for key, value in loss.items():
            if key not in names:
                raise InvalidRequest(
                    f"unknown loss setting {key!r}; expected {', '.join(names)}",
                    field=f"config.loss.{key}",
                )
            if key != "assistantTurns" and not isinstance(value, bool):
                raise InvalidRequest(
                    f"loss.{key} must be true or false", field=f"config.loss.{key}"
                )
            kwargs[names[key]] = value
        return cls(**kwargs)
