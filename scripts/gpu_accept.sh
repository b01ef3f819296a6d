#!/usr/bin/env bash
# Eager vs CUDA graphs on SGLang's real HTTP server, judged by `eagle3-conformance accept` with the
# baseline rule (issue 34): the SmolLM2-135M pair with its shipped EAGLE-3 draft is served twice,
#   1. eager (--disable-cuda-graph): `accept --record eager.json` (8 prompts x 64 tokens, 8 in flight);
#   2. with CUDA graphs (SGLang's default on CUDA): `accept --baseline eager.json`.
# Hooks never fire on graph replay (R42), so this is the check that sees what the graphed decode accepts.
# It fails (exit 1) when the paired 95% interval of (graphed - eager) lies below -5% of eager, overall or
# at any draft position: the same rule as any baseline (the engine path's graph_acceptance finding only
# reports the two figures, never gates them); the two runs' per-position differences are the measurement
# of the spread. PREPARED, NEVER RUN ON A GPU (written without one).
# Called by scripts/gpu-check.sh (ACCEPT=0 skips it). Exit: 0 held, 1 graphed accepts less, 2 a server
# did not start or the run could not be measured.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=${OUT:-$(mktemp -d)}
read -r TARGET DRAFT < <("$PY" -c "from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft as e; t = e(RECIPE); print(t.target_dir, t.draft_dir)")
PORT=$("$PY" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
URL=http://127.0.0.1:$PORT
SPEC=(--speculative-algorithm EAGLE3 --speculative-draft-model-path "$DRAFT" --speculative-num-steps 3
      --speculative-eagle-topk 1 --speculative-num-draft-tokens 4)
serve() {  # $1 log name, rest: extra server flags; sets PID
  "$PY" -m eagle3_conformance.serving.serve --device cuda -- --model-path "$TARGET" --dtype float32 --host 127.0.0.1 \
    --port "$PORT" --random-seed 0 --mem-fraction-static 0.3 "${SPEC[@]}" "${@:2}" > "$OUT/$1.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 150); do
    curl -sf "$URL/health" > /dev/null && return 0
    kill -0 "$PID" 2> /dev/null || { tail -30 "$OUT/$1.log"; exit 2; }
    sleep 2
  done
  echo "server $1 did not start in 300 s"; tail -30 "$OUT/$1.log"; kill "$PID"; exit 2
}
stop() { kill "$PID" 2> /dev/null || true; wait "$PID" 2> /dev/null || true; }
trap stop EXIT
ACC=("$PY" -m eagle3_conformance.cli accept --server "$URL" --contract contracts/smollm2-135m.yaml --concurrency 8)
serve eager --disable-cuda-graph
"${ACC[@]}" --prompts 8 --max-tokens 64 --record "$OUT/eager.json" --json "$OUT/eager-report.json"
stop
serve graphed
set +e
"${ACC[@]}" --baseline "$OUT/eager.json" --json "$OUT/graphed-report.json" --markdown "$OUT/graphed.md"
rc=$?
set -e
echo "eager vs CUDA graphs: exit $rc; reports in $OUT (graphed-report.json meta.comparison: the per-position differences)"
exit $rc
