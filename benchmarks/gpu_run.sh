#!/usr/bin/env bash
# Everything a lent GPU machine does for inferbench, in one go (docs/gpu.md):
#   the brought wheels into a private folder, the brought artifact cache unpacked (a GPU machine without
#   TensorFlow cannot export; inferbench verifies and uses what was exported elsewhere), the idle GPU's power (read
#   again at the end of the call), the referee
#   (benchmarks/gpu_referee.py: inferbench over bare torch and JAX loops), the default quick run,
#   serving (offline, a server search at a p99 of 15 ms), FP16 and BF16 under their gate, the GPU selftest, the
#   sweeps of benchmarks/gpu/*.toml, the power sampler's overhead with the real NVML sensor, and the report.
# Rehearsed in CI with a stand-in python3 (tests/test_gpu_kit.py): every call it makes is parsed there.
#
# Prepared on a CPU machine first (the wheels for the GPU machine's Python, and the artifacts):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 ... -d .whl keras==3.15.1 \
#       namex==0.1.0 optree==0.20.0 onnx2torch==1.5.15
#   python benchmarks/gpu_bring.py pack .gpu/cache.tar.xz
# then, on the GPU machine, from the repository root:  bash benchmarks/gpu_run.sh
#
# Steps already done (a marker in the results folder) are skipped and an interrupted sweep resumes, so a call
# that runs out of time is continued by the next one (with .gpu/results carried along, or GPU_RUN_RESULTS kept on a
# machine that stays warm). No step starts with less than
# 30 s left of GPU_RUN_BUDGET_S; each is stopped (SIGINT: records written so far stay) when the budget ends.
# A dry run of everything but the GPU, on a CPU machine: GPU_RUN_DEVICE=cpu GPU_RUN_WHEELS=none GPU_RUN_QUICK=1
# (batch 1, half-second blocks; the cuda_graphs sweep then fails: CUDA graphs need a GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/inferbench-gpu-out}
# the results: .gpu/results in the tree (carried from one call to the next), or a folder that outlives the call on
# a machine kept warm between calls (GPU_RUN_RESULTS=/tmp/...), seeded from .gpu/results when it is new
RESULTS=${GPU_RUN_RESULTS:-.gpu/results}
if [ ! -d "$RESULTS" ] && [ -d .gpu/results ]; then mkdir -p "$(dirname "$RESULTS")" && cp -a .gpu/results "$RESULTS"; fi
CACHE=${GPU_RUN_CACHE:-/tmp/inferbench-gpu-cache}
DEVICE=${GPU_RUN_DEVICE:-gpu}
BUDGET_S=${GPU_RUN_BUDGET_S:-540}
WHEELS=${GPU_RUN_WHEELS:-.whl}
QUICK=() SELFTEST_QUICK=() REFEREE_QUICK=()
if [ -n "${GPU_RUN_QUICK:-}" ]; then
  QUICK=(--batch-size 1 --duration 0.5 --rounds 2 --warmup 1 --min-iterations 2) SELFTEST_QUICK=(--duration 0.5)
  REFEREE_QUICK=(--batch-sizes 1 --blocks 2 --block-seconds 0.3)
fi
START=$SECONDS
export PYTHONUNBUFFERED=1
mkdir -p "$RESULTS" "$OUT"

left() { echo $((BUDGET_S - (SECONDS - START))); }

step() {  # step NAME COMMAND...: once (a marker says it is done), within the time left, logged
  local name=$1 t rc
  shift
  if [ -e "$RESULTS/.done-$name" ]; then echo "== $name: done in an earlier call"; return; fi
  t=$(left)
  if [ "$t" -lt 30 ]; then echo "== $name: not started, ${t} s left in this call"; return; fi
  echo "== $name ($(date +%T), ${t} s left)"
  timeout -s INT -k 30 "$t" "$@" 2>&1 | tee -a "$RESULTS/log-$name.txt"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -le 1 ]; then touch "$RESULTS/.done-$name"; fi  # 1: a cell failed (its record says why)
  echo "== $name: exit status $rc ($(date +%T))"
}

sweep() {  # sweep NAME: benchmarks/gpu/NAME.toml, or the rest of it where an earlier call began it
  if [ -f "$RESULTS/sweeps/$1/sweep.json" ]; then
    step "sweep-$1" python3 -m inferbench sweep --resume "$RESULTS/sweeps/$1"
  else
    step "sweep-$1" python3 -m inferbench sweep --config "benchmarks/gpu/$1.toml" --name "$1" --device "$DEVICE" \
      --output-dir "$RESULTS/sweeps" --cache-dir "$CACHE" "${QUICK[@]}"
  fi
}

if compgen -G "$WHEELS/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$WHEELS"/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ ! -d "$CACHE" ]; then python3 benchmarks/gpu_bring.py unpack .gpu/cache.tar.xz "$CACHE" || exit 1; fi
{ date -u; python3 --version; nvidia-smi -q 2>&1 | head -60; python3 -m pip list 2>/dev/null \
    | grep -iE "^(torch|torchvision|jax|jaxlib|jax-cuda|keras|onnx|onnx2torch|onnxruntime|nvidia-ml-py|safetensors|numpy) "
} > "$RESULTS/machine-$(date +%H%M%S).txt" 2>&1

run() {  # run NAME OPTIONS...: one inferbench run of the GPU's runtimes (Keras on JAX: no TensorFlow there)
  local name=$1
  shift
  step "$name" python3 -m inferbench run --device "$DEVICE" --keras-backend jax --cache-dir "$CACHE" \
    --output-dir "$RESULTS/runs/$name" "$@"
}

# in the order of what they are worth when the time runs out: the referee (inferbench's cells beside bare torch and
# JAX loops, batch 1 and 256, FP32 and FP16), the default answer, serving (offline's ratio to the closed loop, a
# server search under a p99 bound), the reduced precisions under their gate, then the rest
step idle-before python3 benchmarks/gpu_referee.py --idle before --device "$DEVICE" --out "$RESULTS/referee"
step referee python3 benchmarks/gpu_referee.py --device "$DEVICE" --cache-dir "$CACHE" --out "$RESULTS/referee" \
  "${REFEREE_QUICK[@]}"
run quick --quick
run offline --scenario offline --framework torch-native,jax --batch-size 64,256 "${QUICK[@]}"
run server --scenario server --slo-p99 15 --framework torch-native,jax --batch-size 8,64 "${QUICK[@]}"
run precision --framework torch-native,torch-inductor --precision fp16,bf16 --batch-size 1,256 "${QUICK[@]}"
step selftest python3 -m inferbench selftest "--$DEVICE" --keras-backend jax --cache-dir "$CACHE" \
  --output-dir "$RESULTS/selftest" "${SELFTEST_QUICK[@]}"
sweep batch
step sampler python3 benchmarks/harness_overhead.py --sampler --device "$DEVICE" --cache-dir "$CACHE" --blocks 20
for s in cuda_graphs inductor variants keras_torch; do sweep "$s"; done
# the idle power again after this call's work (read at the end of every call: the last one's is what the GPU ended at)
rm -f "$RESULTS/.done-idle-after" "$RESULTS/.done-report"  # the report is made again from whatever is there
step idle-after python3 benchmarks/gpu_referee.py --idle after --device "$DEVICE" --out "$RESULTS/referee"
shopt -s nullglob
made=("$RESULTS"/sweeps/*/ "$RESULTS"/runs/*/*/)  # the folders that hold records (none before the first run ends)
shopt -u nullglob
if [ ${#made[@]} -gt 0 ]; then
  step report python3 -m inferbench report "${made[@]}" --out "$RESULTS/report"
else
  echo "== report: nothing measured yet"
fi
tar -C "$(dirname "$RESULTS")" -cJf "$OUT/results.tar.xz" --transform "s,^$(basename "$RESULTS"),results," \
  "$(basename "$RESULTS")"
echo "packed $(du -h "$OUT/results.tar.xz" | cut -f1) into $OUT/results.tar.xz after $((SECONDS - START)) s"
