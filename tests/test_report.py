"""`snakemake --report` on the ci run: every figure and table, embedded, with its caption, category and labels."""

from __future__ import annotations

import base64
import re

import pytest
import yaml

from memaudit import jobs
from workflow_helpers import ROOT, report_data, snakemake

pytestmark = pytest.mark.slow

CI = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
VALID = jobs.validate_config(yaml.safe_load((ROOT / "config" / "ci.yaml").read_text()))
SCORED = jobs.scored(VALID)
HEADLINE = VALID["figures"]["headline_methods"]  # the config's, else the schema's default


@pytest.fixture(scope="module")
def report(ci_run, tmp_path_factory):
    # written outside the shared run's tree, which the other tests read as the run left it (test_dvc: git carries
    # nothing of results/ but DVC's .gitignore; a report.html there, written by whichever test ran first, broke it)
    path = tmp_path_factory.mktemp("report") / "report.html"
    snakemake(ci_run, "--report", str(path), "all", "--configfile", "config/ci.yaml")
    html = path.read_text()
    return report_data(html, "results"), report_data(html, "categories"), html


def expected_results() -> dict[str, tuple[str, str | None, dict, list[str]]]:
    """path -> (category, subcategory, labels, words the caption must contain)."""
    stats = {**{"n_boot_small": 10, "n_boot_ci": 1000, "blind_folds": 5}, **CI["stats"]}
    out = {
        "results/summary/metrics.csv": ("Summary", None, {"table": "metrics: every benchmark, model and method"},
                                        ["one row per benchmark, model and method"]),
        "results/summary/models.csv": ("Summary", None, {"table": "models: size, family, contamination"},
                                       ["parameter count"]),
        "results/summary/benchmarks.csv": (
            "Summary", None, {"table": "benchmarks: where the labels come from, which base models are null controls"},
            ["null controls", "a finding, not a check"]),
    }
    for b in CI["benchmarks"]:
        out[f"results/figures/{b}/auc_vs_size.png"] = (
            "AUC against model size", None, jobs.size_figure_labels(VALID, b),
            [f"<strong>{b}</strong>", f"{stats['n_boot_ci']}-resample bootstrap"])
        out[f"results/metrics/{b}/blind_baseline.csv"] = (
            "Metrics", b, {"benchmark": b, "model": "(none): blind baseline", "methods": "blind_bag_of_words"},
            [f"<strong>{b}</strong>", f"{stats['blind_folds']}-fold"])
        for m in SCORED[b]:  # the models some probe scores there (CopyBench's books: its pair only)
            docs = jobs.probe_documents(VALID, b, m)[0]
            labels = jobs.figure_labels(VALID, b, m)  # what each draws: test_figure_labels_name_the_methods_drawn
            out[f"results/figures/{b}/{m}/roc.png"] = ("ROC curves", b, labels, [f"<strong>{m}</strong>", docs])
            out[f"results/figures/{b}/{m}/score_distributions.png"] = (
                "Score distributions", b, labels, [f"<strong>{b}</strong>", docs])
            out[f"results/metrics/{b}/{m}.csv"] = (
                "Metrics", b, {"benchmark": b, "model": m, "methods": "all"},
                [f"<strong>{m}</strong>", f"{stats['n_boot_ci']}-resample percentile"])
    return out


def test_report_holds_every_figure_and_table(ci_run, report):
    """Every figure, summary table and metric table of a (benchmark, model); each captioned and labelled."""
    results, _, _ = report
    on_disk = {str(p.relative_to(ci_run)) for pattern in ("results/figures/**/*.png", "results/summary/*.csv")
               for p in ci_run.glob(pattern)}
    assert all((ci_run / path).is_file() for path in expected_results())
    missing = (on_disk | set(expected_results())) - set(results)
    assert not missing, sorted(missing)
    for path, res in results.items():
        assert res["labels"] and all(str(v) for v in res["labels"].values()), path
        assert len(re.sub(r"<[^>]+>", "", res["caption"])) > 80, path
        # reStructuredText trouble (a bad name or markup) shows as a system message in the caption.
        assert "System Message" not in res["caption"], (path, res["caption"])


def test_report_is_self_contained(ci_run, report):
    results, _, html = report
    for path, res in results.items():
        prefix, _, payload = res["data_uri"].partition(";base64,")
        assert prefix.startswith("data:"), path
        assert base64.b64decode(payload) == (ci_run / path).read_bytes(), path
    assert not re.search(r'(src|href)="(?!data:|#|https?:)[^"]+\.(png|csv|svg)"', html)


def test_report_captions_categories_and_labels(report):
    results, categories, _ = report
    for path, (category, subcategory, labels, words) in expected_results().items():
        res = results[path]
        assert res["labels"] == labels, path
        for word in words:
            assert word in res["caption"], (path, word)
        assert path in categories[category][subcategory or "Other"], (path, category, subcategory)


def test_figure_labels_name_the_methods_drawn(ci_run, report):
    """Each figure's methods label names what it draws, read from the run's tables: the ROC and distribution
    figures' document scores through select_methods, the AUC figures' metric tables of the local models (the
    labels said figures.headline_methods whatever was drawn: loss, zlib, ... over the ci books' CopyBench pair)."""
    import pandas as pd

    from memaudit.stats.workflow import select_methods

    results, _, _ = report
    for b in CI["benchmarks"]:
        local = [m for m in SCORED[b] if m in jobs.local_models(VALID)]
        metrics = pd.concat([pd.read_csv(ci_run / f"results/metrics/{b}/{m}.csv") for m in local])
        drawn = [m for m in HEADLINE if m in set(metrics["method"])] or sorted(set(metrics["method"]))
        labelled = results[f"results/figures/{b}/auc_vs_size.png"]["labels"]["methods"].split(", ")
        assert sorted(labelled) == sorted(drawn), b
        for m in SCORED[b]:
            docs = pd.concat([pd.read_csv(ci_run / p) for p in jobs.probe_documents(VALID, b, m)])
            drawn = set(select_methods(docs, HEADLINE)["method"])
            assert set(results[f"results/figures/{b}/{m}/roc.png"]["labels"]["methods"].split(", ")) == drawn, (b, m)
