#!/usr/bin/env bash
# The GPU check in one command, for a lent GPU machine (no network; the image's python3 has torch
# with CUDA, transformers, pyarrow, pytest): installs the kit (make gpu-kit: .cache/gpu-kit/*.whl)
# into a target folder, then runs, each under its own time limit (about 8 minutes in all):
#   env   asserts CUDA, prints the device              -> env.json
#   rl    one RL step, tiny Qwen3-MoE, bf16 + replay   -> rl_step.json      (bench/gpu_check.py)
#   ds    one DeepSpeed ZeRO-1 bf16 step (torchrun)    -> ds_step.json      (if deepspeed imports)
#   train bench/train_gpu.py, toy + OLMoE-shaped MoE  -> train_gpu.json
#   gpu   pytest -m gpu on the files that hold gpu tests -> pytest.xml
# and writes summary.json and gpu_check.log, all under $OUT when set (else .cache/gpu-check/).
#
#   scripts/gpu_check.sh               # on the GPU machine
#   scripts/gpu_check.sh --cpu-smoke   # here or in CI: every step on the CPU at tiny shapes, with
#                                      # the image emulated (scripts/gpu_image/sitecustomize.py)
# Exit status: 0 when every step passed, 1 otherwise (every step runs regardless).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SMOKE=0
for arg in "$@"; do
  case "$arg" in
    --cpu-smoke) SMOKE=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument $arg" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$ROOT/.cache/gpu-check}
KIT=${GPU_KIT:-$ROOT/.cache/gpu-kit}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
cd "$ROOT" || exit 1
START=$(date +%s)
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$ROOT/.cache/torch_extensions}
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1  # the image's plugins differ from CI's; none is needed

if [ "$SMOKE" = 1 ]; then
  PY=${PYTHON:-$([ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python3)}
  export RATCHET_GPU_IMAGE=emulate OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
  export PYTHONPATH="$ROOT/scripts/gpu_image:$ROOT"
  SMOKE_FLAG=(--cpu-smoke)
  echo "gpu_check: CPU smoke ($PY), GPU image emulated"
else
  PY=${PYTHON:-python3}
  SITE=${GPU_KIT_SITE:-/tmp/ratchet-gpu-kit}
  SMOKE_FLAG=()
  if compgen -G "$KIT/*.whl" > /dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" "$KIT"/*.whl || { echo "gpu_check: kit install failed"; exit 1; }
    echo "gpu_check: kit installed into $SITE: $(ls "$KIT" | tr '\n' ' ')"
  else
    echo "gpu_check: no wheels in $KIT (make gpu-kit); pydantic must already be installed"
  fi
  export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi

# Limits are the GPU machine's; the smoke scales them (a loaded 2-core CPU box, DeepSpeed's first
# op build) by GPU_CHECK_LIMIT_SCALE (default 4 there, 1 on the GPU).
SCALE=${GPU_CHECK_LIMIT_SCALE:-$([ "$SMOKE" = 1 ] && echo 4 || echo 1)}
declare -A STATUS SECONDS_TAKEN
step() {  # step NAME LIMIT_S COMMAND...
  local name=$1 limit=$(( $2 * SCALE )) t0 rc
  shift 2
  echo; echo "== $name (limit ${limit}s): $*"
  t0=$(date +%s)
  timeout --signal=TERM --kill-after=10 "$limit" "$@"
  rc=$?
  SECONDS_TAKEN[$name]=$(( $(date +%s) - t0 ))
  if [ $rc = 0 ]; then STATUS[$name]=ok
  elif [ $rc = 124 ] || [ $rc = 137 ]; then STATUS[$name]=timeout
  else STATUS[$name]="failed ($rc)"; fi
  echo "== $name: ${STATUS[$name]} in ${SECONDS_TAKEN[$name]}s"
}

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

step env 60 "$PY" bench/gpu_check.py env --out "$OUT" "${SMOKE_FLAG[@]}"
if [ "$SMOKE" = 0 ] && [ "${STATUS[env]}" != ok ]; then
  echo "gpu_check: no usable CUDA device; the other steps would only skip"
else
  step rl 120 "$PY" bench/gpu_check.py rl --out "$OUT" "${SMOKE_FLAG[@]}"
  if "$PY" -c "import deepspeed" > /dev/null 2>&1; then
    step ds 150 "$PY" -m torch.distributed.run --nproc-per-node 1 --master-addr 127.0.0.1 \
      --master-port "$(free_port)" bench/gpu_check.py ds --out "$OUT" "${SMOKE_FLAG[@]}"
  else
    STATUS[ds]="skipped: deepspeed did not travel"; echo "== ds: ${STATUS[ds]}"
  fi
  if [ "$SMOKE" = 1 ]; then
    step train 90 "$PY" bench/train_gpu.py --smoke --models toy,olmoe --out "$OUT/train_gpu.json"
  else
    step train 150 "$PY" bench/train_gpu.py --models toy,olmoe --out "$OUT/train_gpu.json"
  fi
  mapfile -t GPU_TESTS < <(grep -rl --include='test_*.py' 'mark.gpu' tests | sort)
  step gpu 90 "$PY" -m pytest -q -m gpu -p no:cacheprovider -o addopts="--strict-markers -ra" \
    --junitxml="$OUT/pytest.xml" "${GPU_TESTS[@]}"
fi

"$PY" - "$OUT/summary.json" "$SMOKE" "$(( $(date +%s) - START ))" <<EOF
import json, sys
status = {$(for k in "${!STATUS[@]}"; do printf '"%s": "%s", ' "$k" "${STATUS[$k]}"; done)}
taken = {$(for k in "${!SECONDS_TAKEN[@]}"; do printf '"%s": %s, ' "$k" "${SECONDS_TAKEN[$k]}"; done)}
ok = bool(status) and all(v == "ok" or v.startswith("skipped") for v in status.values())
json.dump({"smoke": sys.argv[2] == "1", "seconds": int(sys.argv[3]), "ok": ok,
           "steps": status, "step_seconds": taken}, open(sys.argv[1], "w"), indent=2)
print(json.dumps({"ok": ok, "steps": status, "seconds": int(sys.argv[3])}))
sys.exit(0 if ok else 1)
EOF
