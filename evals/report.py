"""Eval report: report.md (metric tables), metrics.json, PNG plots, optional report.html.

Numbers come only from evals.metrics; anything not measured is printed as "not measured",
and a plot with no measured data is not drawn (the report says so instead).
"""

from __future__ import annotations

import base64
import html as _html
import json
from pathlib import Path
from typing import Any

from evals.metrics import P_VALUES, SPEEDUP_KEYS, compute_metrics, latest_rows, measured_speedups, pkey

NM = "not measured"


def _fmt(x: Any, spec: str = ".2f", suffix: str = "") -> str:
    if x is None:
        return NM
    if isinstance(x, float):
        return f"{x:{spec}}{suffix}"
    return str(x)


def _pct(x: float | None) -> str:
    return NM if x is None else f"{x * 100:.1f}%"


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return out


def _summary_row(name: str, s: dict[str, Any]) -> list[str]:
    v = s["verified"]
    se, sc = s["speedup"]["vs_eager"], s["speedup"]["vs_compile"]
    if not v["count"]:
        # Nothing verified: there is no speedup to measure, which is not "not measured".
        return [name, str(s["tasks"]), "0", "0.0%", "n/a", "n/a", "n/a"]
    return [
        name,
        str(s["tasks"]),
        f"{v['count']} ({v['pct']:.0f}%)" if v["pct"] is not None else "0",
        _pct(s["fast_p"]["vs_eager"]["1.0"]),
        _fmt(se["geomean"], ".2f", "x"),
        _fmt(se["median"], ".2f", "x"),
        _fmt(sc["geomean"], ".2f", "x"),
    ]


# ---------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------


def _plots(out: Path, rows: list[dict[str, Any]], metrics: dict[str, Any]) -> dict[str, str | None]:
    """Draw what has data; returns {plot name: file name or None when there was nothing to draw}."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")  # headless: no display on CI or the GPU host
    import matplotlib.pyplot as plt

    made: dict[str, str | None] = {}
    for which, label in (("vs_eager", "eager PyTorch"), ("vs_compile", "torch.compile")):
        spd = measured_speedups(rows, which)
        name = f"speedup_{which}.png"
        if not spd:
            made[name] = None
            continue
        fig, ax = plt.subplots(figsize=(7, 4))
        lo, hi = min(min(spd), 0.5), max(max(spd), 2.0)
        import numpy as np

        bins = np.geomspace(lo * 0.9, hi * 1.1, 25)
        ax.hist(spd, bins=bins, color="#4c72b0", edgecolor="white")
        ax.set_xscale("log")
        ax.axvline(1.0, color="black", linestyle="--", linewidth=1)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}x"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xticks([t for t in (0.25, 0.5, 1, 1.5, 2, 4, 8, 16, 32) if lo * 0.9 <= t <= hi * 1.1])
        ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_xlabel(f"speedup vs {label} (log scale; >1 is faster)")
        ax.set_ylabel("verified tasks")
        ax.set_title(f"Speedup vs {label}: {len(spd)} measured verified task(s)")
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        made[name] = name

    fams = [(k, v["speedup"]["vs_eager"]["geomean"], v) for k, v in metrics["per_family"].items()]
    fams = [f for f in fams if f[1] is not None]
    if fams:
        fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(fams) + 2), 4))
        names = [f"{k}\n({v['measured']['vs_eager']}/{v['tasks']})" for k, _, v in fams]
        vals = [g for _, g, _ in fams]
        ax.bar(range(len(vals)), vals, color=["#55a868" if g >= 1 else "#c44e52" for g in vals])
        ax.axhline(1.0, color="black", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(vals)), names, rotation=45, ha="right", fontsize=8)
        ax.set_ylabel("geomean speedup vs eager")
        ax.set_title("Per family (measured/tasks)")
        fig.tight_layout()
        fig.savefig(out / "per_family.png", dpi=110)
        plt.close(fig)
        made["per_family.png"] = "per_family.png"
    else:
        made["per_family.png"] = None

    stages = [s for s in metrics["stage_ablation"]["stages"] if s["geomean_after"] is not None]
    if stages:
        fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(stages) + 2), 4))
        prev = 1.0
        for i, s in enumerate(stages):
            g = s["geomean_after"]
            base, height = min(prev, g), abs(g - prev) or 0.005
            ax.bar(i, height, bottom=base, color="#55a868" if g >= prev else "#c44e52")
            ax.text(i, max(prev, g), f"{g:.3f}x", ha="center", va="bottom", fontsize=8)
            prev = g
        ax.axhline(1.0, color="black", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(stages)), [s["stage"] for s in stages])
        ax.set_ylabel("geomean speedup vs eager after stage")
        n = metrics["stage_ablation"]["tasks_with_all_stages_measured"]
        ax.set_title(f"Stage waterfall ({n} task(s) measured after every stage)")
        fig.tight_layout()
        fig.savefig(out / "stage_waterfall.png", dpi=110)
        plt.close(fig)
        made["stage_waterfall.png"] = "stage_waterfall.png"
    else:
        made["stage_waterfall.png"] = None
    return made


# ---------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------


def render_markdown(
    rows: list[dict[str, Any]],
    metrics: dict[str, Any],
    plots: dict[str, str | None],
    *,
    complete: bool = True,
    total_tasks: int | None = None,
) -> str:
    o = metrics["overall"]
    lines = ["# EGG eval report", ""]
    if not complete:
        lines += [f"**Partial**: the eval was interrupted; {len(rows)} of {total_tasks} task(s) recorded. "
                  "Rerun with `--resume` to finish.", ""]  # fmt: skip
    cfg = sorted({(r.get("model"), r.get("policy"), r.get("device")) for r in rows}, key=str)
    envs = sorted(
        {
            ", ".join(
                f"{k} {v}" for k, v in sorted({"gpu": r.get("gpu"), **(r.get("versions") or {})}.items()) if v
            )
            for r in rows
        }
    )
    lines += [f"- model / policy / device: {', '.join(' / '.join(map(str, c)) for c in cfg) or 'n/a'}"]
    for e in envs:
        lines += [f"- environment: {e or 'unknown'}"]
    lines += [
        f"- wall time: {_fmt(o['wall_s']['total'], '.0f', ' s')} total, median {_fmt(o['wall_s']['median'], '.1f', ' s')}"
        f" per task; LLM tokens in/out: {o['tokens']['input']}/{o['tokens']['output']}",
        "",
    ]

    lines += ["## Overview", ""]
    comp = o["compiled"]
    lines += _table(
        ["tasks", "compiled", "verified", "failed", "measured (eager)", "verified, not measured"],
        [[
            str(o["tasks"]),
            f"{comp['count']}" + (f" (+{comp['unknown']} unknown)" if comp["unknown"] else ""),
            f"{o['verified']['count']} ({_fmt(o['verified']['pct'], '.1f', '%')})",
            str(o["failed"]),
            str(o["measured"]["vs_eager"]),
            str(o["unmeasured_verified"]["vs_eager"]),
        ]],
    )  # fmt: skip
    if o["verified"]["count"] and not o["measured"]["vs_eager"]:
        lines += [
            "",
            "Speedups were **not measured** (no GPU timing in this run); only correctness is reported.",
        ]
    elif o["unmeasured_verified"]["vs_eager"]:
        lines += [
            "",
            f"{o['unmeasured_verified']['vs_eager']} verified task(s) have no timing: fast_p is a lower bound.",
        ]
    lines += [""]

    lines += ["## fast_p (fraction of ALL tasks that are verified and faster than p x)", ""]
    lines += _table(
        ["baseline"] + [f"p={pkey(p)}" for p in P_VALUES],
        [[w] + [_pct(o["fast_p"][w][pkey(p)]) for p in P_VALUES] for w in SPEEDUP_KEYS],
    )
    lines += ["", "## Speedup over verified, measured tasks", ""]
    lines += _table(
        ["baseline", "n", "geomean", "median", "mean", "min", "max"],
        [[w, str(s["n"])] + [_fmt(s[k], ".3f", "x") for k in ("geomean", "median", "mean", "min", "max")]
         for w, s in o["speedup"].items()],
    )  # fmt: skip
    lines += ["", f"Median roofline fraction: {_fmt(o['roofline_fraction']['median'], '.2f')} "
              f"(n={o['roofline_fraction']['n']})", ""]  # fmt: skip
    ex = metrics["overall_excluding_degenerate"]
    if metrics["degenerate"]:
        lines += [f"Excluding {len(metrics['degenerate'])} flagged task(s): verified "
                  f"{ex['verified']['count']}/{ex['tasks']}, geomean vs eager "
                  f"{_fmt(ex['speedup']['vs_eager']['geomean'], '.3f', 'x')}.", ""]  # fmt: skip

    head = ["group", "tasks", "verified", "fast_1 eager", "geomean eager", "median eager", "geomean compile"]
    for title, key in (("Per family", "per_family"), ("Per level", "per_level"), ("Per kind", "per_kind")):
        lines += [f"## {title}", ""]
        lines += _table(head, [_summary_row(k, v) for k, v in metrics[key].items()])
        lines += [""]

    lines += ["## Stage ablation (geomean speedup vs eager after each stage)", ""]
    st = metrics["stage_ablation"]
    if st["stages"]:
        lines += _table(
            ["stage", "geomean after", "n", "decisions"],
            [[s["stage"], _fmt(s["geomean_after"], ".3f", "x"), str(s["n"]),
              ", ".join(f"{k}: {v}" for k, v in sorted(s["outcomes"].items()))] for s in st["stages"]],
        )  # fmt: skip
    else:
        lines += ["No stage decisions recorded."]
    lines += [""]

    lines += ["## Flagged (degenerate or suspicious) tasks", ""]
    if metrics["degenerate"]:
        lines += _table(
            ["task", "flags"], [[d["task"], "; ".join(d["flags"])] for d in metrics["degenerate"]]
        )
    else:
        lines += ["None."]
    lines += [""]

    lines += ["## Plots", ""]
    for name, f in plots.items():
        lines += [f"![{name}]({f})" if f else f"- {name}: not drawn ({NM} / no data)"]
    lines += [""]

    lines += ["## Tasks", ""]
    lines += _table(
        ["task", "family", "kind", "verified", "eager ms", "candidate ms", "vs eager", "vs compile", "wall s", "failure"],
        [[r["task"], str(r.get("family")), str(r.get("kind")), "yes" if r["verified"] else "no"]
         + ([_fmt(r.get("eager_ms"), ".4f"), _fmt(r.get("candidate_ms"), ".4f"),
             _fmt(r.get("speedup_vs_eager"), ".2f", "x"), _fmt(r.get("speedup_vs_compile"), ".2f", "x")]
            if r["verified"] else ["-"] * 4)
         + [_fmt(r.get("wall_s"), ".1f"), (r.get("failure") or "")[:200].replace("\n", " ")] for r in rows],
    )  # fmt: skip
    return "\n".join(lines) + "\n"


def _render_html(md: str, out: Path, plots: dict[str, str | None]) -> str:
    """A self-contained HTML page: tables rendered, plots embedded as data URIs."""
    body: list[str] = []
    in_table = False
    for line in md.splitlines():
        if line.startswith("|"):
            cells = [c.strip().replace("\\|", "|") for c in line.strip("|").split(" | ")]
            if set(line.replace("|", "")) <= {"-"}:
                continue
            tag = "th" if not in_table else "td"
            if not in_table:
                body.append("<table>")
                in_table = True
            body.append("<tr>" + "".join(f"<{tag}>{_html.escape(c)}</{tag}>" for c in cells) + "</tr>")
            continue
        if in_table:
            body.append("</table>")
            in_table = False
        if line.startswith("!["):
            f = line[line.index("(") + 1 : -1]
            data = base64.b64encode((out / f).read_bytes()).decode()
            body.append(f'<img alt="{_html.escape(f)}" src="data:image/png;base64,{data}">')
        elif line.startswith("## "):
            body.append(f"<h2>{_html.escape(line[3:])}</h2>")
        elif line.startswith("# "):
            body.append(f"<h1>{_html.escape(line[2:])}</h1>")
        elif line.strip():
            body.append(f"<p>{_html.escape(line)}</p>")
    if in_table:
        body.append("</table>")
    style = ("body{font-family:sans-serif;max-width:1200px;margin:auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}img{max-width:100%}")  # fmt: skip
    return f"<!doctype html><html><head><meta charset='utf-8'><title>EGG eval</title><style>{style}</style></head><body>{''.join(body)}</body></html>\n"


def write_report(
    out_dir: str | Path,
    rows: list[dict[str, Any]] | None = None,
    *,
    html: bool = False,
    complete: bool = True,
    total_tasks: int | None = None,
) -> dict[str, str]:
    """Write report.md, metrics.json, plots (and report.html); rows default to results.jsonl."""
    out = Path(out_dir)
    if rows is None:
        from evals.runner import ResultsFile

        rows = latest_rows(ResultsFile(out / "results.jsonl").load())
    metrics = compute_metrics(rows)
    plots = _plots(out, rows, metrics)
    md = render_markdown(rows, metrics, plots, complete=complete, total_tasks=total_tasks or len(rows))
    (out / "report.md").write_text(md)
    payload = {"complete": complete, "total_tasks": total_tasks or len(rows), "plots": plots, **metrics}
    (out / "metrics.json").write_text(json.dumps(payload, indent=2, sort_keys=True))
    written = {"report_md": str(out / "report.md"), "metrics_json": str(out / "metrics.json")}
    written.update({k: str(out / v) for k, v in plots.items() if v})
    if html:
        (out / "report.html").write_text(_render_html(md, out, plots))
        written["report_html"] = str(out / "report.html")
    return written
