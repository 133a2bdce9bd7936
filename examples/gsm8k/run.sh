#!/usr/bin/env bash
# The GSM8K demo as plain commands (what `make demo` does, minus the report).
# Run from the repository root after `make setup` (or `make test`), with the venv on PATH:
#   source .venv/bin/activate && bash examples/gsm8k/run.sh
set -euo pipefail
export AKKA_OPTIMIZE_HOME="${AKKA_OPTIMIZE_HOME:-$PWD/demo-output/home}"
mkdir -p demo-output

# 1. Data: GSM8K rows as conversations (question -> worked answer ending "#### N").
python examples/gsm8k/make_data.py

# 2. The service (state, blobs and weights under $AKKA_OPTIMIZE_HOME).
akka-optimize server start --port 9001 > demo-output/server.log 2>&1 &
SERVER=$!
trap 'kill $SERVER ${PROXY:-} 2>/dev/null || true' EXIT
until curl -sf http://localhost:9001/healthz >/dev/null; do sleep 0.5; done
akka-optimize training info

# 3. Project, datasets, base model.
akka-optimize training projects create gsm8k
akka-optimize registry datasets register gsm8k/train -f demo-output/gsm8k-train.jsonl
akka-optimize registry datasets register gsm8k/val -f demo-output/gsm8k-val.jsonl
akka-optimize registry datasets register gsm8k/test -f demo-output/gsm8k-test.jsonl
akka-optimize registry bundles register gsm8k/scoring -f examples/gsm8k/scoring
akka-optimize training base-models select HuggingFaceTB/SmolLM2-135M-Instruct --wait

# 4. Check the plan, then train.
akka-optimize training runs start -f examples/gsm8k/plan.json --dry-run
RUN=$(akka-optimize training runs start -f examples/gsm8k/plan.json --wait -o json \
      | python -c 'import json,sys; print(json.load(sys.stdin)["id"])')
akka-optimize training runs get "$RUN"
akka-optimize training runs metrics "$RUN"
akka-optimize registry models versions gsm8k/smollm2-gsm8k

# 5. Score the held-out questions before (base model) and after (adapter).
MODEL=$(akka-optimize training runs get "$RUN" -o json \
        | python -c 'import json,sys; print(json.load(sys.stdin)["results"]["model"])')
akka-optimize training evaluations start --model HuggingFaceTB/SmolLM2-135M-Instruct \
  --project gsm8k --dataset gsm8k/test --grader bundle:gsm8k/scoring#reward --wait
akka-optimize training evaluations start --model "$MODEL" \
  --dataset gsm8k/test --grader bundle:gsm8k/scoring#reward --wait
akka-optimize training evaluations list

# 6. Serve the adapter and ask it something through an OpenAI-compatible address.
EP=$(akka-optimize training endpoints create --model "$MODEL" --wait -o json \
     | python -c 'import json,sys; print(json.load(sys.stdin)["id"])')
akka-optimize training endpoints send "$EP" --input "Tom has 3 apples and buys 5 more. How many apples does he have?"
akka-optimize training endpoints proxy "$EP" --port 8800 &
PROXY=$!
until curl -sf http://127.0.0.1:8800/v1/models >/dev/null; do sleep 0.5; done
curl -s http://127.0.0.1:8800/v1/models
