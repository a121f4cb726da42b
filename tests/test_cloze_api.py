"""The cloze probes' black-box mode on an API model, through the workflow: the ci run's cloze items,
an OpenAI-API model behind the loopback server (the real SDK, the real wire format), replies parsed,
refusals and replies without a word counted, scores, metrics, the ledger and the response cache."""

from __future__ import annotations

import shutil
from collections import Counter

import pandas as pd
import pytest
import yaml
from sklearn.metrics import roc_auc_score

from api_server import ChatReply, ChatServer, ScriptedResponder, refusal_text
from memaudit.io import read_jsonl

pytestmark = pytest.mark.slow
KEY_ENV, KEY = "MEMAUDIT_TEST_CLOZE_KEY", "sk-test-cloze-never-in-a-file-7731"


class Memorizer(ScriptedResponder):
    """Knows the member passages: fills their masks right; on a non-member's it guesses wrong, except
    that it refuses one mask and answers another without the <word> tags."""

    def __init__(self, answers: dict[str, tuple[str, int]], refuse: str, untagged: str):
        super().__init__()
        self.answers, self.refuse, self.untagged = answers, refuse, untagged

    def default(self, request):
        # the cloze prompt ends "Input: <context>\nOutput:"
        context = request.prompt.rsplit("Input: ", 1)[1].rsplit("\nOutput:", 1)[0].strip()
        word, label = self.answers[context]
        if context == self.refuse:
            return ChatReply(text=refusal_text(), input_tokens=120, output_tokens=14)
        if context == self.untagged:
            return ChatReply(text="It might be the word morning.", input_tokens=120, output_tokens=7)
        return ChatReply(text=f"<word>{word if label == 1 else 'zeppelin'}</word>", input_tokens=120,
                         output_tokens=4)


def test_cloze_blackbox_on_an_api_model_through_the_workflow(ci_run, tmp_path, monkeypatch):
    from workflow_helpers import snakemake

    monkeypatch.setenv(KEY_ENV, KEY)
    workdir = shutil.copytree(ci_run, tmp_path / "tree", symlinks=True)
    items = read_jsonl(workdir / "results/datasets/novels/cloze_items.jsonl")
    answers = {t["context"].strip(): (t["word"], it["label"]) for it in items for t in it["tokens"]}
    # a masked word can be a token of several types (prob, rank, person): one context, several tokens
    nonmember_contexts = sorted({t["context"].strip() for it in items if it["label"] == 0 for t in it["tokens"]})
    assert len(nonmember_contexts) >= 2 and any(it["label"] == 1 and it["tokens"] for it in items)
    memorizer = Memorizer(answers, refuse=nonmember_contexts[0], untagged=nonmember_contexts[1])

    config = yaml.safe_load((workdir / "config/ci.yaml").read_text())
    with ChatServer(memorizer) as server:
        config["models"]["memorizer"] = {
            "family": "memorizer", "backend": "openai",
            "api": {"api_key_env": KEY_ENV, "concurrency": 4, "base_url": server.openai_base_url,
                    "model_id": "memorizer-v1", "pricing": {"input_per_mtok": 1.0, "output_per_mtok": 4.0}}}
        config["probes"]["cloze_blackbox"] = {"models": ["memorizer"], "benchmarks": ["novels"]}
        (workdir / "config/api.yaml").write_text(yaml.safe_dump(config))
        scores = workdir / "results/scores/novels/memorizer"
        targets = [str(scores.relative_to(workdir) / "cloze_blackbox_documents.csv"),
                   "results/metrics/novels/memorizer.csv", "results/api/ledger.csv"]
        snakemake(workdir, *targets, "--cores", "2", "--resources", "api_openai=4", "--configfile", "config/api.yaml")
        assert server.count("openai") == len(answers)  # one request per masked context

        texts = pd.read_csv(scores / "cloze_blackbox_texts.csv")
        def tokens_of(context):
            return sum(t["context"].strip() == context for it in items for t in it["tokens"])

        assert (texts["n_refusal"].sum(), texts["n_invalid"].sum()) == (
            tokens_of(memorizer.refuse), tokens_of(memorizer.untagged))
        assert texts["n_refusal"].sum() >= 1 and texts["n_invalid"].sum() >= 1
        documents = pd.read_csv(scores / "cloze_blackbox_documents.csv")
        expected = {}  # a member's every masked word reconstructed, a non-member's none: per passage of its document
        passages = Counter(it["doc_id"] for it in items)
        for it in items:
            for t in it["tokens"]:
                key = (it["doc_id"], f"cloze_{t['measure']}")
                expected[key] = expected.get(key, 0.0) + float(it["label"] == 1) / passages[it["doc_id"]]
        got = documents.set_index(["doc_id", "method"])["score"].to_dict()
        assert {k: got[k] for k in expected} == pytest.approx(expected)
        prob = documents[documents["method"] == "cloze_prob"]
        metrics = pd.read_csv(workdir / "results/metrics/novels/memorizer.csv").set_index("method")
        assert metrics.loc["cloze_prob", "auc"] == pytest.approx(roc_auc_score(prob["label"], prob["score"]))
        assert metrics.loc["cloze_prob", "auc"] > 0.9

        ledger = pd.read_csv(workdir / "results/api/ledger.csv").set_index("model")
        assert ledger.loc["memorizer", "n_sent"] == len(answers) and ledger.loc["memorizer", "n_refusal"] == 1
        snakemake(workdir, *targets, "--cores", "2", "--forcerun", "cloze_probe", "--configfile", "config/api.yaml")
        assert server.count("openai") == len(answers)  # every answer from the response cache
    written = [p for top in ("results", "logs", ".snakemake", "config") for p in (workdir / top).rglob("*")
               if p.is_file()]
    assert [p for p in written if KEY.encode() in p.read_bytes()] == []


class ByModel(ScriptedResponder):
    """Two API models behind one server: ``memorizer-v1`` fills the member passages' masks right, every
    other model (and every non-member mask) gets a wrong word."""

    def __init__(self, answers: dict[str, tuple[str, int]]):
        super().__init__()
        self.answers = answers

    def default(self, request):
        context = request.prompt.rsplit("Input: ", 1)[1].rsplit("\nOutput:", 1)[0].strip()
        word, label = self.answers[context]
        right = request.model == "memorizer-v1" and label == 1
        return ChatReply(text=f"<word>{word if right else 'zeppelin'}</word>", input_tokens=120, output_tokens=4)


def test_an_api_model_and_its_declared_control_are_paired_in_the_differences(ci_run, tmp_path, monkeypatch):
    """``control``: a suspect API model against the one it was made from (two model ids behind the loopback
    server, the real SDK): the cloze differences pair them, labels as given, in the headline's own section."""
    from memaudit.probes.cloze import headline
    from workflow_helpers import snakemake

    monkeypatch.setenv(KEY_ENV, KEY)
    workdir = shutil.copytree(ci_run, tmp_path / "tree", symlinks=True)
    items = read_jsonl(workdir / "results/datasets/novels/cloze_items.jsonl")
    answers = {t["context"].strip(): (t["word"], it["label"]) for it in items for t in it["tokens"]}
    config = yaml.safe_load((workdir / "config/ci.yaml").read_text())
    with ChatServer(ByModel(answers)) as server:
        for name, control in (("memorizer", {"control": "original"}), ("original", {})):
            config["models"][name] = {
                "family": "api", "backend": "openai", **control,
                "api": {"api_key_env": KEY_ENV, "concurrency": 4, "base_url": server.openai_base_url,
                        "model_id": f"{name}-v1", "pricing": {"input_per_mtok": 1.0, "output_per_mtok": 4.0}}}
        config["probes"]["cloze_blackbox"] = {"models": ["memorizer", "original"], "benchmarks": ["novels"]}
        (workdir / "config/pair.yaml").write_text(yaml.safe_dump(config))
        snakemake(workdir, "results/summary/cloze_differences.csv", "--cores", "2", "--resources", "api_openai=4",
                  "--configfile", "config/pair.yaml")
        assert server.count("openai") == 2 * len(answers)

    differences = pd.read_csv(workdir / "results/summary/cloze_differences.csv")
    pair = differences[differences["model"] == "memorizer"]
    assert set(pair["base"]) == {"original"} and set(pair["pairing"]) == {"control"}
    assert not pair["contaminated_on_benchmark"].any() and set(pair["mode"]) == {"blackbox"}
    # the ci config's own fine-tune is still paired with its base, and checked
    tuned = differences[differences["model"] == "tiny-gpt2-small-contaminated"]
    assert set(tuned["pairing"]) == {"base"} and tuned["contaminated_on_benchmark"].all()
    by_group = pair.groupby("group")
    # every member mask filled by the suspect and none by the original; every non-member mask by neither
    assert (by_group.get_group("member")["difference"] == 1.0).all()
    assert (by_group.get_group("nonmember")[["difference", "ci_low", "ci_high"]] == 0.0).all().all()
    assert (by_group.get_group("member_minus_nonmember")["difference"] == 1.0).all()
    shown = headline.against_control(differences)
    assert set(shown["model"]) == {"memorizer"} and set(shown["interval"]) == {"above 0", "holds 0"}
    assert headline.expectations(differences)["model"].eq("tiny-gpt2-small-contaminated").all()
