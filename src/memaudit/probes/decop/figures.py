"""The DE-COP figures of one benchmark and the AUC table they plot (``results/summary/decop_<benchmark>.csv``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import pandas as pd

from memaudit.probes.decop.analysis import auc_summary
from memaudit.io import read_json, write_csv


def make_decop_figures(benchmark: str, tables: Sequence[str], answers: Sequence[str], calibrations: Sequence[str],
                       model_dirs: Sequence[str], out: dict) -> pd.DataFrame:
    from memaudit.figures import plots

    manifests = [read_json(Path(d) / "manifest.json") for d in model_dirs]
    n_params = {m["name"]: m.get("n_params") for m in manifests}
    by_model: dict[str, list[pd.DataFrame]] = {}
    for path in tables:
        table = pd.read_csv(path)
        by_model.setdefault(str(table["model"].iloc[0]), []).append(table.drop(columns=["model", "mode"]))
    merged = {m: pd.concat(ts, ignore_index=True) for m, ts in by_model.items()}
    summary = auc_summary(merged, n_params)
    write_csv(out["summary"], summary)
    runs = {}
    for path in answers:
        frame = pd.read_csv(path)
        runs[f"{frame['model'].iloc[0]} ({frame['mode'].iloc[0]})"] = frame
    deltas = {}
    for path in calibrations:
        record = json.loads(Path(path).read_text())
        cal = record.get("calibration", {})
        if cal:
            deltas[f"{record['model']} ({record['mode']})"] = cal[min(cal, key=int)]["delta"]
    strip = lambda p: str(p)[:-4]  # noqa: E731 - plots write <prefix>.png and .svg
    plots.plot_decop_auc_by_size(summary, strip(out["auc_by_size"]), f"DE-COP on {benchmark}: AUC by model size")
    plots.plot_decop_auc_by_length(summary, strip(out["auc_by_length"]), f"DE-COP on {benchmark}: AUC by length")
    plots.plot_decop_calibration_accuracy(merged, strip(out["calibration"]),
                                          f"DE-COP on {benchmark}: logit mode with and without calibration")
    plots.plot_decop_accuracy_by_position(runs, strip(out["position"]),
                                          f"DE-COP on {benchmark}: accuracy by position of the verbatim passage")
    plots.plot_decop_label_probabilities(runs, deltas, strip(out["probabilities"]),
                                         f"DE-COP on {benchmark}: label probabilities before/after calibration")
    return summary
