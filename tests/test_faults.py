"""Faults: killed runs resume, nothing is left half-written, no paid API call is repeated,
and a full disk or a permission error is a clear message.

The workflow tests really kill ``snakemake`` (its whole process group, as a
terminal hang-up or ``scancel`` does) in a scratch copy of the repository:
SIGTERM and SIGKILL in the middle of a fine-tuning job, then in the middle of a
probing job, rerunning after each kill. The resumed results are compared with an
uninterrupted computation of the same job. Tolerance: none -- on one machine
with the same thread count a resumed run performs exactly the float operations
of an uninterrupted one (same weights, optimizer moments, scheduler step, RNG
state and batch order; the same shards of passages in the same batches), so the
arrays must be bitwise equal; any difference is a resume bug, not noise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import TINY_TEXTS
from workflow_helpers import SNAKEMAKE, make_workdir

pytestmark = pytest.mark.workflow

FINETUNED = "tiny-gpt2-small-contaminated"
PROBED = "smollm2-135m"
N_PASSAGES = 24  # 12 documents x 2 passages
SHARD = 4  # passages per probing shard: 6 shards (one pass: the config leaves out the lowercase method)
N_SHARDS = N_PASSAGES // SHARD
THREADS = 2  # the jobs' torch threads (rule threads 8, capped by --cores 2); the references use the same

# The tiny test config cut to what the kills need: one benchmark, a fine-tune long enough to be
# killed twice (150 steps, a checkpoint every 10), and SmolLM2 probed in shards of 4 passages.
FAULTS_CONFIG = {
    "seed": 7,
    "assets_dir": "resources/demo",
    "cache_dir": "resources/cache",
    "benchmarks": {"novels": {"sources": ["austen"], "n_documents": N_PASSAGES // 2, "passage_words": 40,
                              "passages_per_document": 2}},
    "pretrain": {"sources": ["mobydick"]},
    "models": {
        PROBED: {"family": "smollm2", "source": {"builtin": "smollm2-135m-instruct"}, "max_tokens": 64,
                 "batch_size": 4},
        "tiny-gpt2-small": {"family": "tiny-gpt2", "source": {"tiny_gpt2": {
            "n_layer": 1, "n_embd": 32, "n_head": 2, "n_positions": 64, "vocab_size": 512, "max_tokens": 20000}}},
        FINETUNED: {"family": "tiny-gpt2", "base": "tiny-gpt2-small", "finetune": {
            "members_of": ["novels"], "method": "full", "epochs": 3, "lr": 0.003, "batch_size": 2,
            "max_length": 64, "duplication": 3}},
    },
    "probes": {"token_prob": {"methods": ["loss", "zlib", "min_k", "min_k_plus_plus", "reference"],
                              "min_k_ratios": [0.2], "reference_models": ["tiny-gpt2-small"]}},
    "checkpoints": {"every_steps": 10, "shard_passages": SHARD},
}
MODEL_TARGET = f"results/models/{FINETUNED}"
STATS_TARGET = f"results/scores/novels/{PROBED}/token_stats.npz"
LOADED = re.compile(r"shard \d+/\d+: loaded from checkpoint")
TEMPORARY = re.compile(r"^\..+\.[a-z0-9_]{8}(\.[A-Za-z0-9]+)*$")  # what memaudit.io's atomic writers create


# ----------------------------------------------------------------------------- helpers

def parse_every_file(root: Path, *, killed: bool = False) -> dict[str, int]:
    """Open and fully read every file under ``root`` in its format; fail on any that does not parse.

    Returns counts per suffix, so a caller can check that the kinds it expects were read.
    ``killed``: the run was SIGKILLed, which may land in the middle of an atomic write and
    leave that writer's temporary (no cleanup can run); its target is intact and the next
    write of it sweeps the temporary. Such temporaries are counted under ``"temporary"``
    and not parsed; anywhere else a temporary is a failure.
    """
    import pandas as pd
    import torch
    from safetensors import safe_open

    from memaudit.io import read_json, read_jsonl

    counts: dict[str, int] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if TEMPORARY.match(path.name):
            assert killed, f"left-over temporary {path}"
            counts["temporary"] = counts.get("temporary", 0) + 1
            continue
        suffix = path.suffix
        try:
            if suffix == ".npz":
                with np.load(path) as z:
                    assert z.files, "empty npz"
                    for name in z.files:
                        z[name]
            elif suffix == ".csv":
                assert len(pd.read_csv(path).columns) > 0
            elif suffix == ".jsonl":
                assert read_jsonl(path)
            elif suffix == ".json":
                read_json(path)
            elif suffix == ".safetensors":
                with safe_open(str(path), framework="pt") as f:
                    for key in f.keys():
                        f.get_tensor(key)
            elif suffix == ".pt":
                torch.load(path, weights_only=True)
            else:
                path.read_bytes().decode("utf-8")
        except Exception as exc:  # noqa: BLE001 -- reported with the path
            raise AssertionError(f"{path} does not parse as {suffix or 'text'}: {exc!r}") from exc
        counts[suffix] = counts.get(suffix, 0) + 1
    return counts


class Run:
    """``snakemake`` started in its own process group, killed or waited for."""

    def __init__(self, workdir: Path, *targets: str, name: str, unlock: bool = False):
        self.workdir, self.name = workdir, name
        self.out = workdir / f"snakemake-{name}.out"
        if unlock:  # SIGKILL left Snakemake's lock behind, as the README says
            subprocess.run([*SNAKEMAKE, "--unlock", "--configfile", "config/faults.yaml"], cwd=workdir,
                           check=True, capture_output=True)
        with open(self.out, "w") as fh:
            self.proc = subprocess.Popen(
                [*SNAKEMAKE, "--cores", "2", "--rerun-incomplete", *targets, "--configfile", "config/faults.yaml"],
                cwd=workdir, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)

    def tail(self) -> str:
        return self.out.read_text()[-4000:]

    def wait_for(self, what: str, predicate, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name}: snakemake exited ({self.proc.returncode}) before {what}:\n"
                                     f"{self.tail()}")
            if time.monotonic() > deadline:
                self.kill(signal.SIGKILL)
                raise AssertionError(f"{self.name}: timed out waiting for {what}:\n{self.tail()}")
            time.sleep(0.05)

    def kill(self, sig: int) -> int:
        """Signal the whole process group (snakemake and its jobs); wait until every member is gone."""
        os.killpg(self.proc.pid, sig)
        rc = self.proc.wait(timeout=180)
        deadline = time.monotonic() + 60
        while True:  # a job process may outlive snakemake for a moment (SIGTERM: it saves, then exits)
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return rc
            assert time.monotonic() < deadline, f"{self.name}: processes of the group survived {sig!r}"
            time.sleep(0.05)

    def finish(self, timeout: float = 600) -> None:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill(signal.SIGKILL)
            raise
        assert rc == 0, f"{self.name}: snakemake failed ({rc}):\n{self.tail()}"


def checkpoint_files(workdir: Path, *parts: str, pattern: str) -> list[Path]:
    return sorted((workdir / "results" / "checkpoints").joinpath(*parts).glob(f"*/{pattern}"))


def saved_step(workdir: Path) -> int | None:
    """The step of the fine-tuning checkpoint on disk (None: none yet)."""
    import torch

    (state,) = checkpoint_files(workdir, "prepare_model", FINETUNED, pattern="state.pt") or [None]
    if state is None:
        return None
    return int(torch.load(state, weights_only=True)["step"])


def job_log(workdir: Path, rule: str, *wildcards: str) -> str:
    return (workdir / "logs" / rule / Path(*wildcards[:-1], f"{wildcards[-1]}.log")).read_text()


def settled_log(workdir: Path, line: str, rule: str, *wildcards: str, timeout: float = 30) -> str:
    """The job's log once it holds ``line`` (or, after ``timeout`` seconds, as it is, for the test to fail on)."""
    deadline = time.monotonic() + timeout
    while line not in (text := job_log(workdir, rule, *wildcards)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return text


# ----------------------------------------------------------------------------- kill the workflow

@pytest.fixture(scope="module")
def killed_workflow(tmp_path_factory):
    """Fine-tuning killed by SIGTERM then SIGKILL, probing killed by SIGTERM then SIGKILL, each time rerun.

    Returns what was observed at each kill (steps, shards, logs) and the workdir.
    """
    workdir = make_workdir(tmp_path_factory.mktemp("faults"))
    (workdir / "config" / "faults.yaml").write_text(yaml.safe_dump(FAULTS_CONFIG))
    seen: dict = {"parsed": []}

    # 1. SIGTERM once fine-tuning has saved its first checkpoint: the job saves another at
    #    the step it is on, then exits; Snakemake removes the job's output.
    run = Run(workdir, MODEL_TARGET, name="1-finetune-sigterm")
    run.wait_for("the first fine-tuning checkpoint", lambda: saved_step(workdir) is not None)
    seen["first_checkpoint"] = saved_step(workdir)
    seen["rc_sigterm_finetune"] = run.kill(signal.SIGTERM)
    # The job saves its checkpoint, then logs that it stopped: read the log first (waiting a moment for
    # that line), then the checkpoint. Read the other way round, a full make test under load once saw
    # the checkpoint of the step before the one the line names (session 48).
    seen["log_sigterm_finetune"] = settled_log(workdir, "fine-tuning stopped by", "prepare_model", FINETUNED)
    seen["step_sigterm"] = saved_step(workdir)
    seen["model_after_sigterm"] = (workdir / MODEL_TARGET).exists()
    seen["parsed"].append(parse_every_file(workdir / "results"))

    # 2. Rerun; SIGKILL after it has saved a later checkpoint: no cleanup runs at all.
    run = Run(workdir, MODEL_TARGET, name="2-finetune-sigkill")

    def later_checkpoint_logged() -> bool:
        # The state file is renamed into place before the job logs it: waiting for the file
        # alone let SIGKILL land between the two (CI on 88e70bc), so wait for the log line too.
        step = saved_step(workdir) or 0
        seen["step_logged"] = step  # the step this check saw both on disk and in the log
        return step > seen["step_sigterm"] and f"checkpoint saved at step {step} (epoch" in job_log(
            workdir, "prepare_model", FINETUNED)

    run.wait_for("a later fine-tuning checkpoint, logged", later_checkpoint_logged)
    seen["rc_sigkill_finetune"] = run.kill(signal.SIGKILL)
    seen["step_sigkill"] = saved_step(workdir)
    seen["log_sigkill_finetune"] = job_log(workdir, "prepare_model", FINETUNED)
    seen["parsed"].append(parse_every_file(workdir / "results", killed=True))

    # 3. Rerun to the end of fine-tuning (alone, so that the job order is fixed).
    Run(workdir, MODEL_TARGET, name="3-finetune-finish", unlock=True).finish()
    seen["log_finetune_resumed"] = job_log(workdir, "prepare_model", FINETUNED)

    # 4. Probing: SIGTERM once two shards are saved.
    def shards():
        return checkpoint_files(workdir, "token_stats", "novels", PROBED, pattern="[!.]*.npz")  # no temporaries

    run = Run(workdir, STATS_TARGET, name="4-probe-sigterm")
    run.wait_for("two probing shards", lambda: len(shards()) >= 2)
    seen["rc_sigterm_probe"] = run.kill(signal.SIGTERM)
    seen["shards_sigterm"] = len(shards())
    seen["log_sigterm_probe"] = job_log(workdir, "token_stats", "novels", PROBED)
    seen["stats_after_sigterm"] = (workdir / STATS_TARGET).exists()
    seen["parsed"].append(parse_every_file(workdir / "results"))

    # 5. Rerun; SIGKILL once it has saved more shards.
    run = Run(workdir, STATS_TARGET, name="5-probe-sigkill")
    run.wait_for("more probing shards", lambda: len(shards()) > seen["shards_sigterm"])
    seen["rc_sigkill_probe"] = run.kill(signal.SIGKILL)
    seen["shards_sigkill"] = len(shards())
    seen["log_sigkill_probe"] = job_log(workdir, "token_stats", "novels", PROBED)
    seen["parsed"].append(parse_every_file(workdir / "results", killed=True))

    # 6. Rerun to the end.
    Run(workdir, MODEL_TARGET, STATS_TARGET, name="6-finish", unlock=True).finish()
    seen["log_probe_finished"] = job_log(workdir, "token_stats", "novels", PROBED)
    seen["parsed_final"] = parse_every_file(workdir / "results")
    return workdir, seen


@pytest.mark.slow
def test_killed_finetuning_resumes_from_its_checkpoint(killed_workflow):
    workdir, seen = killed_workflow
    first, term, kill = seen["first_checkpoint"], seen["step_sigterm"], seen["step_sigkill"]
    # SIGTERM: the job saved a checkpoint at the step it had reached and stopped there.
    assert seen["rc_sigterm_finetune"] != 0 and not seen["model_after_sigterm"]
    assert term >= first >= 10
    assert f"fine-tuning stopped by SIGTERM at step {term}/" in seen["log_sigterm_finetune"]
    # The rerun started from that step, and SIGKILL left the last periodic checkpoint.
    assert f"resumed from checkpoint at step {term}/" in seen["log_sigkill_finetune"]
    assert seen["rc_sigkill_finetune"] == -signal.SIGKILL
    # The job may save (and not yet log) one more checkpoint between the wait and the kill: the
    # logged one is the wait's, the one on disk is at least as late and is what the rerun reads.
    logged = seen["step_logged"]
    assert kill >= logged > term and f"checkpoint saved at step {logged} (epoch" in seen["log_sigkill_finetune"]
    # The third run resumed from the SIGKILL checkpoint and finished.
    assert f"resumed from checkpoint at step {kill}/" in seen["log_finetune_resumed"]
    manifest = json.loads((workdir / MODEL_TARGET / "manifest.json").read_text())
    assert manifest["training"]["resumed_from_step"] == kill
    assert kill < manifest["training"]["steps"]
    # A finished job's checkpoint is gone.
    assert not (workdir / "results" / "checkpoints" / "prepare_model").exists()


@pytest.mark.slow
def test_resumed_finetuning_equals_an_uninterrupted_run(killed_workflow, tmp_path, monkeypatch):
    import torch
    from safetensors.torch import load_file

    from memaudit.jobs import load_config
    from memaudit.datasets.build import member_texts
    from memaudit.io import read_jsonl
    from memaudit.models.prepare import prepare_finetuned_model

    workdir, _ = killed_workflow
    monkeypatch.chdir(workdir)  # manifests hold paths relative to the workflow's directory
    config = load_config(workdir / "config" / "faults.yaml")
    texts = member_texts(read_jsonl(workdir / "results" / "datasets" / "novels" / "documents.jsonl"))
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        reference = prepare_finetuned_model(
            FINETUNED, config["models"][FINETUNED], Path("results/models/tiny-gpt2-small/manifest.json"), texts,
            tmp_path / "reference", seed=config["seed"], device="cpu")
    finally:
        torch.set_num_threads(threads)
    assert reference["training"]["resumed_from_step"] is None
    resumed = load_file(workdir / MODEL_TARGET / "weights" / "model.safetensors")
    uninterrupted = load_file(tmp_path / "reference" / "weights" / "model.safetensors")
    assert resumed.keys() == uninterrupted.keys()
    for name in resumed:
        assert torch.equal(resumed[name], uninterrupted[name]), name
    manifest = json.loads((workdir / MODEL_TARGET / "manifest.json").read_text())
    assert manifest["training"]["losses"] == reference["training"]["losses"]


@pytest.mark.slow
def test_killed_probing_skips_finished_shards(killed_workflow):
    workdir, seen = killed_workflow
    n_shards = N_SHARDS
    assert seen["rc_sigterm_probe"] != 0 and not seen["stats_after_sigterm"]
    assert "stopped by SIGTERM" in seen["log_sigterm_probe"]
    assert 2 <= seen["shards_sigterm"] < n_shards
    # The SIGKILLed rerun loaded the shards the SIGTERMed run had finished, and added more.
    assert len(LOADED.findall(seen["log_sigkill_probe"])) == seen["shards_sigterm"]
    assert seen["shards_sigterm"] < seen["shards_sigkill"] < n_shards
    assert seen["rc_sigkill_probe"] == -signal.SIGKILL
    # The last run computed only what was missing.
    log = seen["log_probe_finished"]
    assert f"resumed: {seen['shards_sigkill']} of {n_shards} shards loaded" in log
    assert len(LOADED.findall(log)) == seen["shards_sigkill"]
    assert len(re.findall(r"shard \d+/\d+: passages \d+\.\.\d+ done", log)) == n_shards - seen["shards_sigkill"]
    assert not (workdir / "results" / "checkpoints").exists()


@pytest.mark.slow
def test_resumed_probing_equals_an_uninterrupted_run(killed_workflow, tmp_path, monkeypatch):
    import torch

    from memaudit.probes.token_prob.forward import run_token_stats

    workdir, _ = killed_workflow
    monkeypatch.chdir(workdir)  # manifests hold paths relative to the workflow's directory
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        run_token_stats(FAULTS_CONFIG, PROBED, workdir / "results" / "models" / PROBED,
                        workdir / "results" / "datasets" / "novels" / "passages.jsonl", tmp_path / "reference.npz",
                        shard_passages=SHARD, checkpoint_dir=None)
    finally:
        torch.set_num_threads(threads)
    with np.load(workdir / STATS_TARGET) as resumed, np.load(tmp_path / "reference.npz") as uninterrupted:
        assert sorted(resumed.files) == sorted(uninterrupted.files) == ["__provenance__"] + [
            f"original__{k}" for k in ("chars", "ends", "logprob", "mu", "offsets", "sigma")]
        assert len(resumed["original__offsets"]) == N_PASSAGES + 1
        for name in resumed.files:
            np.testing.assert_array_equal(resumed[name], uninterrupted[name], err_msg=name)


@pytest.mark.slow
def test_no_output_is_corrupt_or_half_written_after_any_kill(killed_workflow):
    workdir, seen = killed_workflow
    # Every file under results/ parsed after each of the four kills; at the end no temporary is left
    # (a SIGKILL may leave one beside an intact target; the rerun sweeps it).
    assert len(seen["parsed"]) == 4
    final = seen["parsed_final"]
    assert final[".safetensors"] >= 2 and final[".npz"] == 1 and final[".jsonl"] >= 3 and final[".json"] >= 3
    # After each kill, the killed job's output was absent, never partial.
    assert not seen["model_after_sigterm"] and not seen["stats_after_sigterm"]


# ----------------------------------------------------------------------------- training resume, in process

def _sigterm_at_step(step: int, messages: list[str]):
    """A progress callback that records messages and sends this process SIGTERM at ``step``."""

    def progress(message: str) -> None:
        messages.append(message)
        if re.search(rf"step {step}/", message) and "resumed" not in message:
            os.kill(os.getpid(), signal.SIGTERM)

    return progress


def test_lora_finetuning_stopped_by_sigterm_resumes_to_the_same_adapter(tiny_model_dir, tmp_path):
    import torch
    from safetensors.torch import load_file

    from memaudit.checkpoints import TrainingCheckpoint
    from memaudit.errors import JobInterrupted
    from memaudit.models.finetune import finetune
    from memaudit.models.loading import load_causal_lm

    settings = dict(method="lora", epochs=2, lr=0.01, duplication=1, batch_size=4, max_length=32, lora_r=4,
                    lora_dropout=0.1, seed=3)  # dropout: the torch RNG state must be restored too

    def fresh():
        return load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")

    uninterrupted = finetune(*fresh(), TINY_TEXTS, tmp_path / "plain", **settings)
    ckpt = TrainingCheckpoint(tmp_path / "ckpt", every_steps=0)
    messages: list[str] = []
    with pytest.raises(JobInterrupted, match=r"stopped by SIGTERM at step (\d+)/") as err:
        finetune(*fresh(), TINY_TEXTS, tmp_path / "resumed", checkpoint=ckpt,
                 progress=_sigterm_at_step(uninterrupted["steps"] // 10 * 3, messages), **settings)
    stopped = int(re.search(r"at step (\d+)/", str(err.value)).group(1))
    assert ckpt.saved_at == stopped
    assert not (tmp_path / "resumed").exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler was put back
    record = finetune(*fresh(), TINY_TEXTS, tmp_path / "resumed", checkpoint=ckpt, **settings)
    assert record["resumed_from_step"] == stopped and 0 < stopped < record["steps"]
    a = load_file(tmp_path / "plain" / "adapter_model.safetensors")
    b = load_file(tmp_path / "resumed" / "adapter_model.safetensors")
    assert a.keys() == b.keys() and len(a) > 0
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert record["losses"] == uninterrupted["losses"]


def test_float16_finetuning_resumes_with_its_gradient_scale(tiny_model_dir, tmp_path):
    """float16 mixed precision: the gradient scaler halved its scale at an overflow before the stop; the
    checkpoint holds it, so the resumed run takes the uninterrupted run's steps."""
    import torch
    from safetensors.torch import load_file

    from memaudit.checkpoints import TrainingCheckpoint
    from memaudit.errors import JobInterrupted
    from memaudit.models.finetune import finetune
    from memaudit.models.loading import load_causal_lm

    settings = dict(method="lora", epochs=2, lr=0.01, duplication=1, batch_size=4, max_length=32, lora_r=4,
                    seed=3, autocast="float16")

    def fresh():
        return load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")

    uninterrupted = finetune(*fresh(), TINY_TEXTS, tmp_path / "plain", **settings)
    ckpt = TrainingCheckpoint(tmp_path / "ckpt", every_steps=0)
    with pytest.raises(JobInterrupted, match="at step 3/12"):
        finetune(*fresh(), TINY_TEXTS, tmp_path / "resumed", checkpoint=ckpt,
                 progress=_sigterm_at_step(3, []), **settings)
    assert torch.load(ckpt.path, weights_only=True)["grad_scaler"]["scale"] == 2.0 ** 15  # 2 ** 16 halved once
    record = finetune(*fresh(), TINY_TEXTS, tmp_path / "resumed", checkpoint=ckpt, **settings)
    assert record["resumed_from_step"] == 3 and record["precision"] == "float16-mixed"
    a = load_file(tmp_path / "plain" / "adapter_model.safetensors")
    b = load_file(tmp_path / "resumed" / "adapter_model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)
    assert record["losses"] == uninterrupted["losses"]


def test_packed_finetuning_stopped_inside_a_later_epoch_resumes_to_the_same_model(tiny_model_dir, tmp_path):
    """With packing each epoch has its own windows; a run stopped inside epoch 2 rebuilds that epoch's
    windows on resume and ends with the uninterrupted run's weights."""
    import torch
    from safetensors.torch import load_file

    from memaudit.checkpoints import TrainingCheckpoint
    from memaudit.errors import JobInterrupted
    from memaudit.models.finetune import finetune
    from memaudit.models.loading import load_causal_lm

    settings = dict(method="full", epochs=3, lr=0.003, duplication=1, batch_size=2, max_length=24, seed=5,
                    packing=True)

    def fresh():
        return load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")

    uninterrupted = finetune(*fresh(), TINY_TEXTS, tmp_path / "plain", **settings)
    per_epoch = uninterrupted["steps"] // 3
    assert per_epoch >= 3 and uninterrupted["packing"] is True
    logged = max(1, uninterrupted["steps"] // 10)  # progress (where the signal is sent) every `logged` steps
    at = next(s for s in range(per_epoch + 1, 2 * per_epoch) if s % logged == 0)
    ckpt = TrainingCheckpoint(tmp_path / "ckpt", every_steps=0)
    with pytest.raises(JobInterrupted, match=r"stopped by SIGTERM at step (\d+)/") as err:
        finetune(*fresh(), TINY_TEXTS, tmp_path / "resumed", checkpoint=ckpt,
                 progress=_sigterm_at_step(at, []), **settings)
    stopped = int(re.search(r"at step (\d+)/", str(err.value)).group(1))
    assert per_epoch < stopped < 2 * per_epoch  # inside epoch 2
    record = finetune(*fresh(), TINY_TEXTS, tmp_path / "resumed", checkpoint=ckpt, **settings)
    assert record["resumed_from_step"] == stopped
    a = load_file(tmp_path / "plain" / "model.safetensors")
    b = load_file(tmp_path / "resumed" / "model.safetensors")
    assert a.keys() == b.keys() and len(a) > 0
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert record["losses"] == uninterrupted["losses"]


def test_a_fine_tune_stopped_in_its_last_epoch_resumes_to_the_same_final_epoch_loss(tiny_model_dir, tmp_path):
    """The last epoch's mean loss (the manifest's final loss) sums the batches before a stop too: the
    checkpoint holds the epoch's running sum, so the resumed run reports the uninterrupted run's."""
    from memaudit.checkpoints import TrainingCheckpoint
    from memaudit.errors import JobInterrupted
    from memaudit.models.finetune import finetune
    from memaudit.models.loading import load_causal_lm

    settings = dict(method="full", epochs=2, lr=0.003, duplication=1, batch_size=2, max_length=24, seed=5)

    def fresh():
        return load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")

    uninterrupted = finetune(*fresh(), TINY_TEXTS, tmp_path / "plain", **settings)
    per_epoch, logged = uninterrupted["steps"] // 2, max(1, uninterrupted["steps"] // 10)
    at = next(s for s in range(per_epoch + 2, 2 * per_epoch) if s % logged == 0)  # inside the last epoch
    ckpt = TrainingCheckpoint(tmp_path / "ckpt", every_steps=0)
    with pytest.raises(JobInterrupted, match=f"at step {at}/"):
        finetune(*fresh(), TINY_TEXTS, tmp_path / "resumed", checkpoint=ckpt, progress=_sigterm_at_step(at, []),
                 **settings)
    record = finetune(*fresh(), TINY_TEXTS, tmp_path / "resumed", checkpoint=ckpt, **settings)
    assert record["resumed_from_step"] == at
    assert record["final_epoch_loss"] == uninterrupted["final_epoch_loss"] > 0


def test_epoch_end_checkpoints_wait_epoch_min_seconds_and_step_checkpoints_do_not(tmp_path):
    from memaudit.checkpoints import TrainingCheckpoint

    now = [0.0]
    ckpt = TrainingCheckpoint(tmp_path / "ckpt", epoch_min_seconds=60, clock=lambda: now[0])
    due = []
    # (clock, step, epoch end): 4 steps per epoch; the first step starts the clock
    for t, step, end in [(0, 1, False), (30, 4, True), (61, 8, True), (100, 12, True), (121, 16, True)]:
        now[0] = t
        if ckpt.due(step, epoch_end=end):
            ckpt.save({"step": step, "epoch": step // 4})
            due.append(step)
    assert due == [8, 16]  # 61 s after the first step, then 60 s after that save (not 39 s)
    assert ckpt.saved_at == 16

    now[0] = 0.0
    steps = TrainingCheckpoint(tmp_path / "steps", every_steps=5, epoch_min_seconds=60, clock=lambda: now[0])
    assert [s for s in range(1, 11) if steps.due(s, epoch_end=s % 4 == 0)] == [5, 10]  # every_steps: no floor
    every = TrainingCheckpoint(tmp_path / "every", clock=lambda: now[0])  # the default floor, 0: every epoch end
    assert [s for s in range(1, 13) if every.due(s, epoch_end=s % 4 == 0)] == [4, 8, 12]
    assert not TrainingCheckpoint(None).due(4, epoch_end=True)
    # the workflow's training jobs (prepare_model) wait a minute between epoch-end saves
    from memaudit.models.prepare import _training_checkpoint

    assert _training_checkpoint(tmp_path / "root", "m", {"seed": 0}, 0, print).epoch_min_seconds == 60
    assert _training_checkpoint(None, "m", {"seed": 0}, 0, print).directory is None


def test_a_training_of_one_epoch_saves_a_checkpoint_every_max_seconds(tmp_path):
    """With one epoch (the schema's default for a fine-tune) the only epoch end is the last step, after which
    nothing is saved: a SIGKILL (the OOM killer, a lost node) at step 234 of 392 left no checkpoint, and the
    rerun started at step 0. The workflow's training jobs also save 15 minutes after the last save, at any step."""
    from memaudit.checkpoints import TrainingCheckpoint
    from memaudit.models.prepare import CHECKPOINT_MAX_SECONDS, _training_checkpoint

    now = [0.0]
    ckpt = TrainingCheckpoint(tmp_path / "ckpt", epoch_min_seconds=60, max_seconds=900, clock=lambda: now[0])
    due = []
    # one epoch of 392 steps, 5 s a step: no epoch end before the last step
    for step in range(1, 392):
        now[0] = 5.0 * (step - 1)
        if ckpt.due(step, epoch_end=False):
            ckpt.save({"step": step, "epoch": 0})
            due.append(step)
    assert due == [181, 361]  # 900 s after the first step, then 900 s after that save
    assert (tmp_path / "ckpt" / "state.pt").is_file() and ckpt.saved_at == 361
    assert CHECKPOINT_MAX_SECONDS == 900
    assert _training_checkpoint(tmp_path / "root", "m", {"seed": 0}, 0, print).max_seconds == 900
    now[0] = 0.0
    never = TrainingCheckpoint(tmp_path / "never", clock=lambda: now[0])  # no max_seconds: epoch ends only
    for step in range(1, 400):
        now[0] = 5.0 * step
        assert not never.due(step, epoch_end=False)


def test_a_fine_tune_with_an_epoch_floor_saves_nothing_at_short_epoch_ends_and_the_same_weights(tiny_model_dir,
                                                                                               tmp_path):
    import torch
    from safetensors.torch import load_file

    from memaudit.checkpoints import TrainingCheckpoint
    from memaudit.models.finetune import finetune
    from memaudit.models.loading import load_causal_lm

    settings = dict(method="full", epochs=3, lr=0.003, duplication=1, batch_size=2, max_length=24, seed=5)
    saved = {}
    for floor in (0, 3600):
        messages: list[str] = []
        ckpt = TrainingCheckpoint(tmp_path / f"ckpt-{floor}", epoch_min_seconds=floor, progress=messages.append)
        record = finetune(*load_causal_lm({"path": str(tiny_model_dir)}, device="cpu"), TINY_TEXTS,
                          tmp_path / f"out-{floor}", checkpoint=ckpt, **settings)
        saved[floor] = [m for m in messages if m.startswith("checkpoint saved at step")]
        per_epoch = record["steps"] // 3
    # without a floor the first two epoch ends save (the last step writes the model instead)
    assert [int(m.split()[4]) for m in saved[0]] == [per_epoch, 2 * per_epoch]
    assert saved[3600] == []  # an hour's floor: a few-second fine-tune writes no checkpoint
    a, b = load_file(tmp_path / "out-0" / "model.safetensors"), load_file(tmp_path / "out-3600" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_fine_tune_stopped_on_one_device_type_starts_over_on_another(tiny_model_dir, tmp_path, monkeypatch):
    """prepare_model's checkpoint key held the resolved dtype but not the device: a float32 fine-tune stopped
    on a CPU resumed on a GPU (or the reverse) from a state the GPU run never reaches, so the model was
    neither device's. The key holds the device type now. The GPU here is the CPU with ``device: auto``
    read as cuda (the model still loads on the CPU)."""
    from memaudit.errors import JobInterrupted
    from memaudit.io import write_json
    from memaudit.models import loading
    from memaudit.models.prepare import prepare_finetuned_model

    write_json(tmp_path / "base.json", {"load": {"path": str(tiny_model_dir)}})
    entry = {"dtype": "float32", "finetune": dict(
        members_of=["b"], method="lora", epochs=2, lr=0.01, duplication=1, batch_size=4, max_length=32, lora_r=4,
        lora_alpha=8, lora_dropout=0.0, target_modules="all-linear")}

    def prepare(device: str, messages: list[str], progress=None):
        return prepare_finetuned_model("m", entry, tmp_path / "base.json", TINY_TEXTS, tmp_path / device, seed=3,
                                       device=device, checkpoint_root=tmp_path / "ckpt",
                                       progress=progress or messages.append)

    messages: list[str] = []
    with pytest.raises(JobInterrupted, match="at step 3/"):
        prepare("cpu", messages, _sigterm_at_step(3, messages))
    [stale] = (tmp_path / "ckpt" / "prepare_model" / "m").iterdir()
    resolve, load = loading.resolve_device, loading.load_causal_lm
    monkeypatch.setattr(loading, "resolve_device",
                        lambda device="auto": "cuda:0" if device == "auto" else resolve(device))
    monkeypatch.setattr(loading, "load_causal_lm", lambda spec, **kw: load(spec, **{**kw, "device": "cpu"}))
    messages = []
    record = prepare("auto", messages)["training"]
    assert record["resumed_from_step"] is None and record["steps"] == 12
    assert [m for m in messages if m.startswith("discarding")] == [
        f"discarding stale checkpoint {stale} (inputs or settings changed)"]


def test_tiny_pretraining_stopped_by_sigterm_resumes_to_the_same_model(tmp_path):
    import torch
    from safetensors.torch import load_file

    from memaudit.checkpoints import TrainingCheckpoint
    from memaudit.errors import JobInterrupted
    from memaudit.models.tiny import train_tiny_gpt2

    texts = TINY_TEXTS * 2
    settings = dict(n_layer=1, n_embd=16, n_head=2, n_positions=16, vocab_size=300, epochs=2, lr=0.01,
                    batch_size=4, max_tokens=None, seed=5)
    uninterrupted = train_tiny_gpt2(texts, tmp_path / "plain", **settings)
    ckpt = TrainingCheckpoint(tmp_path / "ckpt", every_steps=4)
    messages: list[str] = []
    with pytest.raises(JobInterrupted, match="pretraining stopped by SIGTERM"):
        train_tiny_gpt2(texts, tmp_path / "resumed", checkpoint=ckpt,
                        progress=_sigterm_at_step(uninterrupted["steps"] // 10 * 5, messages), **settings)
    assert not (tmp_path / "resumed").exists()  # not even the tokenizer: the directory is written atomically
    record = train_tiny_gpt2(texts, tmp_path / "resumed", checkpoint=ckpt, **settings)
    assert record["resumed_from_step"] == uninterrupted["steps"] // 10 * 5
    a, b = load_file(tmp_path / "plain" / "model.safetensors"), load_file(tmp_path / "resumed" / "model.safetensors")
    for name in a:
        assert torch.equal(a[name], b[name]), name
    tokenizers = [(tmp_path / run / "tokenizer.json").read_bytes() for run in ("plain", "resumed")]
    assert tokenizers[0] == tokenizers[1]


def test_a_fine_tune_stopped_under_one_code_version_starts_over_under_the_next(tiny_model_dir, tmp_path, monkeypatch):
    """A fine-tune stopped before an upgrade that bumped the models step's version (its job then reruns) resumed
    from the old code's checkpoint: its weights were the old code's steps and the new code's, matching neither
    version's fine-tune while its manifest was written under the new one. The version is part of the key now."""
    import dataclasses

    from memaudit.errors import JobInterrupted
    from memaudit.io import write_json
    from memaudit.models.prepare import prepare_finetuned_model
    from memaudit.versions import STEPS

    base = tmp_path / "base.json"
    write_json(base, {"load": {"path": str(tiny_model_dir)}})
    ft = {"members_of": ["novels"], "method": "lora", "epochs": 2, "lr": 0.01, "duplication": 1, "batch_size": 4,
          "max_length": 32, "lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.0, "target_modules": "all-linear"}
    entry, root = {"dtype": "float32", "base": "b", "finetune": ft}, tmp_path / "checkpoints"

    def prepare(progress=lambda message: None) -> dict:
        return prepare_finetuned_model("m", entry, base, TINY_TEXTS, tmp_path / "m", seed=0, device="cpu",
                                       checkpoint_root=root, progress=progress)

    with pytest.raises(JobInterrupted, match="stopped by SIGTERM at step 3/12"):
        prepare(_sigterm_at_step(3, []))
    [stopped] = list((root / "prepare_model" / "m").iterdir())
    monkeypatch.setitem(STEPS, "models", dataclasses.replace(STEPS["models"], version=STEPS["models"].version + 1))
    messages: list[str] = []
    manifest = prepare(messages.append)
    assert manifest["training"]["resumed_from_step"] is None and manifest["training"]["steps"] == 12
    assert f"discarding stale checkpoint {stopped} (inputs or settings changed)" in messages
    assert not root.exists()  # removed once the model is written


def test_a_changed_setting_never_resumes_a_stale_checkpoint(tmp_path):
    from memaudit.checkpoints import checkpoint_key, keyed_dir, remove_checkpoint

    base = {"rule": "prepare_model", "name": "m", "finetune": {"lr": 0.001, "epochs": 2}, "seed": 1}
    key = checkpoint_key(base)
    assert key == checkpoint_key({"seed": 1, "name": "m", "finetune": {"epochs": 2, "lr": 0.001},
                                  "rule": "prepare_model"})  # key order is irrelevant
    changed = checkpoint_key({**base, "finetune": {"lr": 0.002, "epochs": 2}})
    assert changed != key and checkpoint_key({**base, "seed": 2}) != key
    stale = keyed_dir(tmp_path / "m", key)
    stale.mkdir(parents=True)
    (stale / "state.pt").write_bytes(b"old")
    messages: list[str] = []
    fresh = keyed_dir(tmp_path / "m", changed, progress=messages.append)
    # kept until the job of the new key succeeds, never resumed: removed at once, one stray run with other settings
    # (a node without a GPU under device: auto) destroyed a resumable GPU fine-tune before it trained a step
    assert fresh.name == changed and (stale / "state.pt").read_bytes() == b"old"
    assert messages == [f"keeping checkpoint {stale} of other inputs or settings until this job succeeds (not resumed)"]
    fresh.mkdir()
    (tmp_path / "other-job").mkdir()
    remove_checkpoint(fresh, tmp_path / "m", stale_keys=True, progress=messages.append)
    assert not (tmp_path / "m").exists() and (tmp_path / "other-job").is_dir()
    assert messages[1:] == [f"discarding stale checkpoint {stale} (inputs or settings changed)"]


def test_a_run_with_other_settings_that_stops_leaves_the_resumable_checkpoint(tiny_model_dir, tmp_path):
    """The helper's case: a fine-tune's checkpoint at some step, then a job of the same model with another device
    (or dtype, or config) that stops before it finishes: the first checkpoint is still there to resume."""
    from memaudit.errors import JobInterrupted
    from memaudit.io import write_json
    from memaudit.models.prepare import prepare_finetuned_model

    write_json(tmp_path / "base.json", {"load": {"path": str(tiny_model_dir)}})
    entry = {"dtype": "float32", "base": "b", "finetune": dict(
        members_of=["b"], method="lora", epochs=2, lr=0.01, duplication=1, batch_size=4, max_length=32, lora_r=4,
        lora_alpha=8, lora_dropout=0.0, target_modules="all-linear")}

    def prepare(lr: float, progress):
        return prepare_finetuned_model("m", {**entry, "finetune": {**entry["finetune"], "lr": lr}},
                                       tmp_path / "base.json", TINY_TEXTS, tmp_path / f"out-{lr}", seed=3,
                                       device="cpu", checkpoint_root=tmp_path / "ckpt", progress=progress)

    with pytest.raises(JobInterrupted, match="at step 3/"):
        prepare(0.01, _sigterm_at_step(3, []))
    [first] = (tmp_path / "ckpt" / "prepare_model" / "m").iterdir()
    with pytest.raises(JobInterrupted, match="at step 2/"):
        prepare(0.02, _sigterm_at_step(2, []))
    assert (first / "state.pt").is_file()
    messages: list[str] = []
    record = prepare(0.01, messages.append)["training"]
    assert record["resumed_from_step"] == 3
    assert not (tmp_path / "ckpt").exists()  # both keys' checkpoints gone once the model is written


# ----------------------------------------------------------------------------- API calls after a kill

KILLED_API_RUN = """
import sys
from memaudit.backends.base import GenerationParams
from memaudit.backends.openai_backend import OpenAIBackend
from memaudit.workflow_support import stop_on_sigterm
stop_on_sigterm()  # what every workflow script does (memaudit.workflow_support.start)
b = OpenAIBackend("gpt-test", base_url=sys.argv[1], api_key_env=sys.argv[3], cache=sys.argv[2], concurrency=3)
b.generate([f"prompt {i}" for i in range(int(sys.argv[4]))], GenerationParams(max_new_tokens=4))
"""


def _answers_stored(db: Path) -> int:
    import sqlite3

    if not db.exists():
        return 0
    with sqlite3.connect(db, timeout=5) as conn:
        try:
            return conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        except sqlite3.OperationalError:  # the table is not created yet
            return 0


def _settled_count(srv, quiet: float = 0.5, limit: float = 30) -> int:
    """The server's request count once every request it received is answered and none has arrived for
    ``quiet`` seconds: a request a killed client sent just before its end can still sit in the server's
    socket, read by a busy machine's handler thread after the kill (it was counted in the rerun)."""
    deadline = time.monotonic() + limit
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        records = list(srv.records)
        if len(records) != last or any(r.finished is None for r in records):
            last, since = len(records), time.monotonic()
        elif time.monotonic() - since >= quiet:
            return last
        time.sleep(0.02)
    raise AssertionError(f"the server did not settle within {limit} s")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_killed_batch_of_api_requests_is_not_paid_twice(sig, tmp_path, monkeypatch):
    from api_server import loopback

    from memaudit.backends.base import GenerationParams
    from memaudit.backends.cache import ResponseCache
    from memaudit.backends.openai_backend import OpenAIBackend

    monkeypatch.setenv("MEMAUDIT_TEST_API_KEY", "sk-test-faults-0123456789")
    db, n, concurrency = tmp_path / "cache.sqlite", 15, 3
    prompts = [f"prompt {i}" for i in range(n)]
    with loopback(latency=0.2) as srv:
        proc = subprocess.Popen([sys.executable, "-c", KILLED_API_RUN, srv.openai_base_url, str(db),
                                 "MEMAUDIT_TEST_API_KEY", str(n)], stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + 60
        while _answers_stored(db) < 4:  # mid-batch: four answers stored, three requests in flight
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline
            time.sleep(0.005)
        os.killpg(proc.pid, sig)
        rc = proc.wait(timeout=60)
        err = proc.stderr.read().decode()
        proc.stderr.close()
        first_run = _settled_count(srv)
        stored = ResponseCache(db).count()
        out = OpenAIBackend("gpt-test", base_url=srv.openai_base_url, api_key_env="MEMAUDIT_TEST_API_KEY",
                            cache=db, concurrency=4).generate(prompts, GenerationParams(max_new_tokens=4))
        rerun = srv.count() - first_run
    assert 4 <= stored < n
    assert rerun == n - stored  # the rerun sends exactly the requests not answered into the cache
    assert sum(g.from_cache for g in out) == stored and [g.text for g in out] == [f"Echo: {p}" for p in prompts]
    if sig == signal.SIGTERM:
        # The requests in flight were answered and stored before the process exited: no request reached
        # the server twice, so nothing was paid twice.
        assert rc == 1 and "JobInterrupted: stopped by SIGTERM" in err
        assert first_run == stored and first_run + rerun == n
    else:
        # SIGKILL runs no code: the answers in flight at the kill are lost and asked again (at most the
        # concurrency); everything answered before is not.
        assert rc == -signal.SIGKILL
        assert 0 <= first_run - stored <= concurrency and first_run + rerun <= n + concurrency


# ----------------------------------------------------------------------------- disk full, permission denied

@pytest.fixture
def tiny_tmpfs():
    """A 64 KiB tmpfs mounted on a fresh directory (skips where mounting is not permitted)."""
    mountpoint = Path(tempfile.mkdtemp(prefix="memaudit-full-"))
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(mountpoint)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        mountpoint.rmdir()
        pytest.skip(f"cannot mount a tmpfs here (needs root / CAP_SYS_ADMIN): {proc.stderr.strip()}")
    yield mountpoint
    subprocess.run(["umount", str(mountpoint)], check=True)
    mountpoint.rmdir()


def _fill(mountpoint: Path, leave: int) -> Path:
    """Fill the file system up to ``leave`` bytes free."""
    filler = mountpoint / "filler.bin"
    free = shutil.disk_usage(mountpoint).free
    with open(filler, "wb") as fh:
        fh.write(b"\0" * max(0, free - leave))
    return filler


def test_disk_full_is_a_clear_error_that_leaves_no_partial_file(tiny_tmpfs):
    from memaudit.errors import StorageError
    from memaudit.io import atomic_dir, write_json, write_jsonl

    target = tiny_tmpfs / "out" / "big.json"
    with pytest.raises(StorageError) as err:
        write_json(target, {"values": list(range(40_000))})  # ~300 KB of JSON into 64 KiB
    msg = str(err.value)
    assert msg.startswith(f"cannot write {target}: no space left on device")
    assert "free space on that file system" in msg and "Nothing half-written" in msg
    assert list((tiny_tmpfs / "out").iterdir()) == []  # neither the target nor its temporary

    with pytest.raises(StorageError, match=r"cannot write .*/rows\.jsonl: no space left on device"):
        write_jsonl(tiny_tmpfs / "rows.jsonl", ({"i": i, "text": "x" * 100} for i in range(2000)))
    with pytest.raises(StorageError, match=r"cannot write .*/model: no space left on device"):
        with atomic_dir(tiny_tmpfs / "model") as tmp:
            (tmp / "weights.bin").write_bytes(b"\1" * 200_000)
    assert sorted(p.name for p in tiny_tmpfs.iterdir()) == ["out"]
    write_json(tiny_tmpfs / "small.json", {"ok": True})  # the space was given back
    assert json.loads((tiny_tmpfs / "small.json").read_text()) == {"ok": True}


def test_disk_full_while_probing_names_the_output_and_keeps_the_finished_shards(tiny_tmpfs, tiny_model_dir,
                                                                                tmp_path):
    from memaudit.errors import StorageError
    from memaudit.io import write_json, write_jsonl
    from memaudit.probes.token_prob.forward import run_token_stats

    write_json(tmp_path / "manifest.json", {"load": {"path": str(tiny_model_dir)}})
    write_jsonl(tmp_path / "passages.jsonl", ({"passage_id": f"p{i:02d}", "doc_id": f"d{i}", "text": t}
                                              for i, t in enumerate(TINY_TEXTS)))
    out = tiny_tmpfs / "scores" / "token_stats.npz"
    out.parent.mkdir()
    filler = _fill(tiny_tmpfs, leave=2048)
    messages: list[str] = []
    args = ({"models": {"tiny": {"max_tokens": 64}}}, "tiny", tmp_path, tmp_path / "passages.jsonl", out)
    with pytest.raises(StorageError) as err:
        run_token_stats(*args, shard_passages=4, checkpoint_dir=tmp_path / "ckpt", progress=messages.append)
    assert str(err.value).startswith(f"cannot write {out}: no space left on device")
    assert list(out.parent.iterdir()) == []
    assert len(list((tmp_path / "ckpt").glob("*/*.npz"))) == 3  # 12 passages: kept for the rerun
    filler.unlink()  # the user frees space and reruns: nothing is computed again
    info = run_token_stats(*args, shard_passages=4, checkpoint_dir=tmp_path / "ckpt", progress=messages.append)
    assert info["shards_resumed"] == 3 and out.exists() and not (tmp_path / "ckpt").exists()


def test_permission_denied_is_a_clear_error_naming_the_path(tmp_path):
    """As a non-root user (root ignores permissions), via setpriv, writing into a root-owned directory."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    locked = Path(tempfile.mkdtemp(prefix="memaudit-locked-"))
    try:
        locked.chmod(0o755)  # root's; others may read but not write
        code = ("import sys; from memaudit.io import write_json; "
                "write_json(sys.argv[1], {'x': 1})")
        proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
                               "-c", code, str(locked / "results" / "x.json")],
                              capture_output=True, text=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        if "Operation not permitted" in proc.stderr and "setpriv" in proc.stderr:
            pytest.skip(f"setpriv cannot change user here: {proc.stderr.strip()}")
        assert proc.returncode == 1
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith(f"memaudit.errors.StorageError: cannot write {locked}/results/x.json: "
                               f"permission denied (at {locked}/results)"), proc.stderr
        assert "make the directory writable by this user" in last
        assert list(locked.iterdir()) == []
    finally:
        shutil.rmtree(locked)


def test_read_only_mount_is_a_clear_error(tmp_path):
    """Root is refused too on a read-only bind mount."""
    from memaudit.errors import StorageError
    from memaudit.io import write_json

    ro = tmp_path / "ro"
    ro.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(ro), str(ro)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {mounted.stderr.strip()}")
    try:
        remount = subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], capture_output=True, text=True)
        if remount.returncode != 0:
            pytest.skip(f"cannot remount read-only here: {remount.stderr.strip()}")
        with pytest.raises(StorageError, match=rf"^cannot write {re.escape(str(ro))}/x\.json: read-only file system"):
            write_json(ro / "x.json", {"x": 1})
    finally:
        subprocess.run(["umount", str(ro)], check=True)
    assert list(ro.iterdir()) == []


def test_token_statistics_resumed_where_dtype_auto_resolves_otherwise_start_over(tiny_model_dir, tmp_path,
                                                                                 monkeypatch):
    """`dtype: auto` is bfloat16 on one machine and float32 on another: shards computed in float32 by a killed
    job were joined to bfloat16 ones by its rerun on a bfloat16 machine, all recorded as bfloat16."""
    from memaudit.io import write_json, write_jsonl
    from memaudit.models import loading
    from memaudit.models.token_stats import load_provenance
    from memaudit.probes.token_prob.forward import run_token_stats

    write_json(tmp_path / "manifest.json", {"load": {"path": str(tiny_model_dir)}})
    write_jsonl(tmp_path / "passages.jsonl", ({"passage_id": f"p{i:02d}", "doc_id": f"d{i}", "text": t}
                                              for i, t in enumerate(TINY_TEXTS)))
    out = tmp_path / "token_stats.npz"
    args = ({"models": {"tiny": {"max_tokens": 64, "dtype": "auto", "device": "cpu"}}}, "tiny", tmp_path,
            tmp_path / "passages.jsonl", out)

    class Killed(Exception):
        pass

    def killed_after_two_shards(message):
        if message.startswith("original shard 2/3: passages"):
            raise Killed

    resolved = loading.resolve_dtype
    monkeypatch.setattr(loading, "resolve_dtype", lambda dtype, device="auto", **kw: (
        "float32" if dtype == "auto" else resolved(dtype, device, **kw)))
    with pytest.raises(Killed):
        run_token_stats(*args, shard_passages=4, checkpoint_dir=tmp_path / "ckpt", progress=killed_after_two_shards)
    [stale] = {p.parent for p in (tmp_path / "ckpt").glob("*/*.npz")}
    assert len(list(stale.iterdir())) == 2
    # the rerun lands on a machine where auto is bfloat16
    monkeypatch.setattr(loading, "resolve_dtype", lambda dtype, device="auto", **kw: (
        "bfloat16" if dtype == "auto" else resolved(dtype, device, **kw)))
    messages: list[str] = []
    info = run_token_stats(*args, shard_passages=4, checkpoint_dir=tmp_path / "ckpt", progress=messages.append)
    assert info["shards_resumed"] == 0 and load_provenance(out)["dtype"] == "bfloat16"
    assert [m for m in messages if m.startswith("discarding")] == [
        f"discarding stale checkpoint {stale} (inputs or settings changed)"]


def _token_stats_killed_after_two_shards(tiny_model_dir, tmp_path, device: str):
    """token_stats' arguments for the tiny model on ``device``, and the checkpoint folder of a run of them
    killed after two of its three shards."""
    from memaudit.io import write_json, write_jsonl
    from memaudit.probes.token_prob.forward import run_token_stats

    write_json(tmp_path / "manifest.json", {"load": {"path": str(tiny_model_dir)}})
    write_jsonl(tmp_path / "passages.jsonl", ({"passage_id": f"p{i:02d}", "doc_id": f"d{i}", "text": t}
                                              for i, t in enumerate(TINY_TEXTS)))
    args = ({"models": {"tiny": {"max_tokens": 64, "dtype": "float32", "device": device}}}, "tiny", tmp_path,
            tmp_path / "passages.jsonl", tmp_path / "token_stats.npz")

    class Killed(Exception):
        pass

    def killed_after_two_shards(message):
        if message.startswith("original shard 2/3: passages"):
            raise Killed

    with pytest.raises(Killed):
        run_token_stats(*args, shard_passages=4, checkpoint_dir=tmp_path / "ckpt", progress=killed_after_two_shards)
    [stale] = {p.parent for p in (tmp_path / "ckpt").glob("*/*.npz")}
    return args, stale


def test_token_statistics_computed_on_one_device_type_start_over_on_another(tiny_model_dir, tmp_path, monkeypatch):
    """token_stats' checkpoint key held the resolved dtype but the device as configured (`auto`): shards a killed
    job computed on a CPU were joined to ones its rerun computed on a GPU (float32 logits differ between them).
    The key holds the device type now. The GPU here is the CPU with ``device: auto`` read as cuda (the model
    still loads on the CPU)."""
    from memaudit.models import loading
    from memaudit.probes.token_prob.forward import run_token_stats

    args, stale = _token_stats_killed_after_two_shards(tiny_model_dir, tmp_path, "auto")
    assert len(list(stale.iterdir())) == 2
    # the rerun lands on a machine where auto is a GPU
    resolve, load = loading.resolve_device, loading.load_model
    monkeypatch.setattr(loading, "resolve_device",
                        lambda device="auto": "cuda:0" if device == "auto" else resolve(device))
    monkeypatch.setattr(loading, "load_model", lambda spec, **kw: load(spec, **{**kw, "device": "cpu"}))
    messages: list[str] = []
    info = run_token_stats(*args, shard_passages=4, checkpoint_dir=tmp_path / "ckpt", progress=messages.append)
    assert info["shards_resumed"] == 0
    assert [m for m in messages if m.startswith("discarding")] == [
        f"discarding stale checkpoint {stale} (inputs or settings changed)"]


def test_token_statistics_stopped_before_a_version_bump_start_over_after_it(tiny_model_dir, tmp_path, monkeypatch):
    """A token_stats job killed midway, then memaudit upgraded with a fix that bumps the token_prob family's
    ``stats`` version: the rerun joined the old code's finished shards to the new code's, recorded as the new
    version's statistics. The key holds the stage's version now."""
    import dataclasses

    from memaudit.probes.registry import FAMILIES
    from memaudit.probes.token_prob.forward import run_token_stats

    args, stale = _token_stats_killed_after_two_shards(tiny_model_dir, tmp_path, "cpu")
    stages = FAMILIES["token_prob"].stages
    monkeypatch.setitem(stages, "stats", dataclasses.replace(stages["stats"], version=stages["stats"].version + 1))
    messages: list[str] = []
    info = run_token_stats(*args, shard_passages=4, checkpoint_dir=tmp_path / "ckpt", progress=messages.append)
    assert info["shards_resumed"] == 0
    assert [m for m in messages if m.startswith("discarding")] == [
        f"discarding stale checkpoint {stale} (inputs or settings changed)"]
