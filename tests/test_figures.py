"""Figures are written as complete PNG + SVG pairs, or not at all."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from memaudit.errors import InputError
from memaudit.figures.plots import plot_auc_vs_size, plot_roc, plot_score_distributions
from memaudit.stats.summary import metrics_table

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _doc_scores(seed: int = 0, n: int = 200) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    labels = np.repeat([1, 0], n // 2)
    frames = []
    for method, shift in (("loss", 1.0), ("zlib_ratio", 0.5), ("min_k_pp", 0.0)):
        frames.append(pd.DataFrame({
            "doc_id": [f"d{i}" for i in range(n)],
            "label": labels,
            "method": method,
            "score": rng.normal(size=n) + shift * labels,
        }))
    return pd.concat(frames, ignore_index=True)


def _assert_figure_pair(paths, prefix):
    assert [p.name for p in paths] == [f"{prefix.name}.png", f"{prefix.name}.svg"]
    png, svg = paths
    assert png.stat().st_size > 1000 and png.read_bytes().startswith(PNG_MAGIC)
    text = svg.read_text()
    assert "<svg" in text and text.rstrip().endswith("</svg>")
    # No temporary siblings left behind by the atomic writes.
    assert sorted(p.name for p in prefix.parent.iterdir()) == sorted(p.name for p in paths)


def test_plot_roc_writes_png_and_svg(tmp_path):
    prefix = tmp_path / "fig" / "roc_bt_m1"
    paths = plot_roc(_doc_scores(), prefix, "BookTection, model m1")
    _assert_figure_pair(paths, prefix)
    assert "loss (AUC" in paths[1].read_text()


def test_plot_score_distributions_writes_png_and_svg(tmp_path):
    prefix = tmp_path / "dist.bt.m1"  # dots in the name must not be taken as a suffix
    paths = plot_score_distributions(_doc_scores(), prefix, "BookTection, model m1")
    _assert_figure_pair(paths, prefix)
    assert "z-scored within method" in paths[1].read_text()


def test_plot_auc_vs_size_writes_png_and_svg(tmp_path):
    models = pd.DataFrame({
        "model": ["p-70m", "p-160m", "p-410m", "o-125m", "o-350m"],
        "family": ["pythia", "pythia", "pythia", "opt", "opt"],
        "n_params": [7e7, 1.6e8, 4.1e8, 1.25e8, 3.5e8],
        "contaminated_on": ["bt", "", "bt", "", ""],
    })
    tables = []
    for i, row in models.iterrows():
        for benchmark in ("bt", "arxiv"):
            tables.append(metrics_table(
                _doc_scores(seed=i, n=60), benchmark=benchmark, model=row["model"],
                contaminated=benchmark in row["contaminated_on"].split(","),
                seed=0, n_boot_small=5, n_boot_ci=50,
            ))
    metrics = pd.concat(tables, ignore_index=True)
    prefix = tmp_path / "auc_vs_size"
    paths = plot_auc_vs_size(metrics, models, prefix, "AUC vs size", methods=["loss", "zlib_ratio"])
    _assert_figure_pair(paths, prefix)
    svg = paths[1].read_text()
    assert "loss · pythia · contaminated" in svg and "min_k_pp" not in svg


def test_auc_vs_size_draws_each_fine_tuning_recipe_as_its_own_line(tmp_path, monkeypatch):
    """On benchmark bt, a base's fine-tune on arxiv is neither the base nor contaminated: grouped by (method, family,
    contaminated) it was a point on the base's line at the base's size, a vertical stroke that read as a size trend
    (the demo's news panel joined SmolLM2 and its novels fine-tune so). Each recipe is its own line, labelled."""
    figures = _drawn(monkeypatch)
    models = pd.DataFrame({"model": ["p-70m", "p-160m", "p-70m-arxiv", "p-160m-arxiv", "p-160m-bt"],
                           "family": "pythia", "n_params": [7e7, 1.6e8, 7e7, 1.6e8, 1.6e8],
                           "contaminated_on": ["", "", "arxiv", "arxiv", "bt;arxiv"]})
    docs = _doc_scores(n=40)
    metrics = pd.concat([metrics_table(docs, benchmark="bt", model=m, contaminated=m == "p-160m-bt",
                                       seed=0, n_boot_small=2, n_boot_ci=10) for m in models["model"]],
                        ignore_index=True)
    plot_auc_vs_size(metrics, models, tmp_path / "auc", "t", methods=["loss"])
    ax = figures[0].axes[0]
    # (x, linestyle, filled): filled markers are the contaminated model's (its face the line's colour), and its line
    # is solid as in DE-COP's, the selection and KTD figures (this figure drew it dashed until session 76)
    lines = {line.get_label(): (list(line.get_xdata()), line.get_linestyle(),
                                line.get_markerfacecolor() == line.get_color())
             for line in ax.get_lines() if not line.get_label().startswith("_")}
    assert lines == {  # one method: no dodge
        "loss · pythia": ([7e7, 1.6e8], "--", False),
        "loss · pythia · fine-tuned on arxiv, not this benchmark": ([7e7, 1.6e8], "-.", False),
        "loss · pythia · contaminated: fine-tuned on arxiv, bt": ([1.6e8], "-", True),
    }


def test_a_model_scored_by_none_of_the_methods_drawn_is_named_under_the_figure(tmp_path, monkeypatch, caplog):
    """A model only other probes scored (the demo's news model the cloze probes ran, its rows all cloze_*) had no
    point in the figure of every local model's AUC, and neither the figure nor the log said so."""
    figures = _drawn(monkeypatch)
    models = pd.DataFrame({"model": ["p-70m", "p-160m", "cloze-only"], "family": ["pythia"] * 3,
                           "n_params": [7e7, 1.6e8, 1.6e8]})
    docs = _doc_scores(n=40)
    cloze = docs[docs["method"] == "loss"].assign(method="cloze_prob")
    metrics = pd.concat([metrics_table(docs if m != "cloze-only" else cloze, benchmark="bt", model=m,
                                       contaminated=False, seed=0, n_boot_small=2, n_boot_ci=10)
                         for m in models["model"]], ignore_index=True)
    with caplog.at_level("INFO", logger="memaudit.figures.plots"):
        plot_auc_vs_size(metrics, models, tmp_path / "auc", "t", methods=["loss"])
    texts = [t.get_text() for t in figures[0].texts]  # the suptitle, then the note
    assert texts[1:] == ["not drawn (scored by none of these methods): cloze-only"]
    assert caplog.messages == ["not drawn (scored by none of the methods shown): cloze-only"]
    figures.clear()
    plot_auc_vs_size(metrics[metrics["model"] != "cloze-only"], models, tmp_path / "auc2", "t", methods=["loss"])
    assert [t.get_text() for t in figures[0].texts] == ["t (dotted: chance; bars: bootstrap 95% CI)"]


def test_plot_auc_vs_size_unknown_model_is_input_error(tmp_path):
    metrics = metrics_table(_doc_scores(n=40), benchmark="bt", model="ghost", contaminated=False,
                            seed=0, n_boot_small=2, n_boot_ci=10)
    models = pd.DataFrame({"model": ["other"], "family": ["f"], "n_params": [1e9]})
    with pytest.raises(InputError, match="ghost"):
        plot_auc_vs_size(metrics, models, tmp_path / "x", "t")
    assert list(tmp_path.iterdir()) == []


def test_bad_input_leaves_no_output(tmp_path):
    docs = _doc_scores().drop(columns="label")
    with pytest.raises(InputError, match="'label'"):
        plot_roc(docs, tmp_path / "roc", "t")
    assert list(tmp_path.iterdir()) == []


def test_failure_while_saving_leaves_neither_file(tmp_path, monkeypatch):
    original = Figure.savefig

    def fail_on_svg(self, fname, *args, **kwargs):
        if kwargs.get("format") == "svg":
            raise OSError("disk full")
        return original(self, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", fail_on_svg)
    with pytest.raises(OSError, match="disk full"):
        plot_score_distributions(_doc_scores(), tmp_path / "dist", "t")
    # The PNG was rendered first but must not appear without its SVG.
    assert list(tmp_path.iterdir()) == []


def _drawn(monkeypatch):
    """The figures the plot functions save, kept for the test to read."""
    from memaudit.figures import plots

    figures = []
    original = plots.save_figure

    def keep(fig, out_prefix):
        figures.append(fig)
        return original(fig, out_prefix)

    monkeypatch.setattr(plots, "save_figure", keep)
    return figures


def test_plot_roc_tells_25_methods_apart_and_names_a_method_without_curve(tmp_path, monkeypatch):
    figures = _drawn(monkeypatch)
    docs = pd.concat([_doc_scores(n=40).assign(method=f"m{i:02d}") for i in range(25)], ignore_index=True)
    members_only = docs[(docs["method"] == "m24") & (docs["label"] == 1)].assign(method="members_only")
    plot_roc(pd.concat([docs, members_only], ignore_index=True), tmp_path / "roc", "t")
    lines = [line for line in figures[0].axes[0].get_lines() if line.get_label() != "chance"]
    styles = [(tuple(line.get_color()), str(line.get_linestyle())) for line in lines]
    assert len(styles) == 26 and len(set(styles)) == 26  # tab20 alone repeated 6 colours
    assert [line.get_linestyle() for line in lines[:21:10]] == ["-", "-", "--"]
    labels = [t.get_text() for t in figures[0].axes[0].get_legend().get_texts()]
    assert "members_only (one class only: no curve)" in labels and len(labels) == 27


def test_a_method_with_no_score_is_named_as_not_measured_not_drawn_or_refused(tmp_path, monkeypatch):
    """A probe that measured nothing leaves its documents' scores blank (a cloze token type no reply answered):
    the per-model figures refused the whole job ("score(s) are missing or not finite"). Such a method is
    named in the ROC legend and given an empty panel saying so; a model with nothing measured gets figures
    saying that, not a failed job. A blank beside numbers of one method is still refused."""
    figures = _drawn(monkeypatch)
    docs = _doc_scores(n=40)
    blank = docs[docs["method"] == "loss"].assign(method="cloze_rank", score=np.nan)
    both = pd.concat([docs, blank], ignore_index=True)
    plot_roc(both, tmp_path / "roc", "t")
    labels = [t.get_text() for t in figures[-1].axes[0].get_legend().get_texts()]
    assert "cloze_rank (not measured: no scores)" in labels and len(labels) == 5
    plot_score_distributions(both, tmp_path / "dist", "t")
    titles = [ax.get_title() for ax in figures[-1].axes if ax.get_visible()]
    assert titles[0] == "cloze_rank  not measured: no scores" and len(titles) == 4
    for plot, name in ((plot_roc, "roc_none"), (plot_score_distributions, "dist_none")):
        paths = plot(blank, tmp_path / name, "b / api")
        assert [t.get_text() for t in figures[-1].axes[0].texts] == [
            "b / api: no method measured anything (every score blank: cloze_rank)"]
        assert paths[0].exists() and paths[1].exists()
    half = both.copy()
    half.loc[half.index[-1], "score"] = 0.5
    with pytest.raises(InputError, match="39 score"):
        plot_roc(half, tmp_path / "roc_half", "t")


def _missing_marks(ax):
    """(x, y) of the hollow markers drawn at the bottom edge, and the "n/a" annotations' x, of one panel."""
    hollow = [line for line in ax.get_lines() if line.get_label() == "_missing"]
    for line in hollow:
        assert line.get_markerfacecolor() == "none" and line.get_linestyle() == "None"
        # y in axes coordinates: the bottom edge, whatever the AUC range of the panel
        assert line.get_transform() == ax.get_xaxis_transform()
    points = sorted((float(x), float(y)) for line in hollow for x, y in zip(line.get_xdata(), line.get_ydata()))
    notes = sorted(float(t.xy[0]) for t in ax.texts if t.get_text() == "n/a")
    return points, notes


def test_plot_auc_vs_size_marks_a_missing_auc(tmp_path, monkeypatch):
    from memaudit.figures.plots import MISSING_LABEL, MISSING_Y

    figures = _drawn(monkeypatch)
    models = pd.DataFrame({"model": ["p-70m", "p-160m", "p-410m"], "family": ["pythia"] * 3,
                           "n_params": [7e7, 1.6e8, 4.1e8]})
    docs = _doc_scores(n=40)
    tables = []
    for model in models["model"]:
        scores = docs
        if model == "p-160m":  # zlib_ratio scored members only: its AUC is NaN
            scores = docs[(docs["method"] != "zlib_ratio") | (docs["label"] == 1)]
        tables.append(metrics_table(scores, benchmark="bt", model=model, contaminated=False,
                                    seed=0, n_boot_small=2, n_boot_ci=10))
    metrics = pd.concat(tables, ignore_index=True)
    assert np.isnan(metrics.loc[(metrics["model"] == "p-160m") & (metrics["method"] == "zlib_ratio"), "auc"]).all()
    plot_auc_vs_size(metrics, models, tmp_path / "auc", "t", methods=["loss", "zlib_ratio"])
    ax = figures[0].axes[0]
    dodge = 10 ** 0.005  # zlib_ratio, the second of two methods
    points, notes = _missing_marks(ax)
    assert points == [(pytest.approx(1.6e8 * dodge), MISSING_Y)]
    assert notes == [pytest.approx(1.6e8 * dodge)]
    assert ax.get_xlim()[0] < 1.6e8 < ax.get_xlim()[1]
    legend = [t.get_text() for t in figures[0].legends[0].get_texts()]
    assert legend[-1] == MISSING_LABEL and "loss · pythia" in legend


def test_plot_auc_vs_size_without_missing_auc_has_no_mark(tmp_path, monkeypatch):
    from memaudit.figures.plots import MISSING_LABEL

    figures = _drawn(monkeypatch)
    metrics = metrics_table(_doc_scores(n=40), benchmark="bt", model="m", contaminated=False,
                            seed=0, n_boot_small=2, n_boot_ci=10)
    models = pd.DataFrame({"model": ["m"], "family": ["f"], "n_params": [1e9]})
    plot_auc_vs_size(metrics, models, tmp_path / "auc", "t")
    assert _missing_marks(figures[0].axes[0]) == ([], [])
    assert MISSING_LABEL not in [t.get_text() for t in figures[0].legends[0].get_texts()]


def test_plot_selection_draws_the_first_listed_method_and_names_a_model_without_one(tmp_path, monkeypatch):
    """One line per model for the first of the figure methods it has; a model with none of them keeps a
    legend entry that says it has no line (it was left out without a word)."""
    from memaudit.figures.plots import plot_selection

    figures = _drawn(monkeypatch)
    qs = [0.1, 0.5]
    rows = [{"benchmark": "news", "model": model, "contaminated": model == "ft", "method": method, "q": q,
             "fdr": q / 2, "power": power * q}
            for model, method, power in (("ft", "loss", 1.0), ("ft", "zlib", 0.5), ("base", "zlib", 0.2),
                                         ("blind", "blind_tfidf", 0.1))
            for q in qs]
    plot_selection(pd.DataFrame(rows), tmp_path / "selection", ["decop-likelihood-prob", "loss", "zlib"])
    ax_fdr, ax_power = figures[0].axes
    drawn = {line.get_label(): line.get_ydata().tolist() for line in ax_power.get_lines()}
    assert drawn == {"base (zlib)": pytest.approx([0.02, 0.1]), "ft (loss)": [0.1, 0.5],
                     "blind (none of stats.selection.figure_methods: no line)": []}
    assert [line.get_linestyle() for line in ax_power.get_lines()[:2]] == ["--", "-"]  # base dashed, ft solid
    labels = [t.get_text() for t in ax_power.get_legend().get_texts()]
    # the legend says what the line styles mean (only the caption did)
    assert labels == ["base (zlib)", "blind (none of stats.selection.figure_methods: no line)", "ft (loss)",
                      "solid: fine-tuned on the benchmark's members", "dashed: not fine-tuned on the benchmark's members"]
    legend_lines = ax_power.get_legend().get_lines()
    assert [line.get_linestyle() for line in legend_lines[-2:]] == ["-", "--"]
    assert [line.get_label() for line in ax_fdr.get_lines()] == ["base (zlib)", "ft (loss)", "FDR = q"]


def test_plot_selection_marks_a_power_with_no_member_to_find(tmp_path, monkeypatch):
    """A method whose test documents hold no member has no power (nan): a hollow 'n/a' marker at the bottom
    of the power panel for each q and a legend entry, where its line was empty and unexplained."""
    from memaudit.figures.plots import MISSING_Y, plot_selection

    figures = _drawn(monkeypatch)
    rows = [{"benchmark": "news", "model": model, "contaminated": False, "method": "loss", "q": q,
             "fdr": 0.05, "power": power}
            for model, power in (("base", 0.3), ("empty", float("nan"))) for q in (0.1, 0.5)]
    plot_selection(pd.DataFrame(rows), tmp_path / "selection", ["loss"])
    ax_fdr, ax_power = figures[0].axes
    points, notes = _missing_marks(ax_power)
    assert points == [(0.1, MISSING_Y), (0.5, MISSING_Y)] and notes == [0.1, 0.5]
    assert _missing_marks(ax_fdr) == ([], [])
    labels = [t.get_text() for t in ax_power.get_legend().get_texts()]
    assert labels == ["base (loss)", "empty (loss)", "dashed: not fine-tuned on the benchmark's members",
                      "n/a (hollow, at the bottom): no member among the test documents"]


def test_plot_roc_low_fpr_panel_draws_every_threshold_of_tied_scores(tmp_path, monkeypatch):
    """Scores tied between members and non-members at 3, 2 and 1 lie on one straight ROC segment, and
    ``roc_curve``'s default drops its inner point: the log panel's steps then drew TPR 1/3 up to FPR 0.75,
    where threshold 2 reaches TPR 2/3 at FPR 0.5 (:func:`tpr_at_fpr`'s value)."""
    from memaudit.stats.metrics import tpr_at_fpr

    figures = _drawn(monkeypatch)
    scores = [3.0, 2.0, 1.0, 3.0, 2.0, 1.0, 0.0]
    labels = [1, 1, 1, 0, 0, 0, 0]
    docs = pd.DataFrame({"doc_id": [f"d{i}" for i in range(7)], "label": labels, "method": "counts",
                         "score": scores})
    plot_roc(docs, tmp_path / "roc", "ties")
    ax_log = figures[0].axes[1]
    curve = next(line for line in ax_log.get_lines() if line.get_drawstyle() == "steps-post")
    np.testing.assert_allclose(curve.get_xydata(), [[0.25, 1 / 3], [0.5, 2 / 3], [0.75, 1.0], [1.0, 1.0]])
    assert [tpr_at_fpr(scores, labels, f) for f in (0.25, 0.5)] == pytest.approx([1 / 3, 2 / 3])


def test_selection_captions_name_the_calibration_setting_not_half(tmp_path, monkeypatch):
    """``stats.selection.calibration_fraction`` may be any share in (0, 1): the figure's title and
    metrics.md's header said "half the non-members" whatever it was."""
    from memaudit.figures.plots import plot_selection
    from memaudit.stats.summary import summary_markdown

    figures = _drawn(monkeypatch)
    rows = [{"benchmark": "news", "model": "base", "contaminated": False, "method": "loss", "q": q, "fdr": 0.0,
             "power": 0.1} for q in (0.1, 0.5)]
    plot_selection(pd.DataFrame(rows), tmp_path / "selection", ["loss"])
    assert figures[0]._suptitle.get_text() == (
        "Conformal p-values + Benjamini-Hochberg: documents named as members (a random "
        "stats.selection.calibration_fraction of the non-members as calibration; mean over splits)")
    header = summary_markdown(pd.DataFrame(columns=["benchmark"])).splitlines()[0]
    assert "half" not in header
    assert header.endswith("at level `bh_q` (a random `stats.selection.calibration_fraction` of the non-members "
                           "as calibration, 0.5 by default; mean over random splits; results/summary/selection.csv "
                           "has every q; n/a where q is below 1/(calibration non-members + 1), the smallest "
                           "conformal p-value, so that nothing can be named).")


def test_plot_auc_vs_size_draws_each_interval_as_given_within_the_axis_limits(tmp_path, monkeypatch):
    """A percentile interval may lie wholly above or below its point estimate (0.92-0.99 around 0.90):
    the bar spans [auc_ci_low, auc_ci_high] as metrics.csv gives it (it was clipped to start at the
    point, 0.90-0.99), and the y limits hold every interval, so none is cut at the edge."""
    figures = _drawn(monkeypatch)
    metrics = pd.DataFrame({"benchmark": "bt", "model": ["a", "b", "c"], "contaminated": False, "method": "loss",
                            "auc": [0.90, 0.55, 0.30], "auc_ci_low": [0.92, 0.02, 0.31],
                            "auc_ci_high": [0.99, 0.60, 0.45]})
    models = pd.DataFrame({"model": ["a", "b", "c"], "family": "f", "n_params": [1e8, 1e9, 1e10]})
    plot_auc_vs_size(metrics, models, tmp_path / "auc", "t")
    ax = figures[0].axes[0]
    bars = sorted((float(x0), float(y0), float(y1)) for c in ax.collections for (x0, y0), (_, y1) in c.get_segments())
    assert bars == [(1e8, pytest.approx(0.92), pytest.approx(0.99)), (1e9, pytest.approx(0.02), pytest.approx(0.60)),
                    (1e10, pytest.approx(0.31), pytest.approx(0.45))]
    low, high = ax.get_ylim()
    assert low < 0.02 and high > 0.99
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "loss · f"]
    assert line.get_ydata().tolist() == [0.90, 0.55, 0.30]


def test_plot_auc_vs_size_of_one_model_size_shows_the_size_on_a_decade_wide_axis(tmp_path, monkeypatch):
    """A base and its fine-tune share one size (an audit's usual pair): the methods' 2.3% dodge alone set
    the x limits (31.2k +- 1.2%), no tick fell inside them and the methods looked like models of
    different sizes. The axis spans at least a decade about the sizes, its ticks labelled; and as each
    line is one point, whose dashes cannot show, the contaminated model's marker is filled, the base's open."""
    figures = _drawn(monkeypatch)
    docs = _doc_scores(n=40)
    metrics = pd.concat([metrics_table(docs, benchmark="bt", model=model, contaminated=model == "ft", seed=0,
                                       n_boot_small=2, n_boot_ci=10) for model in ("base", "ft")], ignore_index=True)
    models = pd.DataFrame({"model": ["base", "ft"], "family": "tiny", "n_params": [31200, 31200]})
    plot_auc_vs_size(metrics, models, tmp_path / "auc", "t", methods=["loss", "zlib_ratio", "min_k_pp"])
    ax = figures[0].axes[0]
    low, high = ax.get_xlim()
    assert (low, high) == (pytest.approx(31200 / 10 ** 0.5), pytest.approx(31200 * 10 ** 0.5))
    shown = [t.get_text() for t in ax.get_xticklabels() + ax.get_xticklabels(minor=True)
             if t.get_text() and low <= t.get_position()[0] <= high]
    assert shown == ["10k", "20k", "50k"]
    lines = {line.get_label(): line for line in ax.get_lines()}
    contaminated, base = lines["loss · tiny · contaminated"], lines["loss · tiny"]
    assert contaminated.get_markerfacecolor() == contaminated.get_color()
    assert base.get_markerfacecolor() == "white" and base.get_markeredgecolor() == base.get_color()
