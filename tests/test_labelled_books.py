"""A benchmark built from the user's books with the user's own labels (``benchmarks.<name>.labels``):
the books a model is known to have seen and known not to have, instead of a random split."""

from __future__ import annotations

import csv
import random
import re
from pathlib import Path

import pytest

from memaudit.config import ConfigError, label_provenance, validate_config
from memaudit.datasets.build import build_benchmark
from memaudit.errors import InputError

WORDS = ("river garden letter morning carriage window sister cousin evening winter harbour voyage captain "
         "candle meadow orchard mirror ribbon parlour journey bridge lantern chapel market").split()
BOOKS = ("Emma.txt", "Persuasion.txt", "The Voyage.txt", "Winter Tales.txt")
MODELS = {"m": {"family": "tiny-gpt2", "source": {"tiny_gpt2": {}}}}


def _books(tmp_path: Path, names=BOOKS, shared: str | None = None) -> Path:
    """Real book files: three chapters of seeded word salad each (no two books share a 13-word run,
    unless ``shared`` is put in the first two)."""
    folder = tmp_path / "books"
    folder.mkdir()
    for i, name in enumerate(names):
        rng = random.Random(name)
        chapters = []
        for n in ("I", "II", "III"):
            sentences = [" ".join(rng.choice(WORDS) for _ in range(9)).capitalize() + "." for _ in range(40)]
            if shared and i < 2 and n == "I":
                sentences.insert(3, shared)
            chapters.append(f"CHAPTER {n}.\n\n" + " ".join(sentences))
        (folder / name).write_text(f"{name.upper()}\n\n" + "\n\n".join(chapters) + "\n", encoding="utf-8")
    return folder


def _labels(tmp_path: Path, rows: list[tuple[str, str]], header=("book", "label")) -> Path:
    path = tmp_path / "labels.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([header, *rows])
    return path


def _bench(folder: Path, labels: Path, **extra) -> dict:
    return {"sources": ["user_books"], "labels": str(labels), "passage_words": 30, "passages_per_document": 2,
            "min_passages": 1, "member_fraction": 0.5, "near_duplicate_ngram": 13,
            "source_options": {"user_books": {"directory": str(folder), "min_chapter_words": 50}}, **extra}


def _build(bench: dict, rejects: list | None = None):
    return build_benchmark("mine", bench, Path("resources/demo"), seed=3, rejects=rejects)


def test_the_labels_file_gives_each_books_documents_their_label(tmp_path):
    folder = _books(tmp_path)
    # a file name, a book id and source/id all name a book
    labels = _labels(tmp_path, [("Emma.txt", "1"), ("persuasion", "0"), ("user_books/the-voyage", "1"),
                                ("Winter Tales.txt", "0")])
    rejects: list = []
    docs, passages = _build(_bench(folder, labels), rejects)
    by_book = {}
    for d in docs:
        by_book.setdefault(d.meta["book"], set()).add(d.meta["label"])
    assert by_book == {"emma": {1}, "persuasion": {0}, "the-voyage": {1}, "winter-tales": {0}}
    assert len(docs) == 12 and {p.label for p in passages} == {0, 1}
    assert all(p.label == next(d.meta["label"] for d in docs if d.doc_id == p.doc_id) for p in passages)
    assert rejects == []


def test_a_file_name_in_nfd_is_the_book_its_labels_row_names_in_nfc(tmp_path):
    """A file copied from a Mac's HFS+ disk has its name decomposed (NFD: e + U+0301), a labels file typed
    anywhere has it composed (NFC): one name, one book, one id, which were two names to the labels (the
    row and the book each rejected, looking alike) and two ids ("cafe" on one disk, "caf" on another)."""
    import unicodedata

    folder = _books(tmp_path, names=(unicodedata.normalize("NFD", "Café Noir.txt"), "Persuasion.txt"))
    labels = _labels(tmp_path, [("Café Noir.txt", "1"), ("Persuasion.txt", "0")])
    rejects: list = []
    docs, _ = _build(_bench(folder, labels), rejects)
    assert rejects == []
    assert [(d.doc_id, d.meta["label"]) for d in docs] == [
        ("user/caf-noir/ch001", 1), ("user/caf-noir/ch002", 1), ("user/caf-noir/ch003", 1),
        ("user/persuasion/ch001", 0), ("user/persuasion/ch002", 0), ("user/persuasion/ch003", 0)]


def test_the_labels_replace_the_random_split_whatever_the_seed(tmp_path):
    folder = _books(tmp_path)
    labels = _labels(tmp_path, [("Emma.txt", "1"), ("Persuasion.txt", "1"), ("The Voyage.txt", "1"),
                                ("Winter Tales.txt", "0")])
    for seed in (0, 1, 2):
        docs, _ = build_benchmark("mine", _bench(folder, labels), Path("resources/demo"), seed=seed)
        assert sum(d.meta["label"] for d in docs) == 9  # three member books of three chapters, not a half


def test_a_book_without_a_row_is_left_out_and_a_row_without_a_book_is_kept_unused(tmp_path):
    folder = _books(tmp_path)
    labels = _labels(tmp_path, [("Emma.txt", "1"), ("Persuasion.txt", "0"), ("Emma2.txt", "1")])
    rejects: list = []
    docs, _ = _build(_bench(folder, labels), rejects)
    assert sorted({d.meta["book"] for d in docs}) == ["emma", "persuasion"]
    rows = sorted((r.line, r.key, r.value, r.action, r.reason) for r in rejects)
    assert rows == [
        (0, "book", "'user_books/the-voyage' (The Voyage.txt, the-voyage)", "rejected",
         "no row names this book: its documents are left out, never guessed"),
        (0, "book", "'user_books/winter-tales' (Winter Tales.txt, winter-tales)", "rejected",
         "no row names this book: its documents are left out, never guessed"),
        (4, "book", "'Emma2.txt'", "unused",
         "no book of benchmark 'mine' with usable documents is called this (its books: user_books/emma, "
         "user_books/persuasion, "
         "user_books/the-voyage, user_books/winter-tales)"),
    ]
    assert {r.file for r in rejects} == {str(labels)}


def test_a_non_member_repeating_a_member_keeps_its_label_with_a_row_saying_so(tmp_path):
    run = "All the bells of the old town rang out over the water at once that strange bright morning."
    folder = _books(tmp_path, shared=run)
    labels = _labels(tmp_path, [("Emma.txt", "1"), ("Persuasion.txt", "0"), ("The Voyage.txt", "1"),
                                ("Winter Tales.txt", "0")])
    rejects: list = []
    docs, _ = _build(_bench(folder, labels, passages_per_document=40, passage_words=400), rejects)
    assert {d.meta["book"]: d.meta["label"] for d in docs} == {"emma": 1, "persuasion": 0, "the-voyage": 1,
                                                               "winter-tales": 0}
    assert [(r.value, r.action, r.reason) for r in rejects] == [
        ("'user_books/persuasion'", "kept",
         "a non-member that shares a 13-word run with member(s) user_books/emma: kept with its label")]
    near = {d.meta["book"]: d.meta.get("near_duplicates") for d in docs if d.meta["chapter"] == 1}
    assert near == {"emma": ["user_books/persuasion"], "persuasion": ["user_books/emma"],
                    "the-voyage": None, "winter-tales": None}


def test_labels_that_leave_one_side_empty_stop_the_build(tmp_path):
    folder = _books(tmp_path)
    labels = _labels(tmp_path, [(b, "1") for b in BOOKS])
    with pytest.raises(InputError, match=r"^benchmark 'mine': the labels in .*labels.csv leave no non-members "
                                         r"among its 12 documents \(a benchmark needs both\)$"):
        _build(_bench(folder, labels))


def test_a_row_naming_two_books_is_an_error_naming_its_line(tmp_path):
    from unittest import mock

    from memaudit.datasets.types import Document

    docs = [Document(f"{src}/emma/ch001", src, "Emma", "a", "book", "Word " * 80, {"book": "emma"})
            for src in ("austen", "user_books")]
    labels = _labels(tmp_path, [("austen/emma", "1"), ("emma", "0")])
    with mock.patch("memaudit.datasets.build.load_documents", return_value=docs), \
            pytest.raises(InputError) as err:
        _build({"sources": ["austen", "user_books"], "labels": str(labels), "passage_words": 30,
                "passages_per_document": 1, "min_passages": 1})
    assert str(err.value) == (f"{labels}, line 3, column book: 'emma' names 2 books of benchmark 'mine' "
                              "(austen/emma, user_books/emma); write one of these instead")


def test_two_rows_naming_one_book_are_an_error(tmp_path):
    folder = _books(tmp_path)
    labels = _labels(tmp_path, [("Emma.txt", "1"), ("emma", "0")])
    with pytest.raises(InputError) as err:
        _build(_bench(folder, labels))
    assert str(err.value) == f"{labels}, line 3, column book: 'emma' is user_books/emma, labelled on an earlier line"


@pytest.mark.parametrize(("rows", "header", "message"), [
    ([("Emma.txt", "1")], ("title", "label"), "line 1: the header must be 'book,label', got 'title,label'"),
    ([("Emma.txt", "yes")], ("book", "label"), "line 2, column label: 'yes' is not 0 or 1 (1 = member)"),
    ([("", "1")], ("book", "label"), "line 2, column book: empty book"),
])
def test_a_labels_file_problem_is_one_line_naming_its_line_and_column(tmp_path, rows, header, message):
    folder = _books(tmp_path)
    labels = _labels(tmp_path, rows, header)
    with pytest.raises(InputError) as err:
        _build(_bench(folder, labels))
    assert str(err.value) == f"{labels}, {message}"


def test_a_labels_file_cut_inside_a_quote_is_an_error_naming_the_line(tmp_path):
    """The last row's quote never closed (a truncated file): it loaded as 'persuasion' labelled 0."""
    from memaudit.datasets.label_files import read_labels

    path = tmp_path / "labels.csv"
    path.write_text('book,label\nEmma.txt,1\n"persuasion,0', encoding="utf-8")
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}, line 3: not valid CSV \(unclosed quote: "
                                         r"the file ends inside this row\)$"):
        read_labels(path, "book")


def test_a_labels_row_of_empty_cells_is_an_error_naming_the_line(tmp_path):
    """DataFrame.to_csv writes a row of missing values as ','; it was skipped without a word."""
    from memaudit.datasets.label_files import read_labels

    path = tmp_path / "labels.csv"
    path.write_text("book,label\nEmma.txt,1\n,\npersuasion,0\n", encoding="utf-8")
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}, line 3, column book: empty book$"):
        read_labels(path, "book")
    path.write_text("book,label\nEmma.txt,1\n\npersuasion,0\n", encoding="utf-8")  # a blank line is no row
    assert read_labels(path, "book") == {"Emma.txt": (1, 2), "persuasion": (0, 4)}


def test_a_labels_file_kept_in_the_books_folder_is_no_rejected_book(tmp_path):
    """docs/models.md keeps labels.csv beside the books: it was a rejects row, 'not a .txt, .epub or
    .pdf file (.csv)'; another CSV there still is one."""
    folder = _books(tmp_path)
    labels = _labels(folder, [("Emma.txt", "1"), ("persuasion", "0"), ("the-voyage", "1"), ("Winter Tales.txt", "0")])
    assert labels.parent == folder
    (folder / "notes.csv").write_text("x\n", encoding="utf-8")
    rejects: list = []
    docs, _ = _build(_bench(folder, labels), rejects)
    assert {d.meta["book"] for d in docs} == {"emma", "persuasion", "the-voyage", "winter-tales"}
    assert [(r.value, r.reason) for r in rejects] == [("notes.csv", "not a .txt, .epub or .pdf file (.csv)")]


def test_the_config_refuses_a_split_the_labels_replace():
    bench = {"sources": ["user_books"], "labels": "labels.csv"}
    assert validate_config({"benchmarks": {"b": bench}, "models": MODELS})["benchmarks"]["b"]["labels"] == "labels.csv"
    assert validate_config({"benchmarks": {"b": dict(bench, split_by="book")}, "models": MODELS})
    with pytest.raises(ConfigError) as err:
        validate_config({"benchmarks": {"b": dict(bench, member_fraction=0.3, split_by="document")},
                         "models": MODELS})
    assert str(err.value).splitlines() == [
        "config key benchmarks.b.member_fraction: the labels file (labels.csv) gives the members; "
        "remove member_fraction",
        "config key benchmarks.b.split_by: labels are given per book, so the split is by book; "
        "remove split_by or set it to book"]
    with pytest.raises(ConfigError, match=r"benchmarks\.p\.labels: only a benchmark built from 'sources' reads it; "
                                          r".*set it under published: for format copybench"):
        validate_config({"benchmarks": {"p": {"published": {"format": "nyt", "path": "x.csv"}, "labels": "l.csv"}},
                         "models": MODELS})


def test_given_labels_make_no_null_control():
    provenance = label_provenance({"sources": ["user_books"], "labels": "my/labels.csv"}, seed=3)
    assert provenance == {"labels": "given per book in my/labels.csv (book,label; 1 = member)",
                          "null_control": False}
    assert label_provenance({"sources": ["user_books"]}, seed=3)["null_control"] is True


def test_only_labels_given_per_book_make_books_the_statistical_draws(tmp_path):
    """A built benchmark labelled by the user's file: its metrics resample whole books (``ci_books``) and its
    blind baseline folds by book; the same documents as an IID split (per_book False, what the config
    says of a split by document) resample documents, even where a sample's books happen to share a label."""
    import numpy as np
    import pandas as pd

    from memaudit.config import labels_per_book
    from memaudit.io import write_jsonl
    from memaudit.stats.workflow import run_blind_baseline, run_metrics

    assert labels_per_book({"sources": ["user_books"], "labels": "l.csv"})
    assert labels_per_book({"sources": ["austen"], "split_by": "book"})
    assert labels_per_book({"published": {"format": "nyt", "path": "x"}})
    assert not labels_per_book({"sources": ["austen"]})
    assert not labels_per_book({"sources": ["a"], "split_by": "document"})

    folder = _books(tmp_path)
    labels = _labels(tmp_path, [("Emma.txt", "1"), ("Persuasion.txt", "0"), ("The Voyage.txt", "1"),
                                ("Winter Tales.txt", "0")])
    docs, _ = _build(_bench(folder, labels))
    documents = tmp_path / "documents.jsonl"
    write_jsonl(documents, (d.to_dict() for d in docs))
    rng = np.random.default_rng(0)
    scores = tmp_path / "scores.csv"
    pd.DataFrame({"doc_id": [d.doc_id for d in docs], "label": [d.meta["label"] for d in docs],
                  "method": "loss", "score": rng.normal(size=len(docs))}).to_csv(scores, index=False)
    stats = {"n_boot_small": 5, "n_boot_ci": 100, "blind_folds": 5,
             "selection": {"q": 0.1, "qs": [0.1], "n_splits": 2, "calibration_fraction": 0.5}}
    for per_book, books in ((True, 4), (False, None)):
        out = {k: tmp_path / f"{k}_{per_book}.csv" for k in ("metrics", "selection", "named", "blind", "blind_scores")}
        table = run_metrics([scores], out["metrics"], out["selection"], out["named"], benchmark="mine", model="m",
                            contaminated=False, stats=stats, seed=0, benchmark_documents=documents, per_book=per_book)
        blind = run_blind_baseline(documents, out["blind_scores"], out["blind"], benchmark="mine", stats=stats,
                                   seed=0, per_book=per_book)
        for got in (table, blind):
            assert (got["ci_books"].iloc[0] == books) if books else got["ci_books"].isna().all()


def test_a_book_that_is_a_broken_link_is_named_before_any_job(tmp_path):
    """A book that is a link to nothing (a moved or unmounted file) was passed over and listed in rejects.csv
    as "no text left after removing the Gutenberg header and licence (an empty file?)": its label row then
    named no book, and the reason sent the user to the wrong file. The build (the first job) stops naming it,
    as for any unreadable book."""
    folder = _books(tmp_path)
    (folder / "Gone.txt").symlink_to(tmp_path / "elsewhere" / "Gone.txt")
    bench = _bench(folder, _labels(tmp_path, [(b, str(i % 2)) for i, b in enumerate(BOOKS)] + [("Gone.txt", "1")]))
    with pytest.raises(InputError) as err:
        _build(bench)
    assert str(err.value) == (f"{folder / 'Gone.txt'}: cannot read (a link to {tmp_path / 'elsewhere' / 'Gone.txt'}, "
                              "which is not there)")


def test_what_a_books_folder_holds_but_is_not_read_as_given_has_a_rejects_row(tmp_path):
    """A folder inside it, a file of another kind and an empty book are rejected rows (the empty book
    stopped the job, the other two went unmentioned); a book whose headings each head a short
    chapter is one document with a kept row naming min_chapter_words."""
    folder = _books(tmp_path)
    (folder / "Notes.md").write_text("my notes\n")
    (folder / "extra").mkdir()
    (folder / "extra" / "Copy.txt").write_text("a copy\n")
    (folder / "Empty.txt").write_text("\n\n")
    (folder / ".DS_Store").write_bytes(b"\0")
    short = "\n\n".join(f"CHAPTER {n}.\n\n" + " ".join(["word"] * 20) for n in ("I", "II", "III"))
    (folder / "Short.txt").write_text("SHORT\n\n" + short + "\n")
    # a book read by chapter with one short chapter among long ones: the short one was left out unmentioned
    long = " ".join(["Letter"] + ["garden"] * 79) + "."
    (folder / "Mixed.txt").write_text("MIXED\n\nCHAPTER I.\n\n" + long + "\n\nCHAPTER II.\n\nA note of six "
                                      "words only.\n\nCHAPTER III.\n\n" + long + "\n")
    labels = _labels(tmp_path, [(b, str(i % 2)) for i, b in enumerate(BOOKS)] + [("Short.txt", "1"),
                                                                                  ("Mixed.txt", "0")])
    rejects: list = []
    docs, _ = _build(_bench(folder, labels), rejects)
    rows = [(r.value, r.action, r.reason) for r in rejects if r.file == str(folder)]
    assert rows == [
        ("Empty.txt", "rejected", "no text left after removing the Gutenberg header and licence (an empty file?)"),
        ("Notes.md", "rejected", "not a .txt, .epub or .pdf file (.md)"),
        ("extra", "rejected", "a folder: books are read from the folder's top level only"),
        ("Mixed.txt: CHAPTER II.", "rejected", "6 words, fewer than min_chapter_words (50): the chapter is left out "
                                               "(lower source_options.user_books.min_chapter_words to keep it)"),
        ("Short.txt", "kept", "3 chapter heading(s), each over fewer than min_chapter_words (50) words: read as "
                              "one document (lower source_options.user_books.min_chapter_words to split it)")]
    short_docs = [d for d in docs if d.meta["book"] == "short"]
    assert [d.doc_id for d in short_docs] == ["user/short/ch001"] and short_docs[0].meta["chapter_headings"] == 3
    mixed = sorted((d for d in docs if d.meta["book"] == "mixed"), key=lambda d: d.doc_id)
    assert [(d.doc_id, d.meta["heading"]) for d in mixed] == [("user/mixed/ch001", "CHAPTER I."),
                                                              ("user/mixed/ch002", "CHAPTER III.")]
    assert mixed[0].meta["short_chapters"] == [["CHAPTER II.", 6]] and "short_chapters" not in mixed[1].meta
    assert {d.meta["book"] for d in docs} == {"emma", "persuasion", "the-voyage", "winter-tales", "short", "mixed"}
