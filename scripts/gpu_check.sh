#!/usr/bin/env bash
# The GPU checks in one device call: the CUDA tests of the engine and serving, and the
# GPU variants of the engine and serving benchmarks (make bench's CUDA rows).
#
# On the CPU machine, once:   bash scripts/gpu_check.sh --prepare
#   downloads the wheels the GPU image lacks or holds too old (pydantic; transformers and
#   peft at this machine's versions) for Python 3.12 into .gpu-wheels/ (git-ignored) and
#   builds the tiny test model's cache.
# On the GPU machine (device `run`, carry [".gpu-wheels", ".cache/test-models/tiny-smollm2",
#   ".cache/test-models/smollm2-tokenizer"], timeout_s 480):
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
  # versions this machine's tests pass with, and the huggingface_hub (>= 2.4) and regex
  # they require (the image's tokenizers fits).
  pinned() { .venv/bin/python -c "import importlib.metadata as m; print('$1=='+m.version('$1'))"; }
  .venv/bin/python -m pip download -q --no-deps -d .gpu-wheels --only-binary=:all: \
    --python-version 3.12 --platform manylinux2014_x86_64 --implementation cp \
    "$(pinned pydantic)" "$(pinned pydantic-core)" "$(pinned annotated-types)" \
    "$(pinned typing-inspection)" "$(pinned transformers)" "$(pinned peft)" \
    "$(pinned huggingface-hub)" "$(pinned regex)" "$(pinned httpx2)" "$(pinned httpcore2)" \
    "$(pinned truststore)"
  # The benchmark's TRL baseline (pyproject's `bench` extra) and what the image lacks of
  # its needs. datasets asks for pyarrow >= 24 but checks no version at import, so the
  # image's pyarrow is used (a pyarrow wheel alone is over the 64 MiB that can travel).
  .venv/bin/python -m pip download -q --no-deps -d .gpu-wheels --only-binary=:all: \
    --python-version 3.12 --platform manylinux2014_x86_64 --implementation cp \
    trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
  # Liger's kernels (pyproject's `gpu` extra; the image's triton runs them).
  .venv/bin/python -m pip download -q --no-deps -d .gpu-wheels --only-binary=:all: \
    liger-kernel==0.8.5
  .venv/bin/python -m pytest -q -p no:cacheprovider tests/engine/test_engine_cuda.py >/dev/null || true
  du -sh .gpu-wheels .cache/test-models/tiny-smollm2 .cache/test-models/smollm2-tokenizer
  exit 0
fi

OUT="${OUT:-/tmp/gpu-check}"
mkdir -p "$OUT"
PY=python3
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .gpu-wheels/*.whl
# USE_HUB_KERNELS=0: the image holds a `kernels` package that this transformers cannot
# use, and from_pretrained then refuses to load (hub kernels are never fetched offline).
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false USE_HUB_KERNELS=0 \
  PYTHONPATH="/tmp/site:$PWD/src:$PWD"
set +e
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  $PY -c "import torch, transformers, peft; print(torch.__version__, transformers.__version__, peft.__version__)"
  $PY -c "import trl, datasets, pyarrow; print('trl', trl.__version__, 'datasets', datasets.__version__, 'pyarrow', pyarrow.__version__)"
  $PY -c "import vllm; print('vllm', vllm.__version__)" || echo "no vllm: the reinforcement rollouts' vLLM test skips"
} 2>&1 | tee "$OUT/versions.txt"
$PY -c "import transformers" 2>/dev/null || exit 1
if [[ "${1:-}" == "--ours" ]]; then
  # A short check of an engine change: the CUDA tests and the engine side alone.
  timeout 60 $PY -m pytest -q -p no:cacheprovider -o addopts= tests/engine/test_engine_cuda.py \
    2>&1 | tee "$OUT/tests.txt"
  timeout 150 $PY -m benchmarks.engine --ours-on-cuda 2>&1 | grep -v "it/s" | tee "$OUT/ours.txt"
  exit 0
fi
# At most about 8 minutes in all (timeout_s 480 leaves time for a second call) where the
# image has no vLLM; with vLLM give the call up to 600.
timeout 100 $PY -m pytest -q -p no:cacheprovider -o addopts= \
  tests/engine/test_engine_cuda.py tests/engine/test_engine_ranks_cuda.py \
  tests/engine/test_attention.py tests/engine/test_flex.py 2>&1 | tee "$OUT/tests.txt"
# The reinforcement rollouts on vLLM (skips at once where the image has no vLLM; vLLM's
# own start takes most of its time where it has).
timeout 120 $PY -m pytest -q -p no:cacheprovider -o addopts= \
  tests/engine/test_engine_rl_vllm_cuda.py 2>&1 | tee -a "$OUT/tests.txt"
timeout 60 $PY -m benchmarks.engine --profile smollm2 >"$OUT/profile_smollm2.txt" 2>&1
timeout 240 $PY -m benchmarks.run --quick --only engine 2>&1 | tee "$OUT/bench.txt"
cp bench-results/latest.json "$OUT/bench.json" 2>/dev/null
timeout 50 $PY -m benchmarks.engine --profile llama >"$OUT/profile_llama.txt" 2>&1
exit 0
