"""The evaluation report: table, plots, markdown."""

from __future__ import annotations

import numpy as np

from cdmpp.evaluate.metrics import summary
from cdmpp.evaluate.report import (NOISE_ROW, comparison_table, markdown_report,
                                   plot_error_cdf, plot_predicted_vs_measured)


def _data(n=200, seed=0):
    rng = np.random.default_rng(seed)
    y = np.exp(rng.uniform(np.log(1e-6), np.log(1e-2), n))
    groups = rng.integers(0, 5, n).astype(str)
    preds = {"cdmpp": y * np.exp(rng.normal(0, 0.05, n)),
             "xgb-baseline": y * np.exp(rng.normal(0, 0.3, n))}
    return y, groups, preds


def test_table_has_every_model_and_the_noise_floor():
    y, groups, preds = _data()
    results = {name: summary(y, p, groups) for name, p in preds.items()}
    table = comparison_table(results, {"median_ape": 0.0123, "within_10": 0.975, "n": 200})
    lines = table.splitlines()
    assert lines[0].split()[0] == "model" and "MAPE" in lines[0] and "±10%" in lines[0]
    assert any(line.startswith("cdmpp ") for line in lines)
    assert any(line.startswith("xgb-baseline ") for line in lines)
    noise = lines[-1]
    assert noise.startswith(NOISE_ROW) and "1.2%" in noise and "97.5%" in noise
    assert f"{100 * results['cdmpp']['mape']:.1f}%" in table
    assert len({len(line) for line in lines if not line.startswith(NOISE_ROW)}) <= 2  # aligned


def test_plots_and_markdown(tmp_path):
    y, groups, preds = _data()
    figs = [plot_predicted_vs_measured(y, preds, tmp_path / "figs" / "scatter.png"),
            plot_error_cdf(y, preds, tmp_path / "figs" / "error_cdf.png")]
    for fig in figs:
        assert fig.exists() and fig.stat().st_size > 1000
        assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = comparison_table({k: summary(y, p, groups) for k, p in preds.items()},
                             {"median_ape": 0.01, "within_10": 0.99, "n": 200})
    md = markdown_report("random split", {"train": 800, "test": 200}, table, figs,
                         tmp_path / "report.md").read_text()
    assert md.startswith("# random split")
    assert "](figs/scatter.png)" in md and "](figs/error_cdf.png)" in md
    assert "```\n" + table + "\n```" in md and "**train**: 800" in md

