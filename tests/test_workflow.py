"""The workflow end to end on config/ci.yaml; lint."""

from __future__ import annotations

import copy
import json

import subprocess

import numpy as np
import pandas as pd
import pytest
import yaml

from workflow_helpers import ROOT, SNAKEMAKE, snakemake

pytestmark = pytest.mark.slow


def test_end_to_end_summary_has_every_row(ci_run):
    cfg = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    summary = pd.read_csv(ci_run / "results/summary/metrics.csv")
    expected_cols = ["benchmark", "model", "contaminated", "method", "n_member", "n_nonmember", "auc",
                     "auc_binarized", "auc_boot_mean", "auc_boot_std",
                     "auc_binarized_boot_mean", "auc_binarized_boot_std", "auc_ci_low", "auc_ci_high",
                     "ci_books", "books_pvalue", "tpr_at_1pct_fpr", "tpr_at_01pct_fpr", "t_pvalue", "bh_q", "bh_fdr", "bh_power"]
    assert list(summary.columns) == expected_cols
    methods = {"loss", "zlib", "lowercase", "min_k_10pct", "min_k_20pct", "min_k_plus_plus_10pct",
               "min_k_plus_plus_20pct"}
    from memaudit.jobs import method_names, probe_runs, validate_config

    runs = probe_runs(validate_config(copy.deepcopy(cfg)), "token_prob")
    # every method the run wrote is one the config check lets figures.headline_methods name
    written = set(summary["method"]) - {"blind_bag_of_words"}
    assert written <= set(method_names(validate_config(copy.deepcopy(cfg)))), written
    assert len(runs) == 2 * len(cfg["probes"]["token_prob"]["models"])  # novels and news
    for bench, model, _ in runs:
        rows = summary[(summary.benchmark == bench) & (summary.model == model)]
        got = set(rows["method"])
        assert methods <= got, (bench, model, methods - got)
        assert ("ref_tiny-gpt2-small" in got) == (model != "tiny-gpt2-small")
        contaminated = bench in cfg["models"][model].get("finetune", {}).get("members_of", [])
        assert rows["contaminated"].eq(contaminated).all(), (bench, model)
    for bench in cfg["benchmarks"]:
        blind = summary[(summary.benchmark == bench) & (summary.model == "(none)")]
        assert list(blind["method"]) == ["blind_bag_of_words"]
    n_docs = cfg["benchmarks"]["novels"]["n_documents"]
    novels = summary[(summary.benchmark == "novels") & ~summary["method"].str.startswith(("decop-", "ktd_"))]
    assert (novels["n_member"] + novels["n_nonmember"]).eq(n_docs).all()  # DE-COP and KTD score a subset
    assert summary["auc"].between(0, 1).all()
    assert (summary["auc_ci_low"] <= summary["auc_ci_high"]).all()
    assert (ci_run / "results/summary/metrics.md").read_text().count("\n") > len(summary)
    # books is split by book: its intervals resample whole books (the blind baseline's at least, over every
    # book); the IID benchmarks' resample documents
    n_books = len({json.loads(line)["meta"]["book"]
                   for line in (ci_run / "results/datasets/books/documents.jsonl").read_text().splitlines()})
    books = summary[summary.benchmark == "books"]
    assert books.loc[books["model"] == "(none)", "ci_books"].tolist() == [n_books] and n_books >= 4
    assert books["ci_books"].dropna().le(n_books).all() and books["books_pvalue"].dropna().between(0, 1).all()
    assert summary.loc[summary.benchmark != "books", ["ci_books", "books_pvalue"]].isna().all().all()


def test_end_to_end_artifacts(ci_run):
    for bench in ("novels", "news"):
        assert (ci_run / f"results/figures/{bench}/auc_vs_size.svg").stat().st_size > 1000
        for model in ("tiny-gpt2-small", "smollm2-135m-contaminated"):
            for fig in ("roc", "score_distributions"):
                assert (ci_run / f"results/figures/{bench}/{model}/{fig}.png").stat().st_size > 1000
    # LoRA stores the adapter, not merged weights; full fine-tuning stores the model.
    lora = ci_run / "results/models/smollm2-135m-contaminated"
    assert (lora / "adapter" / "adapter_config.json").exists()
    assert not list(lora.rglob("model.safetensors"))
    assert (ci_run / "results/models/tiny-gpt2-small-contaminated/weights/model.safetensors").exists()
    models = pd.read_csv(ci_run / "results/summary/models.csv")
    assert models.set_index("model").loc["smollm2-135m", "n_params"] == 134_515_008
    # every ci benchmark is split at random (books by whole book): base models are null controls on each
    origins = pd.read_csv(ci_run / "results/summary/benchmarks.csv").set_index("benchmark")
    assert list(origins.index) == ["books", "news", "novels"] and origins["null_control"].all()
    assert origins.loc["books", "labels"] == "random split by book (seed 7, member fraction 0.5)"
    assert origins.loc["news", "labels"] == "random split of documents (seed 7, member fraction 0.5)"
    assert origins["families"].to_dict() == {"books": "copybench", "news": "token_prob",
                                             "novels": "token_prob;decop;ktd;cloze"}
    docs = pd.read_csv(ci_run / "results/scores/novels/tiny-gpt2-small/token_prob_documents.csv")
    passages = pd.read_csv(ci_run / "results/scores/novels/tiny-gpt2-small/token_prob_passages.csv")
    loss = passages[passages.method == "loss"].groupby("doc_id")["score"].mean()
    got = docs[docs.method == "loss"].set_index("doc_id")["score"]
    pd.testing.assert_series_equal(got.sort_index(), loss.sort_index(), check_names=False)


def test_rerun_has_nothing_to_do(ci_run):
    out = snakemake(ci_run, "-n", "all", "--configfile", "config/ci.yaml").stdout
    assert "Nothing to be done" in out


# Incremental scheduling (adding or changing a model, a method, a benchmark): tests/test_incremental.py.


def test_lint_is_clean():
    proc = subprocess.run([*SNAKEMAKE, "--lint"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and "your workflow is in a good condition" in proc.stdout + proc.stderr


def test_the_snakefile_and_rules_are_formatted_with_snakefmt():
    """STYLE.md: the workflow is formatted with snakefmt (line length 120, pyproject.toml's
    [tool.snakefmt]); `make lint` checks the same. Every file is checked: the Snakefile and each rule file."""
    import sys

    files = ["Snakefile", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "workflow" / "rules").glob("*.smk"))]
    assert len(files) >= 13, files
    proc = subprocess.run([sys.executable, "-m", "snakefmt", "--check", *files], cwd=ROOT, capture_output=True,
                          text=True)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"run `snakefmt Snakefile workflow/rules` (or `make lint` to see which):\n{log}"
    assert f"All {len(files)} file(s) would be left unchanged" in log, log


def test_a_benchmark_no_probe_covers_gets_no_metrics_or_figures(tmp_path):
    """A probe's `benchmarks:` list can leave (benchmark, model) pairs unscored: those get no
    metric table or per-model figure (an empty table used to fail the metrics job)."""
    from workflow_helpers import make_workdir, planned_jobs

    cfg = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    cfg["probes"]["token_prob"]["benchmarks"] = ["novels"]  # DE-COP runs on novels only too
    for probe in ("copybench", "copybench_literal", "copybench_nonliteral"):  # CopyBench covers books
        cfg["probes"].pop(probe)
    workdir = make_workdir(tmp_path, share_resources=False)
    (workdir / "only_novels.yaml").write_text(yaml.safe_dump(cfg))
    jobs = planned_jobs(workdir, "only_novels.yaml")
    scored = {dict(kv.split("=") for kv in w.split(", ")).get("benchmark") for r, w in jobs
              if r in ("metrics", "figures_model", "figure_auc_vs_size", "token_stats") and w}
    assert scored == {"novels"}
    assert ("blind_baseline", "benchmark=news") in jobs  # the benchmark itself is still built
    assert sum(r == "metrics" for r, _ in jobs) == len(cfg["probes"]["token_prob"]["models"])  # novels only


def test_the_demo_runs_decop_on_novels_one_thread_per_job(tmp_path):
    """make run: DE-COP (likelihood mode) and KTD on novels, token-probability attacks on novels and news,
    prefix probing on the tiny pair over the news, and every model job on one thread (threads_per_job: 1);
    without the key a rule keeps its own."""
    from workflow_helpers import dry_run, make_workdir

    workdir = make_workdir(tmp_path, share_resources=False)
    jobs = dry_run(workdir, "config/config.yaml", "--cores", "2")
    pairs = {(j["rule"], j["wildcards"]) for j in jobs}
    assert {w for r, w in pairs if r == "decop_items"} == {"benchmark=novels"}
    # likelihood on the 4 tiny models; logit mode (SmolLM2's, at chance at 135M) is left to ci.yaml and paper.yaml
    assert {w for r, w in pairs if r == "decop_probe"} == {
        f"benchmark=novels, model={m}, mode=likelihood" for m in
        ("tiny-gpt2-small", "tiny-gpt2-small-contaminated", "tiny-gpt2-medium", "tiny-gpt2-medium-contaminated")}
    # KTD on the 4 tiny models over DE-COP's benchmark (its paraphrase pool)
    assert {w.split(", ")[0] for r, w in pairs if r == "ktd_probe"} == {"benchmark=novels"}
    assert sum(r == "ktd_probe" for r, _ in pairs) == 4
    assert {w for r, w in pairs if r == "prefix_probe"} == {
        "benchmark=news, model=tiny-gpt2-medium", "benchmark=news, model=tiny-gpt2-medium-news"}
    assert sum(r == "token_stats" for r, _ in pairs) == 2 * 6
    assert {j["threads"] for j in jobs if j["rule"] in ("prepare_model", "token_stats", "decop_probe")} == {1}
    # the longest chain first: benchmarks, then converted models, fine-tunes, models trained from scratch
    priority = {(j["rule"], j["wildcards"]): j["priority"] for j in jobs}
    assert priority[("benchmark_dataset", "benchmark=novels")] == 40
    assert [priority[("prepare_model", f"model={m}")] for m in
            ("smollm2-135m", "smollm2-135m-contaminated", "tiny-gpt2-medium", "tiny-gpt2-medium-contaminated")] == [
        30, 20, 10, 20]
    # paraphrasing heads DE-COP's and KTD's chains: beside the fine-tune, ahead of the tiny models' pretraining
    assert priority[("decop_items", "benchmark=novels")] == 15
    # the longest probing jobs before the short ones
    assert priority[("token_stats", "benchmark=novels, model=smollm2-135m-contaminated")] == 5
    assert priority[("decop_probe", "benchmark=novels, model=tiny-gpt2-small, mode=likelihood")] == 0

    cfg = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
    del cfg["threads_per_job"]
    (workdir / "default_threads.yaml").write_text(yaml.safe_dump(cfg))
    threads = {(j["rule"], j["wildcards"]): j["threads"] for j in dry_run(workdir, "default_threads.yaml", "--cores", "2")}
    assert threads[("prepare_model", "model=smollm2-135m-contaminated")] == 2  # 8, scaled down to --cores
    assert threads[("token_stats", "benchmark=novels, model=smollm2-135m")] == 2
    assert threads[("decop_probe", "benchmark=novels, model=tiny-gpt2-small, mode=likelihood")] == 1


def test_fdr_selection_and_ktd_tables_of_the_ci_run(ci_run):
    """Conformal BH for every (benchmark, model) pair and KTD on the tiny pair, end to end."""
    summary = pd.read_csv(ci_run / "results/summary/metrics.csv")
    selection = pd.read_csv(ci_run / "results/summary/selection.csv")
    # every metrics row but the blind baseline's has its selection rows, one per q of the grid
    pairs = summary.loc[summary.model != "(none)", ["benchmark", "model", "method"]].drop_duplicates()
    assert len(selection) == len(pairs) * 19
    assert selection[["fdr", "power"]].stack().between(0, 1).all()
    at = selection[selection.q == 0.1].merge(summary, on=["benchmark", "model", "method"])
    # below 1/(n_calibration + 1) BH names nothing: the selection table says 0 beside min_q, metrics.csv nothing
    resolvable = at["q"] >= at["min_q"]
    assert at.loc[~resolvable, ["bh_fdr", "bh_power"]].isna().all().all()
    at = at[resolvable]
    assert np.allclose(at["fdr"], at["bh_fdr"]) and np.allclose(at["power"], at["bh_power"])
    assert (ci_run / "results/figures/selection_fdr_power.png").stat().st_size > 1000
    ktd = pd.read_csv(ci_run / "results/summary/ktd.csv")
    assert set(ktd["model"]) == {"tiny-gpt2-small", "tiny-gpt2-small-contaminated"}
    knock = ktd[~ktd.statistic.str.startswith("validation_") & (ktd.measured_on == "all")]
    assert set(knock["statistic"]) == {"gradnorm", "loss", "min_k"} and set(knock["m"]) == {1, 2, 4}
    # KTD again on the baselines' test passages (Table 2 compares them on the same texts)
    assert len(ktd[ktd.measured_on == "test"]) == len(knock) + len(ktd[ktd.statistic.str.startswith("validation_")])
    assert len(knock) == 2 * 3 * 3 * 3 and set(ktd["fdp_above_q"]) <= {True, False}
    # the Table 2 baselines at the same q: a threshold from labelled validation texts (m 0)
    base = ktd[ktd.statistic.str.startswith("validation_")]
    assert set(base["statistic"]) == {"validation_loss", "validation_min_k", "validation_zlib", "validation_lowercase",
                                      "validation_ref_tiny-gpt2-small"}
    # the reference baseline on the contaminated model only (a model is never its own reference)
    assert set(base.loc[base.statistic == "validation_ref_tiny-gpt2-small", "model"]) == {"tiny-gpt2-small-contaminated"}
    assert len(base) == (2 * 4 + 1) * 3 and (base["m"] == 0).all() and base["sign_pvalue"].isna().all()
    ktd_rows = summary[summary.method.str.startswith("ktd_")]
    assert set(ktd_rows["method"]) == {"ktd_w_gradnorm", "ktd_w_loss", "ktd_w_min_k", "ktd_z_gradnorm"}
    # m up to 4: DE-COP's three paraphrases per passage, topped up by one from the same paraphraser
    w = pd.read_csv(ci_run / "results/scores/novels/tiny-gpt2-small/ktd_w.csv")
    items = {(it := json.loads(line))["item_id"]: it for line in (ci_run / "results/datasets/novels/decop_items.jsonl").open()}
    pool = [json.loads(line) for line in (ci_run / "results/datasets/novels/ktd_pool.jsonl").open()]
    qc = pd.read_csv(ci_run / "results/datasets/novels/ktd_pool_qc.csv")
    assert len(pool) == qc["n_kept"].sum() and qc["n_passages"].sum() == len(items)
    assert all(len(p["options"]) == 5 and p["options"][:4] == items[p["item_id"]]["options"] for p in pool)
    assert all(p["options"][4] not in p["options"][:4] for p in pool)
    assert set(w["item_id"]) == {p["item_id"] for p in pool} and set(w["m"]) == {1, 2, 4}
    # length-matched knockoffs (the default): Z of each passage and its pool at the pool's shortest word count
    cut = w.drop_duplicates("item_id").set_index("item_id")["words"]
    assert all(cut[p["item_id"]] == min(len(o.split()) for o in p["options"]) for p in pool)
    assert set(ktd["n_params"]) == set(pd.read_csv(ci_run / "results/summary/models.csv").set_index("model")
                                       .loc[["tiny-gpt2-small", "tiny-gpt2-small-contaminated"], "n_params"])
    for name in ("fdr_power", "w_distributions", "imbalance", "m_and_size"):
        assert (ci_run / f"results/figures/ktd/{name}.png").stat().st_size > 1000
    # Appendix B: every statistic at m = 2, the default ratios 0.1, 0.05, 0.01 of members per non-member
    imb = pd.read_csv(ci_run / "results/summary/ktd_imbalance.csv")
    assert set(imb["m"]) == {2} and sorted(set(imb["member_ratio"])) == [0.01, 0.05, 0.1]
    assert len(imb) == 2 * 3 * 3 * 3 and (imb["n_members"] >= 1).all()
    assert (imb["n_members"] <= (imb["member_ratio"] * imb["n_nonmembers"]).round().clip(lower=1)).all()


def test_cloze_probes_of_the_ci_run(ci_run):
    """Cloze items chosen once by tiny-gpt2-cb, the tiny pair probed in logit mode, tables and figure."""
    items = [json.loads(line) for line in (ci_run / "results/datasets/novels/cloze_items.jsonl").open()]
    passages = [json.loads(line) for line in (ci_run / "results/datasets/novels/passages.jsonl").open()]
    assert [it["passage_id"] for it in items] == [p["passage_id"] for p in passages]
    tokens = [t for it in items for t in it["tokens"]]
    assert tokens and all(it["text"][t["start"]:t["end"]] == t["word"] and "[MASK]" in t["context"]
                          for it in items for t in it["tokens"])
    assert all(len([t for t in it["tokens"] if t["measure"] == m]) <= 4 for it in items for m in ("prob", "rank"))
    candidates = pd.read_csv(ci_run / "results/datasets/novels/cloze_candidates.csv")
    assert candidates["selected_as"].fillna("").ne("").sum() == len({(t["start"], it["passage_id"])
                                                                        for it in items for t in it["tokens"]})
    table = pd.read_csv(ci_run / "results/summary/cloze.csv")
    assert set(table["model"]) == {"tiny-gpt2-small", "tiny-gpt2-small-contaminated"}
    assert set(table["method"]) == {"majority", "random", "random_expected", "cloze_prob", "cloze_rank",
                                    "cloze_person"}
    probed = table[table.method.str.startswith("cloze_")]
    assert (probed["n_texts"] == len(passages)).all() and probed["n_tokens"].sum() == 2 * len(tokens)
    diffs = pd.read_csv(ci_run / "results/summary/cloze_differences.csv")
    assert set(diffs["group"]) == {"member", "nonmember", "member_minus_nonmember"}
    assert set(diffs["model"]) == {"tiny-gpt2-small-contaminated"}
    assert diffs["contaminated_on_benchmark"].all()  # fine-tuned on novels' members
    versus = pd.read_csv(ci_run / "results/summary/cloze_vs_prefix.csv")  # no prefix probe in ci: the header only
    assert versus.empty and list(versus.columns)[:3] == ["benchmark", "model", "method"]
    rejects = pd.read_csv(ci_run / "results/datasets/novels/rejects.csv")  # built from sources: nothing rejected
    assert rejects.empty and list(rejects.columns) == ["file", "line", "element", "key", "value", "reason", "action"]
    counted = pd.read_csv(ci_run / "results/summary/rejects.csv")  # one row per benchmark, nothing left out
    assert sorted(counted["benchmark"]) == sorted(yaml.safe_load((ROOT / "config/ci.yaml").read_text())["benchmarks"])
    assert (counted["n_rows"] == 0).all()
    summary = pd.read_csv(ci_run / "results/summary/metrics.csv")
    cloze_rows = summary[summary.method.str.startswith("cloze_")]
    assert set(cloze_rows["method"]) == {f"cloze_{m}{s}" for m in ("prob", "rank", "person") for s in ("", "_mrr")}
    assert (ci_run / "results/figures/cloze/reconstruction.png").stat().st_size > 1000
    sized = pd.read_csv(ci_run / "results/summary/cloze_by_size.csv")  # Figure 3: each probed model, by size
    assert set(sized["model"]) == {"tiny-gpt2-small", "tiny-gpt2-small-contaminated"}
    assert (sized["n_params"] > 0).all() and set(sized["label"]) == {0, 1}
    assert sized["n_candidates"].sum() == 2 * len(tokens)  # every masked word, once per model
    assert (ci_run / "results/figures/cloze/recovery_by_size.png").stat().st_size > 1000


LOADING_JOB = """
import json, sys
from memaudit.workflow_support import start
start(snakemake)
from memaudit.models.loading import count_parameters, load_causal_lm
model, _ = load_causal_lm({"path": snakemake.params.model}, device="cpu")
json.dump({"params": count_parameters(model), "hub": "huggingface_hub" in sys.modules},
          open(snakemake.output[0], "w"))
"""


def test_a_job_loading_a_model_prints_no_progress_bar(tiny_model_dir, tmp_path):
    """transformers draws a tqdm "Loading weights" bar at every model load: carriage-return noise in
    the run's output (60 of them in make run). A job's start() turns hub progress bars off; without
    it the same load draws the bar (the control), so the check can fail."""
    import os
    import sys

    (tmp_path / "job.py").write_text(LOADING_JOB)
    (tmp_path / "Snakefile").write_text(
        f'rule load:\n    output: "out.json"\n    log: "load.log"\n    params: model="{tiny_model_dir}"\n'
        '    script: "job.py"\n')
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    proc = subprocess.run([*SNAKEMAKE, "--cores", "1"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = json.loads((tmp_path / "out.json").read_text())
    assert loaded["params"] > 0 and loaded["hub"]  # a real load, through huggingface_hub
    assert "Loading weights" not in proc.stdout + proc.stderr, proc.stderr[-2000:]

    control = subprocess.run(
        [sys.executable, "-c", "from memaudit.models.loading import load_causal_lm; "
                               f"load_causal_lm({{'path': {str(tiny_model_dir)!r}}}, device='cpu')"],
        env=env, capture_output=True, text=True)
    assert control.returncode == 0, control.stderr[-2000:]
    assert "Loading weights" in control.stderr


def test_no_script_imports_huggingface_hub_before_its_job_starts():
    """start() sets HF_HUB_DISABLE_PROGRESS_BARS, which huggingface_hub reads once, at its import: a
    script whose top-level imports pulled it in first would draw the bars again."""
    import sys

    scripts = sorted((ROOT / "workflow" / "scripts").glob("*.py"))
    assert len(scripts) > 20
    code = ("import ast, sys\n"
            "for path in sys.argv[1:]:\n"
            "    for node in ast.parse(open(path).read()).body:\n"
            "        if isinstance(node, ast.ImportFrom) and node.module.startswith('memaudit'):\n"
            "            __import__(node.module)\n"
            "        elif isinstance(node, ast.Import):\n"
            "            [__import__(a.name) for a in node.names]\n"
            "print(sorted(m for m in ('huggingface_hub', 'transformers') if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", code, *map(str, scripts)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]", proc.stdout
