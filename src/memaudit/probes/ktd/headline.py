"""KTD's section of ``memaudit headline``: knockoff+ FDR and power, and the null check on base models."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import pandas as pd

from memaudit.probes.ktd.statistics import ALL_TEXTS
from memaudit.stats.headline import NOT_EVALUATED, base_models, is_null_control, null_control_benchmarks, table_section

HEADER = ("KTD knockoff+ (gradient-norm W, the largest m; FDR and power reported, fdp_above_q: the mean FDP "
          "over knockoff draws on these texts above q by > 2 SE, an observation, no test of FDR control; "
          "base models: (near) nothing named at q = 0.1)")


def headline(summary_dir: Path, models: pd.DataFrame | None) -> list[str]:
    """The registry's ``headline`` hook: :func:`expectations` over ``ktd.csv`` (with ``models.csv``)."""
    if models is None:
        return []
    controlled = null_control_benchmarks(summary_dir)
    return [table_section(Path(summary_dir) / "ktd.csv", HEADER,
                          lambda table: expectations(table, models, controlled=controlled))]


def expectations(ktd: pd.DataFrame, models: pd.DataFrame, statistic: str = "gradnorm",
                 qs: Sequence[float] = (0.1, 0.2, 0.3), null_q: float = 0.1,
                 null_share: float = 0.05, *, controlled: set[str] | None = None) -> pd.DataFrame:
    """KTD's rows at ``qs`` for the largest m: empirical FDR and power with the symmetry test of
    non-members' W beside them. Contaminated models are reported, not checked (the paper's
    guarantee leaks with imperfect knockoffs: ``fdp_above_q`` says where it showed on these texts); a *base*
    model's selection at ``null_q`` is checked to be (near) empty: at most ``null_share`` of the
    passages on average, on the ``controlled`` benchmarks (split at random; None: every one), unless
    there are fewer than ``1/null_q`` passages, which knockoff+ cannot name at ``null_q`` whatever W is
    (:data:`~memaudit.stats.headline.NOT_EVALUATED`, saying so). A base
    model on a benchmark of published labels is reported, not checked. A null control that has no such
    row, on a benchmark where KTD probed it or a model fine-tuned from it, fails as
    :data:`~memaudit.stats.headline.NOT_EVALUATED` rather than drop out of the count."""
    nulls = base_models(models)
    part = ktd[ktd["statistic"] == statistic]
    if "measured_on" in part.columns:  # KTD's own selection, over every text (not a baselines' test part)
        part = part[part["measured_on"] == ALL_TEXTS]
    part = part[part["m"] == part["m"].max()]
    rows, checked = [], set()
    for r in part.itertuples():
        q = round(float(r.q), 6)
        if q not in {round(x, 6) for x in qs}:
            continue
        row = {"benchmark": r.benchmark, "model": r.model, "m": int(r.m), "q": q, "fdr": round(r.fdr, 3),
               "power": round(r.power, 3), "named": round(r.mean_selected, 1),
               "fdp_above_q": r.fdp_above_q,
               "symmetry_p": f"{r.sign_pvalue:.2g}"}
        null = is_null_control(r.benchmark, r.model, nulls, controlled)
        if null and q == round(null_q, 6):
            limit = null_share * r.n_texts
            if q * r.n_texts < 1 - 1e-12:  # knockoff+'s ratio is >= 1/#{W >= t} >= 1/n: it names nothing
                row.update(expected=f"{NOT_EVALUATED}: q = {q:g} is below 1/n_texts = {1 / r.n_texts:.3g} "
                                    f"({int(r.n_texts)} passages): knockoff+ can name nothing", ok=False)
            else:
                row.update(expected=f"named <= {limit:.1f}", ok=bool(r.mean_selected <= limit))
            checked.add((r.benchmark, r.model))
        elif null or (r.model in nulls and q != round(null_q, 6)):
            continue
        else:
            row.update(expected="reported", ok="")  # not a check: the paper's guarantee may leak
        rows.append(row)
    base_of = dict(zip(models["model"], models["base"].fillna("")))
    probed = set(zip(ktd["benchmark"], ktd["model"]))
    wanted = {(b, null) for b, model in probed for null in (model, base_of.get(model, ""))
              if null and is_null_control(b, null, nulls, controlled)}
    m = int(part["m"].iloc[0]) if not part.empty else ""
    at = f"m = {m}, q = {null_q:g}" if m != "" else f"q = {null_q:g}"
    for benchmark, model in sorted(wanted - checked):
        why = (f"no {statistic} row at {at} in ktd.csv" if (benchmark, model) in probed
               else "no row in ktd.csv (probes.ktd.models)")
        rows.append({"benchmark": benchmark, "model": model, "m": m, "q": round(null_q, 6), "fdr": math.nan,
                     "power": math.nan, "named": math.nan, "fdp_above_q": "", "symmetry_p": "",
                     "expected": f"{NOT_EVALUATED}: {why}", "ok": False})
    return pd.DataFrame(rows)
