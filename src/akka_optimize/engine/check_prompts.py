"""The served = trained check's prompts and how they are put to a model (behaviours.md 7).

The training worker answers them with the adapter it has just trained, before saving it
(:func:`akka_optimize.engine.sampling.check_answers`); the post-deploy check
(:mod:`akka_optimize.serving.check`) asks the endpoint and the trainer's sampling with
the saved adapter the same prompts, templated the same way (:func:`check_prompt_ids`),
stopping where an endpoint stops (:func:`stop_token_ids`). Free of torch, so the
serving interface can import it without loading a model library.
"""

from __future__ import annotations

from typing import Any

from ..data.render import template_markers

#: The fixed prompts (user messages) of the served = trained check (behaviours.md 7).
CHECK_PROMPTS = (
    "Say hello.",
    "What is 2 + 3?",
    "Name a colour.",
)
#: Greedy tokens generated per prompt.
CHECK_MAX_TOKENS = 16


def stop_token_ids(tokenizer: Any, generation_config: dict[str, Any] | None = None) -> set[int]:
    """The stop set: EOS ids of the tokenizer and generation config, plus the end-of-turn
    token the chat template writes after a reply.

    The end-of-turn token is found by :func:`akka_optimize.data.render.template_markers`,
    the function that decides which marker a supervised turn trains (issue 15 item 6), so
    an endpoint stops where training taught the model to stop, whatever the template.
    A tokenizer without a chat template stops on its EOS ids only.
    """

    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    eos = (generation_config or {}).get("eos_token_id")
    for e in eos if isinstance(eos, list) else [eos]:
        if isinstance(e, int):
            ids.add(e)
    if getattr(tokenizer, "chat_template", None):
        end_of_turn = template_markers(tokenizer).end_of_turn
        if end_of_turn is not None:
            ids.add(int(tokenizer.convert_tokens_to_ids(end_of_turn)))
    return ids


def check_prompt_ids(tokenizer: Any, prompt: str, instructions: str | None) -> list[int]:
    """The chat-templated token ids of one check prompt: ``instructions`` as a system
    message (when given), ``prompt`` as the user message, then the generation prompt."""
    msgs = [{"role": "user", "content": prompt}]
    if instructions:
        msgs.insert(0, {"role": "system", "content": instructions})
    enc = tokenizer.apply_chat_template(
        msgs, add_generation_prompt=True, tokenize=True, return_dict=True
    )
    return list(enc["input_ids"])
