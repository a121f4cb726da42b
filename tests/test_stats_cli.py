"""``memaudit stats`` on real shapes and broken inputs: physical line numbers, one-line errors,
unscorable groups, few documents, .xlsx workbooks (DE-COP's per-book results, Table 2), fuzzing."""

from __future__ import annotations

import contextlib
import csv
import io
import re
import zipfile
from collections import Counter
from pathlib import Path
from xml.sax.saxutils import escape

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memaudit.stats.cli import stats_main
from memaudit.stats.metrics import METRIC_COLUMNS, bootstrap_auc, compute_metrics

ROOT = Path(__file__).resolve().parents[1]
# The authors' per-book results (avduarte333/DE-COP_Method, BookTection-128_Results/DE-COP/), fetched
# into the git-ignored resources/published/ (docs/statistics.md says how); never committed.
DECOP_RESULTS = ROOT / "resources/published/DE-COP_Method/2_results_DE-COP.xlsx"
# DE-COP (Duarte et al., 2024) Table 2, BookTection, DE-COP's AUC for the open models.
TABLE_2 = {"LLaMA-2_13B_Acc": 0.900, "LLaMA-2_70B_Acc": 0.972, "Mistral-7B_Acc": 0.901, "Mixtral-8x7B_Acc": 0.968}
FAST = ["--n-boot", "3", "--n-boot-ci", "40"]
ACCOUNTING = re.compile(r"^read .*: (\d+) record\(s\) .*; (\d+) scored(?:, (\d+) in skipped groups)?$", re.M)


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = stats_main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def _one_line_error(err: str, path: Path) -> str:
    assert err.count("\n") == 1 and err.startswith(f"memaudit stats: error: {path}"), err[:300]
    return err


# ---------------------------------------------------------------- line numbers and messages

def test_errors_name_the_physical_line_after_blank_lines_and_multi_line_fields(tmp_path):
    # line 1 header; 2 record; 3 blank; 4-6 a record whose quoted group spans three lines;
    # 7 blank; 8 the bad score. The record index + 2 would say line 5.
    src = tmp_path / "docs.csv"
    src.write_text('score,label,method\r\n0.1,1,a\r\n\r\n0.2,0,"x\r\ny\r\nz"\r\n\r\nnan,1,a\r\n', newline="")
    rc, _, err = _run("--input", str(src))
    assert rc == 2
    assert _one_line_error(err, src) == (f"memaudit stats: error: {src}, line 8: column 'score' is not a finite "
                                         f"number ('nan') (1 such row(s) in all)\n")


def test_an_output_that_is_the_input_is_refused_and_the_scores_kept(tmp_path):
    """``--output s.csv --input s.csv`` (or a link to it) replaced the scores with their metrics, exit 0."""
    src = tmp_path / "s.csv"
    scores = "score,label\n0.9,1\n0.1,0\n0.5,1\n0.3,0\n"
    src.write_text(scores)
    (tmp_path / "link.csv").symlink_to(src)
    for out in (src, tmp_path / "link.csv"):
        rc, stdout, err = _run("--input", str(src), "--output", str(out), *FAST)
        assert (rc, stdout) == (2, "")
        assert _one_line_error(err, out) == (f"memaudit stats: error: {out}: --output names the file --input reads, "
                                             f"which writing would destroy; write elsewhere\n")
    assert src.read_text() == scores
    assert _run("--input", str(src), "--output", str(tmp_path / "m.csv"), *FAST)[0] == 0


def test_messages_show_plain_values_not_numpy_reprs(tmp_path):
    src = tmp_path / "docs.csv"
    src.write_text("score,label\n1e999,1\n0.5,0\n")
    rc, _, err = _run("--input", str(src))
    assert rc == 2 and "('1e999')" in err and "np." not in err
    src.write_text("score,label\n0.1,1\n0.5,2\n0.3,0\n")
    rc, _, err = _run("--input", str(src))
    assert rc == 2 and "3 distinct values ('0', '1', '2'...)" in err and "np." not in err


# ---------------------------------------------------------------- unscorable groups

UNSCORABLE = "score,label,method\n0.9,1,a\n0.1,0,a\n0.8,1,b\n0.7,1,b\n0.6,1,\n0.2,0,c\n0.7,1,c\n0.4,0,c\n"


def test_a_group_with_one_class_or_an_empty_value_is_an_error_naming_it(tmp_path):
    src = tmp_path / "docs.csv"
    src.write_text(UNSCORABLE)
    rc, out, err = _run("--input", str(src), "--group-col", "method")
    assert rc == 2 and out == ""
    # Groups in order '', 'a', 'b', 'c': the empty value is the first that cannot be scored.
    assert _one_line_error(err, src) == (
        f"memaudit stats: error: {src}: group method='' (1 record(s), line 6) cannot be scored: empty "
        f"'method' value; --skip-unscorable-groups leaves such groups out\n")
    src.write_text(UNSCORABLE.replace("0.6,1,\n", ""))
    rc, _, err = _run("--input", str(src), "--group-col", "method")
    assert rc == 2 and "group method='b' (2 record(s), lines 4, 5) cannot be scored: members only (2)" in err


def test_skip_unscorable_groups_scores_the_rest_and_says_what_it_left_out(tmp_path):
    src, out_csv = tmp_path / "docs.csv", tmp_path / "m.csv"
    src.write_text(UNSCORABLE)
    rc, _, err = _run("--input", str(src), "--group-col", "method", "--skip-unscorable-groups",
                      "--output", str(out_csv), *FAST)
    assert rc == 0
    table = pd.read_csv(out_csv)
    assert table["method"].tolist() == ["a", "c"]
    # c: members 0.7; non-members 0.2, 0.4 -> AUC 1; a: 0.9 vs 0.1 -> 1.
    assert table["auc"].tolist() == [1.0, 1.0]
    expected = compute_metrics([0.2, 0.7, 0.4], [0, 1, 0], n_boot_small=3, n_boot_ci=40, seed=0)
    for key, value in expected.items():
        assert table.iloc[1][key] == pytest.approx(value, nan_ok=True)
    lines = err.splitlines()
    assert lines[0] == f"read {src}: 8 record(s) (lines 2-9); 5 scored, 3 in skipped groups"
    assert lines[1] == "note: skipped group method='' (1 record(s), line 6): empty 'method' value"
    assert lines[2] == ("note: skipped group method='b' (2 record(s), lines 4, 5): members only (2); "
                        "an AUC needs both")
    src.write_text("score,label,method\n0.1,1,a\n0.2,0,b\n")
    rc, _, err = _run("--input", str(src), "--group-col", "method", "--skip-unscorable-groups")
    assert rc == 2 and _one_line_error(err, src) == (
        f"memaudit stats: error: {src}: no group can be scored (2 group(s); the first, group method='a' "
        f"(1 record(s), line 2): members only (1); an AUC needs both)\n")


# ---------------------------------------------------------------- books

def test_book_col_resamples_whole_books_where_each_book_has_one_label(tmp_path):
    """Chapters of 8 books labelled per book: --book-col gives the cluster interval and the books' t-test
    (ci_books 8); without it, or where a book has both labels, the interval resamples documents."""
    rng = np.random.default_rng(3)
    rows, scores, labels, books = [], [], [], []
    for b in range(8):
        offset = rng.normal()
        for c in range(5):
            scores.append(offset + rng.normal(scale=0.3))
            labels.append(b % 2)
            books.append(f"book {b}")
            rows.append(f"{scores[-1]!r},{labels[-1]},book {b}\n")
    src = tmp_path / "chapters.csv"
    src.write_text("score,label,book\n" + "".join(rows))
    out = tmp_path / "m.csv"
    rc, printed, _ = _run("--input", str(src), "--book-col", "book", "--output", str(out), *FAST)
    assert rc == 0 and "ci_books" in printed
    row = pd.read_csv(out).iloc[0]
    expected = compute_metrics(scores, labels, groups=books, n_boot_small=3, n_boot_ci=40, seed=0)
    assert row["ci_books"] == 8
    assert (row["auc_ci_low"], row["auc_ci_high"], row["t_pvalue"], row["books_pvalue"]) == pytest.approx(
        (expected["auc_ci_low"], expected["auc_ci_high"], expected["t_pvalue"], expected["books_pvalue"]))
    rc, printed, _ = _run("--input", str(src), *FAST)
    assert rc == 0 and "ci_books" not in printed  # no --book-col: the column is left out of the printout
    src.write_text("score,label,book\n" + "".join(rows[:-1]) + rows[-1].replace(",1,book 7", ",0,book 7"))
    rc, _, err = _run("--input", str(src), "--book-col", "book", "--output", str(out), *FAST)
    assert rc == 0 and pd.isna(pd.read_csv(out).iloc[0]["ci_books"])
    assert f"note: {src}: the labels are not given per book" in err


def test_books_from_a_benchmarks_documents_gives_the_workflows_book_counts(tmp_path):
    """A probe's <probe>_documents.csv has doc_id and no book: --books-from the benchmark's documents.jsonl
    finds each row's book, the same numbers as --book-col on a table that has them; a document the file
    does not hold is one line naming the row; the two options together are refused."""
    import json

    rng = np.random.default_rng(5)
    docs, rows, with_books = [], [], []
    for b in range(8):
        for c in range(4):
            doc, score = f"user/book{b}/ch{c:03d}", rng.normal(loc=b % 2)
            docs.append({"doc_id": doc, "meta": {"book": f"book{b}", "label": b % 2}})
            rows.append(f"{doc},{score!r},{b % 2}\n")
            with_books.append(f"{score!r},{b % 2},book{b}\n")
    (tmp_path / "documents.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (tmp_path / "scores.csv").write_text("doc_id,score,label\n" + "".join(rows))
    (tmp_path / "books.csv").write_text("score,label,book\n" + "".join(with_books))
    rc, _, _ = _run("--input", str(tmp_path / "scores.csv"), "--books-from", str(tmp_path / "documents.jsonl"),
                    "--output", str(tmp_path / "a.csv"), *FAST)
    assert rc == 0
    rc, _, _ = _run("--input", str(tmp_path / "books.csv"), "--book-col", "book", "--output", str(tmp_path / "b.csv"),
                    *FAST)
    a, b = pd.read_csv(tmp_path / "a.csv"), pd.read_csv(tmp_path / "b.csv")
    assert a.iloc[0]["ci_books"] == 8
    pd.testing.assert_frame_equal(a, b)
    (tmp_path / "scores.csv").write_text("doc_id,score,label\n" + "".join(rows) + "user/other/ch001,0.5,1\n")
    rc, _, err = _run("--input", str(tmp_path / "scores.csv"), "--books-from", str(tmp_path / "documents.jsonl"),
                      *FAST)
    assert rc == 2 and err.strip().endswith(f"{tmp_path / 'scores.csv'}, line 34: doc_id 'user/other/ch001' is not a "
                                            f"document of {tmp_path / 'documents.jsonl'}")
    rc, _, err = _run("--input", str(tmp_path / "books.csv"), "--book-col", "book", "--books-from",
                      str(tmp_path / "documents.jsonl"), *FAST)
    assert rc == 2 and "--book-col and --books-from both say where the books are: give one" in err
    # a document listed twice would count twice (the workflow's metrics refuse it): one line naming both lines
    (tmp_path / "scores.csv").write_text("doc_id,score,label\n" + "".join(rows) + rows[0])
    rc, _, err = _run("--input", str(tmp_path / "scores.csv"), "--books-from", str(tmp_path / "documents.jsonl"),
                      *FAST)
    assert (rc, err) == (2, f"memaudit stats: error: {tmp_path / 'scores.csv'}, line 34: doc_id 'user/book0/ch000' "
                            f"is listed again (first on line 2); a document listed twice counts twice in every "
                            f"statistic\n")
    # the same document under two methods is two rows of two groups, as in a probe's documents table
    (tmp_path / "scores.csv").write_text("doc_id,score,label,method\n" + "".join(
        f"{row.rstrip()},{method}\n" for method in ("loss", "zlib") for row in rows))
    rc, _, err = _run("--input", str(tmp_path / "scores.csv"), "--books-from", str(tmp_path / "documents.jsonl"),
                      "--group-col", "method", "--output", str(tmp_path / "c.csv"), *FAST)
    assert rc == 0 and list(pd.read_csv(tmp_path / "c.csv")["ci_books"]) == [8, 8]


def test_a_missing_book_is_an_error_naming_its_line_not_a_book_of_its_own(tmp_path):
    """An empty --book-col cell was read as a book named '': the blank rows of a side became one book
    (or, blank on both sides, a book with both labels, and the note blamed the labels)."""
    src = tmp_path / "books.csv"
    src.write_text("score,label,book\n0.9,1,A\n0.8,1,A\n0.7,1,B\n0.75,1, \n0.2,0,C\n0.3,0,C\n0.1,0,D\n0.4,0,D\n")
    rc, printed, err = _run("--input", str(src), "--book-col", "book", *FAST)
    assert (rc, printed, err) == (2, "", f"memaudit stats: error: {src}, line 5: column 'book' is missing\n")


def test_books_from_a_file_that_is_no_documents_table_is_an_error_naming_its_line(tmp_path):
    """--books-from a JSONL whose records lack doc_id or a meta object (not a benchmark's documents.jsonl):
    a one-line error naming the file, the line and the key, exit 2 (was a KeyError traceback, exit 1)."""
    (tmp_path / "scores.csv").write_text("doc_id,score,label\na,0.9,1\nb,0.1,0\n")
    documents = tmp_path / "documents.jsonl"
    for lines, message in [('{"doc_id": "a", "meta": {"book": "A"}}\n\n{"doc_id": "b"}\n',
                            "line 3: no 'meta' object (a benchmark's results/datasets/<benchmark>/documents.jsonl "
                            "has one on every line)"),
                           ('{"doc_id": "a", "meta": {}}\n{"id": "b", "meta": {}}\n',
                            "line 2: no 'doc_id' (a benchmark's results/datasets/<benchmark>/documents.jsonl "
                            "has one on every line)")]:
        documents.write_text(lines)
        rc, _, err = _run("--input", str(tmp_path / "scores.csv"), "--books-from", str(documents), *FAST)
        assert (rc, err) == (2, f"memaudit stats: error: {documents}, {message}\n")


# ---------------------------------------------------------------- few documents

def test_few_documents_warn_that_intervals_and_low_fpr_rates_are_unreliable(tmp_path):
    src = tmp_path / "docs.csv"
    src.write_text("score,label\n0.9,1\n0.8,1\n0.7,1\n0.3,0\n0.2,0\n0.1,0\n")
    rc, out, err = _run("--input", str(src), *FAST)
    assert rc == 0
    # Perfect separation: every resample's interval is [1.00, 1.00], which says nothing with 3 + 3.
    assert re.search(r"\b1\.000\s+1\.000\s+1\.000\s+1\.000\s+", out)
    assert err.splitlines()[1] == (
        f"warning: {src}: 3 member(s) and 3 non-member(s), fewer than 10 in a class: the bootstrap means, "
        f"stds and 95% interval and the TPR at 1% and 0.1% FPR are unreliable, whatever they show")
    rows = "".join(f"{i / 20},{int(i >= 10)}\n" for i in range(20))  # 10 + 10: no warning
    src.write_text("score,label\n" + rows)
    rc, _, err = _run("--input", str(src), *FAST)
    assert rc == 0 and "warning" not in err


@pytest.mark.parametrize("n_nonmember, columns", [
    (60, "tpr_at_1pct_fpr and tpr_at_01pct_fpr are"), (500, "tpr_at_01pct_fpr is"), (1000, None), (5, None)])
def test_a_tpr_at_an_fpr_below_one_non_member_says_it_is_the_tpr_at_fpr_0(tmp_path, n_nonmember, columns):
    """DE-COP's 105 + 60 books printed tpr_at_01pct_fpr 0.638 without a word: with 60 non-members one false
    positive is 1.7% FPR, so both columns are the TPR at FPR 0, the share of members above the highest
    non-member (a statement about one score). Under 10 a class the few-documents warning says it already."""
    rng = np.random.default_rng(1)
    n_member = 10
    scores = np.r_[rng.normal(1.0, size=n_member), rng.normal(size=n_nonmember)]
    src = tmp_path / "docs.csv"
    src.write_text("score,label\n" + "".join(f"{float(s)!r},{int(i < n_member)}\n" for i, s in enumerate(scores)))
    rc, out, err = _run("--input", str(src), *FAST)
    assert rc == 0
    notes = [line for line in err.splitlines() if "FPR 0" in line]
    if columns is None:
        assert notes == []
        return
    assert notes == [f"note: {src}: {n_nonmember} non-members: {columns} the TPR at FPR 0 (the share of members "
                     f"above every non-member): one false positive is already 1/{n_nonmember} = "
                     f"{1 / n_nonmember:.1%} FPR; 1% FPR needs 100 non-members, 0.1% needs 1,000"]
    nonmembers = scores[n_member:]
    expected = float((scores[:n_member] > nonmembers.max()).mean())
    table = pd.read_csv(io.StringIO(re.sub(r" +", ",", "\n".join(line.strip() for line in out.splitlines()))))
    columns_at_0 = ["tpr_at_01pct_fpr"] + (["tpr_at_1pct_fpr"] if n_nonmember < 100 else [])
    assert [round(float(table[c].iloc[0]), 3) for c in columns_at_0] == [round(expected, 3)] * len(columns_at_0)


@pytest.mark.parametrize("n_books, warned", [(6, True), (19, True), (20, False)])
def test_an_interval_over_few_books_warns_that_it_is_no_guide(tmp_path, n_books, warned):
    """Chapters of few books labelled per book (--book-col): 45 + 45 chapters of 6 books raised no warning (the
    few-documents one counts documents), though the interval resamples 6 books, which no percentile
    interval is a guide over (docs/statistics.md; the headline says so below 20 books)."""
    rng = np.random.default_rng(0)
    src = tmp_path / "books.csv"
    src.write_text("score,label,book\n" + "".join(
        f"{rng.normal()!r},{b % 2},book{b}\n" for b in range(n_books) for _ in range(15)))
    rc, _, err = _run("--input", str(src), "--book-col", "book", *FAST)
    warning = (f"warning: {src}: the 95% interval resamples {n_books} books, fewer than 20: no interval is a "
               f"guide over so few; read books_pvalue, the rank test of the books' means (3 books against 3 "
               f"give at best 0.05)")
    assert rc == 0 and (warning in err.splitlines()) == warned, err
    assert "warning" not in err or warned


# ---------------------------------------------------------------- unusable files

@pytest.mark.parametrize("content, message", [
    (b"", r"empty file$"),
    (b" \n\n", r"empty file$"),
    (b"score,label\n", r"no data rows \(only a header, line 1\)$"),
    (b"score,label\n0.1,1\n0.2,\xe9\n", r", line 3: invalid UTF-8 at byte offset 22 \(byte 0xe9\)"),
    ("score,label\n0.1,1\n".encode("utf-16"), r": is UTF-16 text; save it as UTF-8$"),
    (b"score,label\n0.1,1\n0.2\x00,0\n", r", line 3: a NUL byte"),
    (b'score,label\n0.1,1\n0.2,"0\n', r", line 3: not valid CSV: a quoted field is never closed \(a truncated file\?\)$"),
    (b"score,label\n0.1,1\n0.2\n", r", line 3: 1 field\(s\) where the header \(line 1\) has 2$"),
    (b"score,label,score\n0.1,1,2\n", r", line 1: column 'score' appears 2 times in the header \(fields 1, 3\)$"),
    (b"PK\x03\x04rest of a workbook", r": is a zip archive \(an \.xlsx or \.ods spreadsheet\?\), not CSV text"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1 an old .xls", r": is a legacy Excel \(\.xls\) file, not CSV text"),
])
def test_unusable_files_are_one_line_errors_naming_the_file(tmp_path, content, message):
    src = tmp_path / "docs.csv"
    src.write_bytes(content)
    rc, out, err = _run("--input", str(src))
    assert rc == 2 and out == ""
    assert re.search(message, _one_line_error(err, src).rstrip("\n")), err


def test_a_directory_and_a_broken_workbook_are_one_line_errors(tmp_path):
    rc, _, err = _run("--input", str(tmp_path))
    assert rc == 2 and _one_line_error(err, tmp_path).endswith(": is a directory, expected a CSV file\n")
    book = tmp_path / "results.xlsx"
    book.write_bytes(_xlsx_bytes([["score", "label"], [0.1, 1], [0.2, 0]])[:200])
    rc, _, err = _run("--input", str(book))
    assert rc == 2 and "not a readable .xlsx workbook" in _one_line_error(err, book)


def test_a_negative_seed_is_a_one_line_error_not_a_traceback(tmp_path):
    src = tmp_path / "docs.csv"
    src.write_text("score,label\n0.9,1\n0.1,0\n")
    rc, out, err = _run("--input", str(src), "--seed", "-1", *FAST)
    assert (rc, out, err) == (2, "", "memaudit stats: error: --seed must be >= 0 (got -1)\n")



@pytest.mark.parametrize("n", ["1", "2", "39"])
def test_too_few_ci_resamples_is_a_one_line_error_not_a_meaningless_interval(tmp_path, n):
    """``--n-boot-ci 1`` printed a "95% CI" of one resample, [0.831, 0.831]: under 40 resamples a 2.5% tail
    holds none of them (docs/statistics.md)."""
    src = tmp_path / "docs.csv"
    src.write_text("score,label\n0.9,1\n0.1,0\n")
    rc, out, err = _run("--input", str(src), "--n-boot", "3", "--n-boot-ci", n)
    assert (rc, out, err) == (2, "", f"memaudit stats: error: --n-boot-ci must be >= 40 (got {n}): fewer resamples "
                                     "leave a 2.5% tail of the 95% interval without a single one\n")

# ---------------------------------------------------------------- .xlsx: DE-COP's per-book results

def _xlsx_bytes(rows: list[list]) -> bytes:
    """A minimal workbook as Excel writes DE-COP's results: text in sharedStrings.xml, numbers inline."""
    shared: list[str] = []
    xml_rows = []
    for r, row in enumerate(rows, 1):
        cells = []
        for c, value in enumerate(row):
            ref = f"{chr(ord('A') + c)}{r}"
            if isinstance(value, str):
                shared.append(value)
                cells.append(f'<c r="{ref}" t="s"><v>{len(shared) - 1}</v></c>')
            else:
                cells.append(f'<c r="{ref}"><v>{value!r}</v></c>')
        xml_rows.append(f'<row r="{r}">{"".join(cells)}</row>')
    main = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    files = {
        "[Content_Types].xml": '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/'
                               'content-types"/>',
        "xl/workbook.xml": f'<?xml version="1.0"?><workbook {main} xmlns:r="{rel}"><sheets>'
                           f'<sheet name="Sheet1" sheetId="1" r:id="rId1"/></sheets></workbook>',
        "xl/_rels/workbook.xml.rels": '<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/'
                                      f'package/2006/relationships"><Relationship Id="rId1" Type="{rel}/worksheet" '
                                      'Target="worksheets/sheet1.xml"/></Relationships>',
        "xl/worksheets/sheet1.xml": f'<?xml version="1.0"?><worksheet {main}><sheetData>{"".join(xml_rows)}'
                                    f'</sheetData></worksheet>',
        "xl/sharedStrings.xml": f'<?xml version="1.0"?><sst {main}>'
                                + "".join(f"<si><t>{escape(s)}</t></si>" for s in shared) + "</sst>",
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return buffer.getvalue()


# The header of 2_results_DE-COP.xlsx; one row per book, accuracies per model, Label 0 (clean,
# first, as the authors sorted them) or 1 (suspect).
DECOP_HEADER = ["Book Name", "Chat-GPT_Acc", "Chat-GPT_LogitTuningAcc", "Claude_1.2_Acc", "Claude_2.1_Acc",
                "LLaMA-2_7B_Acc", "LLaMA-2_13B_Acc", "LLaMA-2_70B_Acc", "LLaMA-2_70B_LogitTuningAcc",
                "Mistral-7B_Acc", "Mixtral-8x7B_Acc", "Label"]


def _decop_excerpt() -> list[list]:
    # LLaMA-2_13B: suspects 0.9, 0.8, 0.4 against clean 0.7, 0.3, 0.2 -> AUC 8/9, binarized 5/6;
    # Mistral-7B: suspects 0.5-0.7 above every clean book -> 1 in every resample.
    books = [("Clean_A_-_Author", 0.7, 0.1, 0), ("Clean_B_-_Author", 0.3, 0.2, 0), ("Clean_C_-_Author", 0.2, 0.3, 0),
             ("1984_-_George_Orwell", 0.9, 0.5, 1), ("Emma_-_Jane_Austen", 0.8, 0.6, 1), ("Ulysses_-_James_Joyce", 0.4, 0.7, 1)]
    return [DECOP_HEADER] + [[name, 0.5, 0.5, 0.5, 0.5, 0.25, llama, 0.5, 0.5, mistral, 0.5, label]
                             for name, llama, mistral, label in books]


def test_decop_shaped_workbook_scores_each_model_column_by_hand(tmp_path):
    book, out_csv = tmp_path / "2_results_DE-COP.xlsx", tmp_path / "m.csv"
    book.write_bytes(_xlsx_bytes(_decop_excerpt()))
    rc, _, err = _run("--input", str(book), "--label-col", "Label", "--score-col", "LLaMA-2_13B_Acc",
                      "Mistral-7B_Acc", "--output", str(out_csv), "--n-boot-ci", "50")
    assert rc == 0
    assert err.splitlines()[0] == f"read {book}: 6 record(s) (rows 2-7); 6 scored"
    table = pd.read_csv(out_csv).set_index("score_column")
    assert list(table.columns) == METRIC_COLUMNS
    llama, mistral = table.loc["LLaMA-2_13B_Acc"], table.loc["Mistral-7B_Acc"]
    assert (llama["n_member"], llama["n_nonmember"]) == (3, 3)
    assert llama["auc"] == pytest.approx(8 / 9) and llama["auc_binarized"] == pytest.approx(5 / 6)
    expected = bootstrap_auc([0.7, 0.3, 0.2, 0.9, 0.8, 0.4], [0, 0, 0, 1, 1, 1], 10, seed=0, binarized=True)
    assert llama["auc_binarized_boot_mean"] == pytest.approx(expected.mean())
    assert mistral["auc"] == 1.0 and mistral["auc_binarized_boot_mean"] == 1.0 and mistral["auc_binarized_boot_std"] == 0.0


def test_a_workbook_value_beyond_the_header_names_its_row(tmp_path):
    rows = _decop_excerpt()
    rows[3] = rows[3] + ["a stray note"]
    book = tmp_path / "results.xlsx"
    book.write_bytes(_xlsx_bytes(rows))
    rc, _, err = _run("--input", str(book), "--label-col", "Label", "--score-col", "Mistral-7B_Acc")
    assert rc == 2
    assert _one_line_error(err, book) == (f"memaudit stats: error: {book}, row 4: a value in column M, beyond the "
                                          f"header (row 1) of 12 column(s)\n")


@pytest.mark.skipif(not DECOP_RESULTS.exists(), reason=f"{DECOP_RESULTS} not fetched (docs/statistics.md)")
def test_the_authors_per_book_results_reproduce_decop_table_2(tmp_path):
    out_csv = tmp_path / "table2.csv"
    rc, _, err = _run("--input", str(DECOP_RESULTS), "--label-col", "Label", "--score-col", *TABLE_2,
                      "--output", str(out_csv))
    assert rc == 0 and err.splitlines()[0] == f"read {DECOP_RESULTS}: 165 record(s) (rows 2-166); 165 scored"
    table = pd.read_csv(out_csv).set_index("score_column")
    assert (table["n_member"] == 105).all() and (table["n_nonmember"] == 60).all()
    for model, published in TABLE_2.items():
        assert table.loc[model, "auc_binarized_boot_mean"] == pytest.approx(published, abs=0.02), model
    # The values docs/statistics.md shows (seed 0).
    assert table["auc_binarized_boot_mean"].round(3).tolist() == [0.914, 0.973, 0.900, 0.971]
    assert table["auc"].round(3).tolist() == [0.944, 0.981, 0.926, 0.987]


# ---------------------------------------------------------------- fuzzing

BASE_CSV = ('score,label,method\n0.9,1,a\n0.1,0,a\n\n0.8,1,"b\nwith a line break"\n0.3,0,"b\nwith a line break"\n'
            '0.7,yes,a\n0.2,no,a\n')
BASE_XLSX = _xlsx_bytes(_decop_excerpt())


def _check_outcome(path: Path, rc: int, out_csv: Path, err: str, n_lines: int) -> str:
    """Either every record is accounted for, or one line of error naming the file (and a real line)."""
    if rc == 2:
        _one_line_error(err, path)
        for number in re.findall(r", (?:line|row) (\d+)", err):
            assert 1 <= int(number) <= n_lines + 1, err
        return "refused"
    assert rc == 0, err
    read, scored, skipped = (int(v or 0) for v in ACCOUNTING.search(err).groups())
    assert read == scored + skipped
    table = pd.read_csv(out_csv, keep_default_na=False)
    per_column = table.groupby("score_column") if "score_column" in table else [("", table)]
    for _, part in per_column:
        assert int((part["n_member"] + part["n_nonmember"]).sum()) == scored
    out_csv.unlink()
    return "scored"


def test_random_bytes_and_truncations_score_or_fail_in_one_line(tmp_path, capsys):
    outcomes: Counter = Counter()

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(base=st.sampled_from(["csv", "xlsx"]), cut=st.integers(0, 10_000), junk=st.binary(max_size=64),
           at=st.integers(0, 10_000), suffix=st.sampled_from([".csv", ".xlsx", ".txt"]), skip=st.booleans())
    def run(base, cut, junk, at, suffix, skip):
        content = BASE_CSV.encode() if base == "csv" else BASE_XLSX
        content = content[:cut]
        at = min(at, len(content))
        content = content[:at] + junk + content[at:]
        path = tmp_path / f"docs{suffix}"
        path.write_bytes(content)
        argv = ["--input", str(path), "--label-col", "label" if base == "csv" else "Label", *FAST,
                *(["--skip-unscorable-groups"] if skip else [])]
        argv += ["--group-col", "method"] if base == "csv" else ["--score-col", "LLaMA-2_13B_Acc", "Mistral-7B_Acc"]
        out_csv = tmp_path / "metrics.csv"
        rc, _, err = _run(*argv, "--output", str(out_csv))
        n_lines = content.count(b"\n") + content.count(b"\r") + 1
        outcomes[_check_outcome(path, rc, out_csv, err, n_lines if base == "csv" else 10**6)] += 1

    run()
    with capsys.disabled():
        print(f"\nstats CLI, random bytes and truncations: {sum(outcomes.values())} cases, {dict(outcomes)}")
    assert outcomes["refused"] and sum(outcomes.values()) >= 100


GOOD_SCORES = st.floats(min_value=-1e50, max_value=1e50).map(repr)
GOOD_LABELS = st.sampled_from(["0", "1", " 1 ", "yes", "no", "True"])
GOOD_GROUPS = st.sampled_from(["a", "b"] * 4 + ["x\ny", "a,b", 'q"q', "café", "H" * 140_000])
# Rows of a clean table (a group may still hold one class), and rows with blank and broken fields.
CLEAN_ROW = st.tuples(GOOD_SCORES, GOOD_LABELS, GOOD_GROUPS, st.booleans())  # last: a blank line before it
ANY_ROW = st.tuples(st.one_of(GOOD_SCORES, st.sampled_from(["", " ", "inf", "nan", "abc", " 0.5 ", "1e999", "1_0",
                                                           "0x10"])),
                    st.one_of(GOOD_LABELS, st.sampled_from(["", "2", "maybe"])),
                    st.one_of(GOOD_GROUPS, st.just("")), st.booleans())


def _expected(rows, encoding: str, dup_label: bool, skip: bool, record_lines: list[int]):
    """(outcome, text the message must contain) from the rows written, by the rules of docs/statistics.md."""
    if encoding == "utf-16":
        return "refused", "is UTF-16 text"
    if encoding == "latin-1":
        for (_, _, group, _), line in zip(rows, record_lines):
            if "é" in group:  # the first byte that is not UTF-8
                return "refused", f"line {line}: invalid UTF-8"
    if dup_label:
        return "refused", "column 'label' appears 2 times in the header"
    if not rows:
        return "refused", "no data rows"
    spelled = {"yes": "1", "true": "1", "no": "0"}
    labels = []
    for (_, label, _, _), line in zip(rows, record_lines):
        if not label.strip():
            return "refused", f"line {line}: column 'label' is missing"
        labels.append(spelled.get(label.strip().lower(), label.strip()))
    if len(set(labels)) != 2:
        return "refused", "column 'label' has"
    if "1" not in labels:
        return "refused", "--member-value '1' does not occur in column 'label'"
    pattern = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
    for (score, _, _, _), line in zip(rows, record_lines):
        if not pattern.fullmatch(score.strip()) or not np.isfinite(float(score)):
            return "refused", f"line {line}: column 'score' is"
    groups: dict[str, list[str]] = {}
    for (_, _, group, _), label in zip(rows, labels):
        groups.setdefault(group, []).append(label)
    scorable = {g: v for g, v in groups.items() if g.strip() and len(set(v)) == 2}
    if len(scorable) < len(groups) and not skip:
        return "refused", "cannot be scored"
    if not scorable:
        return "refused", "no group can be scored"
    return "scored", {g: (v.count("1"), len(v) - v.count("1")) for g, v in scorable.items()}


def test_generated_tables_score_every_row_or_name_the_line(tmp_path, capsys):
    outcomes: Counter = Counter()
    reasons: Counter = Counter()

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(clean=st.booleans(), data=st.data(), newline=st.sampled_from(["\n", "\r\n"]), skip=st.booleans())
    def run(clean, data, newline, skip):
        if clean:
            rows = data.draw(st.lists(CLEAN_ROW, min_size=4, max_size=14))
            encoding, dup_label = data.draw(st.sampled_from(["utf-8", "utf-8-sig"])), False
        else:
            rows = data.draw(st.lists(ANY_ROW, max_size=14))
            encoding = data.draw(st.sampled_from(["utf-8", "utf-8-sig", "latin-1", "utf-16"]))
            dup_label = data.draw(st.booleans())
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator=newline)
        writer.writerow(["score", "label", "method"] + (["label"] if dup_label else []))
        record_lines = []
        for score, label, group, blank_before in rows:
            if blank_before:
                buffer.write(newline)
            record_lines.append(buffer.getvalue().count("\n") + 1)
            writer.writerow([score, label, group] + ([label] if dup_label else []))
        path = tmp_path / "docs.csv"
        path.write_bytes(buffer.getvalue().encode(encoding, errors="replace"))
        outcome, detail = _expected(rows, encoding, dup_label, skip, record_lines)
        out_csv = tmp_path / "metrics.csv"
        rc, _, err = _run("--input", str(path), "--group-col", "method", "--output", str(out_csv), *FAST,
                          *(["--skip-unscorable-groups"] if skip else []))
        _check_outcome(path, rc, out_csv, err, buffer.getvalue().count("\n") + 1)
        assert (rc == 0) == (outcome == "scored"), (err[:300], detail)
        if rc == 2:
            assert detail in err, (err[:300], detail)
        else:
            read, scored, _ = (int(v or 0) for v in ACCOUNTING.search(err).groups())
            assert read == len(rows) and scored == sum(m + n for m, n in detail.values())
        outcomes[outcome] += 1
        reasons[detail if isinstance(detail, str) and "line" not in detail else outcome] += 1

    run()
    with capsys.disabled():
        print(f"\nstats CLI, generated tables: {sum(outcomes.values())} cases, {dict(outcomes)} {dict(reasons)}")
    assert outcomes["scored"] and outcomes["refused"]
