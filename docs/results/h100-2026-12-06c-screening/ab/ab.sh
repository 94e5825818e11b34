#!/usr/bin/env bash
# Same-machine A/B of the screening change: the same 8 suite tasks, old code then new code
set -u
python3 -m pip install -q --no-index --find-links .whl -e . >/dev/null 2>&1
export LANGGRAPH_CLI_NO_ANALYTICS=1 EGG_GPU_TRACE=1
{ lscpu | grep -E "Model name|^CPU\(s\)|MHz"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $OUT/machine.txt
T=""
for t in mm10_matmul_ragged mm11_bmm_ragged nm03_batchnorm2d_train nm04_batchnorm2d_eval nm05_groupnorm nm09_frobenius_normalize nm11_batchnorm2d_ragged pl04_maxpool3d; do T="$T $PWD/evals/suites/egg/$t.py"; done
tmp=$(python3 -c "import tempfile; print(tempfile.gettempdir())")
for v in old new; do
  dir=$PWD; [ $v = old ] && dir=$PWD/.ab-old
  rm -f "$tmp"/egg-gpu-*.lock.trace
  python3 -m evals.h200.locktrace sample $OUT/$v-cpu.txt & s=$!
  (cd $dir && EGG_HOME=/tmp/egg-home-$v timeout -s INT 150 python3 -m graph.cli eval $T --out $OUT/$v --device cuda --workers 8 --time-box 120 > $OUT/$v-eval.log 2>&1)
  kill $s
  cat "$tmp"/egg-gpu-*.lock.trace > $OUT/$v-trace.txt
  python3 -m evals.h200.locktrace report $OUT/$v-trace.txt --cpu $OUT/$v-cpu.txt | tee $OUT/$v-trace.report
done
cd $OUT && tar -czf ab.tgz old new *.txt *.report *.log && rm -rf old new
