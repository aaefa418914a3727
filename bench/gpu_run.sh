#!/usr/bin/env bash
# The GPU suite in one call of the device machine (docs/gpu-run.md): the environment, the install, the
# CPU-side GPU tests, the GPU properties under the `ci` profile, the planted GPU bugs, the examples per
# second of each GPU property, then, with the time left, the pool and --jobs measurements on 16 cores.
#
#   OUT=/some/dir bash bench/gpu_run.sh                                   # on the GPU machine ($OUT is set there)
#   FUZZDIST_GPU_DRY_RUN=1 OUT=/tmp/gpu-dry bash bench/gpu_run.sh         # here, without a GPU
#   FUZZDIST_GPU_STEPS=planted,gpu_bench OUT=... bash bench/gpu_run.sh    # a rerun of the named steps alone
#
# Every step writes its log to $OUT/<step>.log and a line to $OUT/steps.tsv (step, exit status, seconds).
# Each step has its own time limit, cut to what is left of the whole budget (FUZZDIST_GPU_BUDGET_S,
# default 470 s (four times that in a dry run): the device tool allows 600 s a command, and a rerun of a failed step needs time too).
# A step that fails or times out doesn't stop the next: the script always runs to the end and exits 0
# once the summary is written; read steps.tsv for each step's status.
#
# The dry run (FUZZDIST_GPU_DRY_RUN=1) runs every step's CPU-side part on a machine without a GPU: the same
# commands, so collection, imports, markers and skip reasons are exercised (the GPU tests skip, each with
# its reason), with the install as `pip install --dry-run` and the 16-core measurements shrunk to 2 ranks
# and a few seconds. It shows the script is sound; it measures nothing.
set -uo pipefail   # no -e: a failing step must not stop the next

cd "$(dirname "$0")/.."
if [ -z "${OUT:-}" ]; then
  echo "gpu_run.sh: set OUT to the folder the logs go to (the device tool sets it on its machine)" >&2
  exit 2
fi
mkdir -p "$OUT"
DRY="${FUZZDIST_GPU_DRY_RUN:-0}"
PY="${PYTHON:-python3}"
# The dry run runs on a 2-core machine that others share: its limits are four times the GPU machine's.
SCALE=1
[ "$DRY" = 1 ] && SCALE=4
BUDGET_S="${FUZZDIST_GPU_BUDGET_S:-$((470 * SCALE))}"
case "$BUDGET_S" in
  '' | *[!0-9]*) echo "gpu_run.sh: FUZZDIST_GPU_BUDGET_S must be a whole number of seconds, not '$BUDGET_S'" >&2; exit 2 ;;
esac
START_S=$(date +%s)
export PYTHONUNBUFFERED=1
printf 'step\texit\tseconds\tlimit\n' > "$OUT/steps.tsv"

# step NAME CAP_S COMMAND...: run COMMAND with its output in $OUT/NAME.log, within CAP_S seconds or what is
# left of the budget, whichever is less; a step with under 10 s left is not started (exit "skipped").
step() {
  local name=$1 cap=$(($2 * SCALE))
  shift 2
  if [ -n "${FUZZDIST_GPU_STEPS:-}" ] && [[ ",$FUZZDIST_GPU_STEPS," != *",$name,"* ]]; then
    return 0
  fi
  local left=$((BUDGET_S - ($(date +%s) - START_S)))
  local limit=$((cap < left - 5 ? cap : left - 5))
  if [ "$limit" -lt 10 ]; then
    printf '%s\tskipped\t0\t%s\n' "$name" "$limit" >> "$OUT/steps.tsv"
    echo "== $name: skipped, ${left}s of the budget left"
    return 0
  fi
  echo "== $name (at most ${limit}s)"
  local t0=$(date +%s)
  timeout -k 10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - t0))" "$limit" >> "$OUT/steps.tsv"
  tail -n 4 "$OUT/$name.log"
  [ "$rc" -eq 124 ] && echo "== $name: timed out after ${limit}s"
  return 0
}

environment() {
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || echo "nvidia-smi: not here"
  nproc
  "$PY" -c "import sys, torch, hypothesis, pytest; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count()); print('hypothesis', hypothesis.__version__, 'pytest', pytest.__version__)"
  "$PY" -c "import cupy; print('cupy', cupy.__version__, 'runtime', cupy.cuda.runtime.runtimeGetVersion())" 2>&1 | tail -n 1
}

install() {
  if [ "$DRY" = 1 ]; then
    "$PY" -m pip install --dry-run --no-deps --no-build-isolation -e .
  else
    # The GPU machine has no network: without build isolation pip uses the setuptools already there.
    "$PY" -m pip install --no-deps -e . || "$PY" -m pip install --no-deps --no-build-isolation -e .
  fi
  "$PY" -c "import fuzzdist.pool.capabilities as c; [print(n, '->', p() or 'ok') for n, p in c.PROBES.items()]"
}

# timeout runs programs, not shell functions: the two steps above run in a child bash.
export DRY PY
export -f environment install

# Which GPU tests ran or skipped, and why: -rs prints every skip's reason.
PYTEST=("$PY" -m pytest -p no:cacheprovider -rs)

step environment 45 bash -c environment
step install 60 bash -c install
step cpu_side 60 "${PYTEST[@]}" -q tests/properties/test_gpu_cpu_side.py
step properties_ci 150 "${PYTEST[@]}" -v properties/ -m gpu --hypothesis-profile=ci --junitxml="$OUT/properties_ci.xml"
step planted 120 "${PYTEST[@]}" -v tests/properties/test_gpu_properties_catch_bugs.py
step gpu_bench 60 "$PY" bench/gpu_properties.py --rounds 3 --examples 50

# The 16-core measurements, with what is left.
if [ "$DRY" = 1 ]; then
  step pool_overhead_w2 30 "$PY" bench/pool_overhead.py --world-size 2 --examples 20 --rounds 1
  step jobs 60 "$PY" bench/campaign_jobs.py --jobs 1,2 --rounds 1 --duration 5 --properties 2
else
  for w in 2 4 8; do
    step "pool_overhead_w$w" 40 "$PY" bench/pool_overhead.py --world-size "$w" --examples 500 --rounds 3
  done
  step jobs 150 "$PY" bench/campaign_jobs.py --jobs 1,2,4,8 --rounds 1 --duration 20 --properties 8
fi

echo "== summary ($(($(date +%s) - START_S))s of ${BUDGET_S}s)"
cat "$OUT/steps.tsv"
exit 0
