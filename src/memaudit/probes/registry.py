"""Probe families: one declaration each, everything else derived from it.

A *family* (token_prob, prefix, decop, ...) is one package under ``memaudit.probes``
and one :class:`ProbeFamily` entry in :data:`FAMILIES`. Each of its *modes* is one
*probe*: the config block ``probes.<probe>`` turns it on, and its jobs write
``results/scores/<benchmark>/<model>/<probe>_documents.csv`` (columns
``doc_id, label, method, score, model, dtype``; higher = member), which the
statistics, figures and report read for every probe alike. A single-mode family
has one mode named ``""`` and its probe is the family's name; DE-COP's probes are
``decop_logit``, ``decop_blackbox`` and ``decop_likelihood``, with the settings they
share under ``probes.decop``.

The declaration says what the family reads, which backend capabilities each mode
needs, where its job runner and API request planner live (``"module:function"``,
imported only when called, as lm-evaluation-harness maps model names to classes:
``import memaudit.probes.registry`` imports no torch, no SDK), which auxiliary
models it uses by role, its code version, and the ground-truth checks it adds to
``memaudit headline`` (``headline``; :func:`memaudit.stats.headline.family_blocks` calls it).

Code versions. ``version`` is part of every job's params (``family_version`` in the
rules), so bumping it reruns that family's jobs and nothing else. It is bumped by
hand; ``fingerprint`` is a hash of the family's code -- the syntax tree, docstrings
and comments stripped, of every memaudit module its package imports, directly or
not (:func:`code_fingerprint`) -- and ``tests/test_code_versions.py`` fails when the
code changed and the fingerprint did not follow. A change that alters numbers bumps
``version`` and records the new fingerprint (``memaudit code-versions --record``
prints it); a refactor records the fingerprint only. Why not derive the version from
the source? A pure refactor or a comment fix would then rerun days of GPU or paid API
work, and people learn to ignore a signal that fires on every edit.

Stages. What a family builds once per benchmark before any model is probed (DE-COP's
paraphrased items, KTD's topped-up knockoff pool, CopyBench's items, the cloze probes'
surprisal tokens) can cost more than the probes, and its tables over every model come after
them, so each has its own :class:`Stage`: a version and a fingerprint over the modules that
build it (``roots``, and what they import). Its rules carry ``family_version(family, stage)``;
the family's own version covers the probe jobs. A change to how models are probed then reruns
the probes and not the paraphrasing before them; a change to a summary table reruns the summary
and not the generation it reads.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Mapping

from memaudit.backends.base import GENERATE, GRADIENT_NORMS, OPTION_LOGPROBS, TOKEN_LOGPROBS, WORD_LOGPROBS
from memaudit.config import is_api_model, is_labelled, unknown
from memaudit.versions import STEPS, Stage


@dataclass(frozen=True)
class ProbeFamily:
    """One probe family's declaration (see the module docstring)."""

    name: str
    reads: str | Mapping[str, str]  # the record file under results/datasets/<benchmark>/ its jobs read (per mode)
    modes: Mapping[str, frozenset[str]]  # mode -> backend capabilities it needs ("" = the only mode)
    runner: str  # "module:function" taking a memaudit.probes.job.ProbeJob
    version: int
    fingerprint: str
    planner: str | None = None  # "module:function"(config, model, records, *, mode, datasets) -> planned API requests
    # "module:function"(config, benchmark, mode) -> the files under results/datasets/<benchmark>/ the planner
    # reads (the first is its records; a pathlib.Path is a file elsewhere, as the workflow names it: CopyBench's
    # prompt files), or a sentence saying why it cannot plan before paid work (default: reads)
    plan_inputs: str | None = None
    roles: Mapping[str, str] = field(default_factory=dict)  # role -> dotted key under `probes` naming its model
    # the requests its item-building roles (an API extractor, a QA writer) send before any probe job:
    # "module:function"(config, benchmark) -> the files under results/datasets/<benchmark>/ it reads ([] = none
    # asked there), and "module:function"(config, benchmark, datasets) -> planned requests
    role_plan_inputs: str | None = None
    role_planner: str | None = None
    checks: str | None = None  # "module:function"(config) -> problems ("dotted.key: message"), before any job
    # "module:function"(config, runs) -> the method names (the `method` of its score files) its probes write
    # under this config, from the naming code its runners use; runs: its (benchmark, model, mode) jobs
    # (memaudit.jobs.probe_runs, never empty). memaudit.jobs.method_names lists them over every family
    methods: str | None = None
    # "module:function"(summary_dir, models) -> the sections it adds to `memaudit headline` (its ground-truth
    # checks; memaudit.stats.headline.family_blocks); a module named `headline`, which decides no result
    headline: str | None = None
    # its main per-document scores (metrics.csv methods): `memaudit headline` shows their AUC for a model that
    # no headline token-probability method scored on a benchmark (a black-box audit), whatever its other sections
    headline_methods: tuple[str, ...] = ()
    description: str = ""
    # whether its probes mean something on a benchmark without membership labels (CopyBench's rates do;
    # a detector's AUC does not): memaudit.config.is_labelled
    unlabelled: bool = False
    # whether its summary pairs each model it probes with the model's control (memaudit.config.control_of:
    # the base it is fine-tuned from, or its declared `control`) in a differences table
    paired: bool = False
    # name -> its Stage; declared after `fingerprint` so that the family's own version and fingerprint
    # come first in its entry (record_fingerprints and the tests find them by that order)
    stages: Mapping[str, Stage] = field(default_factory=dict)

    def probe(self, mode: str) -> str:
        """The probe (config block, score file stem) of one mode."""
        return f"{self.name}_{mode}" if mode else self.name

    def reads_of(self, mode: str) -> str:
        return self.reads if isinstance(self.reads, str) else self.reads[mode]

    @property
    def probes(self) -> list[str]:
        return [self.probe(m) for m in self.modes]

    @property
    def package(self) -> str:
        return f"memaudit.probes.{self.name}"


FAMILIES: dict[str, ProbeFamily] = {f.name: f for f in (
    ProbeFamily(
        "token_prob", reads="passages.jsonl", modes={"": frozenset({TOKEN_LOGPROBS})},
        runner="memaudit.probes.token_prob.runner:run_job", checks="memaudit.probes.token_prob.plan:check_config",
        # version 2: lowercase and ref_<model> compare the two passes on the characters both scored (a
        # passage cut at one model's max_tokens and not the other's compared losses over different spans)
        # 3: Min-K% and Min-K%++ take floor(k * tokens) of the decimal product (int(90 * 0.7) was 62)
        # 4: Min-K%++'s sigma in the two-pass form (the one-pass form cancelled in float32)
        # 5: the passages table says which characters each score covers (scored_chars) and whether the
        # passage was cut at max_tokens (truncated)
        methods="memaudit.probes.token_prob.plan:method_names", version=5, fingerprint="446cd3eebc659735",
        description="loss, zlib, lowercase, Min-K%, Min-K%++ and reference-model scores from token "
                    "log-probabilities",
        # the forward pass (token_stats), which every method reads; stats 2: each passage records the
        # characters its scored tokens cover (chars), and zlib compresses only those (session 55); 3: where
        # each scored token ends (ends), which lowercase and ref_<model> align two passes by; 4: a cut at
        # max_tokens inside a multi-byte character keeps none of its byte tokens (it claimed all of it);
        # 5: sigma = sqrt(sum p (z - mu)^2), which sum p z^2 - mu^2 lost to cancellation in float32; 6: the pass
        # over the lowercased passages is a job of its own (token_stats_lowercase), the numbers unchanged
        stages={"stats": Stage(("memaudit.probes.token_prob.forward",), version=6, fingerprint="912752466ecb8b99")},
    ),
    ProbeFamily(
        "prefix", reads="prefix_continuation.jsonl", modes={"": frozenset({GENERATE})},
        runner="memaudit.probes.prefix.runner:run_job", planner="memaudit.probes.prefix.runner:plan_records",
        checks="memaudit.probes.prefix.plan:check_config", methods="memaudit.probes.prefix.plan:method_names",
        headline="memaudit.probes.prefix.headline:headline",
        headline_methods=("prefix_lcs_words", "prefix_rougeL"),
        # 5: "I apologize, but I cannot ..." is a refusal (backends.refusal), as "I'm sorry, but I cannot ..."
        # 6: with continuation_words below 5, a passage holding the whole continuation asked for is an item
        # (it was skipped as too short: prefix_dataset's pairs change); a local model's end token that is no
        # special token is no part of its continuation (backends.hf.generate_text)
        # 7: a stop string that is a special token (probes.prefix.stop) ends the continuation there (it was
        # decoded away and never matched)
        # 8: the prefix is the passage's text as written up to its last prefix word, paragraph breaks and all
        # (its words were joined by spaces: a model that read the breaks in training continued far less often);
        # prefix_outcomes.json records the instruction and system prompt sent
        # 9: a published prefix (NYT Exhibit J) is shown as published, its line breaks and spacing kept (its words
        # were joined by single spaces)
        version=9, fingerprint="f1204e4cc8de8a83",
        description="prefix probing: ROUGE-L recall and longest shared word run of a generated continuation",
    ),
    ProbeFamily(
        "decop", reads="decop_items.jsonl",
        modes={
            # open models: teacher-forced option-letter probabilities, with and without calibration
            "logit": frozenset({OPTION_LOGPROBS}),
            # text-only models: the answer letter parsed from the reply
            "blackbox": frozenset({GENERATE}),
            # base models: the option with the highest length-normalised log-likelihood
            "likelihood": frozenset({TOKEN_LOGPROBS}),
        },
        runner="memaudit.probes.decop.runner:run_job", planner="memaudit.probes.decop.runner:plan_records",
        # version 5: logit mode on a model without a chat template reads the plain-text question after
        # the context token, as generate() and scoring do (HFBackend.option_logprobs left it out). No
        # shipped config runs logit mode on such a model (SmolLM2-Instruct and Llama-2-chat have
        # templates), but a user's finished run on a base model would be stale: it reruns.
        # 6: the suspect list ranks each document's accuracy among the held-out clean documents'
        # (conformal p-values, BH); the per-question Fisher test named clean documents far above its FDR
        # 7: the likelihood mode's token statistics keep whole characters at a max_tokens cut (token_prob's
        # stats 4); API models are asked C.1's closed-model prompt (no system prompt, no format hint); an
        # answer "The verbatim passage is D." / "Passage A" / "D - ..." names its letter; "I apologize, but
        # I cannot ..." is a refusal
        # 8: the black-box table's n_invalid, n_refusal and n_error count per document and passage length
        # (each length's row held every length's total)
        # 9: a request that failed under api.on_error: record is an error (n_error, every mode) left out of the
        # accuracy (it counted as a wrong answer, in logit mode as invalid); a provider-flagged refusal in logit
        # mode is a refusal (it was ok or invalid); logit tables count n_invalid and n_refusal too
        # 10: the -prob score counts a reply that listed no option letter (invalid, a refusal) as 0, as the
        # accuracy counts it wrong (the mean skipped it: a document scored on its few answered questions)
        plan_inputs="memaudit.probes.decop.plan:plan_inputs", version=10, fingerprint="4a32793079343c64",
        # the paraphrased items (decop_items), which KTD reads too; items 5: a local causal paraphraser ends
        # at its generation config's end tokens too (a Gemma/Phi-3 instruct one wrote on; SmolLM2's unchanged);
        # items 6: a paraphrase's own first sentence with a colon, "example d)" or a paragraph opening "The
        # passage of time" is kept (the cleaning cut or dropped it as a preamble, a marker, commentary)
        # items 7: a paraphrase holding a verbatim run of half the passage or more is rejected (verbatim_run,
        # paraphrase.max_verbatim_run) and asked again; decop_qc.csv counts it
        stages={"items": Stage(("memaudit.probes.decop.items",), version=8, fingerprint="66290a82a49cb498"),
                # its tables and figures over every model (decop_figures); 2: the label-probability figure's
                # "after calibration" is the evaluated documents' (it was the calibration set's own, always 0.25)
                # 3: the accuracy-by-position figure leaves failed requests out (they counted as misses)
                # 4: a document id that looks like a number (007, 12) or a missing value (NA) keeps its text as the dataset wrote it (read back as 7.0 or NaN, it joined nothing)
                # 5: a figure with nothing to draw (likelihood mode only: no calibration, one ordering) is a
                # note saying why (blank axes); 6: the AUC-by-size figure draws a model fine-tuned on another
                # benchmark's members as a line of its own (it joined its base's line at the same size)
                "summary": Stage(("memaudit.probes.decop.figures",), version=6, fingerprint="8f85cab3b67c3097")},
        roles={"paraphraser": "decop.paraphrase.model"}, headline="memaudit.probes.decop.headline:headline",
        checks="memaudit.probes.decop.plan:check_config", methods="memaudit.probes.decop.plan:method_names",
        headline_methods=("decop-logit-prob", "decop-blackbox", "decop-likelihood-prob"),
        description="DE-COP: pick the verbatim passage among three paraphrases",
    ),
    ProbeFamily(
        "copybench",
        reads={"literal": "copybench_literal.jsonl", "nonliteral": "copybench_nonliteral.jsonl",
               "qa": "copybench_qa.jsonl"},
        modes={
            # complete a book's prefix; ROUGE-L against the original continuation
            "literal": frozenset({GENERATE}),
            # write an "original" story from a beginning; the book's characters and events found in it
            "nonliteral": frozenset({GENERATE}),
            # fact recall: answer a question about the book, closed-book; SQuAD F1 against the answer
            "qa": frozenset({GENERATE}),
        },
        runner="memaudit.probes.copybench.runner:run_job", planner="memaudit.probes.copybench.api_plan:plan_records",
        # 5: "I apologize, but I cannot ..." is a refusal; an LLM event judge's verdict is its reply's first
        # line's first sentence (a causal LM writes on after "attributable", which counted as invalid and the
        # event as not found), the encoder judge's (the demo's) unchanged; a prompt leaving fewer positions
        # than its new tokens is decoded to the model's end (it stopped the job)
        # 6: an answer a stop string ended counts the tokens up to the one completing it in output_tokens and
        # MemFree's token_ids (it counted up to 3 more, decoded before the sampler's check); a local model's end
        # token that is no special token is no part of the text (backends.hf.generate_text)
        # 7: a prompt file's own system text is sent under the system decoding, and under every decoding where
        # the file sets enable_system (the built-in reminder was sent, enable_system ignored), as the reference
        # 8: fact recall's F1 and exact match compare answers in Unicode NFC (an accent written decomposed
        # scored 0.5)
        # 9: outcomes.json and copybench.csv's story and fact-recall rows say where the events, characters and
        # questions came from (event_source, character_source, qa_writer) and count the event judge's unusable
        # verdicts (judge_invalid of judge_pairs); a judge request without an answer stops the job (it counted
        # as "not found")
        plan_inputs="memaudit.probes.copybench.api_plan:plan_inputs", version=9, fingerprint="2c5b0495af2d2904",
        # the literal prefixes, story beginnings (an extractor's events and characters), demonstrations,
        # the encoder judge's calibration and the fact-recall questions (copybench_items, copybench_qa_items)
        # and the tables and figures over every model's outcomes (copybench_summary); items 5: a written
        # fact-recall question names its book ("According to <title>, ..."), as the published file's do
        # items 6: an extractor's or QA writer's "I apologize, but I cannot ..." is a refusal
        # items 7: a literal prompt and its reference are the document's text as written, paragraph breaks and
        # all (words joined by spaces before), so they equal the prefix probe's prompts again
        # items 8: the in-context demonstrations, the extractor's passage of a book without a summary and the QA
        # writer's passages are the book's text as written (space-joined words before); a judge's positive
        # calibration passage is in the form of the story chunks it is told apart from
        # items 9: a book's chapters reach the extractor (and the extractive builder, the judge's calibration)
        # joined by a blank line, not one line break; spaCy reads each line on its own for the extractive
        # events, characters and questions (a heading or a name ending a line fused with the next line's)
        stages={"items": Stage(("memaudit.probes.copybench.items", "memaudit.backends"),
                               version=9, fingerprint="7d529f866df7266d"),
                # summary 7: a group of one item has no interval (nan bounds; was zero width, a pass); 8: its
                # interval_holds_0 is blank too (it read False: "excludes 0"); 9: a group with nothing of the
                # base to pair keeps its row (n_items 0), its check "not evaluated" (it was dropped); 10: the
                # event_source, character_source, qa_writer and judge_invalid columns; 11: the differences'
                # intervals resample whole books (labels per book) or documents (several items each), not items:
                # ci_unit, n_units; 12: the figures as PNG and SVG, the distributions of the run's decoding where it
                # ran no greedy one (empty panels), member and non-member books apart; 13: copybench.csv's values
                # and intervals from the items file: items' formats averaged, resampled by book or document as the
                # differences (it bootstrapped prompts one by one), a rare rate with Clopper-Pearson's interval
                "summary": Stage(("memaudit.probes.copybench.summary",),
                                 version=13, fingerprint="251d401c0ce7f34a")},
        roles={"event_judge": "copybench.event_judge.model", "extractor": "copybench.extractor.model",
               "qa_writer": "copybench.qa_writer.model", "fluency_judge": "copybench.fluency_judge.model"},
        role_plan_inputs="memaudit.probes.copybench.api_plan:role_plan_inputs",
        role_planner="memaudit.probes.copybench.api_plan:role_plan_records",
        checks="memaudit.probes.copybench.plan:check_config", methods="memaudit.probes.copybench.plan:method_names",
        unlabelled=True, paired=True,
        headline="memaudit.probes.copybench.headline:headline",
        headline_methods=("copybench_rougeL_excess", "copybench_characters"),
        description="CopyBench: literal and non-literal copying (characters, events) against fact recall, "
                    "with MemFree and system-reminder mitigations",
    ),
    ProbeFamily(
        "ktd",
        # knockoffs are the paraphrases of DE-COP's items: the pool DE-COP's paraphraser role makes
        reads="decop_items.jsonl", modes={"": frozenset({TOKEN_LOGPROBS, GRADIENT_NORMS})},
        # version 8: a selection row's power is nan where a draw's texts hold no member (was 0, which
        # read as "found none"), and the means over draws do not skip it: a validation baseline's test
        # part holds no member when every member fell in its validation set, which a benchmark with few
        # members (at most validation_texts) reaches. The knockoff+ rows test every passage (a labelled
        # benchmark has members) and the imbalanced sets keep at least one member: those do not change.
        # version 9: the baselines' validation draws are stratified by label, so that a small benchmark's
        # test part keeps members (statistics.validation_split)
        # version 10: the lowercase and reference baselines align two passes as token_prob's do, and the
        # zlib baseline compresses the scored characters only (token_prob's own methods)
        # version 11: the baselines' token statistics keep whole characters at a max_tokens cut (token_prob's
        # stats 4)
        # version 12: the gradient score reads the same tokens, no part of a character cut by max_tokens
        # version 13: the baselines' validation part holds whole documents (no document on both sides of the
        # split); n_texts is the mean test size over draws
        # version 14: knockoff+ is also measured on the baselines' test passages (ktd_selection's measured_on:
        # all, test), so that KTD and its baselines compare on the same passages
        runner="memaudit.probes.ktd.runner:run_job", version=14, fingerprint="3315999e9f1350b2",
        # the knockoff pool topped up beyond DE-COP's three paraphrases (ktd_pool), by DE-COP's paraphraser
        # pool 8: the local causal paraphraser's end tokens, as decop's items 5
        # pool 9: the paraphrase cleaning of decop's items 6
        # pool 10: the verbatim-run check of decop's items 7
        stages={"pool": Stage(("memaudit.probes.ktd.pool", "memaudit.probes.decop.items"),
                              version=10, fingerprint="4305827f93e90bbf"),
                # the tables and figures over every model's selections (ktd_summary); 8: ktd.csv's measured_on
                # 9: a document id that looks like a number (007, 12) or a missing value (NA) keeps its text;
                # ktd.csv's min_q (1/n_texts, below which knockoff+ names nothing), its job's log naming the rows below it
                # 10: the imbalance figure draws one line per model and member ratio (ratios whose member
                # counts rounded alike were one line through all of them); 11: the size panels draw a line per
                # family and members fine-tuned on (every model not fine-tuned on the benchmark was one line)
                # 12: ktd.csv's and ktd_imbalance.csv's guarantee (holds/fails) is fdp_above_q (True/False): the
                # mean FDP over draws on these texts above q + 2 SE, an observation, not a test of FDR control
                "summary": Stage(("memaudit.probes.ktd.summary", "memaudit.stats.workflow"),
                                 version=12, fingerprint="3e968ae3267548d8")},
        checks="memaudit.probes.ktd.plan:check_config", methods="memaudit.probes.ktd.plan:method_names",
        headline="memaudit.probes.ktd.headline:headline",
        headline_methods=("ktd_w_gradnorm",),
        description="KTD: paraphrase knockoffs, gradient-norm knockoff statistics, knockoff+ FDR control",
    ),
    ProbeFamily(
        "cloze",
        # surprisal tokens chosen once per benchmark by the reference model (cloze_items)
        reads="cloze_items.jsonl",
        modes={
            # the paper's cloze prompt, the <word> reply parsed: API and instruction-tuned models
            "blackbox": frozenset({GENERATE}),
            # open models: is the masked word the model's top next token at its position (and its rank)
            "logit": frozenset({WORD_LOGPROBS}),
        },
        runner="memaudit.probes.cloze.runner:run_job", planner="memaudit.probes.cloze.runner:plan_records",
        # 4 (and items 5): "I apologize, but I cannot ..." is a refusal; a guess with punctuation between
        # digits is no number its digits spell ("1/2" is not "12"); a reply cut inside its closing </word>
        # tag is parsed; a filter's list numbered "**1.**", "#1" or "1 -" no longer lists the numbers 1 to N
        # (a numeric candidate dropped as guessable)
        # 5 (items 6, summary 6): a masked LM (the paper's BERT, any checkpoint config of a masked LM's: one
        # naming several heads or none too) is read as one by the reference role, the word masked in its
        # context window (it loaded as a causal head); the items, candidates, text tables and every summary
        # table say how the reference read the words (reference_scoring); summary 6 also leaves interval_holds_0 blank
        # where a group of one has no interval (it read False)
        # 6 (items 7): a causal reference may read both sides of a word (reference.fills: candidate fills by
        # whole-window likelihood, reference_scoring window; the candidates table's ref_left_*, ref_n_fills,
        # ref_best_fill); a title NER puts inside a name (Mrs, Lady) is no person token; the knowledge filter
        # reads the word after a contraction's apostrophe ("It's") and on the line after a lead-in ending in ":";
        # a reply's guess is its first <word> tag holding a word (an empty first tag hid the answer); a word longer
        # than half a max_tokens window is read from a window holding its first token (it failed)
        # 7 (items 8): logit mode reconstructs a word when greedy decoding writes all of it, each token the
        # model's top choice (the " 19" of " 1914" matched any year); the filter's list prompt keeps a number's
        # thousands separator (2,500 was 2 and 500), its word prompt reads a reply writing the passage out
        # with the word in the mask's place (it was invalid, the guessable token kept)
        # 8 (items 9): a tag holding a non-answer (unknown, I don't know) is a refusal (it was an answered, wrong
        # guess); a reply's one unclosed tag holding one word is read (<word>Frodo<word>, <word>Frodo<\word>, a
        # line end); the logit-mode filter drops a word only when greedy decoding writes all of it, as the probe
        # 9 (items 10, summary 11): a token type none of whose words got an answer (every reply invalid, refused
        # or failed, or no word of the type) is not measured: empty scores, no AUC (it read 0.500), n_answered and
        # unanswered in the tables; every table of the token selection names its reference_model
        # 10: a document's cloze_<type> is the mean over its passages of the words reconstructed (it was their sum:
        # a document of more passages scored higher, the AUC partly one of length)
        plan_inputs="memaudit.probes.cloze.plan:plan_inputs", version=10, fingerprint="1f58cc2d44cb0472",
        # the surprisal tokens the reference model chooses and the knowledge filter keeps (cloze_items);
        # version 4: no piece of a hyphenated or slash- or underscore-joined word (co-op, miles/hour) is a
        # candidate, and the uniqueness window (50 words either side) counts such a compound as one word
        stages={"items": Stage(("memaudit.probes.cloze.items", "memaudit.backends"),
                               version=10, fingerprint="b8c4398fb28cb474"),
                # the tables and figures over every model's reconstructions (cloze_summary)
                # summary 5: a group of one text has no interval (nan bounds; was zero width, a pass)
                # summary 7: cloze.csv's majority and random rows carry their benchmark's reference_scoring
                # summary 8: a group with nothing of the base to pair keeps its row (n_texts 0), its check "not
                # evaluated" (it was dropped); 9: a document id that looks like a number (007, 12) or a missing value (NA) keeps its text as the dataset wrote it (read back as 7.0 or NaN, it joined nothing)
                # summary 10: cloze.csv's prompt column (cloze or one_word for black-box rows, none in logit mode);
                # the differences' intervals resample whole books (labels per book) or documents (several
                # passages each), not passages (too narrow where passages cluster): ci_unit, n_units
                # summary 12: the figures' shares on a 0-1 axis (a panel of zeros read as blank), names at one
                # point stacked (a base and its fine-tunes at one size overprinted theirs)
                "summary": Stage(("memaudit.probes.cloze.summary",),
                                 version=12, fingerprint="6e1a19ac6e6ec124")},
        roles={"reference": "cloze.reference.model", "filter": "cloze.filter.model"},
        checks="memaudit.probes.cloze.plan:check_config", methods="memaudit.probes.cloze.plan:method_names",
        headline="memaudit.probes.cloze.headline:headline", paired=True,
        headline_methods=("cloze_rank", "cloze_rank_mrr"),
        description="information-guided cloze probes: mask high-surprisal words one at a time, count "
                    "reconstructions",
    ),
)}


@dataclass(frozen=True)
class ProbeSpec:
    """One probe (a family's mode) as the planning code sees it."""

    name: str
    family: str
    mode: str
    needs: frozenset[str]
    reads: str


PROBES: dict[str, ProbeSpec] = {
    fam.probe(mode): ProbeSpec(fam.probe(mode), fam.name, mode, needs, fam.reads_of(mode))
    for fam in FAMILIES.values() for mode, needs in fam.modes.items()
}


def family_of(probe: str) -> ProbeFamily:
    return FAMILIES[PROBES[probe].family]


def load_callable(ref: str) -> Callable:
    """The function a ``"module:function"`` reference names, imported now."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def runner_of(family: str) -> Callable:
    return load_callable(FAMILIES[family].runner)


def family_version(family: str, stage: str | None = None) -> int:
    """The code version a family's probe jobs carry, or (``stage``) the one its stage's jobs carry."""
    fam = FAMILIES[family]
    if stage is None:
        return fam.version
    if stage not in fam.stages:
        raise KeyError(f"probe family {family!r} declares no stage {stage!r} (stages: {sorted(fam.stages)})")
    return fam.stages[stage].version


def modes_of(family: str) -> list[str]:
    return list(FAMILIES[family].modes)


# ----------------------------------------------------------------------------- which probe runs where

def enabled_probes(config: dict) -> list[str]:
    return [name for name in PROBES if name in config.get("probes", {})]


def probe_runs_on(probe: str, entry: dict) -> bool:
    """Whether a model entry can serve a probe (white-box probes skip black-box API models)."""
    from memaudit.backends.base import model_capabilities

    return PROBES[probe].needs <= model_capabilities(entry)


def probe_selects(config: dict, probe: str, model: str) -> bool:
    """Whether the probe's optional ``models`` list (default: every model) includes ``model``."""
    chosen = config["probes"][probe].get("models")
    return chosen is None or model in chosen


def probe_covers(config: dict, probe: str, benchmark: str | None) -> bool:
    """Whether the probe's optional ``benchmarks`` list includes ``benchmark``; without a list, every
    benchmark it can mean something on (an unlabelled one only for a family declared ``unlabelled``)."""
    chosen = config["probes"][probe].get("benchmarks")
    if benchmark is None:
        return True
    if chosen is None:
        return is_labelled(config["benchmarks"][benchmark]) or FAMILIES[PROBES[probe].family].unlabelled
    return benchmark in chosen


def probes_for_model(config: dict, model: str, benchmark: str | None = None) -> list[str]:
    entry = config["models"][model]
    return [p for p in enabled_probes(config) if probe_selects(config, p, model) and probe_runs_on(p, entry)
            and probe_covers(config, p, benchmark)]


def check_capabilities(config: dict) -> list[str]:
    """Problems (dotted key: message) for probes configured on models that cannot serve them.

    Every model a probe runs on must serve it, with one exception: a probe without a
    ``models`` list skips the API models that cannot (an API model simply gets no white-box
    probe). Capabilities are the model's own (:func:`~memaudit.backends.base.model_capabilities`):
    an OpenAI-compatible endpoint configured with ``api.logprobs: false`` cannot serve
    ``decop_logit``.
    """
    from memaudit.backends.base import model_capabilities

    problems = []
    for probe in enabled_probes(config):
        for i, model in enumerate(config["probes"][probe].get("models") or []):
            if model not in config["models"]:
                problems.append(f"probes.{probe}.models.{i}: {unknown('model', model, config['models'])}")
        for i, benchmark in enumerate(config["probes"][probe].get("benchmarks") or []):
            if benchmark not in config.get("benchmarks", {}):
                problems.append(f"probes.{probe}.benchmarks.{i}: "
                                f"{unknown('benchmark', benchmark, config.get('benchmarks', {}))}")
            elif not is_labelled(config["benchmarks"][benchmark]) and not FAMILIES[PROBES[probe].family].unlabelled:
                problems.append(f"probes.{probe}.benchmarks.{i}: benchmark {benchmark!r} is unlabelled (published "
                                f"CopyBench without published.labels): {probe} needs members and non-members")
    for model, entry in config["models"].items():
        for probe in enabled_probes(config):
            named = config["probes"][probe].get("models")
            if not probe_selects(config, probe, model) or (named is None and is_api_model(entry)):
                continue
            missing = PROBES[probe].needs - model_capabilities(entry)
            if missing:
                backend = entry.get("backend", "hf")
                why = ", api.logprobs: false" if entry.get("api", {}).get("logprobs") is False else ""
                # at the list that names the model for the probe, where there is one (the usual fix is there)
                key = (f"probes.{probe}.models.{named.index(model)}" if named and model in named
                       else f"models.{model}.backend")
                problems.append(f"{key}: probe {probe!r} needs {', '.join(sorted(missing))}, "
                                f"which model {model!r} (backend {backend!r}{why}) cannot serve")
    return problems


# ----------------------------------------------------------------------------- auxiliary models by role

def named_role_model(config: dict, family: str, role: str) -> str | None:
    """The model the config names for ``role`` at its dotted key under ``probes`` (None where it names none)."""
    value = config.get("probes", {})
    for key in FAMILIES[family].roles[role].split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value or None


def role_model(config: dict, family: str, role: str) -> str | None:
    """The model serving ``role`` for ``family`` (e.g. DE-COP's paraphraser), or None if the family is off.

    The role's dotted key under ``probes`` names it; without one, the first local model
    (the first model if every one is an API model).
    """
    fam = FAMILIES[family]
    if not any(p in config.get("probes", {}) for p in fam.probes):
        return None
    value = named_role_model(config, family, role)
    if value:
        return value
    models = sorted(config["models"])
    local = [m for m in models if not is_api_model(config["models"][m])]
    return (local or models)[0]


def check_families(config: dict) -> list[str]:
    """Each configured family's own checks (its entry's ``checks``)."""
    return [problem for fam in FAMILIES.values() if fam.checks and any(p in config.get("probes", {}) for p in fam.probes)
            for problem in load_callable(fam.checks)(config)]


def check_roles(config: dict) -> list[str]:
    problems = []
    for fam in FAMILIES.values():
        for role, key in fam.roles.items():
            model = role_model(config, fam.name, role)
            if model is not None and model not in config["models"]:
                problems.append(f"probes.{key}: {unknown('model', model, config['models'])} (the {fam.name} {role})")
    return problems


# ----------------------------------------------------------------------------- code fingerprints

# Modules that move data and never decide a number: a change to them does not trip the fingerprints.
NOT_RESULT_CODE = frozenset({
    "memaudit.errors", "memaudit.workflow_support", "memaudit.devices", "memaudit.checkpoints",
    "memaudit.backends.retry", "memaudit.backends.ledger", "memaudit.backends.settings",
    "memaudit.backends.secrets", "memaudit.backends.server", "memaudit.backends.scripted",
    "memaudit.backends.serve", "memaudit.backends.cache", "memaudit.probes.registry", "memaudit.versions",
})


def _module_file(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None


def _imports(name: str, tree: ast.AST, is_package: bool) -> set[str]:
    """memaudit modules a module imports anywhere in its body (function-level imports included)."""
    out = set()
    base = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                parts = base.split(".")
                module = ".".join(parts[:len(parts) - node.level + 1] + ([module] if module else []))
            out.add(module)
            out.update(f"{module}.{a.name}" for a in node.names)  # `from pkg import submodule`
    return {m for m in out if m.startswith("memaudit") and _module_file(m) is not None}


def _normalised(tree: ast.AST) -> str:
    """The syntax tree without docstrings, as text: comments and formatting never change it."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def family_modules(family: str) -> list[str]:
    """Every memaudit module a family's package uses, directly or not (less :data:`NOT_RESULT_CODE`)."""
    package = FAMILIES[family].package
    root = _module_file(package).parent
    return _reachable([package + ("" if p.stem == "__init__" else "." + p.stem) for p in sorted(root.glob("*.py"))])


def stage_modules(family: str, stage: str) -> list[str]:
    """Every memaudit module a family's stage uses: its roots and what they import, directly or not."""
    return _reachable(list(FAMILIES[family].stages[stage].roots))


def step_modules(step: str) -> list[str]:
    """Every memaudit module one of the steps of no family uses (:data:`memaudit.versions.STEPS`)."""
    return _reachable(list(STEPS[step].roots))


def _reachable(todo: list[str]) -> list[str]:
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name in NOT_RESULT_CODE or name.endswith(".headline"):
            continue  # a family's headline module prints checks over finished tables: it decides no result
        seen.add(name)
        todo.extend(_module_facts(name)[1] - seen)
    return sorted(seen)


def _module_facts(name: str) -> tuple[str, frozenset[str]]:
    """A module's normalised syntax tree (:func:`_normalised`) and the memaudit modules it imports,
    parsed once per text of its file: the fingerprints of families and stages share most modules."""
    path = _module_file(name)
    return _parsed(name, str(path), path.read_text(encoding="utf-8"))


@lru_cache(maxsize=None)
def _parsed(name: str, path: str, source: str) -> tuple[str, frozenset[str]]:
    tree = ast.parse(source, filename=path)
    imports = frozenset(_imports(name, tree, Path(path).name == "__init__.py"))
    return _normalised(tree), imports  # (after the imports: it drops the docstrings from the tree)


def code_fingerprint(family: str, stage: str | None = None) -> str:
    """A short hash of the family's code (:func:`family_modules`), or of a stage's
    (:func:`stage_modules`), docstrings and comments stripped."""
    return _fingerprint(family_modules(family) if stage is None else stage_modules(family, stage))


def step_fingerprint(step: str) -> str:
    """A short hash of the code of one of the steps of no family (:func:`step_modules`)."""
    return _fingerprint(step_modules(step))


def _fingerprint(modules: list[str]) -> str:
    digest = hashlib.sha256()
    for name in modules:
        digest.update(name.encode() + b"\0")
        digest.update(_module_facts(name)[0].encode() + b"\0")
    return digest.hexdigest()[:16]


def stale_fingerprints() -> dict[str, tuple[str, str]]:
    """Families, their stages and the steps of no family whose recorded fingerprint differs from their code:
    ``{family, "family.stage" or step: (recorded, current)}``."""
    out = {}
    for fam in FAMILIES.values():
        current = code_fingerprint(fam.name)
        if current != fam.fingerprint:
            out[fam.name] = (fam.fingerprint, current)
        for stage, st in fam.stages.items():
            current = code_fingerprint(fam.name, stage)
            if current != st.fingerprint:
                out[f"{fam.name}.{stage}"] = (st.fingerprint, current)
    for step, st in STEPS.items():
        current = step_fingerprint(step)
        if current != st.fingerprint:
            out[step] = (st.fingerprint, current)
    return out


def record_fingerprints(path: Path | None = None, steps_path: Path | None = None) -> dict[str, str]:
    """Write every current fingerprint into its entry: a family's and its stages' in the registry (this file),
    a step's in :mod:`memaudit.versions`; returns the changed ones.

    The version is never changed here: bump it by hand when the change alters numbers.
    """
    import re

    import memaudit.versions

    paths = {"registry": path or Path(__file__), "steps": steps_path or Path(memaudit.versions.__file__)}
    texts = {k: p.read_text(encoding="utf-8") for k, p in paths.items()}
    changed = {}
    for key, (_, current) in stale_fingerprints().items():
        if key in STEPS:
            where, entry = "steps", rf'"{re.escape(key)}":\s*Stage\(.*?'
        else:
            family, _, stage = key.partition(".")
            # never past the next entry: an entry whose fingerprint is not there yet (or is the docs' placeholder)
            # took the next family's, and left its own as it was
            within = r'(?:(?!ProbeFamily\().)*?'
            where, entry = "registry", rf'ProbeFamily\(\s*"{re.escape(family)}",{within}'
            if stage:  # the stage's own entry inside the family's: stages={"<stage>": Stage(..., fingerprint="...")}
                entry += rf'"{re.escape(stage)}":\s*Stage\({within}'
        # any text between the quotes: a placeholder ("<printed by ...>") is replaced as an old fingerprint is
        pattern = re.compile(rf'({entry}fingerprint=")([^"]*)(")', re.S)
        texts[where], n = pattern.subn(lambda m: m[1] + current + m[3], texts[where], count=1)
        if n != 1:
            raise LookupError(f"{paths[where]}: no fingerprint of {key!r} to update")
        changed[key] = current
    from memaudit.io import write_text

    for k, p in paths.items():
        if texts[k] != p.read_text(encoding="utf-8"):
            write_text(p, texts[k])  # atomically: a kill mid-write left a truncated registry, and no import worked
    return changed


def code_versions_main(argv: list[str] | None = None) -> int:
    """``memaudit code-versions [--record]``: exit 1 while the code of a family, a stage or a step of no family
    changed and its fingerprint did not."""
    import argparse

    p = argparse.ArgumentParser(prog="memaudit code-versions", description=code_versions_main.__doc__)
    p.add_argument("--record", action="store_true",
                   help="write the current fingerprints into memaudit/probes/registry.py and memaudit/versions.py "
                        "(after bumping the version of every family, stage or step whose numbers change)")
    args = p.parse_args(argv)
    stale = stale_fingerprints()
    rows = []
    for fam in FAMILIES.values():
        rows.append((fam.name, fam.version, fam.fingerprint, lambda f=fam.name: family_modules(f)))
        rows += [(f"{fam.name}.{name}", st.version, st.fingerprint, lambda f=fam.name, n=name: stage_modules(f, n))
                 for name, st in fam.stages.items()]
    rows += [(step, st.version, st.fingerprint, lambda n=step: step_modules(n)) for step, st in STEPS.items()]
    for key, version, fingerprint, modules in rows:
        status = "changed: bump version if its numbers change, then --record" if key in stale else "ok"
        print(f"{key:18s} version {version}  fingerprint {fingerprint}  {status}")
        if key in stale:
            print(f"{'':18s} current fingerprint {stale[key][1]} over {len(modules())} modules")
    if args.record and stale:
        for family, current in record_fingerprints().items():
            print(f"recorded {family}: {current}")
        return 0
    return 1 if stale else 0
