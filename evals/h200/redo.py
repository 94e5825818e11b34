"""Drop the rows of named tasks from a results.jsonl, so that `egg eval --resume` runs them again
(with the code of this call) and keeps every other row:

    python -m evals.h200.redo out/h200/kb-tuned/results.jsonl level1/6 level3/5_AlexNet.py

A name is a task's path under its suite, with or without the rest of the file name: `level1/6`
names `.../level1/6_Matmul_with_large_K_dimension_.py` and not `.../level1/63_conv...`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def named(path: str, names: list[str]) -> bool:
    return any(f"/{n}_" in path or path.endswith((f"/{n}", f"/{n}.py")) for n in names)


def drop(results: Path, names: list[str]) -> int:
    """Rewrite `results` without the rows of `names`; returns how many were dropped."""
    rows = [line for line in results.read_text().splitlines(keepends=True) if line.strip()]
    keep = [r for r in rows if not named(str(json.loads(r).get("path") or ""), names)]
    results.write_text("".join(keep))
    return len(rows) - len(keep)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python -m evals.h200.redo RESULTS.jsonl TASK...", file=sys.stderr)
        return 2
    n = drop(Path(args[0]), args[1:])
    print(f"redo: dropped {n} row(s) of {' '.join(args[1:])}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
