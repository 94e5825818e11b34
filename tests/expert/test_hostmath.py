"""Host arithmetic of generated launchers (nodes/expert/kernels/hostmath.py): the helpers give
Triton's and PyTorch's answers, and the assembler swaps them in for host code only, defining each
once. Triton and torch are imported in a child process, as everywhere in the expert tests."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

from expert_helpers import ROOT, describe_many, request, task

from nodes.expert import ExpertCode
from nodes.expert.assemble import HOST_MATH, host_math

CHECK = r"""
import json, sys
import torch, triton
ns = {"torch": torch}
exec(sys.stdin.read(), ns)
ints = list(range(0, 4100)) + [2**31 - 1, 2**31, 2**40 + 3]
bad = [n for n in ints if ns["_host_next_pow2"](n) != triton.next_power_of_2(n)]
bad += [(a, b) for a in range(-70, 300) for b in (1, 2, 3, 7, 64, 1024) if ns["_host_cdiv"](a, b) != triton.cdiv(a, b)]
shapes = [((4, 1, 3), (4, 1, 3)), ((4, 1, 3), (5, 3)), ((2, 3), (2, 3), (1, 3)), ((), (7,)), ((8,), (8,), (8,)),
          ((16, 32, 8, 8), (16, 32, 1, 1)), ((0, 3), (1, 3)), ((1, 0), (5, 1)), ((3, 1, 1), (1, 4, 1), (2,))]
bad += [s for s in shapes if ns["_host_broadcast"](*map(torch.Size, s)) != torch.broadcast_shapes(*s)]
for a, b in (((2, 3), (4, 3)), ((0, 3), (2, 3)), ((3,), (4, 1, 2))):
    try:
        ns["_host_broadcast"](torch.Size(a), torch.Size(b))
        bad.append(f"no error for {a} with {b}")
    except RuntimeError:
        pass
try:
    ns["_host_next_pow2"](3.0)
    bad.append("a float accepted")
except (TypeError, AttributeError):
    pass
print(json.dumps([str(b) for b in bad[:10]]))
"""


def test_the_helpers_answer_as_triton_and_torch_do():
    code = "\n\n".join(HOST_MATH.values())
    proc = subprocess.run(
        [sys.executable, "-c", CHECK], input=code, capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == []


def test_only_calls_are_swapped():
    text = "g = triton.cdiv(n, 4) + triton.next_power_of_2(k)\ns = torch.broadcast_shapes(a.shape, b.shape)\n"
    assert (
        host_math(text)
        == "g = _host_cdiv(n, 4) + _host_next_pow2(k)\ns = _host_broadcast(a.shape, b.shape)\n"
    )
    kept = "f = triton.cdiv\nx = mytriton.cdiv(1, 2)\n"
    assert host_math(kept) == kept


def test_candidates_use_the_helpers_in_host_code_and_define_each_once():
    src_task = task(
        "", "", "return torch.softmax(x, dim=-1) * torch.sigmoid(x).sum(dim=0)", "torch.randn(37, 300)"
    )
    (desc,) = describe_many([(src_task, {})])
    reply = ExpertCode().write(request(desc))
    assert reply.source, reply.note
    tree = ast.parse(reply.source)
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    jit = [n for n in defs if any("triton" in ast.unparse(d) for d in n.decorator_list)]
    host = [n for n in defs if n not in jit]
    host_text = "\n".join(ast.unparse(n) for n in host)
    assert "triton.cdiv(" not in host_text and "triton.next_power_of_2(" not in host_text
    assert "_host_cdiv(" in host_text
    names = [n.name for n in defs]
    assert all(names.count(h) <= 1 for h in HOST_MATH)
    assert all(h in names for h in HOST_MATH if f"{h}(" in host_text.replace(f"def {h}(", ""))
