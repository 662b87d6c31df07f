#!/usr/bin/env bash
# The acceptance run on a machine with 2+ GPUs and a CUDA build of torch, from the repository root, in one command:
#   OUT=gpu-check bash benchmarks/gpu_check.sh
# It fits in 10 minutes on 4 GPUs and 64 cores. Three things run at once: the whole CPU suite in one pytest
# session spread over JOBS workers (pytest-xdist; default: 24 of 64 cores, else half; its test_catalogue runs every
# bug's CPU variants, as `repro --all` does), every bug's --gpu form, and the `gpu` tests (the two GPU jobs share the
# GPUs, which their few ranks leave nearly idle). Each pytest session has a temp dir of its own (--basetemp): two
# sessions at once would otherwise share pytest's numbered ones. Run one after the other, the three took 165 s,
# 365 s and more (cut off at 380 s) and 146 s on 4 H200s. With KV=1, kv-sync's exchange on NCCL by size last. Each
# step's output goes to $OUT; the summary lines are printed, and the exit code is 0 only if every step passed.
set -u
# Absolute, so that pytest sessions started in another folder (the plugin's pytester tests) import this tree too.
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
# A tree run from PYTHONPATH (not pip-installed) has no pytest11 entry point: load the plugin by name instead.
if ! python -c "import sys, importlib.metadata as m; sys.exit(not any(e.value == 'sandbox.pytest_plugin'
                for e in m.entry_points(group='pytest11')))"; then
    export PYTEST_PLUGINS=sandbox.pytest_plugin
fi
out=${OUT:-gpu-check}
mkdir -p "$out"
cores=$(nproc)
jobs=${JOBS:-$(( cores >= 64 ? 24 : (cores > 3 ? cores / 2 : 1) ))}
python -c "import torch; print('torch', torch.__version__, '|', torch.cuda.device_count(), 'GPUs |', $cores, 'cores')"
t=(-q -p no:cacheprovider -rs)
base=$(mktemp -d)
trap 'rm -rf "$base"' EXIT
start=$SECONDS
timeout 330 python -m pytest "${t[@]}" -n "$jobs" -m "not gpu" --basetemp "$base/cpu" > "$out/pytest-cpu.txt" 2>&1 &
cpu=$!
timeout 420 python -m pytest "${t[@]}" -m gpu --basetemp "$base/gpu" > "$out/pytest-gpu.txt" 2>&1 &
gpu=$!
timeout 540 python -m sandbox.repro --all --gpu > "$out/repro-all-gpu.txt" 2>&1
gpu_repro=$?
wait $cpu; cpu_tests=$?
wait $gpu; gpu_tests=$?
echo "pytest -n $jobs -m 'not gpu': exit $cpu_tests: $(tail -1 "$out/pytest-cpu.txt")"
grep -E "^(FAILED|ERROR)" "$out/pytest-cpu.txt"
echo "pytest -m gpu: exit $gpu_tests: $(tail -1 "$out/pytest-gpu.txt")"
grep -E "^(FAILED|ERROR)" "$out/pytest-gpu.txt"
echo "repro --all --gpu: exit $gpu_repro"
cat "$out/repro-all-gpu.txt"
if [[ ${KV:-0} == 1 ]]; then
    timeout 240 python benchmarks/nccl_kv_exchange.py --sizes 256,262144,4194304 --json "$out/kv.json" > "$out/kv.txt" 2>&1
    cut -c1-150 "$out/kv.txt"
fi
echo "gpu_check: $(( SECONDS - start )) s"
(( cpu_tests == 0 && gpu_tests == 0 && gpu_repro == 0 ))
