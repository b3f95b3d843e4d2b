#!/usr/bin/env bash
# The device check, one command on a machine with an NVIDIA GPU (under 10 minutes on an
# H100 or H200): the CUDA tests on the device (`-m gpu`: every CUDA kernel test again with
# the simulator off), then bench/gpu.py (Cuvil CUDA against torch eager and
# torch.compile: the zoo, the kernels one by one, fused elementwise bandwidth against a
# device-to-device copy). The table goes to OUT_DIR/gpu.md, the test log to OUT_DIR/tests.log.
#   tools/gpu-check.sh [OUT_DIR]        (default: $OUT, else ./gpu-check)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-gpu-check}}
mkdir -p "$out"
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-check: no NVIDIA GPU here (nvidia-smi finds none); nothing was run" >&2
    exit 2
fi
nvidia-smi -L | tee "$out/device.txt"
status=0
# ./dev test creates or refreshes .venv, lints, then runs pytest with these arguments
timeout 360 ./dev test -p no:randomly -m gpu tests 2>&1 \
    | tee "$out/tests.log" || status=$?
timeout 240 .venv/bin/python bench/gpu.py --budget 150 2>&1 | tee "$out/gpu.md" || status=$?
exit "$status"
