"""KTD's knockoff pool: DE-COP's three paraphrases per passage, topped up to the m KTD asks for.

A passage's paraphrases are made once and shared: DE-COP's items
(``results/datasets/<b>/decop_items.jsonl``) hold three per passage, and while KTD's largest m
(``max(probes.ktd.ms)``) is at most three KTD reads those items as they are. A larger m (the
paper's m = 10; its Figure 3 goes to 100) tops each passage's pool up in
``results/datasets/<b>/ktd_pool.jsonl``: the same passages, their three DE-COP paraphrases first,
then new ones from the same paraphraser with the same settings and the same quality control
(a new candidate must not duplicate any paraphrase the passage already has).

Why the same paraphraser and settings, not the paper's T5 at temperature 1.9 for the extra ones:
W averages m knockoffs drawn at random from the pool, and the draws are exchangeable only if the
whole pool comes from one distribution; a pool of three careful paraphrases and seven hot ones
would make W depend on which ones a draw picked. For the paper's knockoffs throughout, make its T5
(``humarin/chatgpt_paraphraser_on_T5_base``, a model entry by hub id) DE-COP's paraphraser with
``probes.decop.paraphrase`` ``temperature: 1.9``, ``top_k: 50`` and ``top_p: 0.95``: an
encoder-decoder paraphraser is sampled by ``generate()`` from "paraphrase: <passage>"
(:class:`memaudit.probes.decop.paraphrase.Seq2SeqParaphraser`; docs/probes/ktd.md, "The paper's
T5 paraphraser").

Why a second file, not more paraphrases in DE-COP's items: raising KTD's m then reruns this
top-up and KTD, never DE-COP's probes (their items file is untouched).

A passage whose pool stays short after ``probes.decop.paraphrase.max_attempts`` rounds is left out
of the pool file and counted in ``ktd_pool_qc.csv`` (per document, as ``decop_qc.csv``) and in
the log; no passage's pool is ever short in the file.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable

from memaudit.errors import InputError
from memaudit.io import read_jsonl, write_csv, write_jsonl
from memaudit.probes.decop.paraphrase import QCSettings, paraphrase_with_qc, quality_table
from memaudit.probes.ktd.plan import DECOP_POOL

log = logging.getLogger(__name__)

# The top-up's rounds are numbered from here, so its sampling seeds and API sample indices are not
# those of the DE-COP rounds that made the first three (a replay would only make duplicates).
TOP_UP_FIRST_ATTEMPT = 1000


def build_pool(items_path: str | Path, size: int, paraphrase_settings: dict, paraphraser, encoder,
               out_pool: str | Path, out_qc: str | Path, *, progress: Callable[[str], None] = log.info) -> list[dict]:
    """Top every DE-COP item's paraphrases up to ``size`` (see the module docstring); write the pool
    items (DE-COP's item, its options extended) and their quality-control table."""
    items = read_jsonl(items_path)
    if not items:
        raise InputError(f"{items_path}: no items to top up (every passage failed DE-COP's quality control?)")
    if size <= DECOP_POOL:
        raise InputError(f"KTD's pool: {size} knockoffs per passage are DE-COP's own; nothing to top up")
    bad = [it["item_id"] for it in items if it.get("answer", 0) != 0 or len(it["options"]) - 1 < DECOP_POOL]
    if bad:
        raise InputError(f"{items_path}: item {bad[0]!r} is not a DE-COP item (the verbatim passage as option 0, "
                         f"then {DECOP_POOL} paraphrases)")
    qc = QCSettings.from_config(paraphrase_settings)
    progress(f"{len(items)} passages: pools of {DECOP_POOL} DE-COP paraphrases topped up to {size}")
    t0 = time.time()
    results = paraphrase_with_qc([it["options"][0] for it in items],
                                 [int(it["meta"]["length_tokens"]) for it in items], paraphraser, encoder, qc,
                                 n=size, accepted=[it["options"][1:] for it in items],
                                 first_attempt=TOP_UP_FIRST_ATTEMPT, progress=progress)
    progress(f"paraphrases in {time.time() - t0:.1f}s")
    who = paraphraser.describe()
    pool = []
    for it, res in zip(items, results):
        if res.paraphrases is None:
            continue
        pool.append({**it, "options": [it["options"][0], *res.paraphrases],
                     "meta": {**it["meta"], "pool_size": size, "pool_attempts": res.attempts,
                              "pool_paraphraser": who["paraphraser"]}})
    table = quality_table([(it["doc_id"], int(it["label"]), it["meta"].get("role", "")) for it in items], results,
                          paraphraser=who["paraphraser"], per_passage=size - DECOP_POOL)
    write_csv(out_qc, table)
    write_jsonl(out_pool, pool)
    short = len(items) - len(pool)
    progress(f"{len(pool)} pools of {size}; {short} passage(s) left out, their pools short after "
             f"{qc.max_attempts} rounds (per document: {out_qc})")
    if not pool:
        raise InputError(f"{items_path}: no passage reached a pool of {size} knockoffs after {qc.max_attempts} "
                         f"rounds (see {out_qc}); lower max(probes.ktd.ms), raise "
                         f"probes.decop.paraphrase.max_attempts or change the paraphraser")
    return pool
