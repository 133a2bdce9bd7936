"""Write GSM8K preference pairs for a preference (DPO) run and exit.

``python examples/gsm8k/make_pairs.py [N]`` writes ``demo-output/gsm8k-pairs.jsonl``: N
(default 200) GSM8K training questions, each with its reference answer preferred over
the same worked answer ending in a wrong final number (``#### N+1``), in TRL's
conversational shape ``{"prompt": [...], "chosen": [...], "rejected": [...]}``. Every
fifth row is written in OpenAI's shape instead (``{"input": {"messages": [...]},
"preferred_output": [...], "non_preferred_output": [...]}``): a dataset may mix both.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def pair(question: str, answer: str, openai_shape: bool) -> dict:
    """One pair: the reference ``answer`` preferred over it with the final number + 1."""
    worked, final = answer.rsplit("#### ", 1)
    wrong = f"{worked}#### {int(final.replace(',', '')) + 1}"
    prompt = [{"role": "user", "content": question}]
    chosen = [{"role": "assistant", "content": answer}]
    rejected = [{"role": "assistant", "content": wrong}]
    if openai_shape:
        return {
            "input": {"messages": prompt},
            "preferred_output": chosen,
            "non_preferred_output": rejected,
        }
    return {"prompt": prompt, "chosen": chosen, "rejected": rejected}


def main(n: int) -> Path:
    """Write ``n`` pairs; returns the file."""
    out = Path(os.environ.get("DEMO_OUT", REPO / "demo-output")) / "gsm8k-pairs.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = (REPO / "data/gsm8k/train.jsonl").read_text().splitlines()[:n]
    with out.open("w") as f:
        for i, line in enumerate(lines):
            item = json.loads(line)
            f.write(json.dumps(pair(item["question"], item["answer"], i % 5 == 4)) + "\n")
    return out


if __name__ == "__main__":
    print(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
