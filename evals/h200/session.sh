#!/usr/bin/env bash
# One H200 sitting's measurements for the open issues, as steps that each fit one device call
# (10 minutes at most). Run on the GPU host from the repository root, carrying the wheelhouse,
# the KernelBench checkout and the results of earlier calls:
#
#   here:  bash ../shared/device/wheelhouse.sh .whl      (after any dependency change)
#   run(command="bash evals/h200/session.sh STEP", carry=[".whl", ".kb", "out/h200"])
#   here:  mkdir -p out/h200 && tar -xzf <files_at>/<STEP>.tgz -C out/h200   (before the next call)
#
# The device returns at most 8 files a call, so each step leaves one archive, $OUT/<STEP>.tgz,
# holding its folder; several steps can share one call (`session.sh softmax; session.sh tests`).
# A step that did not finish resumes where it stopped: out/h200/<STEP> (carried) is copied to
# $OUT/<STEP> and `egg eval --resume` skips the tasks that already have a row. Each eval runs
# in a time box of EGG_STEP_SECONDS (default 540 s; `egg eval --time-box`): tasks start while
# enough of it is left and end with their best verified kernel before it ends, so little work is
# lost at the call's limit; SIGINT 30 s later is the backstop. Steps:
#
#   tests    the GPU tests named by issues 10, 12 and 14 (the patched timer against the judge's
#            clock, cached baselines, autotuned kernels through the tiling stage), the examples
#            on the GPU, the suite's tasks at full size and a real `egg eval` smoke run
#   hostile  the adversarial corpus with --device cuda (issue 10's table)
#   softmax  examples/softmax.py alone, default budgets, all four stages (issue 12: <= 60 s)
#   kb       the KernelBench sample (evals/h200/kb_sample.txt, 45 tasks over levels 1-3),
#            algorithm stage, eager and torch.compile timed in the same jobs (issues 11, 13)
#   kb-tuned the same tasks with all four stages (issue 13's tuned figures; issue 12's timing);
#            EGG_REDO="level1/6 level3/5" first drops those tasks' carried rows, so that they run
#            again with the code of this call (kb and suite take it too)
#   kb-ragged the sample's level-1 and level-2 tasks with --shapes ragged (every int size >= 8
#            changed to a smaller non-power of two), all four stages (EGG_STAGES to change);
#            EGG_LEVELS="1 2 3" (any step of the sample) picks the levels
#   suite    the project's whole suite, all four stages, default budgets (issue 12)
#   rnn      the suite's LSTM classifier and KernelBench level3/35-42 (LSTM, GRU), all four stages
#   convnets the suite's conv + BatchNorm networks (cx04, cx09, cx13, cv06) and KernelBench's
#            level2/11 and level3/9 (a pooled BatchNorm group on a ConvTranspose2d and a ResNet
#            stem): their kernels profiled in eval mode (kernel_times, two seeds), then all four
#            stages through egg eval (issue 13's conv rows)
#   tasks    `session.sh tasks TASK.py ...`: the tasks named, all four stages through egg eval
#            (EGG_WORKERS, default 6), e.g. a handful re-measured on another card
#   probe    `session.sh probe TASK.py ... [--seeds N]`: every expert seed of each task through
#            the sandbox, the fastest through the final benchmark (evals/h200/probe.py)
#   kernels  `session.sh kernels TASK.py ... [--seeds N]`: GPU time per kernel of eager, compile
#            and the first seeds of each task, from the PyTorch profiler (evals/h200/kernel_times.py)
#   membw    evals/h200/membw_probe.py: copy/fill floors, eval batch norm, a store-bound K=32
#            GEMM and a 4x4 stride-1 max pool, Triton variants beside eager and torch.compile
#   tf32     the bsplit GEMM's in-register A split three ways (evals/h200/tf32_probe.py; its
#            arguments, e.g. --k 65536)
#   libwarm  a fresh process's first conv and matmul with and without loading cuDNN's and
#            cuBLAS's libraries first (evals/h200/libwarm_probe.py; its arguments)
#   host     `session.sh host [TASK.py KERNEL.py|PARAMS.json ...] [--load 0,16]`: one Triton
#            launch's host cost (JIT path, compiled launcher, a PyTorch op) and each kernel file's
#            (or candidate parameters') launched forward against its CUDA-graph replay, with its
#            host profile, beside that many busy CPU processes (evals/h200/host_probe.py)
set -euo pipefail
step=${1:?usage: session.sh tests|hostile|softmax|kb|kb-tuned|kb-ragged|suite|rnn|convnets|tasks|probe|kernels|membw|libwarm|host|tf32 [ARGS...]}
shift
out=${OUT:?run through the device tool: \$OUT is where results come back}/$step
budget=${EGG_STEP_SECONDS:-540}
# checkpoints and the baseline cache stay on the host (they would not all fit back through $OUT)
export EGG_HOME=/tmp/egg-home LANGGRAPH_CLI_NO_ANALYTICS=1

python3 -m pip install -q --no-index --find-links .whl -e .  # pytest is on the host already
mkdir -p "$out"
# one archive per step, also when the step is stopped or fails
trap 'tar -czf "$out.tgz" -C "$(dirname "$out")" "$step" && rm -rf "$out"' EXIT
if [ -d "out/h200/$step" ]; then
  cp -r "out/h200/$step/." "$out/"
fi
if [ -n "${EGG_REDO:-}" ] && [ -f "$out/results.jsonl" ]; then
  # rows of the tasks named (level1/6 or level1/6_Matmul...: a path under the suite) are dropped
  python3 -m evals.h200.redo "$out/results.jsonl" $EGG_REDO
fi
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  # the host too: two H100 hosts of one sitting differed by half in CPU-bound phases
  lscpu 2>/dev/null | grep -E "^Model name|^CPU\(s\)" | tr -s ' ' || true
  python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} | tee -a "$out/machine.txt"

# egg eval over the task paths and options given, resumed, stopped cleanly before the call's limit;
# the GPU lock's holds are traced and the host's CPU load sampled meanwhile (evals/h200/locktrace.py):
# locktrace-<time>.txt is this call's trace, locktrace-<time>.report its summary
step_eval() {
  local tmp stamp sampler
  # one lock per GPU the eval hands out (tools/sandbox.py: egg-gpu-<uid>-<CUDA_VISIBLE_DEVICES>.lock)
  tmp=$(python3 -c "import tempfile; print(tempfile.gettempdir())")
  stamp=$(date -u +%H%M%S)
  rm -f "$tmp"/egg-gpu-*.lock.trace
  python3 -m evals.h200.locktrace sample "$out/cpu-$stamp.txt" & sampler=$!
  EGG_GPU_TRACE=1 timeout -s INT $((budget + 30)) egg eval "$@" --out "$out" --device cuda --resume \
    --time-box "$budget" 2> >(tee -a "$out/eval.log" >&2) \
    || echo "eval stopped (exit $?): rerun this step to resume"
  kill "$sampler" 2>/dev/null || true
  cat "$tmp"/egg-gpu-*.lock.trace > "$out/locktrace-$stamp.txt" 2>/dev/null || true
  python3 -m evals.h200.locktrace report "$out/locktrace-$stamp.txt" --cpu "$out/cpu-$stamp.txt" \
    | tee "$out/locktrace-$stamp.report" || true
  python3 -m evals report "$out" || true
}

# step_eval over the KernelBench sample (evals/h200/kb_sample.txt)
kb_eval() {
  local -a tasks
  # the levels interleaved, so a run cut short still covers all three
  mapfile -t tasks < <(python3 -c '
import sys
rows = [l.strip() for l in open(sys.argv[1]) if l.strip()]
levels = [[r for r in rows if r.startswith(f"level{n}/")] for n in sys.argv[2].split()]
for i in range(max(map(len, levels))):
    for lv in levels:
        if i < len(lv):
            print(".kb/KernelBench/" + lv[i])
' evals/h200/kb_sample.txt "${EGG_LEVELS:-1 2 3}")
  step_eval "${tasks[@]}" "$@"
}

case "$step" in
  tests)
    # extra arguments replace the default selection (e.g. one file and -k)
    if [ $# -eq 0 ]; then
      set -- tests/tools/test_gpu.py tests/expert/test_expert_gpu.py tests/evals/test_gpu_eval.py
    fi
    timeout -s INT "$budget" python3 -m pytest -m gpu -q -rA --durations=15 "$@" 2>&1 | tee "$out/pytest.log" || true
    ;;
  hostile)
    EGG_HOSTILE_TABLE="$out/hostile.md" timeout -s INT "$budget" python3 -m pytest -m gpu -q -rA \
      tests/tools/test_hostile.py 2>&1 | tee "$out/pytest.log" || true
    ;;
  softmax)
    t0=$(date +%s%N)
    timeout -s INT "$budget" egg optimize examples/softmax.py --device cuda --out "$out/run" \
      > >(tee "$out/optimize.log") 2>&1 || echo "optimize exit $?" | tee -a "$out/optimize.log"
    echo "end to end: $(( ($(date +%s%N) - t0) / 1000000 )) ms" | tee -a "$out/optimize.log"
    ;;
  kb)
    kb_eval --workers "${EGG_WORKERS:-6}" --seeds "${EGG_SEEDS:-3}" --stages algorithm
    ;;
  kb-tuned)
    kb_eval --workers "${EGG_WORKERS:-6}"
    ;;
  kb-ragged)
    # the sample's level-1 and level-2 tasks at other sizes (non-powers of two, ragged edges)
    EGG_LEVELS=${EGG_LEVELS:-1 2} kb_eval --workers "${EGG_WORKERS:-6}" --shapes ragged \
      --stages "${EGG_STAGES:-algorithm,mapping,tiling,memory}"
    ;;
  suite)
    step_eval evals/suites/egg --workers "${EGG_WORKERS:-8}"
    ;;
  rnn)
    # the recurrent layers: the suite's LSTM classifier and KernelBench's level-3 LSTM/GRU tasks
    # (never in the sample: eight of them, two-layer-plus networks of 512-step sequences)
    step_eval evals/suites/egg/cx28_lstm_classifier.py .kb/KernelBench/level3/3[5-9]_*.py \
      .kb/KernelBench/level3/4[0-2]_*.py --workers "${EGG_WORKERS:-5}"
    ;;
  convnets)
    nets=(evals/suites/egg/cx04_tiny_cnn.py evals/suites/egg/cx09_resnet_basic_block.py
          evals/suites/egg/cx13_mobilenet_block.py evals/suites/egg/cv06_pointwise_conv_bn_relu.py)
    for f in .kb/KernelBench/level2/11_*.py .kb/KernelBench/level3/9_ResNet18.py; do
      if [ -f "$f" ]; then nets+=("$f"); fi  # with the KernelBench checkout carried
    done
    timeout -s INT $((budget / 3)) python3 -m evals.h200.kernel_times "${nets[@]:0:4}" --seeds 2 \
      --out "$out/kernels" 2>&1 | grep -v tool.describe | tee -a "$out/kernels.txt" || true
    rm -f "$out"/kernels/*.py  # generated kernels: not results
    budget=$((budget - budget / 3))
    step_eval "${nets[@]}" --workers "${EGG_WORKERS:-6}"
    ;;
  tasks)
    step_eval "$@" --workers "${EGG_WORKERS:-6}"
    ;;
  probe)
    # every seed of the tasks named (paths), the fastest benchmarked beside eager and compile
    timeout -s INT "$budget" python3 -m evals.h200.probe "$@" --out "$out" --budget $((budget - 120)) 2>&1 \
      | grep -v tool.evaluate | tee -a "$out/probe.txt" || true
    ;;
  kernels)
    timeout -s INT "$budget" python3 -m evals.h200.kernel_times "$@" --out "$out" 2>&1 \
      | grep -v tool.describe | tee -a "$out/kernels.txt" || true
    ;;
  host)
    timeout -s INT "$budget" python3 -m evals.h200.host_probe "$@" --out "$out" 2>&1 | tee -a "$out/host.txt" || true
    ;;
  membw)
    # which kernel shapes reach the bandwidth roof for four memory-bound patterns (its arguments)
    timeout -s INT "$budget" python3 -m evals.h200.membw_probe --budget $((budget - 30)) "$@" 2>&1 \
      | tee -a "$out/membw.txt" || true
    ;;
  libwarm)
    timeout -s INT "$budget" python3 -m evals.h200.libwarm_probe "$@" 2>&1 | tee -a "$out/libwarm.txt" || true
    ;;
  tf32)
    timeout -s INT "$budget" python3 -m evals.h200.tf32_probe "$@" 2>&1 \
      | grep -v tool.describe | tee -a "$out/probe.txt" || true
    ;;
  *)
    echo "unknown step $step" >&2
    exit 2
    ;;
esac
