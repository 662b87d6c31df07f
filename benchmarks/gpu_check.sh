#!/usr/bin/env bash
# The acceptance run on a machine with 2+ GPUs and a CUDA build of torch, from the repository root:
#   OUT=gpu-check bash benchmarks/gpu_check.sh
# The whole test suite (CPU tests and the `gpu` ones) in three concurrent pytest sessions (each has its own temp dir
# and leftover checks), the catalogue's CPU runs with the GPUs visible, then every bug's --gpu form, then
# kv-sync's exchange on NCCL by size. Each step's output goes to $OUT; the summary lines are printed.
set -u
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
out=${OUT:-gpu-check}
mkdir -p "$out"
python -c "import torch; print('torch', torch.__version__, '|', torch.cuda.device_count(), 'GPUs')"
t=(-q -p no:cacheprovider -rs)
timeout 420 python -m pytest "${t[@]}" tests/test_gpu.py tests/test_catalogue.py tests/test_check.py tests/test_layers.py \
    tests/test_diagnose_unit.py > "$out/pytest-1.txt" 2>&1 &
timeout 420 python -m pytest "${t[@]}" tests/test_hygiene.py tests/test_interrupt.py tests/test_cli.py tests/test_api.py \
    tests/test_warm.py tests/test_magic.py tests/test_lab.py tests/test_labs.py tests/test_docs.py tests/test_browser.py \
    > "$out/pytest-2.txt" 2>&1 &
timeout 420 python -m pytest "${t[@]}" tests/test_offline.py tests/test_primitives.py tests/test_torchrun.py \
    tests/test_tracer.py tests/test_kinds.py tests/test_bench.py > "$out/pytest-3.txt" 2>&1 &
timeout 300 python -m sandbox.repro --all > "$out/repro-all.txt" 2>&1
echo "repro --all: exit $?"
wait
for f in "$out"/pytest-*.txt; do echo "$f: $(tail -1 "$f")"; grep -E "^(FAILED|ERROR)" "$f"; done
timeout 300 python -m sandbox.repro --all --gpu > "$out/repro-all-gpu.txt" 2>&1
echo "repro --all --gpu: exit $?"
tail -3 "$out/repro-all.txt"
cat "$out/repro-all-gpu.txt"
timeout 240 python benchmarks/nccl_kv_exchange.py --sizes 256,262144,4194304 --json "$out/kv.json" > "$out/kv.txt" 2>&1
cut -c1-150 "$out/kv.txt"
