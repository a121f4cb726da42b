"""Sources on the real demo assets (Debian R data packages) and on small user books.

The first test session on a machine downloads about 6 MB of Debian packages
into ``resources/demo`` (``apt-get download``); later sessions reuse them.
"""

from __future__ import annotations

import collections
import json
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from memaudit import assets
from memaudit.assets import DEMO_PACKAGES, fetch_demo_assets, read_lazyload, read_rda
from memaudit.datasets.sources import SOURCES, load_source
from memaudit.datasets.text import split_chapters, strip_gutenberg
from memaudit.errors import AssetError, ConfigError, InputError

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "resources" / "demo"


@pytest.fixture(scope="session")
def demo_assets() -> Path:
    """The unpacked demo packages, fetched once (idempotent)."""
    if not (DEMO / ".fetched").exists() and shutil.which("apt-get") is None:
        pytest.skip("demo assets need apt-get (Debian/Ubuntu) and are not fetched yet")
    return fetch_demo_assets(DEMO, log=lambda msg: None)


@pytest.fixture(scope="session")
def corpora(demo_assets) -> dict:
    """Every demo source loaded once for the session."""
    return {name: load_source(name, demo_assets) for name in ("austen", "mobydick", "tidytext", "reuters")}


def _per_book(docs) -> dict[str, int]:
    return dict(collections.Counter(d.meta["book"] for d in docs))


# --------------------------------------------------------------------------- assets

def test_fetch_is_idempotent_and_records_versions(demo_assets):
    logged = []
    mtime = (demo_assets / ".fetched").stat().st_mtime_ns
    assert fetch_demo_assets(demo_assets, log=logged.append) == demo_assets
    assert logged == []  # nothing downloaded or unpacked the second time
    # the stamp keeps its mtime, so Snakemake does not see the datasets as stale
    assert (demo_assets / ".fetched").stat().st_mtime_ns == mtime
    record = json.loads((demo_assets / ".fetched").read_text())
    assert sorted(record) == sorted(DEMO_PACKAGES)
    for pkg, entry in record.items():
        assert entry["deb"].startswith(f"{pkg}_") and entry["deb"].endswith(".deb")
        assert entry["version"] and entry["version"] in entry["deb"]


def test_fetch_updates_lists_once_then_names_package_and_stderr(tmp_path, monkeypatch):
    calls = []

    def fake_run(cmd, cwd=None):
        calls.append(cmd[:2])
        if cmd[:2] == ["apt-get", "update"]:
            return subprocess.CompletedProcess(cmd, 0, "", "")
        return subprocess.CompletedProcess(cmd, 100, "", "E: Unable to locate package r-cran-nope")

    monkeypatch.setattr(assets, "_run", fake_run)
    with pytest.raises(AssetError, match=r"cannot fetch r-cran-nope: .*Unable to locate package r-cran-nope"):
        fetch_demo_assets(tmp_path, packages=("r-cran-nope",), log=lambda msg: None)
    assert calls == [["apt-get", "download"], ["apt-get", "update"], ["apt-get", "download"]]
    assert not (tmp_path / ".fetched").exists()
    assert list((tmp_path / "extracted").iterdir()) == []


def test_no_apt_get_defers_to_the_sources_that_need_a_package(tmp_path, monkeypatch, demo_assets):
    """A RHEL-like node has no apt-get: the workflow's fetch records what it could not fetch and goes on
    (a config of the user's own books needs no package); a demo source then fails naming the package and
    the remedy; the CLI, which asks for the packages by name, fails at once."""
    monkeypatch.setattr(assets.shutil, "which", lambda tool: None if tool in ("apt-get", "dpkg-deb") else "/bin/x")

    def no_such_tool(cmd, **kwargs):  # what subprocess.run raises for a program not on PATH
        raise FileNotFoundError(2, "No such file or directory", cmd[0])

    monkeypatch.setattr(assets.subprocess, "run", no_such_tool)
    shutil.copytree(demo_assets / "extracted" / "r-cran-tm", tmp_path / "extracted" / "r-cran-tm")
    logged = []
    assert fetch_demo_assets(tmp_path, packages=("r-cran-tm", "r-cran-janeaustenr"), log=logged.append) == tmp_path
    assert logged == ["warning: apt-get and dpkg-deb not found, so the demo packages r-cran-janeaustenr are not "
                      "fetched: the demo sources that read them fail when loaded (run `memaudit fetch-assets` on a "
                      "Debian or Ubuntu machine); benchmarks of your own books, articles or published files need none"]
    record = json.loads((tmp_path / ".fetched").read_text())
    assert record["r-cran-janeaustenr"] == {"deb": None, "version": None,
                                            "not_fetched": "apt-get and dpkg-deb not found"}
    assert set(record) == {"r-cran-tm", "r-cran-janeaustenr"}
    assert len(load_source("reuters", tmp_path)) == 70  # the package that is here still serves its source
    with pytest.raises(AssetError, match=re.escape(
            f"demo asset r-cran-janeaustenr not found at {tmp_path}/extracted/r-cran-janeaustenr; run `memaudit "
            f"fetch-assets --dest {tmp_path}` on a Debian or Ubuntu machine (apt-get and dpkg-deb not found here) "
            "first")):
        load_source("austen", tmp_path)
    with pytest.raises(AssetError, match=r"^apt-get not found: the demo assets are Debian packages"):
        fetch_demo_assets(tmp_path / "cli", packages=("r-cran-janeaustenr",), log=logged.append, require_tools=True)
    # nothing to fetch: no tool is asked for, no warning
    logged.clear()
    fetch_demo_assets(tmp_path, packages=("r-cran-tm",), log=logged.append)
    assert logged == []


def test_read_lazyload_errors_name_the_file(demo_assets, tmp_path):
    pkg = demo_assets / "extracted" / "r-cran-janeaustenr"
    with pytest.raises(AssetError, match=r"Rdata\.rdx: no object 'nope' \(has: emma, mansfieldpark"):
        read_lazyload(pkg, "nope")
    broken = tmp_path / "r-cran-janeaustenr"
    shutil.copytree(pkg, broken)
    rdb = broken / "usr/lib/R/site-library/janeaustenr/data/Rdata.rdb"
    data = bytearray(rdb.read_bytes())
    data[10:2000] = bytes(1990)  # zero the middle of the first (emma) zlib stream
    rdb.write_bytes(bytes(data))
    with pytest.raises(AssetError, match=r"Rdata\.rdb: corrupt entry for 'emma'"):
        read_lazyload(broken, "emma")
    with pytest.raises(AssetError, match=r"missing\.rda: R data file missing"):
        read_rda(tmp_path / "missing.rda")


def test_read_rda_books_table(demo_assets):
    rda = demo_assets / "extracted/r-cran-tidytext/usr/lib/R/site-library/tidytext/extdata/books.rda"
    books = read_rda(rda)["books"]
    assert list(books.columns) == ["gutenberg_id", "text", "title"]
    assert books.groupby("gutenberg_id").size().to_dict() == {36: 6474, 164: 12135, 1342: 13030, 1400: 20024}


# --------------------------------------------------------------------------- demo sources

def test_austen_chapters_per_novel(corpora):
    docs = corpora["austen"]
    assert _per_book(docs) == {"emma": 55, "mansfieldpark": 48, "northangerabbey": 31,
                               "persuasion": 24, "prideprejudice": 61, "sensesensibility": 50}
    assert 700_000 < sum(d.meta["n_words"] for d in docs) < 730_000
    emma = {d.doc_id: d for d in docs if d.meta["book"] == "emma"}
    first = emma["austen/emma/ch001"]
    assert (first.title, first.author, first.kind, first.source) == ("Emma", "Jane Austen", "book", "austen")
    assert first.text.startswith("Emma Woodhouse, handsome, clever, and rich, with a comfortable home\nand"
                                 .replace("\n", " "))
    # Numbering runs through the volumes: Volume II opens with chapter 19.
    assert emma["austen/emma/ch019"].meta["heading"] == "CHAPTER I"
    assert emma["austen/emma/ch055"].text.endswith("in the perfect happiness of the union.")
    # Northanger Abbey's editorial "A NOTE ON THE TEXT" is not part of chapter 31.
    northanger = [d for d in docs if d.meta["book"] == "northangerabbey"][-1]
    assert northanger.text.endswith("*Vide a letter from Mr. Richardson, No. 97, Vol. II, Rambler.")
    assert {d.title for d in docs} == {"Emma", "Mansfield Park", "Northanger Abbey", "Persuasion",
                                       "Pride and Prejudice", "Sense and Sensibility"}
    assert not any("_" in d.text for d in docs)  # Gutenberg italics unwrapped


def test_mobydick_chapters_without_gutenberg_text(corpora):
    docs = corpora["mobydick"]
    # 135 chapters + Epilogue; chapters 120 and 122 have under 200 words and are dropped.
    assert len(docs) == 134
    headings = [d.meta["heading"] for d in docs]
    assert headings[0] == "CHAPTER 1. Loomings." and headings[-1] == "Epilogue"
    numbers = {int(m.group(1)) for h in headings if (m := re.match(r"CHAPTER (\d+)\.", h))}
    assert set(range(1, 136)) - numbers == {120, 122}
    assert docs[0].text.startswith("Call me Ishmael.")
    assert docs[-1].text.endswith("only found another orphan.")
    assert {d.author for d in docs} == {"Herman Melville"}
    for d in docs:
        assert "Gutenberg" not in d.text and "ETYMOLOGY" not in d.text
        assert "Supplied by a Sub-Sub-Librarian" not in d.text


def test_mobydick_contents_list_does_not_create_chapters(demo_assets, corpora):
    # One string with CRLF line endings.
    lines = list(read_lazyload(demo_assets / "extracted/r-cran-tokenizers", "mobydick"))[0].splitlines()
    body = strip_gutenberg(lines)
    heading = re.compile(r"^(CHAPTER \d+\. .*|Epilogue)$")
    contents = ["CONTENTS", ""] + [line for line in body if heading.match(line)] + ["", ""]
    start = next(i for i, line in enumerate(body) if line.startswith("ETYMOLOGY"))
    with_contents = body[:start] + contents + body[start:]
    assert len(contents) == 140
    assert split_chapters(with_contents) == split_chapters(body)
    assert [h for h, _ in split_chapters(body)] == [d.meta["heading"] for d in corpora["mobydick"]]


def test_tidytext_books_and_exclusion(demo_assets, corpora):
    docs = corpora["tidytext"]
    assert _per_book(docs) == {"greatexpectations": 59, "prideprejudice": 61,
                               "twentythousandleagues": 46, "warofworlds": 27}
    authors = {d.title: d.author for d in docs}
    assert authors == {"The War of the Worlds": "H. G. Wells",
                       "Twenty Thousand Leagues under the Sea": "Jules Verne",
                       "Pride and Prejudice": "Jane Austen", "Great Expectations": "Charles Dickens"}
    wotw = [d for d in docs if d.meta["book"] == "warofworlds"]
    assert wotw[0].meta["heading"] == "CHAPTER ONE. THE EVE OF THE WAR"
    assert wotw[17].meta["heading"] == "CHAPTER ONE. UNDER FOOT"  # Book Two restarts numbering
    # tidytext's Pride and Prejudice is the same text as janeaustenr's.
    pp_tidy = [d.text for d in docs if d.meta["book"] == "prideprejudice"]
    pp_austen = [d.text for d in corpora["austen"] if d.meta["book"] == "prideprejudice"]
    assert pp_tidy == pp_austen
    kept = load_source("tidytext", demo_assets, exclude_titles=["pride and prejudice"])
    assert len(kept) == 193 - 61 and "Pride and Prejudice" not in {d.title for d in kept}
    with pytest.raises(ConfigError, match=r"unknown title\(s\) \['Emma'\] \(known: Great Expectations"):
        load_source("tidytext", demo_assets, exclude_titles=["Emma"])


def test_reuters_articles(corpora):
    docs = corpora["reuters"]
    assert len(docs) == 70
    assert collections.Counter(d.meta["category"] for d in docs) == {"acq": 50, "crude": 20}
    by_id = {d.doc_id: d for d in docs}
    saudi = by_id["reuters/crude/242"]
    assert saudi.title == "SAUDI RIYAL DEPOSIT RATES REMAIN FIRM"
    assert saudi.text.startswith("Saudi riyal interbank deposits were steady at yesterday's higher "
                                 "levels in a quiet market.\n\nTraders said")
    assert saudi.text.endswith("to the dollar after quotes of 3.7500/03 yesterday.")
    assert (saudi.kind, saudi.author, saudi.meta["dateline"]) == ("news", "Reuters", "BAHRAIN, March 1")
    for d in docs:
        assert not re.search(r"(Reuter|REUTER)\W*$", d.text), d.doc_id
        assert "&apos;" not in d.text and "&lt;" not in d.text and "&quot;" not in d.text


def test_all_demo_sources_unique_sorted_and_deterministic(demo_assets, corpora):
    all_ids = [d.doc_id for docs in corpora.values() for d in docs]
    assert len(all_ids) == 269 + 134 + 193 + 70
    # tidytext and austen share Pride and Prejudice's text but not its ids.
    assert len(set(all_ids)) == len(all_ids)
    for name, docs in corpora.items():
        assert [d.doc_id for d in docs] == sorted(d.doc_id for d in docs)
        assert all(d.text and d.text == d.text.strip() and "\x00" not in d.text for d in docs)
    again = load_source("reuters", demo_assets)
    assert [d.to_dict() for d in again] == [d.to_dict() for d in corpora["reuters"]]


# --------------------------------------------------------------------------- registry

def test_unknown_source_and_option_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown source 'nope' \(known: austen, mobydick, tidytext, "
                                          r"reuters, user_books, pydoc_topics, demo_qa\)"):
        load_source("nope", tmp_path)
    with pytest.raises(ConfigError, match=r"source 'austen': unknown option\(s\) \['directory'\]"):
        load_source("austen", tmp_path, directory="x")
    assert set(SOURCES) == {"austen", "mobydick", "tidytext", "reuters", "user_books", "pydoc_topics", "demo_qa"}


def test_missing_assets_name_the_fix(tmp_path):
    with pytest.raises(AssetError, match=r"r-cran-janeaustenr not found .* run `memaudit fetch-assets"):
        load_source("austen", tmp_path)


# --------------------------------------------------------------------------- user_books

GUTENBERG_BOOK = """The Project Gutenberg EBook of Little Tales, by Ann Writer

Title: Little Tales

Author: Ann Writer

*** START OF THIS PROJECT GUTENBERG EBOOK LITTLE TALES ***

LITTLE TALES

CHAPTER I.

The first tale begins here and
it goes on for a while.

CHAPTER II.

The second tale is told in _this_ chapter.

End of the Project Gutenberg EBook of Little Tales
*** END OF THIS PROJECT GUTENBERG EBOOK LITTLE TALES ***
Licence text that must not survive.
"""


def test_user_books_txt_and_epub(tmp_path):
    books = tmp_path / "books"
    books.mkdir()
    (books / "little tales.txt").write_text(GUTENBERG_BOOK, encoding="utf-8")
    (books / "notes.txt").write_text("One paragraph per line.\nAnother line here.\n", encoding="utf-8")
    (books / "ignored.docx").write_bytes(b"PK")
    with zipfile.ZipFile(books / "Story.epub", "w") as zf:
        zf.writestr("META-INF/container.xml",
                    '<container xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
                    '<rootfile full-path="content.opf"/></rootfiles></container>')
        zf.writestr("content.opf",
                    '<package xmlns="http://www.idpf.org/2007/opf"><metadata '
                    'xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>A Story</dc:title>'
                    '<dc:creator>Bo Teller</dc:creator></metadata><manifest>'
                    '<item id="c1" href="c1.xhtml"/></manifest><spine><itemref idref="c1"/></spine></package>')
        zf.writestr("c1.xhtml", "<html><body><p>Once upon a time.</p><p>The end came.</p></body></html>")
    docs = load_source("user_books", tmp_path, directory=books, min_chapter_words=3)
    got = [(d.doc_id, d.title, d.author, d.meta["heading"], d.text) for d in docs]
    assert got == [
        ("user/little-tales/ch001", "Little Tales", "Ann Writer", "CHAPTER I.",
         "The first tale begins here and it goes on for a while."),
        ("user/little-tales/ch002", "Little Tales", "Ann Writer", "CHAPTER II.",
         "The second tale is told in this chapter."),
        ("user/notes/ch001", "notes", "unknown", "", "One paragraph per line.\n\nAnother line here."),
        ("user/story/ch001", "A Story", "Bo Teller", "", "Once upon a time.\n\nThe end came."),
    ]
    assert {d.source for d in docs} == {"user_books"} and {d.kind for d in docs} == {"book"}


def test_user_books_reads_pdf_papers_for_an_arxivtection_like_benchmark(tmp_path):
    """A paper is one document of kind paper: its text layer (pypdf) with hyphenated line breaks re-joined,
    title and author from the PDF's metadata (else the file name and "unknown")."""
    from matplotlib.backends.backend_pdf import PdfPages
    from matplotlib.figure import Figure

    papers = tmp_path / "papers"
    papers.mkdir()
    for name, meta, pages in [
        ("attention.pdf", {"Title": "Attention Is Enough", "Author": "A. Writer"},
         ["Transformers re-\nplace recurrence with attention.\nThey scale well.", "Page two says more."]),
        ("untitled.pdf", {}, ["A second paper without metadata."]),
    ]:
        with PdfPages(papers / name, metadata=meta) as pdf:
            for page in pages:
                fig = Figure()
                fig.text(0.05, 0.5, page, fontsize=10)
                pdf.savefig(fig)
    docs = load_source("user_books", tmp_path, directory=papers)
    assert [(d.doc_id, d.title, d.author, d.kind, d.text, d.meta["n_words"]) for d in docs] == [
        ("user/attention", "Attention Is Enough", "A. Writer", "paper",
         "Transformers replace recurrence with attention. They scale well. Page two says more.", 12),
        ("user/untitled", "untitled", "unknown", "paper", "A second paper without metadata.", 5)]
    # a broken or text-less PDF stops the source with its name and the reason
    (papers / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    with pytest.raises(InputError, match=r"broken\.pdf: not a readable PDF"):
        load_source("user_books", tmp_path, directory=papers)
    (papers / "broken.pdf").unlink()
    with PdfPages(papers / "scan.pdf") as pdf:
        pdf.savefig(Figure())
    with pytest.raises(InputError, match=r"scan\.pdf: no text layer in its 1 page\(s\)"):
        load_source("user_books", tmp_path, directory=papers)


def test_user_books_named_in_another_script_keep_distinct_ids(tmp_path):
    """Books whose file names hold no ASCII letter or digit are ``book-`` and 8 hex digits of the name's
    SHA-256, not all ``user/book`` (the second was refused as the first's duplicate)."""
    for name in ("Война и мир", "紅樓夢"):
        (tmp_path / f"{name}.txt").write_text("One paragraph of the book.\n", encoding="utf-8")
    docs = load_source("user_books", tmp_path, directory=tmp_path, min_chapter_words=3)
    assert sorted((d.doc_id, d.title) for d in docs) == [
        ("user/book-ea1d47ab/ch001", "紅樓夢"), ("user/book-f83d61d9/ch001", "Война и мир")]


def test_user_books_missing_directory_and_bad_file(tmp_path):
    from memaudit.datasets.sources import user_books_inputs

    assert load_source("user_books", tmp_path, directory=tmp_path / "absent") == []
    # the dataset job's inputs: the folder itself when it is not there, which Snakemake names before any job runs
    bench = {"sources": ["austen", "user_books"],
             "source_options": {"user_books": {"directory": str(tmp_path / "absent")}}}
    assert user_books_inputs(bench) == [str(tmp_path / "absent")]
    (tmp_path / "absent").mkdir()
    assert user_books_inputs(bench) == [] and user_books_inputs({"sources": ["austen"]}) == []
    (tmp_path / "absent" / "Emma.txt").write_text("x")
    assert user_books_inputs(bench) == [str(tmp_path / "absent" / "Emma.txt")]
    (tmp_path / "bad.txt").write_bytes(b"Chapter 1\r\n\r\ncaf\xe9")  # the line, not only the byte offset
    with pytest.raises(InputError, match=r"bad\.txt, line 3: invalid UTF-8 at byte offset 16 \(byte 0xe9\)"):
        load_source("user_books", tmp_path, directory=tmp_path)


def test_user_books_nul_stops_the_build_naming_line_and_column(tmp_path):
    """A NUL in a book was removed without a word; the user's own file is never changed silently."""
    books = tmp_path / "books"
    books.mkdir()
    (books / "Emma.txt").write_bytes("CHAPTER I\n\nEmma Woodhouse, handsome,\nclever\x00 and rich.\n".encode())
    with pytest.raises(InputError) as info:
        load_source("user_books", tmp_path, directory=books, min_chapter_words=3)
    assert str(info.value) == (f"{books / 'Emma.txt'}, line 4, column 7: a NUL character (1 in the file); a book is "
                               f"read as UTF-8 text: is it UTF-16 or a binary file? convert it to UTF-8")


def test_pydoc_topics_are_prose_documents_of_the_python_reference(tmp_path):
    docs = load_source("pydoc_topics", tmp_path)
    assert len(docs) > 50 and all(d.kind == "paper" and d.doc_id.startswith("pydoc/") for d in docs)
    text = "\n".join(d.text for d in docs)
    assert "::=" not in text and ">>>" not in text and "=====" not in text
    assert all(d.meta["n_words"] >= 40 for d in docs)


def test_a_multi_source_benchmarks_split_does_not_depend_on_the_order_sources_are_listed(tmp_path):
    """[user_books, pydoc_topics] and [pydoc_topics, user_books] sampled and shuffled the documents in the
    order listed, so the same sources gave two different member sets."""
    from memaudit.datasets.build import build_benchmark

    books = tmp_path / "books"
    books.mkdir()
    for name in ("Emma", "Persuasion", "Sanditon"):
        chapters = [f"CHAPTER {n}\n\n" + " ".join(f"{name} walked to the garden in chapter {n}, sentence {i}."
                                                  for i in range(30)) for n in ("I", "II", "III")]
        (books / f"{name}.txt").write_text("\n\n".join(chapters) + "\n", encoding="utf-8")
    bench = {"passage_words": 40, "passages_per_document": 1, "min_passages": 1, "member_fraction": 0.5,
             "n_documents": 20, "near_duplicate_ngram": None,
             "source_options": {"user_books": {"directory": str(books), "min_chapter_words": 50}}}
    splits = []
    for sources in (["user_books", "pydoc_topics"], ["pydoc_topics", "user_books"]):
        docs, _ = build_benchmark("mixed", dict(bench, sources=sources), tmp_path, seed=13)
        splits.append({d.doc_id: d.meta["label"] for d in docs})
    assert splits[0] == splits[1]
    assert len(splits[0]) == 20 and sum(splits[0].values()) == 10
    assert any(i.startswith("user/") for i in splits[0]) and any(i.startswith("pydoc/") for i in splits[0])


def test_a_benchmark_asking_for_more_than_its_books_give_says_so(tmp_path, caplog):
    """``n_documents`` above what the sources give took them all, said in the log's counts only; a
    ``passage_words`` longer than every document stopped on "only 0 usable documents", naming neither."""
    from memaudit.datasets.build import build_benchmark

    books = tmp_path / "books"
    books.mkdir()
    for name in ("Emma", "Persuasion"):
        chapters = [f"CHAPTER {n}\n\n" + " ".join(f"{name} walked to the garden in chapter {n}, sentence {i}."
                                                  for i in range(30)) for n in ("I", "II", "III")]
        (books / f"{name}.txt").write_text("\n\n".join(chapters) + "\n", encoding="utf-8")
    bench = {"sources": ["user_books"], "passage_words": 40, "passages_per_document": 1, "min_passages": 1,
             "member_fraction": 0.5, "n_documents": 50, "near_duplicate_ngram": None,
             "source_options": {"user_books": {"directory": str(books), "min_chapter_words": 50}}}
    with caplog.at_level("WARNING", logger="memaudit.datasets.build"):
        docs, _ = build_benchmark("mine", bench, tmp_path, seed=13)
    assert len(docs) == 6
    assert caplog.messages == ["benchmark mine: n_documents is 50, but the sources give 6 usable documents (0 left "
                               "out for fewer than min_passages passages): all 6 are used"]
    words = len((books / "Emma.txt").read_text().split("\n\n")[1].split())  # a chapter's words
    with pytest.raises(InputError) as err:
        build_benchmark("mine", dict(bench, passage_words=5000), tmp_path, seed=13)
    assert str(err.value) == (f"benchmark 'mine': only 0 usable documents in sources ['user_books'] (need at least 2 "
                              f"with 1 passage(s) of passage_words=5000 words; 6 document(s) gave fewer, the longest "
                              f"of them {words:,} words)")
