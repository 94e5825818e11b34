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

from evals.metrics import (
    HOST_BOUND,
    P_VALUES,
    SLOW_VS_EAGER,
    SPEEDUP_KEYS,
    compute_metrics,
    fast_p,
    group_by,
    latest_rows,
    measured_speedups,
    pkey,
)
from evals.results import ResultsFile

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


SUMMARY_HEAD = ["group", "tasks", "verified (fast_0)", "fast_1 eager", "geomean eager", "median eager",
                "geomean compile", "fast_1 compile", "geomean best", "median s/task"]  # fmt: skip


def _summary_row(name: str, s: dict[str, Any]) -> list[str]:
    v = s["verified"]
    se, sc = s["speedup"]["vs_eager"], s["speedup"]["vs_compile"]
    wall = _fmt(s["wall_s"]["median"], ".0f")
    if not v["count"]:
        # Nothing verified: there is no speedup to measure, which is not "not measured".
        return [name, str(s["tasks"]), "0 (0%)", "0.0%", "n/a", "n/a", "n/a", "0.0%", "n/a", wall]
    return [
        name,
        str(s["tasks"]),
        f"{v['count']} ({v['pct']:.0f}%)",
        _pct(s["fast_p"]["vs_eager"]["1.0"]),
        _fmt(se["geomean"], ".2f", "x"),
        _fmt(se["median"], ".2f", "x"),
        _fmt(sc["geomean"], ".2f", "x"),
        _pct(s["fast_p"]["vs_compile"]["1.0"]),
        # against the faster of eager and torch.compile of the same run (metrics.SPEEDUP_KEYS)
        _fmt(s["speedup"]["vs_best"]["geomean"], ".2f", "x"),
        wall,
    ]


# ---------------------------------------------------------------------------------------------
# What ran where: GPU, dtype and versions, for every title
# ---------------------------------------------------------------------------------------------


def _distinct(values: Any) -> list[str]:
    out: list[str] = []
    for v in values:
        if v not in (None, "") and str(v) not in out:
            out.append(str(v))
    return out


def run_caption(rows: list[dict[str, Any]]) -> str:
    """One line naming the GPU(s), dtype(s), versions and shapes the rows were measured with."""
    gpus = _distinct(r.get("gpu") for r in rows)
    devices = _distinct(r.get("device") for r in rows)
    if gpus:
        where = " / ".join(gpus)
    elif devices == ["cpu"]:
        where = "CPU (Triton interpreter; no GPU timing)"
    else:
        where = "GPU not recorded"
    dtypes = _distinct(r.get("dtype") for r in rows)
    parts = [where, " / ".join(dtypes) if dtypes else "dtype not recorded"]
    for key, label in (("torch", "torch"), ("triton", "triton"), ("cuda", "CUDA")):
        vals = _distinct((r.get("versions") or {}).get(key) for r in rows)
        if vals:
            parts.append(f"{label} {' / '.join(vals)}")
    # the sizes the tasks ran at (`egg eval --shapes`); rows older than the field: as written
    parts.append(
        f"shapes {' / '.join(_distinct(r.get('shapes') or 'as-written' for r in rows)) or 'as-written'}"
    )
    return " | ".join(parts)


def peaks_of(gpu: str | None) -> dict[str, float] | None:
    """The peak table entry the run's roofline fractions were computed with; None: peak unknown."""
    from tools.toolbox import peaks_for

    return peaks_for(gpu)


# ---------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------


def _label(r: dict[str, Any], names: list[str]) -> str:
    name = str(r.get("name") or r.get("task"))
    return name if names.count(name) == 1 else str(r.get("task"))


def _spread(r: dict[str, Any], base_ms: float | None) -> tuple[float, float] | None:
    """The speedup over a baseline at the kernel's p80 and p20 times (slow and fast end)."""
    p20, p80 = r.get("candidate_p20_ms"), r.get("candidate_p80_ms")
    if not (
        base_ms and isinstance(p20, (int, float)) and isinstance(p80, (int, float)) and p20 > 0 and p80 > 0
    ):
        return None
    return base_ms / p80, base_ms / p20


def _plot_speedup_per_task(plt: Any, out: Path, rows: list[dict[str, Any]], caption: str) -> str | None:
    timed = [
        r
        for r in rows
        if r.get("verified") is True and (r.get("speedup_vs_eager") or r.get("speedup_vs_compile"))
    ]
    if not timed:
        return "no verified task was timed"
    timed.sort(key=lambda r: r.get("speedup_vs_eager") or r.get("speedup_vs_compile") or 0)
    names = [str(r.get("name") or r.get("task")) for r in timed]
    n = len(timed)
    fig, ax = plt.subplots(figsize=(9, max(3.0, 0.42 * n + 1.8)))
    h = 0.38
    any_spread = False
    vals: list[float] = []
    for off, key, base, color, label in (
        (h / 2, "speedup_vs_eager", "eager_ms", "#4c72b0", "vs eager PyTorch"),
        (-h / 2, "speedup_vs_compile", "compile_ms", "#dd8452", "vs torch.compile"),
    ):
        ys, xs, lo, hi = [], [], [], []
        for i, r in enumerate(timed):
            v = r.get(key)
            if not isinstance(v, (int, float)) or v <= 0:
                continue
            ys.append(i + off)
            xs.append(v)
            sp = _spread(r, r.get(base))
            lo.append(v - sp[0] if sp else 0.0)
            hi.append(sp[1] - v if sp else 0.0)
            any_spread = any_spread or sp is not None
        if not xs:
            continue
        vals += xs
        # Bars grow from 1x (no change) to the speedup, so a slowdown points left.
        ax.barh(ys, [x - 1 for x in xs], left=1, height=h, color=color, label=label)
        if any(lo) or any(hi):
            ax.errorbar(xs, ys, xerr=[lo, hi], fmt="none", ecolor="black", elinewidth=1, capsize=2)
        for y, x, dl, dh in zip(ys, xs, lo, hi, strict=True):
            # The value beyond the bar's end and its error bar.
            at = (x + dh) * 1.03 if x >= 1 else (x - dl) / 1.03
            ax.text(at, y, f"{x:.2f}x", va="center", ha="left" if x >= 1 else "right", fontsize=7)
    ax.set_xscale("log")
    lo_x, hi_x = min(min(vals), 0.8) / 1.5, max(max(vals), 1.25) * 1.5
    ax.set_xlim(lo_x, hi_x)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks(range(n), [_label(r, names) for r in timed], fontsize=8)
    ax.set_ylim(-0.7, n - 0.3)
    _log_ticks(ax, lo_x, hi_x)
    ax.set_xlabel("speedup (log scale; > 1x is faster than the baseline)")
    note = "error bars: the kernel's p20-p80 time" if any_spread else "no p20/p80 recorded in these rows"
    ax.set_title(
        f"Speedup per task: {n} timed verified of {len(rows)} task(s); {note}\n{caption}", fontsize=9
    )
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "speedup_per_task.png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return None


def _log_ticks(ax: Any, lo: float, hi: float) -> None:
    import matplotlib.ticker

    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}x"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xticks([t for t in (0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 20, 50) if lo <= t <= hi])


def _plot_fast_p(plt: Any, out: Path, rows: list[dict[str, Any]], caption: str) -> str | None:
    if not measured_speedups(rows, "vs_eager") and not measured_speedups(rows, "vs_compile"):
        return "no verified task was timed (fast_0, the correctness rate, is in the tables)"
    levels = group_by(rows, "level")
    groups = list(levels.items()) + ([("all tasks", rows)] if len(levels) > 1 else [])
    top = max(measured_speedups(rows, "vs_eager") + measured_speedups(rows, "vs_compile"))
    # A log axis: the thresholds that matter (0.5x-2x) stay readable next to a 30x outlier.
    pmin, pmax = 0.1, max(2.5, top * 1.1)
    ps = [pmin * (pmax / pmin) ** (i / 400) for i in range(401)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, which, label in (
        (axes[0], "vs_eager", "eager PyTorch"),
        (axes[1], "vs_compile", "torch.compile"),
    ):
        for i, (name, grp) in enumerate(groups):
            if fast_p(grp, 1.0, which) is None:
                continue  # this level has no timed kernel against this baseline
            ys = [100 * (fast_p(grp, p, which) or 0.0) for p in ps]
            total = name == "all tasks"
            ax.step(ps, ys, where="post", color="black" if total else f"C{i}",
                    linewidth=2.2 if total else 1.5, label=f"{name} ({len(grp)})")  # fmt: skip
            shown = [p for p in P_VALUES if p >= pmin]
            ax.plot(shown, [100 * (fast_p(grp, p, which) or 0) for p in shown], "o",
                    color="black" if total else f"C{i}", markersize=3)  # fmt: skip
        ax.axvline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.set_xscale("log")
        ax.set_xlim(pmin, pmax)
        _log_ticks(ax, pmin, pmax)
        ax.set_ylim(0, 105)
        ax.set_xlabel(f"p (speedup threshold vs {label}, log scale)")
        ax.set_title(f"fast_p vs {label}", fontsize=9)
        ax.legend(fontsize=7, loc="upper right")
    axes[0].set_ylabel("tasks verified and faster than p (% of all)")
    fig.suptitle(f"fast_p by level (the correctness rate, p = 0, is in the tables)\n{caption}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "fast_p.png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return None


_BOTTLENECK_COLORS = {"memory": "#4c72b0", "compute": "#c44e52", "latency": "#8172b2"}


def _plot_roofline(plt: Any, out: Path, rows: list[dict[str, Any]], caption: str) -> str | None:
    have = [
        r for r in rows if r.get("verified") is True and isinstance(r.get("roofline_fraction"), (int, float))
    ]
    unknown = _distinct(r.get("gpu") for r in have if peaks_of(r.get("gpu")) is None)
    have = [r for r in have if peaks_of(r.get("gpu")) is not None]
    if not have:
        why = "no timed verified task has a roofline fraction"
        return why + (f"; peak unknown for {', '.join(unknown)}" if unknown else "")
    have.sort(key=lambda r: r["roofline_fraction"])
    names = [str(r.get("name") or r.get("task")) for r in have]
    n = len(have)
    fig, ax = plt.subplots(figsize=(9, max(3.0, 0.34 * n + 2.0)))
    fr = [float(r["roofline_fraction"]) for r in have]
    colors = [_BOTTLENECK_COLORS.get(str(r.get("bottleneck")), "#999999") for r in have]
    ax.barh(range(n), fr, color=colors, height=0.6)
    for i, (r, f) in enumerate(zip(have, fr, strict=True)):
        ms = r.get("candidate_ms")
        ideal = (
            f"; attainable {f * ms * 1e3:.0f} us vs achieved {ms * 1e3:.0f} us"
            if isinstance(ms, float)
            else ""
        )
        ax.text(f + 0.01, i, f"{f:.0%} ({r.get('bottleneck') or 'unknown'}{ideal})", va="center", fontsize=7,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5}, zorder=3)  # fmt: skip
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xlim(0, max(1.0, max(fr)) * 1.9)  # room for the labels right of the bars
    ax.set_yticks(range(n), [_label(r, names) for r in have], fontsize=8)
    ax.set_xlabel("fraction of the roofline as the run computed it: attainable time / achieved time,\n"
                  "attainable = max(bytes / peak bandwidth, FLOPs / peak FLOP/s); > 100%: the estimate is low")  # fmt: skip
    peaks = []
    for g in _distinct(r.get("gpu") for r in have):
        pk = peaks_of(g) or {}
        peaks.append(
            f"{g}: {pk['gbps']:.0f} GB/s, fp32 {pk['tflops_fp32']:g} / TF32 {pk['tflops_tf32']:g} / "
            f"bf16 {pk['tflops_bf16']:g} TFLOP/s"
        )
    skipped = f"; not shown (peak unknown): {', '.join(unknown)}" if unknown else ""
    ax.set_title(f"Roofline: achieved vs attainable per task ({n} task(s){skipped})\n{caption}\n"
                 f"peaks: {'; '.join(peaks)}", fontsize=8)  # fmt: skip
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in _BOTTLENECK_COLORS.values()]
    fig.legend(handles, [f"{k}-bound" for k in _BOTTLENECK_COLORS], fontsize=7, ncol=3, loc="lower center")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(out / "roofline.png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return None


def _plot_per_family(plt: Any, out: Path, metrics: dict[str, Any], caption: str) -> str | None:
    import matplotlib.ticker

    fams = [(k, v["speedup"]["vs_eager"]["geomean"], v) for k, v in metrics["per_family"].items()]
    fams = [f for f in fams if f[1] is not None]
    if not fams:
        return "no family has a timed verified task"
    fig, ax = plt.subplots(figsize=(max(8, 0.6 * len(fams) + 2), 4))
    names = [f"{k}\n({v['measured']['vs_eager']}/{v['tasks']})" for k, _, v in fams]
    vals = [g for _, g, _ in fams]
    ax.bar(range(len(vals)), vals, color=["#55a868" if g >= 1 else "#c44e52" for g in vals])
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(vals)), names, rotation=45, ha="right", fontsize=8)
    ax.set_yscale("log")  # a 30x family must not flatten the ones near 1x
    # plain "1.2x" tick labels on both the decade and the in-between ticks (not 1.2 x 10^0)
    ticks = matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:.3g}x")
    ax.yaxis.set_major_formatter(ticks)
    # in-between ticks are labelled only where no decade tick would show (a narrow range)
    narrow = max(vals) / min(vals) < 8
    ax.yaxis.set_minor_formatter(ticks if narrow else matplotlib.ticker.NullFormatter())
    for i, g in enumerate(vals):
        ax.text(i, g, f"{g:.2f}x", ha="center", va="bottom" if g >= 1 else "top", fontsize=7)
    ax.set_ylabel("geomean speedup vs eager (log scale)")
    ax.set_title(f"Per family (timed/tasks)\n{caption}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "per_family.png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return None


def _plot_waterfall(plt: Any, out: Path, metrics: dict[str, Any], caption: str) -> str | None:
    stages = [s for s in metrics["stage_ablation"]["stages"] if s["geomean_after"] is not None]
    if not stages:
        return "no task was timed after every stage"
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(stages) + 2), 4))
    prev = 1.0
    labels = []
    for i, s in enumerate(stages):
        g = s["geomean_after"]
        base, height = min(prev, g), abs(g - prev) or 0.005
        # A stage skipped by every task (not asked for, or nothing to tune) is drawn grey and
        # named so: its value is the previous stage's kernel carried forward.
        skipped = set(s.get("outcomes") or {}) <= {"skipped"}
        labels.append(f"{s['stage']}\n(skipped)" if skipped else s["stage"])
        ax.bar(i, height, bottom=base, color="#bbbbbb" if skipped else "#55a868" if g >= prev else "#c44e52")
        ax.text(i, max(prev, g), f"{g:.3f}x", ha="center", va="bottom", fontsize=8)
        prev = g
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(stages)), labels)
    ax.set_ylabel("geomean speedup vs eager after stage")
    n = metrics["stage_ablation"]["tasks_with_all_stages_measured"]
    ax.set_title(f"Stage waterfall ({n} task(s) with a kernel after every stage)\n{caption}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "stage_waterfall.png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return None


PLOTS = ("speedup_per_task.png", "fast_p.png", "roofline.png", "per_family.png", "stage_waterfall.png")


def _plots(
    out: Path, rows: list[dict[str, Any]], metrics: dict[str, Any]
) -> tuple[dict[str, str | None], dict[str, str]]:
    """Draw what has data: ({plot: file name or None}, {plot: why it was not drawn})."""
    import matplotlib

    matplotlib.use("Agg")  # headless: no display on CI or the GPU host
    import matplotlib.pyplot as plt

    caption = run_caption(rows)
    why = {
        "speedup_per_task.png": _plot_speedup_per_task(plt, out, rows, caption),
        "fast_p.png": _plot_fast_p(plt, out, rows, caption),
        "roofline.png": _plot_roofline(plt, out, rows, caption),
        "per_family.png": _plot_per_family(plt, out, metrics, caption),
        "stage_waterfall.png": _plot_waterfall(plt, out, metrics, caption),
    }
    for name, reason in why.items():
        if reason is not None:
            # A plot of an earlier report of this directory must not pass for this run's.
            (out / name).unlink(missing_ok=True)
    made = {name: (None if reason else name) for name, reason in why.items()}
    return made, {k: v for k, v in why.items() if v}


# ---------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------


def _shapes_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The header's line on the sizes the tasks ran with (`egg eval --shapes`)."""
    modes = _distinct(r.get("shapes") or "as-written" for r in rows) or ["as-written"]
    line = f"- shapes: {' / '.join(modes)}"
    if "ragged" in modes:
        line += (
            " (int size constants >= 8 changed to smaller non-power-of-two values; on CPU applied "
            "to the shrunk sizes)"
        )
        fell_back = [
            str(r.get("task"))
            for r in rows
            if r.get("shapes") == "ragged" and r.get("shapes_used") != "ragged"
        ]
        if fell_back:
            line += f"; ran as written (no ragged set ran, or the task failed to load), not ragged: {', '.join(fell_back)}"
    return [line]


def render_markdown(
    rows: list[dict[str, Any]],
    metrics: dict[str, Any],
    plots: dict[str, str | None],
    *,
    complete: bool = True,
    total_tasks: int | None = None,
    not_drawn: dict[str, str] | None = None,
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
    lines += [f"- measured on: {run_caption(rows)}"]
    lines += _shapes_lines(rows)
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
    lines += ["p=0.0 is the correctness rate (KernelBench fast_0), measured on every device.", ""]
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
    for bn, v in (o.get("roofline_by_bottleneck") or {}).items():
        below = ", ".join(v["below_0.8"]) or "none"
        lines.append(f"- {bn}-bound: median {_fmt(v['median'], '.2f')} (n={v['n']}); below 0.8: {below}")
    if o.get("roofline_by_bottleneck"):
        lines.append("")
    if metrics.get("stage_timed"):
        names = ", ".join(metrics["stage_timed"])
        lines += [f"Timed by their stage, not by the final benchmark (the time box ended first): "
                  f"{len(metrics['stage_timed'])} task(s): {names}.", ""]  # fmt: skip
    ex = metrics["overall_excluding_degenerate"]
    if metrics["degenerate"]:
        lines += [f"Excluding {len(metrics['degenerate'])} flagged task(s): verified "
                  f"{ex['verified']['count']}/{ex['tasks']}, geomean vs eager "
                  f"{_fmt(ex['speedup']['vs_eager']['geomean'], '.3f', 'x')}.", ""]  # fmt: skip

    head = SUMMARY_HEAD
    for title, key in (("Per family", "per_family"), ("Per level", "per_level"), ("Per kind", "per_kind")):
        lines += [f"## {title}", ""]
        lines += _table(head, [_summary_row(k, v) for k, v in metrics[key].items()])
        lines += [""]

    lines += ["## Outcomes per level", ""]
    oc = metrics["outcomes"]
    lines += _table(
        ["level", "tasks", "verified", "unsupported", "bad input", "failed"],
        [[lvl, str(c["tasks"])] + [f"{c[k]} ({100 * c[k] / c['tasks']:.0f}%)" if c["tasks"] else "0"
                                   for k in ("verified", "unsupported", "bad_input", "failed")]
         for lvl, c in oc["per_level"].items()],
    )  # fmt: skip
    for kind, title in (("unsupported", "Unsupported"), ("bad_input", "Bad input"), ("failed", "Failed")):
        if oc[kind]:
            lines += ["", f"{title}:", ""]
            lines += [f"- {x['task']}: {x['reason'][:300].replace(chr(10), ' ')}" for x in oc[kind]]
    lines += [""]

    slow = metrics.get("slow_vs_eager") or []
    lines += [f"## Slower than {SLOW_VS_EAGER:g}x of eager", ""]
    lines += [f"- {x['task']}: {x['speedup_vs_eager']:.2f}x: {x['reason']}" for x in slow] or ["None."]
    lines += [""]

    ob = metrics.get("compile_outside_bar") or []
    if ob:
        lines += ["## torch.compile outside the checker's bar", ""]
        lines += [
            "Its output on the timed inputs missed the bar a kernel of ours must pass (float64 "
            "reference, tolerance plus 4x the reference's own error); a kernel computing the same "
            "way would have been refused.",
            "",
        ]
        lines += [
            f"- {x['task']}: ours {_fmt(x['speedup_vs_compile'], '.2f', 'x')} of it: {x['reason'][:200]}"
            for x in ob
        ]
        lines += [""]

    hb = metrics.get("host_bound") or []
    lines += [f"## Host-bound forwards (launched over CUDA-graph replay above {HOST_BOUND:g}x)", ""]
    if hb:
        lines += ["The quoted figure is the launched forward's; the replay runs the same kernels with "
                  "no host work between them (Python launch overhead, or a host busy with other jobs).", ""]  # fmt: skip
        lines += _table(
            ["task", "launched ms", "graph replay ms", "stage ms", "launched / replay"],
            [[str(d["task"]), _fmt(d["candidate_ms"], ".3f"), _fmt(d["cudagraph_ms"], ".3f"),
              _fmt(d["stage_ms"], ".3f"), f"{d['ratio']:.2f}x"] for d in hb],
        )  # fmt: skip
    else:
        lines += ["None."]
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

    lines += ["## Where the time went (seconds per phase)", ""]
    ph = metrics["phases"]
    if ph:
        lines += _table(
            ["phase", "total s", "median s per task", "tasks"],
            [[k, f"{v['total']:.1f}", f"{v['median']:.1f}", str(v["tasks"])] for k, v in ph.items()],
        )
        sources = sorted({str(r.get("phases_source")) for r in rows if r.get("phases")})
        lines += ["", f"Source: {', '.join(sources)} (see evals/phases.py). Job phases are summed over "
                  "candidate jobs, which run in parallel: they can exceed a task's wall time.", ""]  # fmt: skip
    else:
        lines += ["No per-phase seconds recorded.", ""]

    lines += ["## Plots", ""]
    for name, f in plots.items():
        why = (not_drawn or {}).get(name, "no data")
        lines += [f"![{name}]({f})" if f else f"- {name}: not drawn ({why})"]
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
        rows = latest_rows(ResultsFile(out / "results.jsonl").load())
    metrics = compute_metrics(rows)
    plots, not_drawn = _plots(out, rows, metrics)
    md = render_markdown(
        rows, metrics, plots, complete=complete, total_tasks=total_tasks or len(rows), not_drawn=not_drawn
    )
    (out / "report.md").write_text(md)
    payload = {
        "complete": complete,
        "total_tasks": total_tasks or len(rows),
        "measured_on": run_caption(rows),
        "plots": plots,
        "plots_not_drawn": not_drawn,
        **metrics,
    }
    (out / "metrics.json").write_text(json.dumps(payload, indent=2, sort_keys=True))
    written = {"report_md": str(out / "report.md"), "metrics_json": str(out / "metrics.json")}
    written.update({k: str(out / v) for k, v in plots.items() if v})
    if html:
        (out / "report.html").write_text(_render_html(md, out, plots))
        written["report_html"] = str(out / "report.html")
    return written
