"""Write the demo's GSM8K conversations and exit.

``python examples/gsm8k/make_data.py`` writes ``demo-output/gsm8k-train.jsonl`` (200
rows), ``demo-output/gsm8k-val.jsonl`` (40 other rows) and ``demo-output/gsm8k-test.jsonl``
(30 held-out test questions) exactly as ``make demo`` does (``DEMO_OUT``,
``DEMO_TRAIN_ROWS`` and ``DEMO_TEST_QUESTIONS`` apply).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from demo import write_datasets  # noqa: E402

if __name__ == "__main__":
    train, val, test, _ = write_datasets()
    print(train)
    print(val)
    print(test)
