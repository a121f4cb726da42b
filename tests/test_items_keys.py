"""The items rules get only the settings keys their builders read (``ITEMS_KEYS`` of
:mod:`memaudit.probes.decop.plan`, ``ITEMS_KEYS`` and ``QA_ITEMS_KEYS`` of
:mod:`memaudit.probes.copybench.plan`): each builder, run on small inputs with the probe's full
settings behind a mapping that records every key asked for, asks for declared keys only. A builder
that came to read another key would, in the workflow, raise a KeyError, or worse, quietly take a
``.get`` default; here it fails at once, naming the key."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from memaudit.io import write_jsonl
from memaudit.jobs import job_settings, load_config

ROOT = Path(__file__).resolve().parents[1]


class Recording(Mapping):
    """``settings`` read-only, every top-level key asked for (found or not) in ``read``; iterating
    (``keys``, ``items``, ``dict(...)``, ``{**...}``) counts as reading every key."""

    def __init__(self, settings: dict):
        self._settings, self.read = dict(settings), set()

    def __getitem__(self, key):
        self.read.add(key)
        return self._settings[key]

    def __contains__(self, key):
        self.read.add(key)
        return key in self._settings

    def get(self, key, default=None):
        self.read.add(key)
        return self._settings.get(key, default)

    def __iter__(self):
        self.read.update(self._settings)
        return iter(self._settings)

    def __len__(self):
        return len(self._settings)


def _undeclared(recording: Recording, declared) -> set:
    return recording.read - set(declared)


@pytest.fixture(scope="module")
def config():
    return load_config(ROOT / "config" / "config.yaml")


def _sentences(tag: str, n: int) -> str:
    return " ".join(f"The keeper of {tag} counted {k} bells by the quay and walked home slowly in the rain."
                    for k in range(n))


def test_the_recording_mapping_catches_every_way_of_reading_a_key():
    rec = Recording({"a": 1, "b": 2})
    assert rec["a"] == 1 and rec.get("z") is None and "y" not in rec
    assert rec.read == {"a", "z", "y"}
    assert dict(rec) == {"a": 1, "b": 2} and rec.read == {"a", "b", "y", "z"}


# ----------------------------------------------------------------------------- DE-COP

class _Paraphraser:
    """Three paraphrases of every passage, word for word of other words: QC accepts them."""

    def candidates(self, texts, lengths, attempt, wanted=None):
        return [[" ".join(f"{w}{i}" for i in range(len(t.split()))) for w in ("alpha", "bravo", "charlie")][:n]
                for t, n in zip(texts, wanted or [3] * len(texts))]

    def describe(self):
        return {"paraphraser": "stub"}


class _Encoder:
    def cosine(self, a, b):
        return [1.0] * len(a)


def _decop_documents(path: Path, n: int = 8) -> Path:
    write_jsonl(path, ({"doc_id": f"d{i}", "source": "s", "title": f"T{i}", "author": "A", "kind": "book",
                        "text": _sentences(f"d{i}", 60), "meta": {"label": i % 2}} for i in range(n)))
    return path


def _decop_settings(config) -> Recording:
    from memaudit.probes.decop.plan import ITEMS_KEYS, settings

    cfg = settings(config, "books")
    assert set(cfg) > set(ITEMS_KEYS)  # more keys than the items builders may read: a read of another is seen
    # the full settings (every key the probe jobs get too), small enough for a quick run
    cfg.update(lengths=[64], n_documents=None, calibration_documents=2, passages_per_document=2)
    return Recording(cfg)


def test_decop_build_items_reads_only_its_items_keys(config, tmp_path):
    from memaudit.probes.decop.plan import ITEMS_KEYS
    from memaudit.probes.decop.runner import build_items

    cfg = _decop_settings(config)
    items = build_items(_decop_documents(tmp_path / "documents.jsonl"), cfg, 13, _Paraphraser(), _Encoder(),
                        tmp_path / "mcq.jsonl", tmp_path / "qc.csv", progress=lambda m: None)
    assert items and cfg.read  # a real run: items were made
    assert not _undeclared(cfg, ITEMS_KEYS), \
        f"decop build_items reads keys outside ITEMS_KEYS: {_undeclared(cfg, ITEMS_KEYS)}"


def test_decop_published_items_for_run_reads_only_its_items_keys(config, tmp_path):
    import pandas as pd

    from memaudit.datasets.published import published_benchmark
    from memaudit.probes.decop.plan import ITEMS_KEYS
    from memaudit.probes.decop.runner import published_items_for_run

    rows = [{"ID": f"Book_{i}_-_Author_{i}", "Label": i % 2, "Length": "small", "Answer": "A",
             **{f"Example_{c}": f"Book {i} passage {n} option {c}." for c in "ABCD"}}
            for i in range(8) for n in range(2)]
    pd.DataFrame(rows).to_csv(tmp_path / "BookTection.csv", index=False)
    published = {"format": "booktection", "path": str(tmp_path / "BookTection.csv")}
    docs, _ = published_benchmark("bt", published)
    write_jsonl(tmp_path / "documents.jsonl", (d.to_dict() for d in docs))
    cfg = _decop_settings(config)
    items = published_items_for_run(tmp_path / "documents.jsonl", published, cfg, 13, tmp_path / "items.jsonl",
                                    tmp_path / "qc.csv")
    assert items and cfg.read
    assert not _undeclared(cfg, ITEMS_KEYS), \
        f"published_items_for_run reads keys outside ITEMS_KEYS: {_undeclared(cfg, ITEMS_KEYS)}"


# ----------------------------------------------------------------------------- CopyBench

def _copybench_documents(path: Path) -> Path:
    """Two short books of two chapters each: literal items, fact-recall passages; too short for stories."""
    write_jsonl(path, ({"doc_id": f"austen/{book}/ch{c:03d}", "source": "austen", "title": book.title(),
                        "author": "", "kind": "book",
                        "text": _sentences(f"{book} Anne Elliot", 12) + " Anne Elliot smiled at Captain Wentworth.",
                        "meta": {"book": book, "chapter": c, "label": label}}
                       for book, label in (("emma", 1), ("persuasion", 0)) for c in (1, 2)))
    return path


def test_copybench_build_items_reads_only_its_items_keys(config, tmp_path):
    from memaudit.probes.copybench.plan import ITEMS_KEYS
    from memaudit.probes.copybench.runner import build_items

    cfg = Recording(job_settings(config, "copybench"))
    out = {k: tmp_path / f"{k}.x" for k in ("literal", "nonliteral", "rejects", "judge", "demos", "extraction")}
    counts = build_items(_copybench_documents(tmp_path / "documents.jsonl"), None, cfg, seed=13,
                         **{f"out_{k}": v for k, v in out.items()}, progress=lambda m: None)
    assert counts["literal"] > 0 and cfg.read
    assert not _undeclared(cfg, ITEMS_KEYS), \
        f"copybench build_items reads keys outside ITEMS_KEYS: {_undeclared(cfg, ITEMS_KEYS)}"


def test_copybench_build_qa_items_reads_only_its_qa_items_keys(config, tmp_path):
    from memaudit.probes.copybench.plan import QA_ITEMS_KEYS
    from memaudit.probes.copybench.runner import build_qa_items

    cfg = Recording(job_settings(config, "copybench"))
    counts = build_qa_items(_copybench_documents(tmp_path / "documents.jsonl"), cfg, seed=13,
                            out_items=tmp_path / "qa.jsonl", out_rejects=tmp_path / "rejects.csv",
                            progress=lambda m: None)
    assert counts["qa_source"] == "extractive" and counts["qa"] > 0 and cfg.read
    assert not _undeclared(cfg, QA_ITEMS_KEYS), \
        f"build_qa_items reads keys outside QA_ITEMS_KEYS: {_undeclared(cfg, QA_ITEMS_KEYS)}"
