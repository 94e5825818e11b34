"""On the GPU host: every seed of the example tasks at their real sizes is correct on sm_90
(fp32 GEMMs against true fp32 at 1e-4, i.e. 3xTF32 must hold up); each seed's time vs eager
(and, for the first seed, vs torch.compile) is printed as one JSON line (run with -s).

    .venv/bin/pytest -m gpu tests/expert/test_expert_gpu.py -s -q
"""

from __future__ import annotations

import json
import shutil

import pytest
from expert_helpers import EXAMPLES, check_jobs, describe_many, request, run_jobs

from nodes.expert import ExpertCode

pytestmark = pytest.mark.gpu

EXAMPLE_FILES = [
    "gelu_chain.py",
    "softmax.py",
    "log_softmax_dim1.py",
    "linear_gelu.py",
    "bmm_residual.py",
    "conv_bias_relu.py",
    "layernorm.py",
    "mse_loss.py",
    "sum_dim1.py",
    "attention.py",
]


def _has_cuda() -> bool:
    return shutil.which("nvidia-smi") is not None


@pytest.mark.skipif(not _has_cuda(), reason="needs a CUDA GPU")
def test_examples_on_gpu():
    sources = [(EXAMPLES / f).read_text() for f in EXAMPLE_FILES]
    descs = describe_many([(s, {}) for s in sources])
    code = ExpertCode()
    jobs, labels = [], []
    for f, src, desc in zip(EXAMPLE_FILES, sources, descs, strict=True):
        for i in range(6):
            r = code.write(request(desc, seed_index=i, n_seeds=6))
            if r.source is None:
                break
            jobs += [dict(j, kind="bench", compile=(i == 0)) for j in check_jobs(src, {}, [r])]
            labels.append((f, r.origin))
    res = run_jobs(jobs, interpret=False, timeout=1800)
    failures = []
    for (f, origin), r in zip(labels, res, strict=True):
        line = {"task": f, "origin": origin, **{k: v for k, v in r.items() if k != "traceback"}}
        if r.get("candidate_ms") and r.get("eager_ms"):
            line["speedup_vs_eager"] = round(r["eager_ms"] / r["candidate_ms"], 3)
        if r.get("candidate_ms") and r.get("compile_ms"):
            line["speedup_vs_compile"] = round(r["compile_ms"] / r["candidate_ms"], 3)
        print(json.dumps(line))
        if not r.get("ok"):
            failures.append(line)
    assert not failures, failures
