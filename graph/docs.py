"""Generated README sections: the graph diagrams and the configuration table.

`python -m graph.docs` rewrites them in README.md; a test fails when README.md is out of date.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from graph.context import config_table

README = Path(__file__).resolve().parents[1] / "README.md"


def _strip_front_matter(mermaid: str) -> str:
    return re.sub(r"^---\n.*?\n---\n", "", mermaid, flags=re.S).strip()


def diagrams() -> dict[str, str]:
    from graph.factory import build_stage_graph
    from graph.main import build_graph
    from graph.stages import ALGORITHM, TILING
    from nodes.deps import Deps

    deps = Deps(toolbox=None, model_factory=lambda s, t: None)  # nodes are never called here
    top = build_graph(deps).compile().get_graph().draw_mermaid()
    explore = build_stage_graph(ALGORITHM, deps).compile().get_graph(xray=1).draw_mermaid()
    tune = build_stage_graph(TILING, deps).compile().get_graph().draw_mermaid()
    return {
        "graph-top": "```mermaid\n" + _strip_front_matter(top) + "\n```",
        "graph-explore": "```mermaid\n" + _strip_front_matter(explore) + "\n```",
        "graph-tune": "```mermaid\n" + _strip_front_matter(tune) + "\n```",
        "config": config_table(),
    }


def render(text: str, sections: dict[str, str]) -> str:
    for name, body in sections.items():
        pattern = re.compile(rf"(<!-- {name}:begin -->\n)(?:.*?\n)?(<!-- {name}:end -->)", re.S)
        if not pattern.search(text):
            raise ValueError(f"README.md lacks the markers for section {name!r}")
        text = pattern.sub(lambda m, body=body: m.group(1) + body + "\n" + m.group(2), text)
    return text


def main() -> int:
    text = README.read_text()
    new = render(text, diagrams())
    if "--check" in sys.argv:
        if new != text:
            print("README.md is out of date: run `python -m graph.docs`", file=sys.stderr)
            return 1
        return 0
    README.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
