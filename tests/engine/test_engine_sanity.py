"""First-loss sanity (DATA-AND-TRAINING-RULES.md §2 rule 10): a warning, never a change."""

from __future__ import annotations

import math

from akka_optimize.engine.sanity import first_loss_warning


def test_a_plausible_first_loss_gives_no_warning() -> None:
    assert first_loss_warning(1.2, 262_144) is None
    assert first_loss_warning(3.0, 262_144) is None


def test_above_three_warns_naming_the_likely_causes() -> None:
    w = first_loss_warning(3.5, 262_144)
    assert w is not None and w["type"] == "warning" and w["loss"] == 3.5
    assert "above 3.0" in w["message"]
    for cause in ("loss mask", "weights", "vision or audio tower"):
        assert cause in w["message"]


def test_near_log_vocab_is_called_random_prediction() -> None:
    w = first_loss_warning(11.9, 262_144)
    assert w is not None and "near log(vocabulary) = 12.48" in w["message"]
    assert w["logVocab"] == math.log(262_144)
    # a small vocabulary: near log(V) although below 3.0
    assert "near log(vocabulary)" in first_loss_warning(2.9, 32)["message"]
