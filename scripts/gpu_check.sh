#!/usr/bin/env bash
# The GPU checks in one device call: the CUDA tests of the engine and serving, and the
# GPU variants of the engine and serving benchmarks (make bench's CUDA rows).
#
# On the CPU machine, once:   bash scripts/gpu_check.sh --prepare
#   downloads the wheels the GPU image lacks or holds too old (pydantic; transformers and
#   peft at this machine's versions) for Python 3.12 into .gpu-wheels/ (git-ignored) and
#   builds the tiny test model's cache.
# On the GPU machine (device `run`, carry [".gpu-wheels", ".cache/test-models/tiny-smollm2",
#   ".cache/test-models/smollm2-tokenizer"], timeout_s 540):
#                             bash scripts/gpu_check.sh
#   writes tests.txt, bench.txt and bench.json to $OUT.
#
# The image's own torch is used, with the carried transformers and peft, and
# SmolLM2's GGUF wheel is too large to travel, so the GPU engine bench runs
# SmolLM2-135M- and Llama-3.2-1B-shaped models with random weights.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--prepare" ]]; then
  rm -rf .gpu-wheels && mkdir -p .gpu-wheels
  # The image's transformers (5.17) is older than the project's floor (5.20): carry the
  # versions this machine's tests pass with (the image's huggingface_hub and tokenizers fit).
  pinned() { .venv/bin/python -c "import importlib.metadata as m; print('$1=='+m.version('$1'))"; }
  .venv/bin/python -m pip download -q --no-deps -d .gpu-wheels --only-binary=:all: \
    --python-version 3.12 --platform manylinux2014_x86_64 --implementation cp \
    "$(pinned pydantic)" "$(pinned pydantic-core)" "$(pinned annotated-types)" \
    "$(pinned typing-inspection)" "$(pinned transformers)" "$(pinned peft)"
  .venv/bin/python -m pytest -q -p no:cacheprovider tests/engine/test_engine_cuda.py >/dev/null || true
  du -sh .gpu-wheels .cache/test-models/tiny-smollm2 .cache/test-models/smollm2-tokenizer
  exit 0
fi

OUT="${OUT:-/tmp/gpu-check}"
mkdir -p "$OUT"
PY=python3
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .gpu-wheels/*.whl
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false \
  PYTHONPATH="/tmp/site:$PWD/src:$PWD"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  $PY -c "import torch, transformers, peft; print(torch.__version__, transformers.__version__, peft.__version__)"
} 2>&1 | tee "$OUT/versions.txt"
set +e
timeout 180 $PY -m pytest -q -p no:cacheprovider -o addopts= \
  tests/engine/test_engine_cuda.py tests/engine/test_engine_ranks_cuda.py \
  tests/engine/test_attention.py 2>&1 | tee "$OUT/tests.txt"
timeout 300 $PY -m benchmarks.run --quick --only engine 2>&1 | tee "$OUT/bench.txt"
cp bench-results/latest.json "$OUT/bench.json" 2>/dev/null
exit 0
