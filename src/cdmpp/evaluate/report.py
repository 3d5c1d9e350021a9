"""The evaluation report: a side-by-side table of models, plots, and a markdown page.

    table = comparison_table({"cdmpp": summary(y, p1, g), "xgb": summary(y, p2, g)},
                             {"median_ape": 0.012, "within_10": 0.97, "n": len(y)})
    figs = [plot_predicted_vs_measured(y, preds, "out/scatter.png"),
            plot_error_cdf(y, preds, "out/error_cdf.png")]
    markdown_report("random split", {"train": 9000, "test": 1000}, table, figs, "out/report.md")

matplotlib is imported only by the plotting functions; figures are drawn with the Agg backend
(no display, no pyplot state).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

# (metric key, column header, format): fractions are shown as percentages
COLUMNS = (
    ("n", "n", "int"),
    ("mape", "MAPE", "pct"),
    ("median_ape", "median APE", "pct"),
    ("within_10", "±10%", "pct"),
    ("rmse_log", "RMSE(log)", "float"),
    ("top1", "top-1", "float"),
    ("top5", "top-5", "float"),
    ("pairwise_acc", "pairwise", "pct"),
)
NOISE_ROW = "label noise floor"


def _cell(value, fmt: str) -> str:
    if value is None:
        return "-"
    value = float(value)
    if math.isnan(value):
        return "n/a"
    if fmt == "int":
        return str(int(value))
    if fmt == "pct":
        return f"{100 * value:.1f}%"
    return f"{value:.3f}"


def comparison_table(results: dict[str, dict], noise_floor: dict) -> str:
    """One aligned text table: a row per model (its `metrics.summary()` dict), then a row
    "label noise floor" with the noise figures that apply (median APE: median per-record label
    noise; ±10%: share of records whose noise is at most 10%; n); other cells show "-".
    Missing metrics show "-", NaN shows "n/a"."""
    header = ["model"] + [title for _, title, _ in COLUMNS]
    rows = [[str(name)] + [_cell(metrics.get(key), fmt) for key, _, fmt in COLUMNS]
            for name, metrics in results.items()]
    rows.append([NOISE_ROW] + [_cell(noise_floor.get(key), fmt) for key, _, fmt in COLUMNS])
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]

    def line(cells):
        first = cells[0].ljust(widths[0])
        rest = [c.rjust(w) for c, w in zip(cells[1:], widths[1:])]
        return "  ".join([first] + rest).rstrip()

    rule = "  ".join("-" * w for w in widths)
    lines = [line(header), rule] + [line(r) for r in rows[:-1]] + [rule, line(rows[-1])]
    if noise_floor.get("disturbed"):
        lines.append(f"{noise_floor['disturbed']} test labels were timed with no pass on an "
                     "undisturbed machine (likely too high): `cdmpp collect --remeasure-disturbed`")
    return "\n".join(lines)


def _figure(**kwargs):
    """A matplotlib Figure drawn by the Agg backend, outside pyplot's global state (so the
    caller's interactive backend, if any, is left alone)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(**kwargs)
    FigureCanvasAgg(fig)
    return fig


def _checked(y_true, preds: dict) -> tuple[np.ndarray, dict]:
    t = np.asarray(y_true, dtype=np.float64)
    if not preds:
        raise ValueError("preds must hold at least one model's predictions")
    out = {}
    for name, p in preds.items():
        p = np.asarray(p, dtype=np.float64)
        if p.shape != t.shape:
            raise ValueError(f"predictions of {name!r} have shape {p.shape}, y_true {t.shape}")
        out[name] = p
    return t, out


def _save(fig, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp{os.getpid()}{path.suffix}")
    fig.savefig(tmp, dpi=120, bbox_inches="tight", format="png")
    os.replace(tmp, path)
    return path


def plot_predicted_vs_measured(y_true, preds: dict[str, np.ndarray], path) -> Path:
    """Log-log scatter of predicted vs measured latency, one panel per model, with the y = x
    line and a ±10% band. Returns the PNG's path."""
    t, preds = _checked(y_true, preds)
    n = len(preds)
    fig = _figure(figsize=(4.2 * n, 4.2))
    axes = fig.subplots(1, n, squeeze=False, sharex=True, sharey=True)
    positive = [a[(a > 0) & np.isfinite(a)] for a in [t, *preds.values()]]
    values = np.concatenate(positive) if any(len(a) for a in positive) else np.array([1e-6, 1e-3])
    lo, hi = values.min() / 1.5, values.max() * 1.5
    for ax, (name, p) in zip(axes[0], preds.items()):
        ok = (t > 0) & (p > 0) & np.isfinite(t) & np.isfinite(p)
        ax.scatter(t[ok], p[ok], s=6, alpha=0.5, linewidths=0)
        line = np.array([lo, hi])
        ax.plot(line, line, color="black", linewidth=0.8, label="y = x")
        ax.fill_between(line, line * 0.9, line * 1.1, color="gray", alpha=0.2, label="±10%")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_title(f"{name} (n={int(ok.sum())})")
        ax.set_xlabel("measured latency (s)")
        ax.grid(True, which="major", alpha=0.3)
    axes[0][0].set_ylabel("predicted latency (s)")
    axes[0][0].legend(loc="upper left", fontsize="small")
    return _save(fig, path)


def plot_error_cdf(y_true, preds: dict[str, np.ndarray], path) -> Path:
    """CDF of the relative error |pred - true| / true of each model, the x axis in percent on
    a log scale (errors below 0.1% are drawn at 0.1%), with a marker line at 10%."""
    t, preds = _checked(y_true, preds)
    fig = _figure(figsize=(6, 4.2))
    ax = fig.subplots()
    floor = 0.1  # percent
    for name, p in preds.items():
        ok = (t > 0) & np.isfinite(t) & np.isfinite(p)
        err = np.sort(np.maximum(100 * np.abs(p[ok] - t[ok]) / t[ok], floor))
        if not len(err):
            continue
        share = np.arange(1, len(err) + 1) / len(err)
        ax.step(err, share, where="post", label=f"{name} (n={len(err)})")
    ax.axvline(10, color="black", linewidth=0.8, linestyle="--", label="10%")
    ax.set_xscale("log")
    ax.set_xlabel("relative error |pred - measured| / measured (%)")
    ax.set_ylabel("share of programs with at most this error")
    ax.set_ylim(0, 1.01)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    return _save(fig, path)


def markdown_report(title, split_info: dict, table: str, figures: list[Path], path) -> Path:
    """Write a markdown report: the split (one bullet per entry), the table in a code block,
    and the figures as images linked relative to the report's directory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# {title}", ""]
    if split_info:
        lines += ["## Split", ""]
        lines += [f"- **{key}**: {value}" for key, value in split_info.items()]
        lines.append("")
    lines += ["## Results", "", "```", table.rstrip("\n"), "```", ""]
    if figures:
        lines += ["## Figures", ""]
        for fig in figures:
            fig = Path(fig)
            rel = Path(os.path.relpath(fig.resolve(), path.parent.resolve())).as_posix()
            lines += [f"![{fig.stem}]({rel})", ""]
    from cdmpp.atomic import write_text_atomic

    write_text_atomic(path, "\n".join(lines))
    return path
