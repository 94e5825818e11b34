#!/usr/bin/env bash
# Same-host A/B of two code trees on the same tasks: an earlier commit unpacked in OLD_DIR, then
# this tree, each through `egg eval` with its own EGG_HOME (both measure their baselines), the
# GPU lock traced and the host's CPU sampled. On the GPU host, from the repository root:
#
#   here:  rm -rf .ab-old && mkdir .ab-old && git archive <commit> | tar -x -C .ab-old
#   run(command="bash evals/h200/ab.sh .ab-old 120 evals/suites/egg/nm05_groupnorm.py ...",
#       carry=[".whl", ".ab-old"])
#
# BOX_SECONDS is each run's --time-box (tasks end with their best verified kernel before it);
# EGG_WORKERS (default 8) workers. $OUT/ab.tgz holds old/ and new/ (results, task logs),
# <v>-trace.txt and <v>-trace.report (evals/h200/locktrace.py), <v>-eval.log, machine.txt and
# ab.txt: the per-job phases of both runs side by side and the tasks' walls
# (evals/h200/jobphases.py).
set -u
old=$(cd "${1:?usage: ab.sh OLD_DIR BOX_SECONDS TASK.py...}" && pwd)
box=${2:?usage: ab.sh OLD_DIR BOX_SECONDS TASK.py...}
shift 2
tasks=()
for t in "$@"; do tasks+=("$(cd "$(dirname "$t")" && pwd)/$(basename "$t")"); done
out=${OUT:?run through the device tool}/ab
mkdir -p "$out"
python3 -m pip install -q --no-index --find-links .whl -e . >/dev/null 2>&1
export LANGGRAPH_CLI_NO_ANALYTICS=1 EGG_GPU_TRACE=1
{
  lscpu | grep -E "Model name|^CPU\(s\)|MHz"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
  echo "old: $(cat "$old/.ab-commit" 2>/dev/null || echo "$old")  new: $(git rev-parse --short HEAD 2>/dev/null || echo this tree)"
} > "$out/machine.txt"
tmp=$(python3 -c "import tempfile; print(tempfile.gettempdir())")
for v in old new; do
  dir=$PWD
  [ "$v" = old ] && dir=$old
  rm -f "$tmp"/egg-gpu-*.lock.trace
  python3 -m evals.h200.locktrace sample "$out/$v-cpu.txt" & sampler=$!
  (cd "$dir" && EGG_HOME=/tmp/egg-home-$v timeout -s INT $((box + 30)) python3 -m graph.cli eval "${tasks[@]}" \
    --out "$out/$v" --device cuda --workers "${EGG_WORKERS:-8}" --time-box "$box" > "$out/$v-eval.log" 2>&1)
  kill "$sampler" 2>/dev/null
  cat "$tmp"/egg-gpu-*.lock.trace > "$out/$v-trace.txt" 2>/dev/null
  python3 -m evals.h200.locktrace report "$out/$v-trace.txt" --cpu "$out/$v-cpu.txt" | tee "$out/$v-trace.report"
done
python3 -m evals.h200.jobphases "$out/old" "$out/new" | tee "$out/ab.txt"
cd "$OUT" && tar -czf ab.tgz ab && rm -rf ab
