"""The ``text_similarity`` grader's metrics, in the standard library only (this file is
also copied into a reinforcement run's reward bundle: :mod:`.bundle`).

OpenAI's ``evaluation_metric`` values (platform.openai.com/docs/api-reference/graders):
``fuzzy_match`` (a normalised edit similarity; here :class:`difflib.SequenceMatcher`'s
ratio), ``bleu`` (sentence BLEU up to 4-grams, Papineni et al. 2002, with add-one smoothing
of the higher orders, Lin & Och 2004), ``gleu`` (Google-BLEU, Wu et al. 2016: the smaller of
n-gram precision and recall over 1-4-grams), ``rouge_1`` … ``rouge_5`` (n-gram F1, Lin
2004) and ``rouge_l`` (longest common subsequence F1). Tokens are lower-cased words and
punctuation marks. ``meteor`` (needs WordNet) and ``cosine`` (needs an embedding model) are
not computed here: :data:`UNAVAILABLE` says why, and the grader is refused.
"""

from __future__ import annotations

import difflib
import math
import re
from collections import Counter
from collections.abc import Callable

_TOKEN = re.compile(r"\w+|[^\w\s]")

UNAVAILABLE = {
    "cosine": "cosine similarity needs an embedding model, and none is configured on this "
    "service; use fuzzy_match, bleu, gleu or a rouge variant",
    "meteor": "meteor needs WordNet, which this service does not ship; use fuzzy_match, bleu, "
    "gleu or a rouge variant",
}
"""OpenAI metrics this service refuses, with the reason."""


def tokens(text: str) -> list[str]:
    """Lower-cased word and punctuation tokens of ``text``."""
    return _TOKEN.findall(text.lower())


def _ngrams(toks: list[str], n: int) -> Counter[tuple[str, ...]]:
    return Counter(tuple(toks[i : i + n]) for i in range(len(toks) - n + 1))


def fuzzy_match(output: str, reference: str) -> float:
    """Edit similarity in [0, 1] (1 = equal texts)."""
    return difflib.SequenceMatcher(None, output, reference, autojunk=False).ratio()


def bleu(output: str, reference: str) -> float:
    """Sentence BLEU-4 in [0, 1] with the brevity penalty; orders 2-4 add-one smoothed."""
    out, ref = tokens(output), tokens(reference)
    if not out or not ref:
        return float(out == ref)
    logs = 0.0
    for n in range(1, 5):
        o, r = _ngrams(out, n), _ngrams(ref, n)
        match, total = sum((o & r).values()), max(sum(o.values()), 0)
        if n == 1:
            if match == 0:
                return 0.0
            logs += math.log(match / total)
        else:
            logs += math.log((match + 1) / (total + 1))
    bp = 1.0 if len(out) > len(ref) else math.exp(1 - len(ref) / len(out))
    return bp * math.exp(logs / 4)


def gleu(output: str, reference: str) -> float:
    """Google-BLEU in [0, 1]: min(precision, recall) of the 1-4-grams of both texts."""
    out, ref = tokens(output), tokens(reference)
    o = sum((_ngrams(out, n) for n in range(1, 5)), Counter())
    r = sum((_ngrams(ref, n) for n in range(1, 5)), Counter())
    if not o or not r:
        return float(o == r)
    match = sum((o & r).values())
    return min(match / sum(o.values()), match / sum(r.values()))


def _f1(match: int, a: int, b: int) -> float:
    if match == 0 or a == 0 or b == 0:
        return 0.0
    p, r = match / a, match / b
    return 2 * p * r / (p + r)


def rouge_n(output: str, reference: str, n: int) -> float:
    """ROUGE-N F1 in [0, 1]."""
    o, r = _ngrams(tokens(output), n), _ngrams(tokens(reference), n)
    return _f1(sum((o & r).values()), sum(o.values()), sum(r.values()))


def rouge_l(output: str, reference: str) -> float:
    """ROUGE-L F1 in [0, 1] over the longest common token subsequence."""
    a, b = tokens(output), tokens(reference)
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return _f1(prev[-1], len(a), len(b))


METRICS: dict[str, Callable[[str, str], float]] = {
    "fuzzy_match": fuzzy_match,
    "bleu": bleu,
    "gleu": gleu,
    **{f"rouge_{n}": (lambda o, r, n=n: rouge_n(o, r, n)) for n in range(1, 6)},
    "rouge_l": rouge_l,
}
"""Every metric computed here, by OpenAI's name."""
