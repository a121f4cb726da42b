"""Pure text utilities on hand-written inputs with exact expected outputs."""

from __future__ import annotations

import zipfile

import pytest

from memaudit.datasets.readers import epub_metadata, read_epub, read_text_file
from memaudit.datasets.text import (
    clean_text,
    gutenberg_metadata,
    is_english_word,
    join_hyphenated_lines,
    make_passages,
    split_chapters,
    split_sentences,
    strip_gutenberg,
)
from memaudit.errors import InputError


# --------------------------------------------------------------------------- clean_text

def test_clean_text_removes_controls_markup_and_extra_space():
    raw = "\ufeffa\x00b\x07c\r\nd   e\t_italic words_ snake_case_name\r\n\n\n\nf  \n  "
    assert clean_text(raw) == "abc\nd e\titalic words snake_case_name\n\nf"


def test_clean_text_normalises_to_nfc_and_is_idempotent():
    raw = "Cafe\u0301 _au lait_"
    assert clean_text(raw) == "Caf\u00e9 au lait"
    assert clean_text(clean_text(raw)) == clean_text(raw)


def test_clean_text_drops_soft_hyphens_and_makes_no_break_spaces_plain():
    """A soft hyphen (U+00AD) marks where a word may break and is no text ("trans\u00adformation" was
    another string, and other tokens, than "transformation"); one ending a line joins the word's halves.
    No-break spaces (U+00A0, U+202F: an epub's "Mr.&nbsp;Darcy") are spaces."""
    raw = "Mr.\u00a0Darcy\u00a0 saw 10\u202f000 trans\u00adfor\u00admation non\u00ad\nstop\u00a0\nend\u00ad"
    assert clean_text(raw) == "Mr. Darcy saw 10 000 transformation nonstop\nend"
    assert clean_text(clean_text(raw)) == clean_text(raw)


def test_join_hyphenated_lines_joins_a_word_broken_at_a_pdf_line_end_and_keeps_compounds():
    raw = ("a transfor-\nmation, an \u00e9l\u00e9-  \n  ment, COVID-\n19, Anglo-\nSaxon, so-called, a dash -\n"
           "here, a list-\n\nnext, under-\nstood, non\u00ad\nStop")
    assert join_hyphenated_lines(raw) == ("a transformation, an \u00e9l\u00e9ment, COVID-19, Anglo-Saxon, "
                                          "so-called, a dash -\nhere, a list-\n\nnext, understood, nonStop")


def test_join_hyphenated_lines_keeps_a_compound_broken_at_its_own_hyphen():
    """A compound WordNet lists ("so-called", "state-of-the-art"), or whose parts are English words and,
    joined, none, keeps its hyphen ("well-\nknown" was "wellknown"); a word broken where its parts are words
    too ("under-\nstood", "to-\ngether", "be-\ncause", "every-\nbody", "data-\nset"), or inflected
    ("transfor-\nmations", "frac-\ntured"), or with a part that is no word ("pre-\ntrained"), joins."""
    raw = ("a well-\nknown, state-of-the-\nart, long-\nterm and data-\ndriven method, well-\nKnown, so-\ncalled "
           "fine-\ntuned models; under-\nstood to-\ngether be-\ncause every-\nbody data-\nset transfor-\nmations "
           "frac-\ntured pre-\ntrained")
    assert join_hyphenated_lines(raw) == (
        "a well-known, state-of-the-art, long-term and data-driven method, well-Known, so-called fine-tuned "
        "models; understood together because everybody dataset transformations fractured pretrained")


@pytest.mark.parametrize(("word", "expected"), [
    ("well", True), ("known", True), ("wellknown", False), ("because", True), ("transformations", True),
    ("trained", True), ("geese", True), ("transfor", False), ("mation", False), ("pretrained", False),
])
def test_is_english_word_reads_wordnet_lemmas_inflections_and_stop_words(word, expected):
    assert is_english_word(word) is expected


# --------------------------------------------------------------------------- Gutenberg

MODERN = [
    "The Project Gutenberg EBook of Foo, by Bar",
    "",
    "Title: Foo",
    "Author: Bar Baz",
    "",
    "*** START OF THIS PROJECT GUTENBERG EBOOK FOO ***",
    "First line.",
    "Last line.",
    "End of Project Gutenberg's Foo, by Bar",
    "*** END OF THIS PROJECT GUTENBERG EBOOK FOO ***",
    "Section 1. General Terms of Use",
]


def test_strip_gutenberg_modern_header_and_footer():
    assert strip_gutenberg(MODERN) == ["First line.", "Last line."]


def test_strip_gutenberg_old_small_print_header():
    lines = ["**The Project Gutenberg Etext of Foo**", "legal text",
             "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*",
             "Body.", "End of the Project Gutenberg Etext of Foo", "licence"]
    assert strip_gutenberg(lines) == ["Body."]


def test_strip_gutenberg_is_a_noop_without_markers():
    lines = ["CHAPTER I", "", "Text about the project."]
    assert strip_gutenberg(lines) == lines


def test_gutenberg_metadata_reads_header_only():
    lines = MODERN[:6] + ["Title: not metadata, this is the novel"]
    assert gutenberg_metadata(lines) == {"title": "Foo", "author": "Bar Baz"}


# --------------------------------------------------------------------------- chapters

FRONT = "This etymology is front matter that must never become part of a chapter at all."


def test_split_chapters_skips_contents_list_and_front_matter():
    lines = [
        "MOBY DICK", "", "CONTENTS", "",
        "CHAPTER 1. Loomings.", "CHAPTER 2. The Carpet-Bag.", "Epilogue", "", "",
        "ETYMOLOGY.", "", FRONT, FRONT, "",
        "CHAPTER 1. Loomings.", "", "Call me Ishmael. Some years ago,", "never mind how long.", "",
        "Second paragraph here with words.", "",
        "CHAPTER 2. The Carpet-Bag.", "", "I stuffed a shirt or two into my old carpet-bag.",
        "Epilogue", "", "The drama's done. Why then here does any one step forth?",
    ]
    assert split_chapters(lines, min_words=8) == [
        ("CHAPTER 1. Loomings.",
         "Call me Ishmael. Some years ago, never mind how long.\n\nSecond paragraph here with words."),
        ("CHAPTER 2. The Carpet-Bag.", "I stuffed a shirt or two into my old carpet-bag."),
        ("Epilogue", "The drama's done. Why then here does any one step forth?"),
    ]


def test_split_chapters_contents_list_with_default_min_words():
    body = " ".join(["word"] * 210) + "."
    lines = ["Chapter I. Start", "Chapter II. End", "", "Preface. " + body, "",
             "Chapter I. Start", "", body, "", "Chapter II. End", "", body]
    chapters = split_chapters(lines)
    assert [h for h, _ in chapters] == ["Chapter I. Start", "Chapter II. End"]
    assert all(t == body for _, t in chapters)


def test_split_chapters_dividers_subtitles_and_end_marks():
    lines = [
        "EMMA", "", "VOLUME I", "", "CHAPTER I", "", "One two three four five six.", "",
        "VOLUME II", "", "CHAPTER I", "", "Seven eight nine ten eleven twelve.", "",
        "BOOK TWO", "", "THE EARTH UNDER THE MARTIANS", "", "", "CHAPTER ONE", "", "UNDER FOOT", "",
        "Thirteen fourteen fifteen sixteen seventeen eighteen.", "", "A NOTE ON THE TEXT", "",
        "This edition follows the first one.", "", "THE END", "", "Transcriber notes.",
    ]
    assert split_chapters(lines, min_words=5) == [
        ("CHAPTER I", "One two three four five six."),
        ("CHAPTER I", "Seven eight nine ten eleven twelve."),
        ("CHAPTER ONE. UNDER FOOT", "Thirteen fourteen fifteen sixteen seventeen eighteen."),
    ]


def test_split_chapters_ignores_prose_and_drops_short_chapters():
    lines = [
        "CHAPTER XII.", "", "Chapter 3 tells us nothing new, said he.",
        "chapter of the First Book of Kings and more words.", "",
        "CHAPTER XIII", "", "Too short.", "",
        "Chapter TWENTY-ONE: The Last", "", "Enough words in this final chapter to keep it.",
    ]
    assert split_chapters(lines, min_words=6) == [
        ("CHAPTER XII.",
         "Chapter 3 tells us nothing new, said he. chapter of the First Book of Kings and more words."),
        ("Chapter TWENTY-ONE: The Last", "Enough words in this final chapter to keep it."),
    ]


def test_split_chapters_without_headings_is_empty():
    assert split_chapters(["Just some text.", "", "More text."], min_words=1) == []


# --------------------------------------------------------------------------- sentences

def test_split_sentences_abbreviations_initials_and_quotes():
    text = ('Mr. Woodhouse met Mrs. Weston and Dr. Perry at St. Paul\'s. "Is it you?" '
            'she cried. "Yes." H. G. Wells agreed--Mr. Elton did not!\nSo did I. '
            'It ended\n\nwithout punctuation')
    assert split_sentences(text) == [
        "Mr. Woodhouse met Mrs. Weston and Dr. Perry at St. Paul's.",
        '"Is it you?" she cried.',
        '"Yes."',
        "H. G. Wells agreed--Mr. Elton did not!",
        "So did I.",
        "It ended",
        "without punctuation",
    ]


# --------------------------------------------------------------------------- passages

def _sentences(n: int, words: int = 5) -> str:
    return " ".join(" ".join(["W"] + ["w"] * (words - 2) + [f"s{i}."]) for i in range(n))


def test_make_passages_packs_whole_sentences_and_drops_short_tail():
    passages = make_passages(_sentences(7), target_words=12, max_passages=None)
    assert [len(p.split()) for p in passages] == [15, 15]  # tail of 5 < 12/2 is dropped
    assert passages[0] == "W w w w s0. W w w w s1. W w w w s2."
    assert all(p.endswith(".") for p in passages)


def test_make_passages_keeps_tail_of_half_target_and_limits_count():
    assert [len(p.split()) for p in make_passages(_sentences(8), 12, None)] == [15, 15, 10]
    assert make_passages(_sentences(8), 12, 1) == ["W w w w s0. W w w w s1. W w w w s2."]
    assert make_passages(_sentences(8), 12, 2) == make_passages(_sentences(8), 12, None)[:2]


def test_make_passages_cuts_overlong_sentence_at_one_and_a_half_targets():
    long_sentence = " ".join(f"x{i}" for i in range(39)) + " end."
    passages = make_passages(long_sentence, target_words=10, max_passages=None)
    assert [len(p.split()) for p in passages] == [15, 15, 10]
    assert passages[0] == " ".join(f"x{i}" for i in range(15))
    assert passages[-1].endswith("x38 end.")


def test_make_passages_preserves_paragraph_breaks_and_is_deterministic():
    text = "One two three. Four five six.\n\nSeven eight nine ten."
    assert make_passages(text, 4, None) == ["One two three. Four five six.", "Seven eight nine ten."]
    assert make_passages(text, 8, None) == ["One two three. Four five six.\n\nSeven eight nine ten."]
    assert make_passages(text, 8, None) == make_passages(text, 8, None)


# --------------------------------------------------------------------------- readers

def test_read_text_file_drops_bom_and_normalises_line_ends(tmp_path):
    path = tmp_path / "book.txt"
    path.write_bytes(b"\xef\xbb\xbfHello\r\nworld\rend\n")
    assert read_text_file(path) == "Hello\nworld\nend\n"


def test_read_text_file_names_a_nul_by_line_and_column(tmp_path):
    """A NUL was removed without a word (a UTF-16 file without its byte-order mark read as UTF-8 is every
    other byte NUL): it stops the build naming where it is, as a byte that is not UTF-8 does."""
    path = tmp_path / "book.txt"
    path.write_bytes(b"\xef\xbb\xbfOne\r\nCaf\xc3\xa9 Hel\x00lo\nmore\x00\n")
    with pytest.raises(InputError) as info:
        read_text_file(path)
    assert str(info.value) == (f"{path}, line 2, column 9: a NUL character (2 in the file); a book is read as "
                               f"UTF-8 text: is it UTF-16 or a binary file? convert it to UTF-8")


def test_read_text_file_non_utf8_names_file_and_offset(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("abc\u00e9".encode("latin-1"))
    with pytest.raises(InputError, match=r"latin1\.txt, line 1: invalid UTF-8 at byte offset 3"):
        read_text_file(path)


def test_read_text_file_empty_after_cleaning_names_file(tmp_path):
    path = tmp_path / "blank.txt"
    path.write_bytes(b"\x07 \n\t\n")
    with pytest.raises(InputError, match=r"blank\.txt: no text left"):
        read_text_file(path)


CONTAINER = """<?xml version="1.0"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
  <rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles>
</container>"""

OPF = """<?xml version="1.0"?>
<package xmlns="http://www.idpf.org/2007/opf" version="2.0">
  <metadata xmlns:dc="http://purl.org/dc/elements/1.1/">
    <dc:title>A Test Book</dc:title><dc:creator>Ann Author</dc:creator>
  </metadata>
  <manifest>
    <item id="b" href="text/two.xhtml" media-type="application/xhtml+xml"/>
    <item id="a" href="text/one.xhtml" media-type="application/xhtml+xml"/>
  </manifest>
  <spine><itemref idref="a"/><itemref idref="b"/></spine>
</package>"""

ONE = """<html xmlns="http://www.w3.org/1999/xhtml"><head><title>skip me</title>
<style>p {color: red}</style></head><body>
<h1>Chapter 1</h1><p>It was a <i>dark</i>
and stormy night &amp; cold.</p><p>Line one<br/>Line two</p></body></html>"""

TWO = """<html><body><div><p>The second file.</p><script>var x = 1;</script></div></body></html>"""


def _write_epub(path, files):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("mimetype", "application/epub+zip")
        for name, content in files.items():
            zf.writestr(name, content)


def test_read_epub_follows_spine_and_keeps_paragraphs(tmp_path):
    path = tmp_path / "book.epub"
    _write_epub(path, {"META-INF/container.xml": CONTAINER, "OEBPS/content.opf": OPF,
                       "OEBPS/text/one.xhtml": ONE, "OEBPS/text/two.xhtml": TWO})
    assert read_epub(path) == ("Chapter 1\n\nIt was a dark and stormy night & cold.\n\n"
                               "Line one\n\nLine two\n\nThe second file.")
    assert epub_metadata(path) == {"title": "A Test Book", "author": "Ann Author"}


def test_read_epub_decodes_each_document_in_its_declared_encoding_or_names_its_bad_bytes(tmp_path):
    """An ISO-8859-1 chapter read as UTF-8 with errors="replace" became 'Caf\ufffd na\ufffdve' without a word."""
    latin = '<?xml version="1.0" encoding="iso-8859-1"?><html><body><p>Caf\xe9 na\xefve</p></body></html>'
    meta = '<html><head><meta charset="windows-1252"/></head><body><p>\u201cQuoted\u201d</p></body></html>'
    path = tmp_path / "book.epub"
    _write_epub(path, {"META-INF/container.xml": CONTAINER, "OEBPS/content.opf": OPF,
                       "OEBPS/text/one.xhtml": latin.encode("latin-1"), "OEBPS/text/two.xhtml": meta.encode("cp1252")})
    assert read_epub(path) == "Café naïve\n\n\u201cQuoted\u201d"
    bad = tmp_path / "bad.epub"
    _write_epub(bad, {"META-INF/container.xml": CONTAINER, "OEBPS/content.opf": OPF,
                      "OEBPS/text/one.xhtml": latin.encode("latin-1").replace(b"iso-8859-1", b"utf-8"),
                      "OEBPS/text/two.xhtml": TWO})
    with pytest.raises(InputError, match=r"^.*bad\.epub: OEBPS/text/one\.xhtml is not valid utf-8 at byte offset 56 "
                                         r"\(byte 0xe9\)$"):
        read_epub(bad)


def test_read_epub_names_a_nul_by_document_line_and_column(tmp_path):
    """A NUL in a chapter's XHTML was dropped by clean_text without a word."""
    path = tmp_path / "nul.epub"
    _write_epub(path, {"META-INF/container.xml": CONTAINER, "OEBPS/content.opf": OPF,
                       "OEBPS/text/one.xhtml": ONE, "OEBPS/text/two.xhtml": TWO.replace("second", "sec\x00ond")})
    with pytest.raises(InputError) as info:
        read_epub(path)
    assert str(info.value) == f"{path}: OEBPS/text/two.xhtml, line 1, column 28: a NUL character (1 in the document)"


def test_read_epub_rejects_non_epub_naming_the_file(tmp_path):
    fake = tmp_path / "fake.epub"
    fake.write_text("not a zip")
    with pytest.raises(InputError, match=r"fake\.epub: not a valid epub"):
        read_epub(fake)
    no_container = tmp_path / "nocontainer.epub"
    _write_epub(no_container, {"OEBPS/content.opf": OPF})
    with pytest.raises(InputError, match=r"nocontainer\.epub: not a valid epub \(missing"):
        read_epub(no_container)
