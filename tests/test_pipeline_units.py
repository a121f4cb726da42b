"""Atomic outputs, strict readers, benchmark construction and the score runner."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from memaudit.cli import main
from memaudit.datasets.build import build_benchmark, member_texts
from memaudit.errors import InputError
from memaudit.io import atomic_path, read_jsonl, write_jsonl
from memaudit.probes.token_prob.forward import run_token_stats
from memaudit.probes.token_prob.runner import run_token_prob_scores
from memaudit.models.token_stats import load_many, load_provenance

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "resources" / "demo"


def test_atomic_path_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.csv"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []
    with atomic_path(target) as tmp:
        tmp.write_text("done")
    assert target.read_text() == "done" and len(list(tmp_path.iterdir())) == 1


def test_an_output_path_that_cannot_be_written_is_a_storage_error_and_a_writers_own_oserror_is_not(tmp_path):
    """A folder, a path under a file or in a folder that cannot be made: a StorageError naming the path (the
    commands print it as one line), found before the writer runs; an OSError of the writer itself (an input it
    reads) is not the output's and passes through as it was."""
    from memaudit.errors import StorageError

    (tmp_path / "folder").mkdir()
    (tmp_path / "file.csv").write_text("kept")
    expected = {"folder": "is a directory; name a file, not a directory",
                "file.csv/x.json": f"not a directory (at {tmp_path / 'file.csv'}); a file stands where the path has "
                                   f"a folder: name another path"}
    for name, message in expected.items():
        with pytest.raises(StorageError) as err:
            with atomic_path(tmp_path / name):
                raise AssertionError("the writer ran")
        assert str(err.value) == f"cannot write {tmp_path / name}: {message}"
    with pytest.raises(FileNotFoundError):
        with atomic_path(tmp_path / "out.csv"):
            open(tmp_path / "no-input.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.csv", "folder"]
    assert list((tmp_path / "folder").iterdir()) == [] and (tmp_path / "file.csv").read_text() == "kept"


def test_atomic_writes_get_the_umask_permissions_a_plain_write_gets(tmp_path):
    # mkstemp/mkdtemp made every output 0600 (a folder 0700), whatever the umask: unreadable to the group
    from memaudit.io import atomic_dir, write_csv, write_text

    previous = os.umask(0o022)
    try:
        write_text(tmp_path / "a.txt", "x")
        write_csv(tmp_path / "a.csv", pd.DataFrame({"x": [1]}))
        with atomic_dir(tmp_path / "model") as tmp:
            (tmp / "config.json").write_text("{}")
        os.umask(0o077)
        write_text(tmp_path / "private.txt", "x")
    finally:
        os.umask(previous)
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes == {"a.txt": 0o644, "a.csv": 0o644, "model": 0o755, "private.txt": 0o600}


def test_the_next_write_sweeps_what_a_sigkilled_writer_left(tmp_path):
    # SIGKILL in the middle of an atomic write runs no cleanup: the target is intact (or absent)
    # and the writer's temporary stays beside it. The next write of that target removes it,
    # and nothing else (another target's temporary, a look-alike name).
    target = tmp_path / "state.pt"
    target.write_text("step 10")
    left = tmp_path / ".state.pt.218f9t6s.pt"  # the name a killed writer of state.pt leaves
    left.write_text("half")
    other = tmp_path / ".shard-0001.npz.k2j4h6g8.npz"
    other.write_text("half")
    look_alike = tmp_path / ".state.pt.notours.pt"
    look_alike.write_text("user file")
    with atomic_path(target) as tmp:
        tmp.write_text("step 20")
    assert target.read_text() == "step 20"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([target.name, other.name, look_alike.name])


def test_read_jsonl_names_file_and_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2\n')
    with pytest.raises(InputError, match=r"p.jsonl, line 3: not valid JSON"):
        read_jsonl(path)
    path.write_text('[1, 2]\n')
    with pytest.raises(InputError, match="line 1: expected a JSON object"):
        read_jsonl(path)
    # a folder, UTF-16 text, a Latin-1 byte: one line naming the file (was IsADirectoryError, UnicodeDecodeError)
    from memaudit.io import read_json

    path.write_bytes('{"a": 1}\n'.encode("utf-16"))
    for read, what in ((read_jsonl, "a JSONL file"), (read_json, "a JSON file")):
        with pytest.raises(InputError) as caught:
            read(tmp_path)
        assert str(caught.value) == f"{tmp_path}: is a directory, expected {what}"
        with pytest.raises(InputError) as caught:
            read(path)
        assert str(caught.value) == f"{path}: is UTF-16 text, expected {what} in UTF-8; convert the file to UTF-8"
    path.write_bytes(b'{"a": 1}\n\n{"a": "caf\xe9"}\n')
    with pytest.raises(InputError) as caught:
        read_jsonl(path)
    assert str(caught.value) == f"{path}, line 3: invalid UTF-8 at byte offset 20 (byte 0xe9); convert the file to UTF-8"


# near_duplicate_ngram None: the plain seeded split, exactly half and half (near-duplicates are
# kept together in tests/test_near_duplicates.py)
BENCH = {"sources": ["reuters"], "n_documents": 20, "member_fraction": 0.5, "passage_words": 40,
         "passages_per_document": 2, "min_passages": 1, "source_options": {}, "near_duplicate_ngram": None}


def test_benchmark_split_is_seeded_iid_and_exact():
    docs, passages = build_benchmark("news", BENCH, ASSETS, seed=3)
    again, _ = build_benchmark("news", BENCH, ASSETS, seed=3)
    other, _ = build_benchmark("news", BENCH, ASSETS, seed=4)
    labels = {d.doc_id: d.meta["label"] for d in docs}
    assert labels == {d.doc_id: d.meta["label"] for d in again}
    assert labels != {d.doc_id: d.meta["label"] for d in other}
    assert len(docs) == 20 and sum(labels.values()) == 10
    # every passage belongs to its document's excerpt and carries its label
    by_id = {d.doc_id: d for d in docs}
    for p in passages:
        assert p.text in by_id[p.doc_id].text and p.label == labels[p.doc_id]
    members = member_texts([d.to_dict() for d in docs])
    assert len(members) == 10 and all(labels[d.doc_id] == 1 for d in docs if d.text in members)


def test_documents_below_min_passages_are_left_out_with_a_rejects_row():
    """The demo's news drops 8 short Reuters articles (25-46 words) at min_passages 2 of 40 words:
    each has its row in the benchmark's rejects table, none leaves without a trace."""
    from memaudit.datasets.build import load_documents

    cfg = dict(BENCH, n_documents=None, passages_per_document=2, min_passages=2)
    rejects = []
    docs, _ = build_benchmark("news", cfg, ASSETS, seed=3, rejects=rejects)
    all_docs = load_documents(["reuters"], ASSETS, {})
    kept = {d.doc_id for d in docs}
    assert len(rejects) == len(all_docs) - len(kept) > 0
    assert {r.value.split(" ")[0].strip("'") for r in rejects} == {d.doc_id for d in all_docs} - kept
    r = rejects[0]
    assert (r.file, r.line, r.key, r.action) == ("source reuters", 0, "document", "rejected")
    assert r.reason == "fewer than min_passages (2) passages of 40 words: the document is left out"
    assert r.value.endswith(" (1 passage(s))'") or r.value.endswith(" (0 passage(s))'")


def test_benchmark_with_too_few_documents_names_it():
    with pytest.raises(InputError, match="benchmark 'tiny'"):
        build_benchmark("tiny", dict(BENCH, passage_words=5000), ASSETS, seed=0)


def _tiny_token_stats(tiny_model_dir, tmp_path, n: int) -> list[dict]:
    """``n`` short labelled passages in ``tmp_path/passages.jsonl`` and the tiny model's token statistics of them
    in ``tmp_path/ts.npz``, of their lowercased copies in ``tmp_path/ts_lower.npz`` (model ``m``, float32);
    returns the passages."""
    import json

    passages = [{"passage_id": f"d{i}#p0", "doc_id": f"d{i}", "label": i % 2,
                 "text": f"Passage number {i} about the sea and the whale."} for i in range(n)]
    write_jsonl(tmp_path / "passages.jsonl", passages)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "manifest.json").write_text(json.dumps({"load": {"path": str(tiny_model_dir)}}))
    config = {"models": {"m": {"device": "cpu", "dtype": "float32", "batch_size": 4, "max_tokens": 64}}}
    for name, lowercased in (("ts", False), ("ts_lower", True)):
        run_token_stats(config, "m", tmp_path / "m", tmp_path / "passages.jsonl", tmp_path / f"{name}.npz",
                        lowercased=lowercased)
    return passages


def test_runner_scores_from_one_pass_and_rejects_stale_statistics(tiny_model_dir, tmp_path):
    passages = _tiny_token_stats(tiny_model_dir, tmp_path, 6)
    assert load_provenance(tmp_path / "ts.npz") == {"dtype": "float32", "model": "m"}
    original, lower = load_many(tmp_path / "ts.npz", "original"), load_many(tmp_path / "ts_lower.npz", "lowercase")
    assert len(original) == 6 and np.isnan(lower.mu).all() and not np.isnan(original.mu).any()
    cfg = {"methods": ["loss", "lowercase", "min_k_plus_plus"], "min_k_ratios": [0.5], "aggregate": "mean"}
    docs = run_token_prob_scores("m", tmp_path / "ts.npz", {}, tmp_path / "passages.jsonl", cfg,
                                 tmp_path / "p.csv", tmp_path / "d.csv", lowercase_path=tmp_path / "ts_lower.npz")
    assert set(docs["method"]) == {"loss", "lowercase", "min_k_plus_plus_50pct"}
    assert set(docs["model"]) == {"m"} and set(docs["dtype"]) == {"float32"}
    got = pd.read_csv(tmp_path / "p.csv")
    loss = got[got.method == "loss"].sort_values("passage_id")
    np.testing.assert_allclose(loss["score"], -original.mean_nll(), rtol=1e-6)
    np.testing.assert_allclose(loss["perplexity"], np.exp(original.mean_nll()), rtol=1e-6)
    write_jsonl(tmp_path / "passages.jsonl", passages[:5])
    with pytest.raises(ValueError, match="cover 6 passages.*has 5"):
        run_token_prob_scores("m", tmp_path / "ts.npz", {}, tmp_path / "passages.jsonl", cfg,
                              tmp_path / "p2.csv", tmp_path / "d2.csv")
    assert not (tmp_path / "p2.csv").exists()


def test_a_non_finite_score_names_the_passage_line_the_model_and_the_statistics(tiny_model_dir, tmp_path,
                                                                               monkeypatch):
    """The scores job's error named a passage id and a method only: not the file the passage is in, its line,
    the model or the statistics file to rerun."""
    import memaudit.probes.token_prob.runner as runner

    _tiny_token_stats(tiny_model_dir, tmp_path, 4)
    score = runner.score_passages

    def one_nan(*args, **kwargs):
        scores = score(*args, **kwargs)
        scores.loc[(scores["passage_id"] == "d2#p0") & (scores["method"] == "loss"), "score"] = np.nan
        return scores

    monkeypatch.setattr(runner, "score_passages", one_nan)
    cfg = {"methods": ["loss"], "min_k_ratios": [0.5], "aggregate": "mean"}
    with pytest.raises(ValueError) as err:
        run_token_prob_scores("m", tmp_path / "ts.npz", {}, tmp_path / "passages.jsonl", cfg,
                              tmp_path / "p.csv", tmp_path / "d.csv", benchmark="b")
    assert str(err.value) == (
        f"b, m: 1 non-finite score, e.g. passage d2#p0 ({tmp_path / 'passages.jsonl'}, line 3), method loss, "
        f"from {tmp_path / 'ts.npz'}: an empty passage, or statistics out of range; rerun its token_stats job")
    assert not (tmp_path / "p.csv").exists()


def test_fetch_assets_to_a_folder_it_cannot_make_is_one_line(tmp_path, capsys):
    """--dest under a file (or anywhere the folder cannot be made) ended in a FileExistsError/NotADirectoryError
    traceback; it is one line naming the folder, nothing fetched."""
    (tmp_path / "a-file").write_text("x")
    dest = tmp_path / "a-file" / "demo"
    assert main(["fetch-assets", "--dest", str(dest)]) == 2
    assert capsys.readouterr().err == (f"memaudit fetch-assets: error: {dest}: cannot make the folder "
                                       f"({tmp_path / 'a-file'} is not a folder)\n")


def test_make_clean_results_removes_a_runs_outputs_and_keeps_the_paid_answers_and_timings(tmp_path):
    """It left results/selection, results/pretrain and an old results/report.html, which then read as the
    current run's; the paid API answers and the benchmark timings stay."""
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    shutil.copy2(ROOT / "Makefile", tmp_path / "Makefile")
    kept = ["results/api/cache.sqlite", "results/bench/dag.json", "results/notes.txt"]
    gone = ["results/datasets/b/documents.jsonl", "results/models/m/config.json", "results/scores/b/m/x.csv",
            "results/metrics/b/m.csv", "results/summary/metrics.csv", "results/figures/b/roc.png",
            "results/selection/b/m.csv", "results/pretrain/tiny/log.txt", "results/checkpoints/ab/state.pt",
            "results/report.html", "logs/score/x.log"]
    for name in kept + gone:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    done = subprocess.run(["make", "-s", "clean-results"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert left == ["Makefile", *sorted(kept)]
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["api", "bench", "notes.txt"]


def test_a_file_a_command_cannot_open_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    """An OSError with a file name that no command turned into its own message: one line naming the file and
    the command, status 2, not a traceback; one without a file name (a bug, a closed pipe) is not hidden."""
    import memaudit.cli as cli

    monkeypatch.setitem(cli.COMMANDS, "stats", lambda argv: open(tmp_path / "gone.csv").close())
    assert main(["stats"]) == 2
    assert capsys.readouterr() == ("", f"memaudit stats: error: {tmp_path / 'gone.csv'}: No such file or directory\n")
    monkeypatch.setitem(cli.COMMANDS, "stats", lambda argv: os.read(-1, 1))
    with pytest.raises(OSError, match="Bad file descriptor"):
        main(["stats"])


def test_cli_dispatch_and_headline(tmp_path, capsys):
    assert main(["nope"]) == 2
    commands = ("api-cache-merge, api-ledger, check-config, code-versions, dvc-stage, estimate-cost, fetch-assets, "
                "headline, serve, stats")
    assert capsys.readouterr() == ("", f"memaudit: error: unknown command 'nope' (commands: {commands}; "
                                       f"memaudit --help)\n")
    assert main(["check_config", "my.yaml"]) == 2  # a typo is named, with the command meant
    assert capsys.readouterr().err == (f"memaudit: error: unknown command 'check_config'; did you mean 'check-config'? "
                                       f"(commands: {commands}; memaudit --help)\n")
    assert main([]) == 2  # an error: the usage on stderr, not on stdout (where `memaudit > f` would hide it)
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("usage: memaudit COMMAND [ARGS]")
    assert main(["--help"]) == 0  # asked for: on stdout
    out, err = capsys.readouterr()
    assert err == "" and out.startswith("usage: memaudit COMMAND [ARGS]")
    from memaudit import __version__

    assert main(["--version"]) == 0 and capsys.readouterr().out == f"memaudit {__version__}\n"
    rows = []
    for model, auc in (("m1", 0.93), ("(none)", 0.51)):
        rows.append({"benchmark": "b", "model": model, "contaminated": model == "m1",
                     "method": "loss" if model == "m1" else "blind_bag_of_words", "auc": auc,
                     "auc_ci_low": auc - 0.05, "auc_ci_high": auc + 0.04})
    (tmp_path / "summary").mkdir()
    pd.DataFrame(rows).to_csv(tmp_path / "summary" / "metrics.csv", index=False)
    assert main(["headline", "--summary", str(tmp_path / "summary" / "metrics.csv")]) == 0
    out = capsys.readouterr().out
    assert "0.930 [0.880, 0.970]" in out and "0.510 [0.460, 0.550]" in out and "figures" in out
    assert "length cue" not in out  # no DE-COP table
    pd.DataFrame([{"model": "m1", "method": "decop-logit", "length": 64, "n_documents": 12, "auc": 0.9,
                   "accuracy_members": 0.6, "accuracy_nonmembers": 0.2},
                  {"model": "(none)", "method": "decop-longest-option", "length": 64, "n_documents": 12,
                   "auc": 0.3125, "accuracy_members": 0.708, "accuracy_nonmembers": 0.81}]).to_csv(
        tmp_path / "summary" / "decop_novels.csv", index=False)
    assert main(["headline", "--summary", str(tmp_path / "summary" / "metrics.csv")]) == 0
    out = capsys.readouterr().out
    assert "DE-COP's length cue" in out
    assert "  novels (64 tokens): members 0.71, non-members 0.81, AUC 0.31 (12 documents)" in out
    assert "probes.decop.paraphrase.min_length" in out  # 0.81 >= 0.5: the key that removes it at its source
    pd.DataFrame([{"model": "(none)", "method": "decop-longest-option", "length": 64, "n_documents": 12,
                   "auc": 0.5, "accuracy_members": 0.3, "accuracy_nonmembers": 0.49}]).to_csv(
        tmp_path / "summary" / "decop_novels.csv", index=False)
    assert main(["headline", "--summary", str(tmp_path / "summary" / "metrics.csv")]) == 0
    out = capsys.readouterr().out
    assert "non-members 0.49" in out and "min_length" not in out  # below twice chance: no pointer
    assert main(["headline", "--summary", str(tmp_path / "missing.csv")]) == 2
    # another table passed as the summary (a `memaudit stats` input): one line naming it, not a KeyError
    capsys.readouterr()
    pd.DataFrame({"doc": ["a", "b"], "score": [1.0, 0.0], "label": [1, 0]}).to_csv(tmp_path / "scores.csv", index=False)
    assert main(["headline", "--summary", str(tmp_path / "scores.csv")]) == 2
    err = capsys.readouterr().err
    assert err == (f"memaudit headline: error: {tmp_path / 'scores.csv'}: not a run's metrics table (no column "
                   "'benchmark', 'model', 'contaminated', 'method', 'auc', 'auc_ci_low', 'auc_ci_high'); "
                   "pass results/summary/metrics.csv\n")
    # a folder, an empty file, UTF-16 text, a malformed table: one line naming the file, not pandas' traceback
    (tmp_path / "folder.csv").mkdir()
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "utf16.csv").write_bytes("benchmark,model\nnovels,m1\n".encode("utf-16"))
    (tmp_path / "ragged.csv").write_text("benchmark,model\nnovels,m1\nnovels,m2,extra,more\n")
    for name, reason in [("folder.csv", "is a directory, expected a run's metrics table (results/summary/metrics.csv)"),
                         ("empty.csv", "empty file"),
                         ("utf16.csv", "UTF-16 text (little-endian byte-order mark), expected a run's metrics table "
                                       "(results/summary/metrics.csv) in UTF-8; convert the file to UTF-8"),
                         ("ragged.csv", "not a readable CSV table (Error tokenizing data. C error: Expected 2 fields "
                                        "in line 3, saw 4)")]:
        assert main(["headline", "--summary", str(tmp_path / name)]) == 2
        assert capsys.readouterr().err == f"memaudit headline: error: {tmp_path / name}: {reason}\n"
    # a value that is no number, and an empty table beside the metrics: one line each, not a traceback
    summary = tmp_path / "summary" / "metrics.csv"
    pd.DataFrame([rows[0], {**rows[1], "auc_ci_low": "low"}]).to_csv(summary, index=False)
    assert main(["headline", "--summary", str(summary)]) == 2
    assert capsys.readouterr().err == f"memaudit headline: error: {summary}, line 3: column 'auc_ci_low' is not a " \
                                      f"number ('low')\n"
    pd.DataFrame(rows).to_csv(summary, index=False)
    (tmp_path / "summary" / "models.csv").write_text("")
    assert main(["headline", "--summary", str(summary)]) == 2
    assert capsys.readouterr().err.endswith(f"memaudit headline: error: {tmp_path / 'summary' / 'models.csv'}: "
                                            f"empty file\n")
    # a run whose only benchmark is unlabelled (published CopyBench): empty metrics and selection tables
    (tmp_path / "unlabelled").mkdir()
    pd.DataFrame(columns=list(rows[0])).to_csv(tmp_path / "unlabelled" / "metrics.csv", index=False)
    pd.DataFrame(columns=["benchmark", "model", "contaminated", "method", "q", "fdr", "power"]).to_csv(
        tmp_path / "unlabelled" / "selection.csv", index=False)
    pd.DataFrame({"model": ["m1"], "base": [""]}).to_csv(tmp_path / "unlabelled" / "models.csv", index=False)
    assert main(["headline", "--summary", str(tmp_path / "unlabelled" / "metrics.csv")]) == 0
    out = capsys.readouterr().out
    assert "No labelled benchmark in this run: no ROC-AUC" in out and "ROC-AUC [bootstrap" not in out


def test_the_headlines_tables_without_a_column_and_methods_the_run_lacks_are_one_line(tmp_path, capsys):
    """models.csv without ``base`` was a KeyError traceback; ``--methods losss`` printed pandas' "Empty
    DataFrame" and exited 0, and ``--methods loss zlibb`` dropped zlibb unseen. Each is one line, exit 2."""
    summary = tmp_path / "summary"
    summary.mkdir()
    metrics = summary / "metrics.csv"
    n = {"n_member": 30, "n_nonmember": 30}
    pd.DataFrame([{"benchmark": "b", "model": m, "contaminated": m == "m1", "method": method, "auc": 0.9,
                   "auc_ci_low": 0.8, "auc_ci_high": 0.95, **n}
                  for m in ("m0", "m1") for method in ("loss", "zlib")]).to_csv(metrics, index=False)
    pd.DataFrame({"model": ["m0", "m1"], "contaminated_on": ["", "b"]}).to_csv(summary / "models.csv", index=False)
    assert main(["headline", "--summary", str(metrics)]) == 2
    assert capsys.readouterr().err == (f"memaudit headline: error: {summary / 'models.csv'}: not the run's models "
                                       f"table (no column 'base'); rerun the workflow to write it again\n")
    pd.DataFrame({"model": ["m0", "m1"], "base": ["", "m0"]}).to_csv(summary / "models.csv", index=False)
    pd.DataFrame([{"benchmark": "b", "model": "m1", "contaminated": True, "method": "loss", "q": 0.1,
                   "fdr": 0.05}]).to_csv(summary / "selection.csv", index=False)
    assert main(["headline", "--summary", str(metrics)]) == 2
    assert capsys.readouterr().err == (f"memaudit headline: error: {summary / 'selection.csv'}: not the run's "
                                       f"selection table (no column 'power', 'mean_selected', 'n_test'); rerun the "
                                       f"workflow to write it again\n")
    (summary / "selection.csv").unlink()
    # a family's table: ktd.csv without the column its check reads
    pd.DataFrame([{"benchmark": "b", "model": "m0", "statistic": "gradnorm", "m": 2, "q": 0.1, "fdr": 0.5,
                   "power": 0.2, "sign_pvalue": 0.5, "n_texts": 20, "mean_selected": 0.0}]).to_csv(
        summary / "ktd.csv", index=False)
    assert main(["headline", "--summary", str(metrics)]) == 2
    assert capsys.readouterr().err == (f"memaudit headline: error: {summary / 'ktd.csv'}: not a table of the run's "
                                       f"(no column 'fdp_above_q'); rerun the workflow to write it again\n")
    (summary / "ktd.csv").unlink()
    assert main(["headline", "--summary", str(metrics), "--methods", "losss"]) == 2
    assert capsys.readouterr() == ("", f"memaudit headline: error: --methods: 'losss' (did you mean 'loss'?) not in "
                                       f"{metrics} (its methods: loss, zlib)\n")
    assert main(["headline", "--summary", str(metrics), "--methods", "loss", "zlibb", "gzip"]) == 2
    assert capsys.readouterr().err == (f"memaudit headline: error: --methods: 'zlibb' (did you mean 'zlib'?), 'gzip' "
                                       f"not in {metrics} (its methods: loss, zlib)\n")
    assert main(["headline", "--summary", str(metrics), "--methods", "zlib"]) == 0
    out = capsys.readouterr().out
    assert "method                                        zlib\n" in out and " loss" not in out.split("Tables:")[0]
    # the default list, as far as the run has it: none of it, and no blind baseline either, is said in words
    assert main(["headline", "--summary", str(metrics), "--config", str(ROOT / "config" / "ci.yaml")]) == 0
    pd.DataFrame([{"benchmark": "b", "model": "m1", "contaminated": True, "method": "copybench_rougeL", "auc": 0.9,
                   "auc_ci_low": 0.8, "auc_ci_high": 0.95, **n}]).to_csv(metrics, index=False)
    capsys.readouterr()
    assert main(["headline", "--summary", str(metrics)]) == 0
    out = capsys.readouterr().out
    assert (f"none of loss, zlib, lowercase, min_k_20pct, min_k_plus_plus_20pct in this run (every method: "
            f"{metrics})\n") in out and "Empty DataFrame" not in out


def test_the_headlines_default_methods_are_the_figures(tmp_path, monkeypatch, capsys):
    """memaudit headline --methods defaults to figures.headline_methods' schema default, what the ROC and
    distribution figures of a config that does not set it draw (a hand-written copy had drifted: no lowercase)."""
    import yaml

    from memaudit import jobs
    from memaudit.stats import headline

    seen = []
    monkeypatch.setattr(headline, "print_headline", lambda summary, methods, **_: seen.append(list(methods)))
    ci = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    assert "figures" not in ci
    drawn = jobs.validate_config(ci)["figures"]["headline_methods"]
    assert main(["headline"]) == 0 and main(["headline", "--methods", "loss"]) == 0
    assert seen == [drawn, ["loss"]]
    assert drawn == ["loss", "zlib", "lowercase", "min_k_20pct", "min_k_plus_plus_20pct"]
    with pytest.raises(SystemExit):
        main(["headline", "--help"])
    assert ("(default: loss zlib lowercase min_k_20pct min_k_plus_plus_20pct, as far as the run has them: the "
            "schema's default of") in " ".join(
        capsys.readouterr().out.split())


def test_the_headline_takes_its_methods_from_the_runs_config(tmp_path, monkeypatch):
    """A config's own figures.headline_methods drew the figures, but `make run CONFIG=...` called `memaudit
    headline` without it, so the AUC table showed the schema's default list: the Makefile passes the config
    (the demo's without CONFIG), whose list is the default of --methods."""
    import subprocess

    import yaml

    from memaudit.stats import headline

    seen = []
    monkeypatch.setattr(headline, "print_headline", lambda summary, methods, **_: seen.append(list(methods)))
    mine = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    mine["figures"] = {"headline_methods": ["zlib", "loss"]}
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(mine))
    assert main(["headline", "--config", str(tmp_path / "mine.yaml")]) == 0
    assert main(["headline", "--config", str(tmp_path / "mine.yaml"), "--methods", "loss"]) == 0
    assert seen == [["zlib", "loss"], ["loss"]]
    for config in ("mine.yaml", ""):
        dry = subprocess.run(["make", "-n", "run", f"CONFIG={config}"], cwd=ROOT, capture_output=True, text=True)
        assert [line for line in dry.stdout.splitlines() if " headline " in line] == [
            f".venv/bin/memaudit headline --summary results/summary/metrics.csv "
            f"--config {config or 'config/config.yaml'}"], dry.stdout + dry.stderr


def test_the_headline_lists_the_figures_the_run_made_and_prints_auc_and_interval_alike(tmp_path, capsys):
    """The "Figures:" line named auc_vs_size.png and ROC paths a run without local models or labels never drew;
    an AUC printed to 3 decimals with its interval to 2 could sit outside it (0.895 [0.90, 0.92]), and a
    missing AUC printed as `nan [nan, nan]`."""
    from memaudit.stats.headline import auc_cells

    rows = pd.DataFrame({"auc": [0.8951, np.nan, 0.93], "auc_ci_low": [0.8951, np.nan, np.nan],
                         "auc_ci_high": [0.9204, np.nan, np.nan]})
    assert list(auc_cells(rows)) == ["0.895 [0.895, 0.920]", "n/a", "0.930 [n/a]"]
    summary = tmp_path / "results" / "summary"
    summary.mkdir(parents=True)
    pd.DataFrame([{"benchmark": "b", "model": "api", "contaminated": False, "method": "loss", "auc": 0.6,
                   "auc_ci_low": 0.41, "auc_ci_high": 0.79}]).to_csv(summary / "metrics.csv", index=False)
    figures = tmp_path / "results" / "figures"

    def figures_line():
        main(["headline", "--summary", str(summary / "metrics.csv")])
        return [line for line in capsys.readouterr().out.splitlines() if line.startswith("Figures:")]

    assert figures_line() == [f"Figures: none in {figures}"]
    (figures / "b" / "api").mkdir(parents=True)
    for name in ("roc.png", "score_distributions.png"):
        (figures / "b" / "api" / name).write_bytes(b"png")
    assert figures_line() == [f"Figures: {figures}/<benchmark>/<model>/roc.png, score_distributions.png"]
    (figures / "b" / "auc_vs_size.png").write_bytes(b"png")
    assert figures_line() == [f"Figures: {figures}/<benchmark>/<model>/roc.png, score_distributions.png, "
                              f"{figures}/<benchmark>/auc_vs_size.png"]


def fake_family_headline(summary_dir, models):
    """A headline hook of a family the tests declare (test_families_add_their_headline_sections...)."""
    return [f"Fake family: {len(models)} models in {Path(summary_dir).name}", ""]


def test_families_add_their_headline_sections_through_the_registry(tmp_path, capsys, monkeypatch):
    """`memaudit headline` prints the core checks (metrics, selection), then each family's own sections
    through its registry entry's `headline` hook, in registry order; a new family's hook is picked up
    with no change to memaudit.stats.headline, and its empty sections print nothing."""
    from memaudit.probes import registry
    from memaudit.stats.headline import print_headline

    summary = tmp_path / "summary"
    summary.mkdir()
    pd.DataFrame([{"benchmark": "b", "model": "m1", "contaminated": True, "method": "loss", "auc": 0.93,
                   "auc_ci_low": 0.88, "auc_ci_high": 0.97, "n_member": 30, "n_nonmember": 30}]).to_csv(
        summary / "metrics.csv", index=False)
    pd.DataFrame({"model": ["m0", "m1"], "base": ["", "m0"]}).to_csv(summary / "models.csv", index=False)
    diff = {"benchmark": "b", "model": "m1", "base": "m0", "group": "member", "difference": 0.2, "ci_low": 0.1,
            "ci_high": 0.3}
    pd.DataFrame([{**diff, "mode": "logit", "measure": "prob", "contaminated_on_benchmark": True}]).to_csv(
        summary / "cloze_differences.csv", index=False)
    pd.DataFrame([{**diff, "score": "copybench_rougeL_excess", "decoding": "greedy"}]).to_csv(
        summary / "copybench_differences.csv", index=False)
    fake = registry.ProbeFamily("zz_fake", reads="passages.jsonl", modes={"": frozenset()}, runner="x:y",
                                version=1, fingerprint="", headline=f"{__name__}:fake_family_headline")
    monkeypatch.setitem(registry.FAMILIES, "zz_fake", fake)
    print_headline(summary / "metrics.csv", ["loss"])
    out = capsys.readouterr().out
    heads = ["Ground truth (contaminated", "CopyBench ground truth", "Cloze probes ground truth",
             "Fake family: 2 models in summary", "Ground-truth checks: 3 of 7 hold; not evaluated", "Report:"]
    at = [out.find(h) for h in heads]
    assert -1 not in at and at == sorted(at), dict(zip(heads, at))
    assert "FDR-controlled selection" not in out and "KTD knockoff+" not in out  # no selection.csv, no ktd.csv
    assert "\n\nFake family: 2 models in summary\n" in out and "\n\n\n" not in out  # the empty section: nothing
    # the non-member and gain rows are missing from the tables: not evaluated (test_a_paired_check_whose_group...)
    assert ("        b    m1   m0 logit   prob                 member         0.2 [0.100, 0.300]" + " " * 66
            + "CI above 0  True\n") in out
    assert not [m for f in ("cloze", "copybench", "decop", "ktd") for m in registry.family_modules(f)
                if m.endswith(".headline")]  # printing code is not part of a family's fingerprint


def test_the_headline_counts_its_checks_and_names_where_they_fail():
    from memaudit.stats.headline import section, tally

    checked = section("A checks (the rule)", pd.DataFrame({"v": [1, 2, 3], "ok": [True, False, True]}))
    reported = section("B: some reported", pd.DataFrame({"v": [1, 2], "ok": [True, ""]}))  # blank: not a check
    plain = section("C plain", pd.DataFrame({"v": [1]}))
    assert (checked.held, checked.checked, checked.title) == (2, 3, "A checks")
    assert tally([checked, reported, plain, "a line of text"]) == (
        "Ground-truth checks: 3 of 4 hold; failing (ok False above): 1 in A checks\n"
        "  (on the demo's few documents some checks fall either way with a CPU's rounding: "
        "docs/statistics.md#checks-that-fall-either-way)")
    assert tally([plain, "a line of text", ""]) == ""
    assert tally([reported]) == "Ground-truth checks: 1 of 1 hold"


def test_a_check_without_its_row_in_metrics_csv_is_counted_not_evaluated(tmp_path, capsys):
    """A contaminated model scored by the token-probability probe without ``loss`` (m2: zlib only), or with
    no row at all on a benchmark it was fine-tuned on where others have ``loss`` (m3), has a check that
    cannot be made: it is listed and counted, not left out of "N of M hold" (which said 1 of 1)."""
    from memaudit.stats.headline import print_headline

    summary = tmp_path / "summary"
    summary.mkdir()
    auc = {"benchmark": "b", "contaminated": True, "auc": 0.93, "auc_ci_low": 0.88, "auc_ci_high": 0.97,
           "n_member": 30, "n_nonmember": 30}
    pd.DataFrame([{**auc, "model": "m1", "method": "loss"}, {**auc, "model": "m2", "method": "zlib"}]).to_csv(
        summary / "metrics.csv", index=False)
    pd.DataFrame({"model": ["m0", "m1", "m2", "m3", "m4"], "base": ["", "m0", "m0", "m0", "m0"],
                  "contaminated_on": ["", "b", "b", "b", "c"]}).to_csv(summary / "models.csv", index=False)
    pd.DataFrame([{"benchmark": "b", "labels": "random split of documents", "null_control": False}]).to_csv(
        summary / "benchmarks.csv", index=False)
    print_headline(summary / "metrics.csv", ["loss", "zlib"])
    out = capsys.readouterr().out
    assert "        b    m1   loss 0.93                                    >= 0.9  True\n" in out
    assert "        b    m2   loss  NaN not evaluated: no loss row in metrics.csv False\n" in out
    assert "        b    m3   loss  NaN not evaluated: no loss row in metrics.csv False\n" in out
    assert "m0   loss" not in out and "m4" not in out  # a base model without rows, a benchmark not scored
    assert out.count("Ground-truth checks:") == 1 and (
        "Ground-truth checks: 1 of 3 hold; not evaluated (no row to check in its table): 2 in Ground truth\n") in out
    assert "fall either way" not in out
    # a run that scored no loss at all: every check it would have made is listed
    pd.DataFrame([{**auc, "model": "m1", "method": "zlib"}]).to_csv(summary / "metrics.csv", index=False)
    print_headline(summary / "metrics.csv", ["loss", "zlib"])
    out = capsys.readouterr().out
    assert "Ground-truth checks: 0 of 3 hold; not evaluated (no row to check in its table): 3 in Ground truth\n" in out


def test_a_selection_check_without_its_rows_in_selection_csv_is_counted_not_evaluated(tmp_path, capsys):
    """A model whose loss has too few non-members to calibrate conformal BH has no rows in selection.csv: its
    checks (q = 0.1, 0.2, 0.3 on a contaminated model, q = 0.1 on a null control) are listed and counted as
    not evaluated, not left out of "N of M hold" (which said 3 of 3, and with no row at all printed none)."""
    from memaudit.stats.headline import print_headline

    summary = tmp_path / "summary"
    summary.mkdir()
    auc = {"benchmark": "b", "method": "loss", "auc": 0.5, "auc_ci_low": 0.3, "auc_ci_high": 0.7, "n_member": 30}
    pd.DataFrame([{**auc, "model": "m0", "contaminated": False, "n_nonmember": 1},
                  {**auc, "model": "m1", "contaminated": True, "auc": 0.95, "n_nonmember": 30},
                  {**auc, "model": "m2", "contaminated": True, "auc": 0.95, "n_nonmember": 1}]).to_csv(
        summary / "metrics.csv", index=False)
    pd.DataFrame({"model": ["m0", "m1", "m2"], "base": ["", "m0", "m0"],
                  "contaminated_on": ["", "b", "b"]}).to_csv(summary / "models.csv", index=False)
    chosen = {"benchmark": "b", "model": "m1", "contaminated": True, "method": "loss", "n_splits": 20,
              "n_calibration": 15, "n_test": 45, "n_test_member": 30, "min_q": 0.0625, "fdr_se": 0.01,
              "power": 0.9, "power_se": 0.01, "mean_selected": 27.0}
    pd.DataFrame([{**chosen, "q": q, "fdr": q / 2} for q in (0.1, 0.2, 0.3)]).to_csv(
        summary / "selection.csv", index=False)
    print_headline(summary / "metrics.csv", ["loss"])
    out = capsys.readouterr().out
    # m0's loss over 30 + 1 documents is no null check (test_a_null_check_of_too_few_documents_to_fail...)
    assert ("Ground-truth checks: 5 of 9 hold; not evaluated (no row to check in its table): "
            "4 in FDR-controlled selection\n") in out
    assert "        b    m1 0.3 0.15    0.9        27.0" + " " * 70 + "fdr <= 0.32  True\n" in out
    for model, q in (("m0", 0.1), ("m2", 0.1), ("m2", 0.2), ("m2", 0.3)):
        assert (f"        b    {model} {q}  NaN    NaN         NaN not evaluated: no loss row in selection.csv "
                f"(1 non-member: too few to calibrate) False\n") in out
    # no model could be calibrated: a selection.csv of no rows still lists the checks it could not make
    pd.DataFrame(columns=list(chosen) + ["q", "fdr"]).to_csv(summary / "selection.csv", index=False)
    print_headline(summary / "metrics.csv", ["loss"])
    out = capsys.readouterr().out
    assert ("Ground-truth checks: 2 of 9 hold; not evaluated (no row to check in its table): "
            "7 in FDR-controlled selection\n") in out
    # a grid of qs without a checked q (stats.selection.qs): that check alone, said so
    from memaudit.stats.headline import selection_expectations

    grid = pd.DataFrame([{**chosen, "q": q, "fdr": q / 2} for q in (0.1, 0.2)])
    checks = selection_expectations(grid, pd.read_csv(summary / "models.csv"),
                                    summary=pd.read_csv(summary / "metrics.csv"))
    assert [(r.model, r.q, r.expected) for r in checks.itertuples() if not r.ok] == [
        ("m0", 0.1, "not evaluated: no loss row in selection.csv (1 non-member: too few to calibrate)"),
        ("m1", 0.3, "not evaluated: no loss row in selection.csv at q = 0.3 (stats.selection.qs)"),
        *[("m2", q, "not evaluated: no loss row in selection.csv (1 non-member: too few to calibrate)")
          for q in (0.1, 0.2, 0.3)]]


def test_demo_expectations_flag_each_rule():
    from memaudit.stats.headline import demo_expectations

    n = {"n_member": 60, "n_nonmember": 60}
    summary = pd.DataFrame([
        {"benchmark": "b", "model": "base", "contaminated": False, "method": "loss", "auc": 0.62, **n},
        {"benchmark": "b", "model": "tuned", "contaminated": True, "method": "loss", "auc": 0.95, **n},
        {"benchmark": "c", "model": "tuned", "contaminated": False, "method": "loss", "auc": 0.7, **n},
        {"benchmark": "c", "model": "base", "contaminated": False, "method": "loss", "auc": 0.65, **n},
        {"benchmark": "d", "model": "base", "contaminated": False, "method": "loss", "auc": 0.65,
         "n_member": 31, "n_nonmember": 31},
        {"benchmark": "e", "model": "base", "contaminated": False, "method": "loss", "auc": float("nan"),
         "n_member": 0, "n_nonmember": 31},
        {"benchmark": "b", "model": "weak", "contaminated": True, "method": "loss", "auc": 0.8, **n},
        {"benchmark": "b", "model": "base", "contaminated": False, "method": "zlib", "auc": 0.9, **n},
    ])
    models = pd.DataFrame({"model": ["base", "tuned", "weak"], "base": [None, "base", "base"]})
    got = demo_expectations(summary, models)
    # a base model's range is the split's: 0.65 is too far from 0.5 for 60 + 60 documents, not for 31 + 31
    assert [(r.benchmark, r.model, r.expected, r.ok) for r in got.itertuples()] == [
        ("b", "base", "in [0.363, 0.637]", True), ("b", "tuned", ">= 0.9", True),
        ("c", "base", "in [0.363, 0.637]", False), ("d", "base", "in [0.309, 0.691]", True),
        ("e", "base", "members and non-members", False), ("b", "weak", ">= 0.9", False)]


def test_a_failing_checks_number_is_never_shown_on_the_passing_side_of_its_bound():
    """A check that failed printed its number rounded onto its bound: `0.637` beside `in [0.363, 0.637]` and
    ok False (AUC 0.6372 of 60 + 60), `0.9` beside `>= 0.9` (0.8996), `fdr 0.12` beside `fdr <= 0.12`
    (0.1202). A failing number is rounded away from its bound; a number that holds is rounded as before."""
    from memaudit.stats.headline import demo_expectations, selection_expectations

    n = {"n_member": 60, "n_nonmember": 60}
    summary = pd.DataFrame([
        {"benchmark": "b", "model": "base", "contaminated": False, "method": "loss", "auc": 0.6372, **n},
        {"benchmark": "c", "model": "base", "contaminated": False, "method": "loss", "auc": 0.3628, **n},
        {"benchmark": "d", "model": "base", "contaminated": False, "method": "loss", "auc": 0.6368, **n},
        {"benchmark": "b", "model": "tuned", "contaminated": True, "method": "loss", "auc": 0.8996, **n},
        {"benchmark": "c", "model": "tuned", "contaminated": True, "method": "loss", "auc": 0.9004, **n},
    ])
    models = pd.DataFrame({"model": ["base", "tuned"], "base": [None, "base"], "contaminated_on": ["", "b;c"]})
    got = demo_expectations(summary, models)
    assert [(r.benchmark, r.model, r.auc, r.expected, r.ok) for r in got.itertuples()] == [
        ("b", "base", 0.638, "in [0.363, 0.637]", False), ("c", "base", 0.362, "in [0.363, 0.637]", False),
        ("d", "base", 0.637, "in [0.363, 0.637]", True), ("b", "tuned", 0.899, ">= 0.9", False),
        ("c", "tuned", 0.9, ">= 0.9", True)]
    row = {"benchmark": "b", "model": "tuned", "contaminated": True, "method": "loss", "n_splits": 20,
           "n_calibration": 30, "n_test": 90, "n_test_member": 60, "min_q": 1 / 31, "fdr_se": 0.01, "power": 0.9,
           "power_se": 0.01, "mean_selected": 50.0}
    selection = pd.DataFrame([{**row, "q": 0.1, "fdr": 0.1202}, {**row, "q": 0.2, "fdr": 0.2198}])
    got = selection_expectations(selection, models, qs=(0.1, 0.2))
    assert [(r.q, r.fdr, r.expected, r.ok) for r in got.itertuples()] == [
        (0.1, 0.121, "fdr <= 0.12", False), (0.2, 0.22, "fdr <= 0.22", True)]


def test_a_shown_value_is_on_the_side_of_its_bounds_the_value_is():
    from hypothesis import given
    from hypothesis import strategies as st

    from memaudit.stats.headline import shown_value

    thousandths = st.integers(0, 1000).map(lambda k: k / 1000)

    @given(st.floats(0, 1), thousandths, thousandths)
    def check(value, a, b):
        low, high = min(a, b), max(a, b)
        shown = shown_value(value, low, high)
        assert (low <= shown <= high) == (low <= value <= high), (value, low, high, shown)
        assert abs(shown - value) <= 0.001 + 1e-12

    check()


def test_null_auc_range_holds_a_random_splits_auc_99_times_in_100():
    """The range is the Mann-Whitney null's: random labels over fixed scores (a base model on a random
    split) give an AUC inside it 99% of the time, for small and unequal splits too."""
    from scipy.stats import rankdata
    from sklearn.metrics import roc_auc_score

    from memaudit.stats.headline import null_auc_range

    rng = np.random.default_rng(0)
    for n1, n0 in [(31, 31), (60, 60), (20, 45)]:
        scores = rng.normal(size=n1 + n0)
        low, high = null_auc_range(n1, n0)
        # 4000 random splits at once: a split's AUC is the Mann-Whitney U of its members' ranks over n1 n0
        # (12,000 roc_auc_score calls were 16 s of make test-quick)
        members = rng.permuted(np.tile(np.arange(n1 + n0), (4000, 1)), axis=1)[:, :n1]
        ranks = rankdata(scores)
        aucs = (ranks[members].sum(axis=1) - n1 * (n1 + 1) / 2) / (n1 * n0)
        for split in range(3):
            labels = np.isin(np.arange(n1 + n0), members[split]).astype(int)
            assert aucs[split] == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
        inside = float(np.mean((aucs >= low) & (aucs <= high)))
        assert 0.984 <= inside <= 0.996, (n1, n0, inside)
    assert null_auc_range(60, 60) == (0.363, 0.637)
    assert null_auc_range(60, 60, alpha=0.05) == (0.396, 0.604)
    with pytest.raises(ValueError, match="members and non-members, not 0 and 31"):
        null_auc_range(0, 31)


def test_a_base_model_on_a_split_by_book_is_checked_on_the_books_not_the_documents():
    """Labels drawn per book: a book's chapters share its level, so the documents' AUC strays far beyond
    null_auc_range (which draws labels document by document) by chance alone; the check of the books'
    means by Welch's t-test fails about one run in a hundred, as the level says."""
    from sklearn.metrics import roc_auc_score

    from memaudit.stats.headline import demo_expectations, null_auc_range
    from memaudit.stats.metrics import group_t_test_pvalue, label_groups

    rng = np.random.default_rng(3)
    rows, outside = [], 0
    for (n_books, chapters), run in [((6, 20), r) for r in range(600)] + [((20, 6), r) for r in range(600)]:
        books = np.repeat([f"book{i}" for i in range(n_books)], chapters)
        scores = rng.normal(size=n_books)[np.repeat(np.arange(n_books), chapters)] + rng.normal(size=books.size)
        members = rng.permutation(n_books)[: n_books // 2]
        labels = np.isin(np.repeat(np.arange(n_books), chapters), members).astype(int)
        assert label_groups(books, labels) is not None  # the workflow would set ci_books
        n1, n0 = int(labels.sum()), int((1 - labels).sum())
        auc = roc_auc_score(labels, scores)
        low, high = null_auc_range(n1, n0)
        outside += not (low <= auc <= high)
        rows.append({"benchmark": f"b{n_books}-{run}", "model": "base", "contaminated": False, "method": "loss",
                     "auc": auc, "n_member": n1, "n_nonmember": n0, "ci_books": float(n_books),
                     "t_pvalue": group_t_test_pvalue(scores, labels, books)})
    got = demo_expectations(pd.DataFrame(rows), pd.DataFrame({"model": ["base"], "base": [None]}))
    assert len(got) == 1200
    assert 0.003 <= 1 - got["ok"].mean() <= 0.022  # the check's level, 0.01
    assert outside / 1200 > 0.2  # what the documents' range would have said
    assert got["expected"].iloc[0] == "books' means alike (t-test p >= 0.01; 6 books)"
    # a split with members by book that do differ fails; no variance in either class cannot show it
    differ = {**rows[0], "t_pvalue": 0.004}
    flat = {**rows[0], "t_pvalue": float("nan")}
    assert demo_expectations(pd.DataFrame([differ, flat]), pd.DataFrame({"model": ["base"], "base": [None]}))[
        "ok"].tolist() == [False, False]


def test_label_provenance_says_where_labels_come_from_and_where_base_models_are_null_controls():
    from memaudit.config import label_provenance

    assert label_provenance({"sources": ["austen"], "member_fraction": 0.4}, 13) == {
        "labels": "random split of documents (seed 13, member fraction 0.4)", "null_control": True}
    assert label_provenance({"sources": ["austen"], "split_by": "book"}, 7)["labels"] == (
        "random split by book (seed 7, member fraction 0.5)")
    assert label_provenance({"published": {"format": "qa", "path": "q.jsonl", "member_fraction": 0.3}}, 5) == {
        "labels": "random split of the QA set's questions (seed 5, member fraction 0.3)", "null_control": True}
    assert label_provenance({"published": {"format": "articles", "path": "a", "cutoff": "2020-01-01"}}, 5) == {
        "labels": "published (articles): the articles' dates (1 = dated before 2020-01-01, 0 = on or after it)",
        "null_control": False}
    for fmt in ("nyt", "wikimia", "member_texts", "booktection", "arxivtection", "bookmia"):
        got = label_provenance({"published": {"format": fmt, "path": "x"}}, 5)
        assert got["null_control"] is False and got["labels"].startswith(f"published ({fmt}): ") and "{" not in got["labels"]
    assert label_provenance({"published": {"format": "copybench", "path": "d", "labels": "l.csv"}}, 5)["labels"] == (
        "published (copybench): the labels file l.csv (1 = a member book)")
    assert label_provenance({"published": {"format": "copybench", "path": "d"}}, 5)["null_control"] is False


def test_base_models_are_checked_as_null_controls_only_on_benchmarks_split_at_random(tmp_path, capsys):
    """On an auditor's own articles (labels by date) a base model's AUC of 0.25 and its selections are
    findings: not checked, and the headline says why; on the benchmark split at random the same model is
    checked. A run from before benchmarks.csv checks base models everywhere, as it did."""
    from memaudit.stats.headline import print_headline

    summary = tmp_path / "summary"
    summary.mkdir()
    auc = {"method": "loss", "auc_ci_low": 0.1, "auc_ci_high": 0.9, "n_member": 60, "n_nonmember": 60}
    pd.DataFrame([{"benchmark": "novels", "model": "m0", "contaminated": False, "auc": 0.7, **auc},
                  {"benchmark": "archive", "model": "m0", "contaminated": False, "auc": 0.25, **auc},
                  {"benchmark": "archive", "model": "m1", "contaminated": True, "auc": 0.95, **auc}]).to_csv(
        summary / "metrics.csv", index=False)
    pd.DataFrame({"model": ["m0", "m1"], "base": ["", "m0"]}).to_csv(summary / "models.csv", index=False)
    sel = {"method": "loss", "q": 0.1, "fdr": 0.0, "power": 0.5, "n_test": 10}
    pd.DataFrame([{"benchmark": "novels", "model": "m0", "contaminated": False, "mean_selected": 0.0, **sel},
                  {"benchmark": "archive", "model": "m0", "contaminated": False, "mean_selected": 4.0, **sel},
                  *[{"benchmark": "archive", "model": "m1", "contaminated": True, "mean_selected": 5.0, **sel, "q": q}
                    for q in (0.1, 0.2, 0.3)]]).to_csv(summary / "selection.csv", index=False)
    ktd = {"model": "m0", "statistic": "gradnorm", "m": 2, "q": 0.1, "fdr": 0.5, "power": 0.2, "fdp_above_q": False,
           "sign_pvalue": 0.5, "n_texts": 20}
    pd.DataFrame([{"benchmark": "novels", "mean_selected": 0.0, **ktd},
                  {"benchmark": "archive", "mean_selected": 6.0, **ktd}]).to_csv(summary / "ktd.csv", index=False)
    pd.DataFrame([{"benchmark": "archive", "labels": "published (articles): dated before 2020-01-01",
                   "null_control": False},
                  {"benchmark": "novels", "labels": "random split of documents", "null_control": True}]).to_csv(
        summary / "benchmarks.csv", index=False)
    print_headline(summary / "metrics.csv", ["loss"])
    out = capsys.readouterr().out
    assert "  novels    m0   loss 0.70 in [0.363, 0.637] False\n" in out
    assert "  archive    m1   loss 0.95            >= 0.9  True\n" in out and "archive    m0   loss" not in out
    assert "   novels    m0 0.1  0.0    0.5         0.0 named <= 5% of 10 True\n" in out
    assert "archive    m0 0.1" not in out  # the selection: novels only
    assert "   novels    m0  2 0.1  0.5    0.2    0.0        False        0.5 named <= 1.0 True\n" in out
    assert "  archive    m0  2 0.1  0.5    0.2    6.0        False        0.5     reported     \n" in out
    assert ("there a base model's AUC and selections are findings, not checks\n"
            f"({summary / 'benchmarks.csv'}):\n  archive: published (articles): dated before 2020-01-01\n") in out
    assert "Ground-truth checks: 6 of 7 hold; failing (ok False above): 1 in Ground truth" in out
    (summary / "benchmarks.csv").unlink()
    print_headline(summary / "metrics.csv", ["loss"])
    out = capsys.readouterr().out
    assert "archive    m0   loss 0.25 in [0.363, 0.637] False" in out and "findings, not checks" not in out
    assert "Ground-truth checks: 6 of 10 hold" in out
    # benchmarks.csv names the families this run ran: a KTD table left by a run of another config is not shown
    origins = pd.DataFrame([{"benchmark": "archive", "labels": "random split of documents", "null_control": True,
                             "families": "token_prob"},
                            {"benchmark": "novels", "labels": "random split of documents", "null_control": True,
                             "families": "token_prob;decop"}])
    origins.to_csv(summary / "benchmarks.csv", index=False)
    print_headline(summary / "metrics.csv", ["loss"])
    out = capsys.readouterr().out
    assert "False        0.5 named <= 1.0" not in out and (
        f"Not shown: the tables of ktd in {summary}, left there by a run of another config (this run's "
        "benchmarks.csv lists the families it ran on each benchmark).") in out
    assert "Ground-truth checks: 5 of 8 hold" in out  # less the two KTD rows, one of them held
    origins.assign(families=["token_prob", "token_prob;ktd"]).to_csv(summary / "benchmarks.csv", index=False)
    print_headline(summary / "metrics.csv", ["loss"])
    out = capsys.readouterr().out
    assert "Not shown" not in out and "Ground-truth checks: 6 of 10 hold" in out  # the KTD rows again


def test_the_headline_shows_the_main_scores_of_models_no_token_probability_method_scored(tmp_path, capsys):
    """A black-box audit (an API model probed by the cloze probes and prefix probing only) gets its AUCs in
    the headline: each family's main scores (the registry's headline_methods), in registry order, for the
    pairs the token-probability table has no score of; a pair that table shows is not repeated."""
    from memaudit.stats.headline import other_scores_table, print_headline

    ci = {"auc_ci_low": 0.4, "auc_ci_high": 0.9, "contaminated": False}
    summary = pd.DataFrame([
        {"benchmark": "archive", "model": "(none)", "method": "blind_bag_of_words", "auc": 0.55, **ci},
        {"benchmark": "archive", "model": "gpt", "method": "cloze_person", "auc": 0.61, **ci},
        {"benchmark": "archive", "model": "gpt", "method": "cloze_rank", "auc": 0.72, **ci},
        {"benchmark": "archive", "model": "gpt", "method": "prefix_lcs_words", "auc": 0.66, **ci},
        {"benchmark": "archive", "model": "local", "method": "loss", "auc": 0.58, **ci},
        {"benchmark": "archive", "model": "local", "method": "prefix_lcs_words", "auc": 0.51, **ci},
        {"benchmark": "novels", "model": "gpt", "method": "decop-blackbox", "auc": 0.8, **ci},
    ])
    got = other_scores_table(summary, ["loss"])
    assert got.to_dict("records") == [
        {"benchmark": "archive", "model": "gpt", "contaminated": False, "method": "prefix_lcs_words",
         "auc": "0.660 [0.400, 0.900]"},
        {"benchmark": "archive", "model": "gpt", "contaminated": False, "method": "cloze_rank",
         "auc": "0.720 [0.400, 0.900]"},
        {"benchmark": "novels", "model": "gpt", "contaminated": False, "method": "decop-blackbox",
         "auc": "0.800 [0.400, 0.900]"}]
    assert other_scores_table(summary[summary["model"] != "gpt"], ["loss"]).empty
    (tmp_path / "s").mkdir()
    summary.to_csv(tmp_path / "s" / "metrics.csv", index=False)
    print_headline(tmp_path / "s" / "metrics.csv", ["loss"])
    out = capsys.readouterr().out
    assert "of the models scored by other probes only" in out
    assert "  archive   gpt         False       cloze_rank 0.720 [0.400, 0.900]\n" in out


def test_the_headline_marks_an_interval_of_fewer_than_ten_documents_a_class(tmp_path, capsys):
    """A dozen documents (DE-COP on an API model: 7 members, 5 non-members) printed `0.829 [0.571, 1.000]` as a
    95% interval like any other, where `memaudit stats` warns that below 10 documents a class the interval is
    unreliable (a percentile bootstrap of so few undercovers; 3 + 3 separated documents give [1.000, 1.000])."""
    from memaudit.stats.headline import FEW_DOCUMENTS_NOTE, auc_cells, print_headline

    def row(model, method, n_member, n_nonmember):
        return {"benchmark": "novels", "model": model, "contaminated": False, "method": method, "auc": 0.829,
                "auc_ci_low": 0.571, "auc_ci_high": 1.0, "n_member": n_member, "n_nonmember": n_nonmember}

    summary = pd.DataFrame([row("gpt", "decop-blackbox", 7, 5), row("local", "loss", 60, 9),
                            row("local2", "loss", 10, 10)])
    assert list(auc_cells(summary)) == ["0.829 [0.571, 1.000]*", "0.829 [0.571, 1.000]*", "0.829 [0.571, 1.000]"]
    (tmp_path / "s").mkdir()
    summary.to_csv(tmp_path / "s" / "metrics.csv", index=False)
    print_headline(tmp_path / "s" / "metrics.csv", ["loss"])
    out = capsys.readouterr().out
    assert FEW_DOCUMENTS_NOTE == ("* fewer than 10 members or non-members (n_member, n_nonmember in metrics.csv): "
                                  "no interval is a guide over so few (a percentile bootstrap of 3 + 3 separated "
                                  "documents gives [1.000, 1.000])")
    assert out.count(FEW_DOCUMENTS_NOTE) == 1 and out.index(FEW_DOCUMENTS_NOTE) < out.index("Tables:")
    summary[summary["model"] == "local2"].to_csv(tmp_path / "s" / "metrics.csv", index=False)
    print_headline(tmp_path / "s" / "metrics.csv", ["loss"])
    assert "fewer than 10 members" not in capsys.readouterr().out


def test_the_headline_names_benchmarks_the_text_alone_separates_and_the_models_above_that(tmp_path, capsys):
    """Where the blind baseline's interval lies above 0.5, a detector's AUC mixes memorisation with what the
    text says of the labels: the headline says so, naming the models whose interval clears the blind AUC
    (their best headline method); a benchmark whose blind interval holds 0.5 gets no line."""
    from memaudit.stats.headline import blind_baseline_note, print_headline

    def row(benchmark, model, method, auc, low, high):
        return {"benchmark": benchmark, "model": model, "method": method, "auc": auc, "auc_ci_low": low,
                "auc_ci_high": high, "contaminated": False}

    summary = pd.DataFrame([
        row("books", "(none)", "blind_bag_of_words", 0.80, 0.70, 0.90),
        row("books", "base", "loss", 0.82, 0.72, 0.92),          # within reach of the text alone
        row("books", "suspect", "loss", 0.95, 0.90, 0.99),       # clears it ...
        row("books", "suspect", "zlib", 0.97, 0.93, 1.00),       # ... best by AUC
        row("books", "suspect", "min_k_20pct", 0.99, 0.97, 1.0),  # not a headline method here
        row("books", "api", "cloze_rank", 0.91, 0.85, 0.97),      # a family's main score counts too
        row("news", "(none)", "blind_bag_of_words", 0.55, 0.45, 0.65),
        row("news", "suspect", "loss", 0.99, 0.97, 1.0),
    ])
    note = blind_baseline_note(summary, ["loss", "zlib"])
    assert note.splitlines()[-1] == ("  books: blind AUC 0.800 [0.700, 0.900]; above it: api (cloze_rank 0.910 "
                                     "[0.850, 0.970]), suspect (zlib 0.970 [0.930, 1.000])")
    assert len(note.splitlines()) == 4 and "news" not in note
    assert blind_baseline_note(summary[summary["benchmark"] == "news"], ["loss"]) == ""
    weaker = summary[~summary["model"].isin(["suspect", "api"])]
    assert blind_baseline_note(weaker, ["loss"]).endswith("books: blind AUC 0.800 [0.700, 0.900]; above it: no model")
    (tmp_path / "s").mkdir()
    summary.to_csv(tmp_path / "s" / "metrics.csv", index=False)
    print_headline(tmp_path / "s" / "metrics.csv", ["loss", "zlib"])
    assert note in capsys.readouterr().out


def test_the_headline_says_which_intervals_rest_on_whole_books_and_when_they_are_too_few():
    from memaudit.stats.headline import book_intervals_note

    nan = float("nan")
    summary = pd.DataFrame({"benchmark": ["books"] * 4 + ["qa", "novels"], "model": ["m", "m", "m", "base", "m", "m"],
                            "method": ["zlib", "loss", "b", "zlib", "loss", "loss"],
                            "ci_books": [6.0, 6.0, nan, 6.0, 70.0, nan], "books_pvalue": [0.2, 0.05, nan, 0.5, 0.01, nan]})
    assert book_intervals_note(summary, ["loss", "zlib"]).splitlines()[2:] == [
        "  books: 6 books, fewer than 20: no interval is a guide; read the rank test of the books' means "
        "(books_pvalue, one-sided; its smallest value, e.g. 0.05 for 3 books against 3, comes 1 time in 20 by "
        "chance alone)",
        "    base zlib: books_pvalue 0.500",
        "    m loss: books_pvalue 0.050",  # the first headline method a model has, not the smallest p
        "  qa: 70 books"]
    assert book_intervals_note(summary[summary["benchmark"] == "novels"]) == ""
    assert book_intervals_note(summary.drop(columns="ci_books")) == ""  # a run summarised before the column


def test_the_few_books_line_orders_the_books_by_the_models_mean_score(tmp_path):
    """Below 20 books the headline lists a model's books by its mean score over each book's documents,
    members starred: the ranking the rank test rests on, read from the run's own per-document scores."""
    import json

    from memaudit.stats.headline import book_intervals_note

    results = tmp_path / "results"
    (results / "datasets" / "books").mkdir(parents=True)
    docs = [("a/1", "a", 1), ("a/2", "a", 1), ("b/1", "b", 0), ("c/1", "c", 1), ("d/1", "d", 0)]
    (results / "datasets" / "books" / "documents.jsonl").write_text("".join(
        json.dumps({"doc_id": d, "text": "x", "meta": {"book": b, "label": y}}) + "\n" for d, b, y in docs))
    (results / "scores" / "books" / "m").mkdir(parents=True)
    pd.DataFrame({"doc_id": [d for d, _, _ in docs] * 2, "label": [y for _, _, y in docs] * 2,
                  "method": ["loss"] * 5 + ["zlib"] * 5,
                  "score": [0.9, 0.1, 0.6, 0.2, 0.8] + [0.0] * 5}).to_csv(
        results / "scores" / "books" / "m" / "token_prob_documents.csv", index=False)
    summary = pd.DataFrame({"benchmark": ["books"], "model": ["m"], "method": ["loss"], "ci_books": [4.0],
                            "books_pvalue": [0.5]})
    note = book_intervals_note(summary, ["loss"], results / "summary")
    # d 0.8, b 0.6, a (0.9 + 0.1) / 2 = 0.5, c 0.2
    assert note.splitlines()[-1] == "    m loss: books_pvalue 0.500; by mean score (* member): d, b, a*, c*"
    assert book_intervals_note(summary, ["loss"]).splitlines()[-1] == "    m loss: books_pvalue 0.500"


def test_a_books_pvalue_below_a_thousandth_is_not_printed_as_zero():
    """From 14 books on, the rank test of the books' means goes below 0.001: 7 against 7 have 3,432 splits
    (smallest p 1/3,432), 8 against 8 more than 9,999, of which it draws 9,999 (smallest p 1/10,000). The
    few-books line printed such a p-value as `books_pvalue 0.000`, a p-value of 0, as metrics.md did before
    it printed p-values as 1.00e-04."""
    from memaudit.stats.headline import book_intervals_note

    summary = pd.DataFrame({"benchmark": ["books"] * 2, "model": ["m", "n"], "method": ["loss"] * 2,
                            "ci_books": [16.0] * 2, "books_pvalue": [1e-4, 0.0012]})
    assert book_intervals_note(summary, ["loss"]).splitlines()[-2:] == ["    m loss: books_pvalue 1.0e-04",
                                                                        "    n loss: books_pvalue 0.001"]


def test_a_printed_pvalue_is_never_zero_and_keeps_its_value():
    from hypothesis import given
    from hypothesis import strategies as st

    from memaudit.stats.headline import pvalue_text

    @given(st.floats(min_value=5e-324, max_value=1.0))
    def check(p):
        shown = float(pvalue_text(p))
        assert shown > 0
        assert abs(shown - p) <= (0.0005 if p >= 0.001 else 0.05 * p), (p, pvalue_text(p))

    check()
    assert [pvalue_text(p) for p in (1.0, 0.05, 0.001, 0.00099, 1e-4, 2.5e-30)] == [
        "1.000", "0.050", "0.001", "9.9e-04", "1.0e-04", "2.5e-30"]


def test_the_cloze_headline_says_how_many_black_box_replies_could_be_read():
    """A model that ignores the cloze prompt (every reply without <word> tags) scores AUC 0.5 on every
    text; the headline's replies table says so beside its precision, for black-box rows only."""
    from memaudit.probes.cloze.headline import replies

    base = {"benchmark": "archive", "n": 12, "n_member": 6, "precision": 0.0, "recall": 0.0, "fbeta": 0.0}
    table = pd.DataFrame([
        {**base, "model": "gpt", "mode": "blackbox", "method": "majority"},  # a baseline row: no replies
        {**base, "model": "gpt", "mode": "blackbox", "method": "cloze_rank", "n_texts": 12, "n_tokens": 53,
         "n_invalid": 50, "n_refusal": 1, "n_error": 0},
        {**base, "model": "tiny", "mode": "logit", "method": "cloze_rank", "n_texts": 12, "n_tokens": 53,
         "n_invalid": 0, "n_refusal": 0, "n_error": 0},
    ])
    assert replies(table).to_dict("records") == [
        {"benchmark": "archive", "model": "gpt", "tokens": "cloze_rank", "texts": 12, "words": 53, "answered": 2,
         "refused": 1, "invalid": 50, "errors": 0, "precision": 0.0, "recall": 0.0, "fbeta": 0.0}]


def test_the_prefix_headline_lists_the_models_that_refused(tmp_path):
    """Prefix probing's section: one row per (benchmark, model) of metrics.csv with a refusal or an invalid
    reply in its prefix_outcomes.json (found from the names, not parsed from paths); none where every reply
    was a continuation."""
    from memaudit.probes.prefix.headline import headline

    summary = tmp_path / "results" / "summary"
    summary.mkdir(parents=True)
    pd.DataFrame([{"benchmark": "archive", "model": "claude", "method": "prefix_lcs_words", "auc": 0.6},
                  {"benchmark": "news", "model": "tiny", "method": "prefix_rougeL", "auc": 0.8},
                  {"benchmark": "news", "model": "tiny", "method": "loss", "auc": 0.9}]).to_csv(
        summary / "metrics.csv", index=False)
    outcomes = {("archive", "claude"): {"n_items": 40, "ok": 9, "refusal": 30, "invalid": 1, "error": 0,
                                        "n_from_cache": 40},
                ("news", "tiny"): {"n_items": 12, "ok": 12, "refusal": 0, "invalid": 0, "error": 0, "n_from_cache": 0},
                ("other", "unscored"): {"n_items": 5, "ok": 0, "refusal": 5, "invalid": 0, "error": 0}}
    for (b, m), o in outcomes.items():
        (tmp_path / "results" / "scores" / b / m).mkdir(parents=True)
        (tmp_path / "results" / "scores" / b / m / "prefix_outcomes.json").write_text(json.dumps(o))
    [text] = headline(summary, None)
    assert text.startswith("Prefix probing, refusals and invalid replies")
    assert text.endswith("benchmark  model  items  refused  invalid  from_cache\n  archive claude     40       30"
                         "        1          40")
    (tmp_path / "results" / "scores" / "archive" / "claude" / "prefix_outcomes.json").unlink()
    assert headline(summary, None) == [""]


def test_the_decop_headline_flags_answers_that_favour_one_letter(tmp_path):
    """A model that answers A to 3 of 4 evaluated questions is listed with each letter's share and its
    accuracy; a balanced one is not; likelihood mode (no letter asked) is never; calibration questions
    and failed replies do not count."""
    from memaudit.probes.decop.headline import letter_bias, letter_bias_section

    def answers(preds, role="evaluate", status="ok"):
        return [{"role": role, "status": status, "pred": p, "correct": i % 4} for i, p in enumerate(preds)]

    biased = pd.DataFrame(answers([0, 0, 0, 1]) + answers([3, 3], role="calibrate") + answers([2], status="invalid"))
    assert letter_bias(biased) == {"A": 0.75, "B": 0.25, "C": 0.0, "D": 0.0, "answers": 4, "accuracy": 0.25}
    summary = tmp_path / "results" / "summary"
    summary.mkdir(parents=True)
    pd.DataFrame([{"benchmark": "novels", "model": "gpt", "method": "decop-blackbox"},
                  {"benchmark": "novels", "model": "fair", "method": "decop-logit"},
                  {"benchmark": "novels", "model": "fair", "method": "decop-logit-calibrated"},
                  {"benchmark": "novels", "model": "tiny", "method": "decop-likelihood"}]).to_csv(
        summary / "metrics.csv", index=False)
    for model, mode, table in (("gpt", "blackbox", biased), ("fair", "logit", pd.DataFrame(answers([0, 1, 2, 3]))),
                               ("tiny", "likelihood", pd.DataFrame(answers([0, 0, 0, 0])))):
        (tmp_path / "results" / "scores" / "novels" / model).mkdir(parents=True)
        table.to_csv(tmp_path / "results" / "scores" / "novels" / model / f"decop_{mode}_answers.csv", index=False)
    text = letter_bias_section(summary)
    assert text.startswith("DE-COP answers that favour one letter")
    assert text.endswith("benchmark model     mode    A    B   C   D  answers  accuracy\n"
                         "   novels   gpt blackbox 0.75 0.25 0.0 0.0        4      0.25")
    assert letter_bias_section(summary, min_share=0.8) == ""


def test_the_decop_length_cue_shows_the_benchmarks_this_run_probed_with_decop(tmp_path):
    """decop_<benchmark>.csv stays in results/summary when the next config runs DE-COP elsewhere or not on
    that benchmark: its length cue is another run's, and the headline shows the benchmarks benchmarks.csv says
    DE-COP ran on (it showed every decop_*.csv); a run without that table (older) shows them all."""
    from memaudit.probes.decop.headline import headline

    summary = tmp_path / "summary"
    summary.mkdir()
    for benchmark, accuracy in (("novels", 0.3), ("news", 0.9)):
        pd.DataFrame([{"model": "(none)", "method": "decop-longest-option", "length": 64, "n_documents": 12,
                       "auc": 0.5, "accuracy_members": accuracy, "accuracy_nonmembers": accuracy}]).to_csv(
            summary / f"decop_{benchmark}.csv", index=False)
    pd.DataFrame([{"benchmark": "news", "labels": "random", "null_control": True, "families": "token_prob"},
                  {"benchmark": "novels", "labels": "random", "null_control": True,
                   "families": "token_prob;decop"}]).to_csv(summary / "benchmarks.csv", index=False)
    (cue, _) = headline(summary, None)
    assert cue.splitlines()[1:] == ["  novels (64 tokens): members 0.30, non-members 0.30, AUC 0.50 (12 documents)"]
    (summary / "benchmarks.csv").unlink()
    assert len(headline(summary, None)[0].splitlines()) == 4  # both, and the min_length pointer (0.9)


def test_demo_expectations_for_decop_likelihood():
    """DE-COP's likelihood mode (its mean verbatim probability): >= 0.8 on a contaminated model; on a
    base model the AUC must fall in the null range of its documents, as the loss's (12 + 12: [0.190,
    0.810]; 0.3 and 0.7 pass whatever their bootstrap intervals, 0.85 fails). Other DE-COP scores (here
    the accuracy) are reported, not checked."""
    from memaudit.stats.headline import demo_expectations

    row = {"benchmark": "novels", "contaminated": False, "method": "decop-likelihood-prob", "n_member": 12,
           "n_nonmember": 12}
    summary = pd.DataFrame([
        {**row, "model": "tuned", "contaminated": True, "auc": 0.85, "auc_ci_low": 0.7, "auc_ci_high": 0.95},
        {**row, "model": "weak", "contaminated": True, "auc": 0.75, "auc_ci_low": 0.6, "auc_ci_high": 0.9},
        {**row, "model": "base", "auc": 0.3, "auc_ci_low": 0.1, "auc_ci_high": 0.55},
        {**row, "model": "base2", "auc": 0.7, "auc_ci_low": 0.58, "auc_ci_high": 0.82},
        {**row, "model": "base3", "auc": 0.85, "auc_ci_low": 0.7, "auc_ci_high": 0.95},
        {**row, "model": "base", "method": "decop-likelihood", "auc": 0.9, "auc_ci_low": 0.8, "auc_ci_high": 1.0},
    ])
    models = pd.DataFrame({"model": ["base", "base2", "base3", "tuned", "weak"],
                           "base": [None, None, None, "base", "base"]})
    got = demo_expectations(summary, models)
    assert [(r.model, r.method, r.expected, r.ok) for r in got.itertuples()] == [
        ("tuned", "decop-likelihood-prob", ">= 0.8", True), ("weak", "decop-likelihood-prob", ">= 0.8", False),
        ("base", "decop-likelihood-prob", "in [0.190, 0.810]", True),
        ("base2", "decop-likelihood-prob", "in [0.190, 0.810]", True),
        ("base3", "decop-likelihood-prob", "in [0.190, 0.810]", False)]


def test_a_null_check_of_too_few_documents_to_fail_is_reported_not_counted_as_holding():
    """The null range of 3 + 1 documents is [-0.460, 1.460] (the ci run's DE-COP base model): no AUC can fall
    outside it, and the check was printed with that range and counted as holding. Where the range holds
    every AUC from 0 to 1 the row says so, without a verdict; 5 + 5 documents can fail (AUC 0 or 1)."""
    from memaudit.stats.headline import demo_expectations, section

    row = {"benchmark": "novels", "contaminated": False, "method": "decop-likelihood-prob", "auc": 0.667}
    summary = pd.DataFrame([{**row, "model": "base", "n_member": 3, "n_nonmember": 1},
                            {**row, "model": "base2", "n_member": 5, "n_nonmember": 5, "auc": 1.0}])
    models = pd.DataFrame({"model": ["base", "base2"], "base": [None, None]})
    got = demo_expectations(summary, models)
    assert [(r.model, r.expected, r.ok) for r in got.itertuples()] == [
        ("base", "no check: 3 + 1 documents, too few (any AUC lies in the null range)", ""),
        ("base2", "in [0.006, 0.994]", False)]
    block = section("Ground truth", got)
    assert (block.held, block.checked) == (0, 1)


def test_a_checked_row_without_members_or_non_members_says_so():
    """A method whose documents hold one class has no AUC (nan): every checked row, the contaminated
    model's and DE-COP's on a base model too, fails as "members and non-members", not as an AUC or an
    interval it cannot have."""
    from memaudit.stats.headline import demo_expectations

    nan = float("nan")
    one_class = {"benchmark": "novels", "auc": nan, "auc_ci_low": nan, "auc_ci_high": nan, "n_member": 0,
                 "n_nonmember": 12}
    summary = pd.DataFrame([
        {**one_class, "model": "tuned", "contaminated": True, "method": "loss"},
        {**one_class, "model": "tuned", "contaminated": True, "method": "decop-likelihood-prob"},
        {**one_class, "model": "base", "contaminated": False, "method": "decop-likelihood-prob"},
        {**one_class, "model": "base", "contaminated": False, "method": "loss", "n_member": 12, "n_nonmember": 0},
    ])
    models = pd.DataFrame({"model": ["base", "tuned"], "base": [None, "base"]})
    got = demo_expectations(summary, models)
    assert [(r.model, r.method, r.expected, r.ok) for r in got.itertuples()] == [
        ("tuned", "loss", "members and non-members", False),
        ("tuned", "decop-likelihood-prob", "members and non-members", False),
        ("base", "decop-likelihood-prob", "members and non-members", False),
        ("base", "loss", "members and non-members", False)]


def test_cloze_expectations_check_only_models_fine_tuned_on_the_benchmark():
    from memaudit.probes.cloze.headline import expectations as cloze_expectations

    row = {"benchmark": "qa", "model": "tuned", "base": "base", "mode": "logit", "measure": "prob",
           "contaminated_on_benchmark": True, "difference": 0.2}
    differences = pd.DataFrame([
        {**row, "group": "member", "ci_low": 0.1, "ci_high": 0.3},
        {**row, "group": "nonmember", "ci_low": 0.01, "ci_high": 0.2},
        {**row, "measure": "rank", "group": "member", "ci_low": 0.0, "ci_high": 0.3},
        {**row, "measure": "rank", "group": "nonmember", "ci_low": -0.1, "ci_high": 0.1},
        {**row, "model": "other", "contaminated_on_benchmark": False, "group": "member", "ci_low": -1, "ci_high": 1},
        {**row, "group": "member_minus_nonmember", "ci_low": 0.05, "ci_high": 0.2},
    ])
    got = cloze_expectations(differences)
    assert [(r.model, r.tokens, r.texts, r.expected, r.ok) for r in got.itertuples()] == [
        ("tuned", "prob", "member", "CI above 0", True), ("tuned", "prob", "nonmember", "CI holds 0", False),
        ("tuned", "rank", "member", "CI above 0", False), ("tuned", "rank", "nonmember", "CI holds 0", True),
        ("tuned", "prob", "member_minus_nonmember", "CI above 0", True),
        ("tuned", "rank", "member_minus_nonmember", "not evaluated: no member_minus_nonmember row (a group without "
                                                    "masked words)", False)]


def test_a_paired_check_whose_group_has_no_row_is_counted_not_evaluated():
    """A group with nothing of its own to pair has no row in the differences table (no member text with a
    masked word of the type, no member book that gave an item), and neither has the member gain beyond the
    non-members: those checks dropped out and the rest read "1 of 1 hold". Each is listed as not evaluated."""
    from memaudit.probes.cloze.headline import expectations as cloze_expectations
    from memaudit.probes.copybench.headline import expectations as copybench_expectations
    from memaudit.stats.headline import section, tally

    row = {"benchmark": "qa", "model": "tuned", "base": "base", "mode": "logit", "measure": "person",
           "contaminated_on_benchmark": True, "difference": 0.0, "group": "nonmember", "ci_low": 0.0, "ci_high": 0.0}
    got = cloze_expectations(pd.DataFrame([row]))
    assert [(r.tokens, r.texts, r.expected, r.ok) for r in got.itertuples()] == [
        ("person", "nonmember", "CI holds 0", True),
        ("person", "member", "not evaluated: no member row (a group without masked words)", False),
        ("person", "member_minus_nonmember", "not evaluated: no member_minus_nonmember row (a group without masked "
                                             "words)", False)]
    assert tally([section("Cloze probes ground truth", got)]) == (
        "Ground-truth checks: 1 of 3 hold; not evaluated (no row to check in its table): 2 in Cloze probes ground truth")
    row = {"benchmark": "books", "model": "tuned", "base": "base", "decoding": "greedy", "difference": 0.0,
           "score": "copybench_characters", "group": "nonmember", "ci_low": 0.0, "ci_high": 0.0}
    got = copybench_expectations(pd.DataFrame([row, {**row, "decoding": "memfree"}]))
    assert [(r.score, r.books, r.expected, r.ok) for r in got.itertuples()] == [
        ("copybench_characters", "nonmember", "CI holds 0", True),
        ("copybench_characters", "member", "not evaluated: no member row (a group without items)", False),
        ("copybench_characters", "member_minus_nonmember",
         "not evaluated: no member_minus_nonmember row (a group without items)", False)]


def test_copybench_expectations_want_copying_on_member_books_only():
    from memaudit.probes.copybench.headline import expectations as copybench_expectations
    from memaudit.probes.copybench.headline import reported

    row = {"benchmark": "books", "model": "tuned", "base": "base", "decoding": "greedy", "difference": 0.1}
    differences = pd.DataFrame([
        {**row, "score": "copybench_rougeL_excess", "group": "member", "ci_low": 0.05, "ci_high": 0.2},
        {**row, "score": "copybench_rougeL_excess", "group": "nonmember", "ci_low": -0.02, "ci_high": 0.04},
        {**row, "score": "copybench_characters", "group": "member", "ci_low": 0.0, "ci_high": 0.3},
        {**row, "score": "copybench_characters", "group": "nonmember", "ci_low": 0.01, "ci_high": 0.3},
        {**row, "score": "copybench_events", "group": "member", "ci_low": 0.5, "ci_high": 1.0},  # not checked
        {**row, "score": "copybench_rougeL_excess", "group": "member", "decoding": "memfree", "ci_low": -1,
         "ci_high": 1},
        {**row, "score": "copybench_rougeL_excess", "group": "member_minus_nonmember", "ci_low": 0.01, "ci_high": 0.2},
        {**row, "score": "copybench_characters", "group": "member_minus_nonmember", "ci_low": -0.1, "ci_high": 0.2},
        {**row, "score": "copybench_rougeL_chance", "group": "nonmember", "ci_low": 0.05, "ci_high": 0.1},  # not checked
        # the mean ROUGE-L rises with the author's style on unseen books; the paper's rate at ROUGE-L >= 0.8:
        # both reported, no verdict
        {**row, "score": "copybench_rougeL", "group": "nonmember", "ci_low": 0.05, "ci_high": 0.09},
        {**row, "score": "copybench_rougeL_copy", "group": "member", "ci_low": 0.0, "ci_high": 0.17},
    ])
    got = copybench_expectations(differences)
    assert [(r.score, r.books, r.expected, r.ok) for r in got.itertuples()] == [
        ("copybench_rougeL_excess", "member", "CI above 0", True),
        ("copybench_rougeL_excess", "nonmember", "CI holds 0", True),
        ("copybench_characters", "member", "CI above 0", False),
        ("copybench_characters", "nonmember", "CI holds 0", False),
        ("copybench_rougeL_excess", "member_minus_nonmember", "CI above 0", True),
        ("copybench_characters", "member_minus_nonmember", "CI above 0", False)]
    shown = reported(differences)
    assert [(r["score"], r["books"], r["ci"]) for r in shown.to_dict("records")] == [
        ("copybench_rougeL", "nonmember", "[0.050, 0.090]"), ("copybench_rougeL_copy", "member", "[0.000, 0.170]")]
    assert "ok" not in shown.columns and "expected" not in shown.columns


def test_the_dvc_stage_lists_every_local_input_a_config_names_and_nothing_else():
    from memaudit.dvc_stage import CORE_DEPS, config_inputs, stage_deps

    config = {
        "benchmarks": {
            "mine": {"sources": ["user_books"], "labels": "/data/labels.csv",
                     "source_options": {"user_books": {"directory": "/data/books"}}},
            "demo_books": {"sources": ["user_books", "austen"]},  # the default folder, already a core dep
            "cb": {"published": {"format": "copybench", "path": "/data/copybench", "labels": "/data/titles.csv"}},
            "quiz": {"published": {"format": "qa", "path": "data/quiz.jsonl", "label_key": "seen"}},
            "hub": {"published": {"format": "booktection", "hf": "avduarte333/BookTection"}},
            "novels": {"sources": ["austen"]},
        },
        "pretrain": {"sources": ["user_books"], "source_options": {"user_books": {"directory": "/data/pool"}}},
        "models": {"suspect": {"source": {"path": "/models/suspect"}}, "hub": {"source": {"hub_id": "org/m"}},
                   "api": {"backend": "openai", "api": {"model_id": "gpt"}},
                   "again": {"source": {"path": "/models/suspect"}}},
        "probes": {"copybench": {"prompt_dir": "/data/prompts", "memfree_rejection_file": "/data/corpus.json",
                                 "extractor": {"model": "api", "summaries": "/data/summaries.jsonl"}}},
    }
    # the paths check-config checks (config.local_inputs: benchmarks by name), then the default books folder
    assert config_inputs(config) == [
        "/data/copybench", "/data/titles.csv", "/data/labels.csv", "/data/books", "data/quiz.jsonl", "/data/pool",
        "/models/suspect", "/data/prompts", "/data/corpus.json", "/data/summaries.jsonl", "resources/books"]
    deps = stage_deps(config, "audit.yaml")
    n = len(CORE_DEPS) + 1
    assert deps[:n] == [*CORE_DEPS, "audit.yaml"] and "resources/books" not in deps[n:]
    assert "/data/summaries.jsonl" in deps  # the summaries CopyBench's events come from (missed before)
    assert "config/config.yaml" not in deps  # a --configfile replaces it: no input of this run
    assert len(deps) == len(CORE_DEPS) + 1 + 10


def test_the_dvc_stage_depends_on_the_config_it_runs_not_also_the_demos(tmp_path):
    """`snakemake --configfile mine.yaml` never reads config/config.yaml (the Snakefile), yet the stage kept it
    as a dependency: an edit of the demo config made an audit's stage changed for DVC. The config a stage
    runs on takes the demo config's place, the other entries and their comments kept."""
    import shutil

    import yaml

    from memaudit.dvc_stage import CORE_DEPS, write_stage

    shipped = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["memaudit"]
    assert shipped["deps"] == [*CORE_DEPS, "config/config.yaml"]  # the demo's stage: the demo config
    shutil.copy2(ROOT / "dvc.yaml", tmp_path / "dvc.yaml")
    deps = write_stage(tmp_path / "dvc.yaml", "config/ci.yaml", {"benchmarks": {}, "models": {}}, cores=2)
    text = (tmp_path / "dvc.yaml").read_text()
    assert deps == yaml.safe_load(text)["stages"]["memaudit"]["deps"] == [
        "Snakefile", "workflow", "src/memaudit", "resources/books", "config/ci.yaml"]
    assert "# the user_books source's default folder" in text and "config/config.yaml" not in text
    assert write_stage(tmp_path / "dvc.yaml", "config/config.yaml", {"benchmarks": {}, "models": {}}) == shipped["deps"]


def test_a_closed_pipe_ends_the_cli_quietly(tmp_path):
    """`memaudit -h | head -3`: the reader gone, Python printed a BrokenPipeError traceback (or "Exception
    ignored ... BrokenPipeError" at exit); a CLI tool stops quietly, as when SIGPIPE ends it."""
    import subprocess
    import sys

    pd.DataFrame([{"benchmark": "b", "model": "m1", "contaminated": True, "method": "loss", "auc": 0.93,
                   "auc_ci_low": 0.88, "auc_ci_high": 0.97}] * 2000).to_csv(tmp_path / "metrics.csv", index=False)
    memaudit = str(Path(sys.executable).with_name("memaudit"))
    for argv in (["-h"], ["headline", "--summary", str(tmp_path / "metrics.csv")]):
        read, write = os.pipe()
        os.close(read)  # the reader has gone before the first line is written
        proc = subprocess.run([memaudit, *argv], stdout=write, stderr=subprocess.PIPE, text=True)
        os.close(write)
        assert (proc.returncode, proc.stderr) == (141, ""), argv


def test_a_job_stopped_by_bad_input_prints_its_one_line_and_no_traceback(tmp_path):
    """A script's uncaught MemauditError (workflow_support.log_uncaught_errors, which every script's
    start() installs) is its one line on the console and in the job's log, exit status 1; any other
    error keeps its traceback."""
    import subprocess
    import sys

    def run(error: str) -> subprocess.CompletedProcess:
        code = ("import logging, sys\n"
                "from memaudit.workflow_support import log_uncaught_errors\n"
                "from memaudit.errors import InputError\n"
                "log = logging.getLogger('job'); log.addHandler(logging.StreamHandler(sys.stderr))\n"
                f"log.addHandler(logging.FileHandler({str(tmp_path / 'job.log')!r}))\n"
                "log_uncaught_errors(log)\n"
                f"raise {error}\n")
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)

    proc = run("InputError(\"labels.csv, line 3, column label: 'yes' is not 0 or 1\")")
    line = "InputError: labels.csv, line 3, column label: 'yes' is not 0 or 1\n"
    assert (proc.returncode, proc.stderr) == (1, line)
    assert (tmp_path / "job.log").read_text() == line
    proc = run("ValueError('a bug')")
    assert proc.returncode == 1 and "Traceback (most recent call last)" in proc.stderr and "ValueError: a bug" in proc.stderr
    # a traceback quoting a key shows none of it, on stderr (SLURM's log file) or in the job's log
    proc = run("ValueError('rejected key sk-proj-Ab3Ab3Ab3Ab3Ab3Ab3Ab3Ab3 at https://u:pw@gw.example.com/v1')")
    assert proc.returncode == 1 and proc.stderr.count("ValueError: rejected key sk-*** at https://***@gw.example.com/v1\n") == 2
    assert "Ab3Ab3" not in proc.stderr + (tmp_path / "job.log").read_text()
    assert "Traceback (most recent call last)" in (tmp_path / "job.log").read_text()


def test_the_metrics_caption_says_where_the_interval_and_t_test_are_over_books():
    """Labels given per book: the metric table's interval resamples whole books and the t-test compares the
    books' means (compute_metrics' groups); the caption said "over the member and non-member documents"."""
    from types import SimpleNamespace

    import jinja2

    template = jinja2.Template((ROOT / "workflow" / "report" / "metrics.rst").read_text())

    def caption(per_book):
        job = SimpleNamespace(wildcards=SimpleNamespace(benchmark="books", model="m1"),
                              params=SimpleNamespace(stats={"n_boot_small": 10, "n_boot_ci": 1000}, per_book=per_book))
        return " ".join(template.render(snakemake=job).split())

    by_document, by_book = caption(False), caption(True)
    assert "the 1000-resample percentile 95% interval, TPR at 1% and 0.1% FPR and Welch's t-test p-value, " \
           "over the member and non-member documents." in by_document and "whole books" not in by_document
    assert ("the 1000-resample percentile 95% interval, over whole books in a row whose ``ci_books`` is set (the "
            "labels are given per book; it counts the books; a row without it resampled documents), TPR at 1% and "
            "0.1% FPR over the documents, and Welch's t-test p-value, of the books' mean scores where ``ci_books`` "
            "is set, beside ``books_pvalue``, a one-sided rank test of the books' means.") in by_book


def test_report_labels_call_a_table_a_table_and_a_figure_a_figure():
    """Every ``report(...)`` of the rule files whose labels are written out: a CSV is never labelled
    ``figure`` nor a PNG ``table`` (copybench.csv, copybench_differences.csv and decop_<benchmark>.csv were
    "figure"s in the report)."""
    import ast
    import re

    declared = {}
    for rules in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        for call in rules.read_text().split("report(")[1:]:
            path = re.match(r'\s*"([^"]+)"', call).group(1)
            labels = re.search(r"labels=(.*),\n", call).group(1)
            if labels.startswith("{"):  # not a helper's (figure_labels, metrics_labels)
                declared[path] = set(ast.literal_eval(labels)) & {"table", "figure"}
    wrong = {p: k for p, k in declared.items() if k - ({"table"} if p.endswith(".csv") else {"figure"})}
    assert wrong == {}
    assert declared["results/summary/copybench.csv"] == {"table"} and len(declared) >= 30


def test_a_selection_check_at_a_q_no_calibration_set_can_resolve_is_not_evaluated_not_passed():
    """Four calibration non-members make every conformal p-value at least 1/5: at q = 0.1 BH names nothing
    whatever the scores, so "FDR <= 0.12" on the contaminated model and "names nothing" on the base model
    held by arithmetic, not by the detector (they read True). They are listed as not evaluated, saying why;
    q = 0.2 and 0.3, which BH can resolve, are checked as before."""
    from memaudit.stats.headline import selection_expectations

    models = pd.DataFrame({"model": ["m0", "m1"], "base": ["", "m0"], "contaminated_on": ["", "b"]})
    row = {"benchmark": "b", "method": "loss", "n_splits": 20, "n_calibration": 4, "n_test": 34,
           "n_test_member": 30, "min_q": 0.2, "fdr_se": 0.0, "power": 0.0, "power_se": 0.0, "mean_selected": 0.0}
    grid = pd.DataFrame([{**row, "model": model, "contaminated": model == "m1", "q": q, "fdr": 0.0}
                         for model in ("m0", "m1") for q in (0.1, 0.2, 0.3)])
    checks = selection_expectations(grid, models)
    why = "not evaluated: q = 0.1 is below 1/(n_calibration + 1) = 0.2 (4 calibration non-members): nothing can be named"
    assert [(r.model, r.q, r.expected, r.ok) for r in checks.itertuples()] == [
        ("m0", 0.1, why, False), ("m1", 0.1, why, False),
        ("m1", 0.2, "fdr <= 0.22", True), ("m1", 0.3, "fdr <= 0.32", True)]


def test_base_models_of_a_models_table_without_any_fine_tune(recwarn):
    """models.csv of a run without fine-tunes has an empty ``base`` column, which pandas reads as floats:
    every model is a base model, without pandas' warning that fillna("") on floats will raise."""
    import io

    from memaudit.stats.headline import base_models

    assert base_models(pd.read_csv(io.StringIO("model,base\na,\nb,\n"))) == {"a", "b"}
    assert base_models(pd.read_csv(io.StringIO("model,base\na,\nb,a\n"))) == {"a"}
    assert [str(w.message) for w in recwarn if "fill" in str(w.message)] == []
