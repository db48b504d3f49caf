#!/usr/bin/env bash
# GPU check of the cuda profiler and the simulator, for a session that has an NVIDIA GPU.
# NOT YET RUN ON A GPU (see docs/runtime.md). Budget: < 5 minutes on one H100/H200.
#
#   1. generate one GPT-2 MoE layer (lancet-model gpt2-moe --layers 1 --moe-every 1);
#   2. profile it on the GPU: lancet-profile measure --backend cuda (CUDA events, CuPy kernels);
#   3. bench/gpu_check.py: replay program order, FIFO and lancet-schedule with real kernels on
#      two streams and print predicted vs measured makespans (also in $OUT/gpu_check.json).
#
# Needs CuPy in the environment (`pip install cupy-cuda13x`, the project's `gpu` extra) and a
# CUDA driver. Exit code 2: no GPU or no CuPy (nothing was measured).
# Environment: PYTHON (default .venv/bin/python), OUT (default bench/results/gpu_check),
# HIDDEN/SEQ/BATCH/WORLD to change the layer's size.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
OUT=${OUT:-bench/results/gpu_check}
HIDDEN=${HIDDEN:-1024}
SEQ=${SEQ:-512}
BATCH=${BATCH:-8}
WORLD=${WORLD:-8}

if ! "$PYTHON" -c "import cupy" 2>/dev/null; then
  echo "gpu_check: CuPy is missing: pip install cupy-cuda13x (the 'gpu' extra)" >&2
  exit 2
fi
"$PYTHON" -c "from lancet_mlir.measure.cuda_backend import gpu_status; import sys; n, why = gpu_status(); print(f'gpu_check: {n} CUDA device(s) {why}'); sys.exit(0 if n else 2)"

mkdir -p "$OUT"
echo "== model: one MoE layer, hidden $HIDDEN, seq $SEQ, batch $BATCH, world $WORLD"
timeout 60 "$PYTHON" -m lancet_mlir.tools.lancet_model gpt2-moe --layers 1 --moe-every 1 \
  --hidden "$HIDDEN" --heads 16 --seq "$SEQ" --batch "$BATCH" --world-size "$WORLD" \
  --experts-per-rank 2 --vocab 8192 --optimizer sgd -o "$OUT/model.mlir"

echo "== profile on cuda"
time timeout 150 "$PYTHON" -m lancet_mlir.tools.lancet_profile measure "$OUT/model.mlir" \
  --backend cuda --warmup 5 --iters 20 -o "$OUT/prof.json"

echo "== predicted vs measured"
timeout 90 "$PYTHON" bench/gpu_check.py --model "$OUT/model.mlir" --profile "$OUT/prof.json" \
  --out "$OUT" --iters 10
