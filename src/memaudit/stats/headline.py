"""The few numbers a user reads first after a run, and where everything else is."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from memaudit.errors import InputError


def headline_table(summary: pd.DataFrame, methods: Sequence[str]) -> pd.DataFrame:
    """AUC [95% CI] per (benchmark, model) for the headline methods, plus the blind baseline."""
    rows = summary[summary["method"].isin(methods) | summary["method"].str.startswith("ref_")
                   | (summary["model"] == "(none)")]
    cell = rows.apply(lambda r: f"{r['auc']:.3f} [{r['auc_ci_low']:.2f}, {r['auc_ci_high']:.2f}]", axis=1)
    table = rows.assign(cell=cell).pivot_table(index=["benchmark", "model", "contaminated"],
                                               columns="method", values="cell", aggfunc="first")
    return table.fillna("")


def print_headline(summary_path: Path, methods: Sequence[str]) -> None:
    summary_path = Path(summary_path)
    if not summary_path.exists():
        raise InputError(f"{summary_path}: not found (did the run finish?)")
    summary = pd.read_csv(summary_path)
    if summary.empty:  # every benchmark unlabelled (published CopyBench without labels): no AUC to show
        print("\nNo labelled benchmark in this run: no ROC-AUC (CopyBench's rates: "
              f"{summary_path.with_name('copybench.csv')}).")
    else:
        with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_colwidth", 22):
            print("\nROC-AUC [bootstrap 95% CI] of document scores (higher score = member):\n")
            print(headline_table(summary, methods).to_string())
    root = summary_path.parent.parent
    print(f"\nTables:  {summary_path} (every method), {summary_path.with_suffix('.md')}")
    print(f"Figures: {root / 'figures'}/<benchmark>/<model>/roc.png, score_distributions.png, "
          f"{root / 'figures'}/<benchmark>/auc_vs_size.png")
    models_path = summary_path.with_name("models.csv")
    models = pd.read_csv(models_path) if models_path.exists() else None
    sections = [
        ("metrics.csv", True, lambda table: demo_expectations(table, models),
         "Ground truth (contaminated: fine-tuned on the members; base models: null control)"),
        ("copybench_differences.csv", False, copybench_expectations,
         "CopyBench ground truth (contaminated minus base, paired; member books: above 0, "
         "non-member books: interval holds 0; member minus non-member gain: above 0)"),
        ("cloze_differences.csv", False, cloze_expectations,
         "Cloze probes ground truth (fine-tuned on the benchmark minus base, reconstruction rate, paired; "
         "members: above 0, non-members: interval holds 0; member minus non-member gain: above 0)"),
        ("selection.csv", True, lambda table: selection_expectations(table, models),
         "FDR-controlled selection (conformal BH over the loss score; contaminated: empirical FDR "
         "<= q + 0.02; base models: (near) nothing named at q = 0.1)"),
        ("ktd.csv", True, lambda table: ktd_expectations(table, models),
         "KTD knockoff+ (gradient-norm W, the largest m; FDR and power reported, the guarantee holds "
         "or fails as measured; base models: (near) nothing named at q = 0.1)"),
    ]
    for name, needs_models, check, header in sections:
        path = summary_path if name == "metrics.csv" else summary_path.with_name(name)
        if not path.exists() or (needs_models and models is None):
            continue
        table = summary if name == "metrics.csv" else pd.read_csv(path)
        if table.empty:
            continue
        checks = check(table)
        if len(checks):
            print(f"\n{header}:\n")
            print(checks.to_string(index=False))
    cue = decop_length_cue(sorted(summary_path.parent.glob("decop_*.csv")))
    if cue:
        print("\n" + cue)
    rejects_path = summary_path.with_name("rejects.csv")
    if rejects_path.exists():
        print("\n" + rejects_summary(pd.read_csv(rejects_path, keep_default_na=False)))
    report = root / "report.html"
    print(f"Report:  {report}" + ("" if report.exists() else " (make it with: snakemake --report "
                                                        f"{report})"))


def decop_length_cue(paths: Sequence[Path]) -> str:
    """A line per benchmark of the DE-COP tables' blind longest-option rows
    (:func:`memaudit.probes.decop.analysis.longest_option_rows`), or "" where there are none."""
    from memaudit.probes.decop.analysis import BLIND_MODEL, LONGEST

    lines = []
    for path in paths:
        table = pd.read_csv(path)
        if not {"model", "method"} <= set(table.columns):
            continue
        blind = table[(table["model"] == BLIND_MODEL) & (table["method"] == LONGEST)]
        for r in blind.itertuples():
            lines.append(f"  {path.stem.removeprefix('decop_')} ({r.length} tokens): members {r.accuracy_members:.2f}, "
                         f"non-members {r.accuracy_nonmembers:.2f}, AUC {r.auc:.2f} ({r.n_documents} documents)")
    if not lines:
        return ""
    return "\n".join(["DE-COP's length cue (a reader that sees only the options' word counts picks the longest; "
                      "chance 0.25). Read the models' accuracies in results/summary/decop_<benchmark>.csv "
                      "against it:", *lines])


def rejects_summary(rejects: pd.DataFrame) -> str:
    """What ``results/summary/rejects.csv`` says in a line, or a line per (benchmark, file, reason)."""
    where = "results/datasets/<benchmark>/rejects.csv"
    left = rejects[rejects["n_rows"] > 0]
    if left.empty:
        n = rejects["benchmark"].nunique()
        return f"Input rows left out by the loaders: none ({n} benchmark{'s' if n != 1 else ''} checked)."
    lines = [f"Input rows left out by the loaders ({int(left['n_rows'].sum())}; each row with its line in {where}):"]
    lines += [f"  {r.benchmark}: {r.n_rows} {r.action} in {r.file}: {r.reason}" for r in left.itertuples()]
    return "\n".join(lines)


def demo_expectations(summary: pd.DataFrame, models: pd.DataFrame, method: str = "loss",
                      contaminated_min: float = 0.9, null_range: tuple[float, float] = (0.4, 0.6),
                      decop_method: str = "decop-likelihood-prob", decop_min: float = 0.8) -> pd.DataFrame:
    """Check the ground-truth expectations of a run against its summary.

    A model fine-tuned on a benchmark's members should separate them (AUC >= ``contaminated_min``);
    an uncontaminated *base* model on the same IID split should sit near chance (AUC within
    ``null_range``). DE-COP's likelihood mode (``decop_method``; by default its mean probability of
    the verbatim option, since accuracy over the demo's 3 passages per document takes 4 values)
    should reach ``decop_min`` on the contaminated models; on a base model its bootstrap 95% interval should hold 0.5 -- DE-COP
    scores a few dozen documents, too few for a fixed band around 0.5 to be a fair null check.
    Returns one row per checked (benchmark, model, method) with ``ok``.
    """
    base_models = set(models.loc[models["base"].fillna("") == "", "model"])
    rows = []
    for r in summary[summary["method"].isin([method, decop_method])].itertuples():
        is_decop = r.method == decop_method
        if bool(r.contaminated):
            floor = decop_min if is_decop else contaminated_min
            expect, ok = f">= {floor}", r.auc >= floor
        elif r.model in base_models and is_decop:
            expect, ok = "95% CI holds 0.5", r.auc_ci_low <= 0.5 <= r.auc_ci_high
        elif r.model in base_models:
            expect, ok = f"in [{null_range[0]}, {null_range[1]}]", null_range[0] <= r.auc <= null_range[1]
        else:
            continue
        rows.append({"benchmark": r.benchmark, "model": r.model, "method": r.method, "auc": round(r.auc, 3),
                     "expected": expect, "ok": bool(ok)})
    return pd.DataFrame(rows)


COPYBENCH_CHECKED = ("copybench_rougeL", "copybench_rougeL_excess", "copybench_characters")


def copybench_expectations(differences: pd.DataFrame, scores: Sequence[str] = COPYBENCH_CHECKED,
                           decoding: str = "greedy") -> pd.DataFrame:
    """CopyBench's ground-truth checks: a model fine-tuned on the member books copies more of them
    than its base (the paired interval of the difference lies above 0); on books it never saw the
    interval holds 0; its member gain exceeds its non-member gain (``member_minus_nonmember``, the
    difference in differences: above 0 even where fine-tuning on an author's books also raised the
    scores on that author's other books). Literal ROUGE-L, its excess over chance (the same output
    against other books' references: a base that writes almost nothing scores 0 on both, a model
    that writes the author's English ~0.1 on any passage) and character counts, greedy decoding."""
    rows = []
    chosen = differences[differences["score"].isin(scores) & (differences["decoding"] == decoding)]
    for r in chosen.itertuples():
        if r.group in ("member", "member_minus_nonmember"):
            expect, ok = "CI above 0", r.ci_low > 0
        else:
            expect, ok = "CI holds 0", r.ci_low <= 0 <= r.ci_high
        rows.append({"benchmark": r.benchmark, "model": r.model, "base": r.base, "score": r.score,
                     "books": r.group, "difference": round(r.difference, 3),
                     "ci": f"[{r.ci_low:.3f}, {r.ci_high:.3f}]", "expected": expect, "ok": bool(ok)})
    return pd.DataFrame(rows)


def cloze_expectations(differences: pd.DataFrame) -> pd.DataFrame:
    """The cloze probes' ground-truth checks (the issue's "what must hold"): a model fine-tuned on a
    benchmark's members reconstructs more of their masked words than its base (paired interval above
    0); on the non-members the interval holds 0. Rows of models fine-tuned on other texts
    (``contaminated_on_benchmark`` false) are comparisons, not checked."""
    rows = []
    for r in differences[differences["contaminated_on_benchmark"].astype(bool)].itertuples():
        if r.group in ("member", "member_minus_nonmember"):
            expect, ok = "CI above 0", r.ci_low > 0
        else:
            expect, ok = "CI holds 0", r.ci_low <= 0 <= r.ci_high
        rows.append({"benchmark": r.benchmark, "model": r.model, "base": r.base, "mode": r.mode,
                     "tokens": r.measure, "texts": r.group, "difference": round(r.difference, 3),
                     "ci": f"[{r.ci_low:.3f}, {r.ci_high:.3f}]", "expected": expect, "ok": bool(ok)})
    return pd.DataFrame(rows)


def selection_expectations(selection: pd.DataFrame, models: pd.DataFrame, method: str = "loss",
                           qs: Sequence[float] = (0.1, 0.2, 0.3), slack: float = 0.02,
                           null_q: float = 0.1, null_share: float = 0.05) -> pd.DataFrame:
    """Issue 17's checks of conformal BH against ground truth, over ``method``'s scores.

    On a benchmark whose members a model was fine-tuned on, the empirical FDR (mean over the
    calibration splits) is at most ``q + slack`` at each of ``qs``; a *base* model (the null
    control) names at most ``null_share`` of the test documents on average at ``null_q``.
    """
    base_models = set(models.loc[models["base"].fillna("") == "", "model"])
    rows = []
    for r in selection[selection["method"] == method].itertuples():
        q = round(float(r.q), 6)
        if bool(r.contaminated) and q in {round(x, 6) for x in qs}:
            expect, ok = f"fdr <= {q + slack:g}", r.fdr <= q + slack
        elif r.model in base_models and q == round(null_q, 6):
            expect, ok = f"named <= {null_share:.0%} of {r.n_test}", r.mean_selected <= null_share * r.n_test
        else:
            continue
        rows.append({"benchmark": r.benchmark, "model": r.model, "q": q, "fdr": round(r.fdr, 3),
                     "power": round(r.power, 3), "mean_named": round(r.mean_selected, 1), "expected": expect,
                     "ok": bool(ok)})
    return pd.DataFrame(rows)


def ktd_expectations(ktd: pd.DataFrame, models: pd.DataFrame, statistic: str = "gradnorm",
                     qs: Sequence[float] = (0.1, 0.2, 0.3), null_q: float = 0.1,
                     null_share: float = 0.05) -> pd.DataFrame:
    """KTD's rows at ``qs`` for the largest m: empirical FDR and power with the symmetry test of
    non-members' W beside them. Contaminated models are reported, not checked (the paper's
    guarantee leaks with imperfect knockoffs: ``guarantee`` says where); a *base* model's
    selection at ``null_q`` is checked to be (near) empty: at most ``null_share`` of the
    passages on average."""
    base_models = set(models.loc[models["base"].fillna("") == "", "model"])
    part = ktd[ktd["statistic"] == statistic]
    if part.empty:
        return pd.DataFrame()
    part = part[part["m"] == part["m"].max()]
    rows = []
    for r in part.itertuples():
        q = round(float(r.q), 6)
        if q not in {round(x, 6) for x in qs}:
            continue
        row = {"benchmark": r.benchmark, "model": r.model, "m": int(r.m), "q": q, "fdr": round(r.fdr, 3),
               "power": round(r.power, 3), "named": round(r.mean_selected, 1), "guarantee": r.guarantee,
               "symmetry_p": f"{r.sign_pvalue:.2g}"}
        if r.model in base_models and q == round(null_q, 6):
            limit = null_share * r.n_texts
            row.update(expected=f"named <= {limit:.1f}", ok=bool(r.mean_selected <= limit))
        elif r.model in base_models:
            continue
        else:
            row.update(expected="reported", ok="")  # not a check: the paper's guarantee may leak
        rows.append(row)
    return pd.DataFrame(rows)
