"""One process writing a whole run's checkpoints into a shared store (used by the concurrency
tests): `python tests/store_writer.py URL THREAD START_AT`. It waits until START_AT (a
time.time() value) so that all writers start together, runs the full graph with the scripted
toolbox and models, and prints the run's status."""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fakes import FakeToolbox, ScriptedCode, scripted_models  # noqa: E402

from graph.context import Context  # noqa: E402
from graph.main import build_graph  # noqa: E402
from graph.persistence import OWNER_KEY, current_owner, open_checkpointer  # noqa: E402
from graph.records import TaskSpec  # noqa: E402
from nodes.deps import Deps  # noqa: E402

SCRIPT = {
    ("algorithm", "seed"): ["# s0 ms=0.9", "# s1 ms=0.5", "# s2 ms=0.6", "# s3 mismatch"],
    ("algorithm", "fix"): ["# fixed ms=0.45"],
    ("algorithm", "refine"): ["# r ms=0.40"],
    ("mapping", "tune"): ["# m1 G=2 ms=0.41", "# m2 G=4 ms=0.30"],
    ("tiling", "tune"): ["# t1 B=64 ms=0.35"],
    ("memory", "tune"): ["# w W=8 ms=0.299"],
}


def main() -> None:
    url, thread, start_at = sys.argv[1], sys.argv[2], float(sys.argv[3])
    code = ScriptedCode(SCRIPT)
    deps = Deps(toolbox=FakeToolbox(), model_factory=lambda s, t: scripted_models(code))
    while time.time() < start_at:
        time.sleep(0.005)
    saver = open_checkpointer("unused-home", url)  # opening (and creating the tables) races too
    g = build_graph(deps).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": thread, OWNER_KEY: current_owner()}, "recursion_limit": 300}
    ctx = Context(device="cuda", tune_budget=2, tune_width=2)
    out = g.invoke({"task": TaskSpec(path="t.py", name="t", source="class Model: pass\n")}, cfg, context=ctx)
    print(out["status"])


if __name__ == "__main__":
    main()
