#!/usr/bin/env bash
# The acceptance run on a machine with 2+ GPUs and a CUDA build of torch, from the repository root:
#   OUT=gpu-check bash benchmarks/gpu_check.sh
# The whole test suite (CPU tests and the `gpu` ones) in four concurrent pytest sessions (each has its own temp dir
# and leftover checks; the third and fourth share every test file the first two do not name), the catalogue's CPU runs with the
# GPUs visible, then every bug's --gpu form, then (with KV=1) kv-sync's exchange on NCCL by size. Each step's output
# goes to $OUT; the summary lines are printed.
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
python -c "import torch; print('torch', torch.__version__, '|', torch.cuda.device_count(), 'GPUs')"
t=(-q -p no:cacheprovider -rs)
g1=(tests/test_gpu.py tests/test_catalogue.py tests/test_check.py tests/test_layers.py tests/test_diagnose_unit.py)
g2=(tests/test_hygiene.py tests/test_interrupt.py tests/test_cli.py tests/test_api.py tests/test_warm.py tests/test_magic.py
    tests/test_lab.py tests/test_labs.py tests/test_docs.py tests/test_browser.py)
g3=() g4=()
for f in tests/test_*.py; do   # the rest, dealt alternately to two more sessions (one alone ran past 420 s)
    [[ " ${g1[*]} ${g2[*]} " == *" $f "* ]] && continue
    if (( ${#g3[@]} <= ${#g4[@]} )); then g3+=("$f"); else g4+=("$f"); fi
done
timeout 420 python -m pytest "${t[@]}" "${g1[@]}" > "$out/pytest-1.txt" 2>&1 &
timeout 420 python -m pytest "${t[@]}" "${g2[@]}" > "$out/pytest-2.txt" 2>&1 &
timeout 420 python -m pytest "${t[@]}" "${g3[@]}" > "$out/pytest-3.txt" 2>&1 &
timeout 420 python -m pytest "${t[@]}" "${g4[@]}" > "$out/pytest-4.txt" 2>&1 &
timeout 300 python -m sandbox.repro --all > "$out/repro-all.txt" 2>&1
echo "repro --all: exit $?"
wait
for f in "$out"/pytest-*.txt; do echo "$f: $(tail -1 "$f")"; grep -E "^(FAILED|ERROR)" "$f"; done
timeout 300 python -m sandbox.repro --all --gpu > "$out/repro-all-gpu.txt" 2>&1
echo "repro --all --gpu: exit $?"
tail -3 "$out/repro-all.txt"
cat "$out/repro-all-gpu.txt"
if [[ ${KV:-0} == 1 ]]; then
    timeout 240 python benchmarks/nccl_kv_exchange.py --sizes 256,262144,4194304 --json "$out/kv.json" > "$out/kv.txt" 2>&1
    cut -c1-150 "$out/kv.txt"
fi
