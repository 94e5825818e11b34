"""evals.h200.redo drops exactly the named tasks' rows, so a resumed eval runs them again."""

import json
from pathlib import Path

from evals.h200.redo import drop, main


def _rows(path: Path) -> list[str]:
    return [json.loads(line)["task"] for line in path.read_text().splitlines()]


def test_drops_only_the_named_tasks(tmp_path: Path) -> None:
    res = tmp_path / "results.jsonl"
    paths = [
        ".kb/KernelBench/level1/6_Matmul_with_large_K_dimension_.py",
        ".kb/KernelBench/level1/63_conv_standard_2D.py",
        ".kb/KernelBench/level3/5_AlexNet.py",
        ".kb/KernelBench/level3/51_Something.py",
        ".kb/KernelBench/level2/71_Conv2d_Divide_LeakyReLU.py",
    ]
    res.write_text("".join(json.dumps({"task": p.split("/")[-1], "path": p}) + "\n" for p in paths))
    assert drop(res, ["level1/6", "level3/5_AlexNet.py"]) == 2
    assert _rows(res) == ["63_conv_standard_2D.py", "51_Something.py", "71_Conv2d_Divide_LeakyReLU.py"]
    assert main([str(res), "level2/71_Conv2d_Divide_LeakyReLU"]) == 0
    assert _rows(res) == ["63_conv_standard_2D.py", "51_Something.py"]
    assert main([str(res)]) == 2
