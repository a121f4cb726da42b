"""GPU allocation for jobs: processes competing for device locks, and Snakemake capping GPU jobs.

No GPU is needed: the locks only need device ids, and CUDA_VISIBLE_DEVICES set to ids of GPUs
that do not exist makes torch see none, so the jobs run on the CPU as they would anyway.
"""

from __future__ import annotations

import json
import re
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from memaudit import devices
from memaudit.errors import ConfigError

from workflow_helpers import ROOT, SNAKEMAKE

WORKER = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from memaudit.devices import claim_gpus
    locks, go, n, hold, out = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
    while not go.exists():
        time.sleep(0.01)
    got = claim_gpus(n, ["0", "1", "2"], locks=locks, poll=0.02)
    start = time.time()
    time.sleep(hold)
    Path(out).write_text(json.dumps({"devices": got, "start": start, "end": time.time()}))
""")


def _overlap(a: dict, b: dict) -> bool:
    return a["start"] < b["end"] and b["start"] < a["end"]


def test_visible_gpus_follows_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert devices.visible_gpus() == ["2", "5"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert devices.visible_gpus() == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert devices.visible_gpus() == []


def test_model_gpus_from_gpus_and_device():
    assert devices.model_gpus({"gpus": 4, "device": "cuda"}) == 4
    assert devices.model_gpus({"device": "cuda"}, visible=0) == 1
    assert devices.model_gpus({"device": "cuda:1"}, visible=0) == 1
    assert devices.model_gpus({"device": "cpu"}, visible=8) == 0
    assert devices.model_gpus({"device": "auto"}, visible=0) == 0
    assert devices.model_gpus({"device": "auto"}, visible=8) == 1
    assert devices.model_gpus({"backend": "openai", "device": "cuda"}) == 0
    with pytest.raises(ConfigError, match="models.big.device"):
        devices.model_gpus({"device": "gpu"}, model="big")


def test_competing_processes_never_share_a_device(tmp_path):
    """Ten processes want 1 or 2 of 3 devices at once: no device is ever held by two of them."""
    go = tmp_path / "go"
    wants, hold = [1, 2, 1, 1, 2, 1, 1, 2, 1, 1], 0.5
    procs = []
    for i, n in enumerate(wants):
        cmd = [sys.executable, "-c", WORKER, str(tmp_path), str(go), str(n), str(hold), str(tmp_path / f"{i}.json")]
        procs.append(subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True))
    time.sleep(1.0)  # let every interpreter start, then release them together
    go.touch()
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read()
    runs = [json.loads((tmp_path / f"{i}.json").read_text()) for i in range(len(wants))]
    for run, n in zip(runs, wants):
        assert len(run["devices"]) == n and len(set(run["devices"])) == n
        assert set(run["devices"]) <= {"0", "1", "2"}
    for i, a in enumerate(runs):
        for b in runs[i + 1:]:
            if _overlap(a, b):
                assert not set(a["devices"]) & set(b["devices"]), (a, b)
    # Work ran side by side: held device-seconds exceed the wall time of the whole run.
    wall = max(r["end"] for r in runs) - min(r["start"] for r in runs)
    assert hold * len(runs) > wall
    assert {d for r in runs for d in r["devices"]} == {"0", "1", "2"}


def test_a_killed_job_frees_its_device(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from memaudit.devices import claim_gpus
        claim_gpus(1, ["0"], locks=Path({str(tmp_path)!r}))
        print("held", flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(devices.DeviceError, match="no 1 free GPU"):
            devices.claim_gpus(1, ["0"], locks=tmp_path, timeout=0.5)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    try:
        assert devices.claim_gpus(1, ["0"], locks=tmp_path, timeout=5) == ["0"]
    finally:
        devices.release_gpus()


def test_the_lock_folder_is_one_per_machine_whatever_tmpdir_says(monkeypatch, tmp_path):
    """Under $TMPDIR, jobs whose TMPDIR differed (a per-user or per-job one) locked in different folders: two
    processes each held device 0."""
    import tempfile

    monkeypatch.delenv(devices.LOCK_DIR_ENV, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    assert tempfile.gettempdir() == str(tmp_path)
    assert devices.lock_dir() == devices.Path("/tmp/memaudit-gpu-locks")
    monkeypatch.setenv(devices.LOCK_DIR_ENV, str(tmp_path / "mine"))
    assert devices.lock_dir() == tmp_path / "mine" and (tmp_path / "mine").is_dir()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv to be two users")
def test_a_lock_file_another_user_left_is_lockable_by_the_next(tmp_path):
    """A lock file is made 0666 (the umask left 0644), and one another user made without that (an older memaudit)
    is locked through a read-only descriptor: a second user's GPU job stopped with a PermissionError on the
    first user's leftover file, though nothing held it."""
    import tempfile

    locks = Path(tempfile.mkdtemp(prefix="memaudit-locks-", dir="/tmp"))  # /tmp: the other user can reach it
    try:
        locks.chmod(0o1777)
        try:
            devices.claim_gpus(1, ["0"], locks=locks, timeout=5)
        finally:
            devices.release_gpus()
        assert (locks / "gpu-0.lock").stat().st_mode & 0o777 == 0o666
        (locks / "gpu-1.lock").write_text("")
        (locks / "gpu-1.lock").chmod(0o644)  # as an older memaudit left it
        claim = (f"import sys; sys.path[:0] = {sys.path!r}; from pathlib import Path; "
                 f"from memaudit.devices import claim_gpus; print(claim_gpus(2, ['0', '1'], locks=Path({str(locks)!r}), "
                 f"timeout=5))")
        as_other = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c"]
        reach = subprocess.run([*as_other, f"import sys; sys.path[:0] = {sys.path!r}; import memaudit.devices"],
                               capture_output=True, text=True, cwd="/", env={**os.environ, "HOME": "/"})
        if reach.returncode != 0:  # a checkout or venv under a folder only root may read (/root)
            pytest.skip(f"user 65534 cannot import memaudit here: {reach.stderr.strip().splitlines()[-1:]}")
        other = subprocess.run([*as_other, claim], capture_output=True, text=True, cwd="/",
                               env={**os.environ, "HOME": "/"})
        assert other.returncode == 0, other.stderr
        assert other.stdout.strip() == "['0', '1']"
    finally:
        shutil.rmtree(locks)


def test_more_gpus_than_visible_is_an_error(tmp_path):
    with pytest.raises(devices.DeviceError, match="claims 3 GPU"):
        devices.claim_gpus(3, ["0", "1"], locks=tmp_path)


def test_bind_job_devices(monkeypatch, tmp_path):
    monkeypatch.setenv(devices.LOCK_DIR_ENV, str(tmp_path))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    try:
        assert devices.bind_job_devices(1) == ["3"]
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "3"
        # another process of the same machine now gets the other one
        other = subprocess.run([sys.executable, "-c", "import os; from memaudit.devices import bind_job_devices;"
                                "bind_job_devices(1); print(os.environ['CUDA_VISIBLE_DEVICES'])"],
                               env=dict(os.environ, CUDA_VISIBLE_DEVICES="3,5"), capture_output=True, text=True)
        assert other.stdout.strip() == "5", other.stderr
    finally:
        devices.release_gpus()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert devices.bind_job_devices(0) == [] and os.environ["CUDA_VISIBLE_DEVICES"] == ""
    # no GPU at all: the job runs on the CPU
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert devices.bind_job_devices(2) == []
    # under SLURM the scheduler has chosen: no lock beside other jobs' (only in its allocation's own folder),
    # but the count must be there
    monkeypatch.setenv("SLURM_JOB_ID", "17")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    try:
        assert devices.bind_job_devices(1) == ["0"]
    finally:
        devices.release_gpus()
    assert not list(tmp_path.glob("gpu-0.lock")) and (tmp_path / "slurm-job-17" / "gpu-0.lock").is_file()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(devices.DeviceError, match="SLURM gave this job 1 GPU"):
        devices.bind_job_devices(2)


def test_jobs_inside_one_slurm_allocation_each_get_their_own_gpu(monkeypatch, tmp_path):
    """`snakemake --profile profiles/local --resources gpu=2` inside `salloc --gpus=2` (or one sbatch running the
    whole workflow on a GPU node): every GPU job took the allocation's first device, visible[:1], and two ran on
    it side by side while the second stood idle. Jobs of one allocation lock its devices among themselves;
    another SLURM job on the node, whose devices SLURM numbers from 0 too, does not wait for those locks."""
    monkeypatch.setenv(devices.LOCK_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("SLURM_JOB_ID", "17")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    bind = ("import os; from memaudit.devices import bind_job_devices; bind_job_devices(1); "
            "print(os.environ['CUDA_VISIBLE_DEVICES'])")
    try:
        assert devices.bind_job_devices(1) == ["0"]
        same_job = subprocess.run([sys.executable, "-c", bind], env=dict(os.environ, CUDA_VISIBLE_DEVICES="0,1"),
                                  capture_output=True, text=True, timeout=60)
        assert same_job.stdout.strip() == "1", same_job.stderr
        other_job = subprocess.run([sys.executable, "-c", bind],
                                   env=dict(os.environ, SLURM_JOB_ID="18", CUDA_VISIBLE_DEVICES="0"),
                                   capture_output=True, text=True, timeout=60)
        assert other_job.stdout.strip() == "0", other_job.stderr
    finally:
        devices.release_gpus()


def test_slurm_job_given_no_gpu_sees_none_of_the_nodes(monkeypatch, tmp_path, caplog):
    """SLURM sets CUDA_VISIBLE_DEVICES only for a job it gave GPUs. A job it gave none, on a node with
    two (the driver lists both in /proc), must neither claim one for `device: auto` (its own Snakemake
    evaluates the rule's `gpu` again there) nor bind device 0, which belongs to another job."""
    proc = tmp_path / "nvidia-gpus"
    for bus in ("0000:01:00.0", "0000:02:00.0"):
        (proc / bus).mkdir(parents=True)
    monkeypatch.setattr(devices, "NVIDIA_PROC", proc)
    monkeypatch.setenv(devices.LOCK_DIR_ENV, str(tmp_path / "locks"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert devices.visible_gpus() == ["0", "1"]  # outside SLURM: the driver's list
    assert devices.model_gpus({"device": "auto"}) == 1
    monkeypatch.setenv("SLURM_JOB_ID", "17")
    monkeypatch.setattr(devices, "_warned_unassigned", [])
    with caplog.at_level("WARNING", logger="memaudit.devices"):
        assert devices.visible_gpus() == []
        assert devices.visible_gpus() == []
    # said once, not silently: a node's GPUs left unused where SLURM set no CUDA_VISIBLE_DEVICES
    assert [r.getMessage() for r in caplog.records] == [
        "SLURM job 17 has no CUDA_VISIBLE_DEVICES: its 2 listed GPU(s) are taken as other jobs' and not used "
        "(ask SLURM for GPUs, --gpus=N, or set CUDA_VISIBLE_DEVICES where the node's GPUs are the job's own)"]
    assert devices.model_gpus({"device": "auto"}) == 0
    # and torch does not see them either: without CUDA_VISIBLE_DEVICES (a node without device cgroups) it saw every
    # GPU of the node, and `device: auto` took device 0, another job's
    assert devices.bind_job_devices(1, progress=lambda _: None) == []
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert devices.bind_job_devices(0, progress=lambda _: None) == []
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    monkeypatch.delenv("SLURM_JOB_ID")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setattr(devices, "NVIDIA_PROC", tmp_path / "none")  # outside SLURM on a machine without GPUs
    assert devices.bind_job_devices(0, progress=lambda _: None) == []
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # nothing to hide: the environment left as it was
    monkeypatch.setenv("SLURM_JOB_ID", "17")
    # a job SLURM gave a GPU sees exactly that one
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert devices.visible_gpus() == ["1"]
    assert devices.model_gpus({"device": "auto"}) == 1


SNAKEFILE = """
rule all:
    input: expand("out/{i}.json", i=range(4))

rule gpu_job:
    output: "out/{i}.json"
    threads: 1
    resources: gpu=1
    script: "job.py"
"""

JOB = """
import json, os, time
from memaudit.workflow_support import start
start(snakemake, "light")  # no torch import: the test is about the devices
t0 = time.time()
time.sleep(3)
with open(snakemake.output[0], "w") as f:
    json.dump({"devices": os.environ["CUDA_VISIBLE_DEVICES"].split(","), "start": t0, "end": time.time()}, f)
"""


@pytest.mark.slow
def test_snakemake_caps_gpu_jobs_and_each_gets_its_own_device(tmp_path):
    """The local-profile mechanism for real: --resources gpu=2 over 3 (fake) devices, four GPU jobs."""
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    (tmp_path / "job.py").write_text(JOB)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0,1,2", MEMAUDIT_GPU_LOCK_DIR=str(tmp_path / "locks"))
    env.pop("SLURM_JOB_ID", None)
    proc = subprocess.run([*SNAKEMAKE, "--cores", "4", "--resources", "gpu=2"], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = [json.loads((tmp_path / f"out/{i}.json").read_text()) for i in range(4)]
    assert all(len(r["devices"]) == 1 and r["devices"][0] in {"0", "1", "2"} for r in runs)
    pairs = [(a, b) for i, a in enumerate(runs) for b in runs[i + 1:] if _overlap(a, b)]
    assert pairs, "no two GPU jobs ran at once: nothing was tested"
    for a, b in pairs:
        assert a["devices"] != b["devices"], (a, b)
    # never more than two at once (gpu=2), whatever the 4 cores would allow
    at_start = [sum(r["start"] <= a["start"] < r["end"] for r in runs) for a in runs]
    assert max(at_start) == 2, at_start


@pytest.mark.slow
def test_gpu_resource_of_jobs_follows_the_model_config(tmp_path):
    """The rules' `gpu` resource, as Snakemake evaluates it: what --resources caps and SLURM gets as --gpus."""
    import yaml

    from workflow_helpers import dry_run_resources, make_workdir

    workdir = make_workdir(tmp_path)
    cfg = yaml.safe_load((ROOT / "config/ci.yaml").read_text())
    cfg["models"]["smollm2-135m-contaminated"]["device"] = "cuda"
    cfg["models"]["tiny-gpt2-small"]["gpus"] = 2
    (workdir / "config/gpus.yaml").write_text(yaml.safe_dump(cfg))
    # CUDA_VISIBLE_DEVICES="" so that `auto` claims nothing even where a GPU is present
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    gpu = {job: res.get("gpu") for job, res in dry_run_resources(workdir, "config/gpus.yaml", env=env).items()}
    assert gpu[("prepare_model", "model=smollm2-135m-contaminated")] == 1   # fine-tuning, device cuda
    assert gpu[("prepare_model", "model=smollm2-135m")] == 0                # a conversion needs no GPU
    assert gpu[("prepare_model", "model=tiny-gpt2-small-contaminated")] == 0  # auto, no GPU visible
    for bench in ("novels", "news"):
        for rule in ("token_stats", "token_stats_lowercase"):  # the lowercased passes (ci scores lowercase) alike
            assert gpu[(rule, f"benchmark={bench}, model=smollm2-135m-contaminated")] == 1
            assert gpu[(rule, f"benchmark={bench}, model=tiny-gpt2-small")] == 2
            assert gpu[(rule, f"benchmark={bench}, model=smollm2-135m")] == 0
    # DE-COP probes a local model like token_stats; the paraphrasing job claims its model's GPUs
    assert gpu[("decop_probe", "benchmark=novels, model=smollm2-135m-contaminated, mode=logit")] == 1
    assert gpu[("decop_probe", "benchmark=novels, model=tiny-gpt2-small, mode=likelihood")] == 2
    assert gpu[("decop_items", "benchmark=novels")] == 0  # the paraphraser, smollm2-135m: device auto
    # KTD's gradients run on the model under test's GPUs
    assert gpu[("ktd_probe", "benchmark=novels, model=tiny-gpt2-small")] == 2
    # and so do the cloze probes' reads of its word ranks
    assert gpu[("cloze_probe", "benchmark=novels, model=tiny-gpt2-small, mode=logit")] == 2
    # every other job claims none
    others = {k: v for k, v in gpu.items()
              if k[0] not in ("prepare_model", "token_stats", "token_stats_lowercase", "decop_probe", "ktd_probe",
                              "cloze_probe")}
    assert others and all(v in (None, 0) for v in others.values()), others



@pytest.mark.slow
def test_cloze_items_claims_the_gpu_of_its_local_knowledge_filter(tmp_path):
    """cloze_items loads the knowledge filter (probes.cloze.filter.model) beside the reference model. A local
    filter on `device: cuda` with the reference on the CPU claimed no GPU: the job saw none and stopped with
    "device 'cuda' requested but no CUDA device is available" (under SLURM: no --gpus asked)."""
    import yaml

    from workflow_helpers import dry_run_resources, make_workdir

    workdir = make_workdir(tmp_path, share_resources=False)
    cfg = yaml.safe_load((ROOT / "config/ci.yaml").read_text())
    cfg["models"]["smollm2-135m"]["device"] = "cuda"  # the filter; the reference, tiny-gpt2-cb, stays auto
    cfg["probes"]["cloze"]["filter"] = {"model": "smollm2-135m", "mode": "logit"}
    (workdir / "config/filter.yaml").write_text(yaml.safe_dump(cfg))
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # `auto` claims nothing
    gpu = {job: res.get("gpu") for job, res in dry_run_resources(workdir, "config/filter.yaml", env=env).items()}
    assert gpu[("cloze_items", "benchmark=novels")] == 1
    # without a filter the job claims the reference's GPUs alone: none
    del cfg["probes"]["cloze"]["filter"]
    (workdir / "config/nofilter.yaml").write_text(yaml.safe_dump(cfg))
    gpu = {job: res.get("gpu") for job, res in dry_run_resources(workdir, "config/nofilter.yaml", env=env).items()}
    assert gpu[("cloze_items", "benchmark=novels")] == 0


# The ci run's jobs that load smollm2-135m: its own and its fine-tune's preparation, the fine-tune's token
# statistics (of the passages and of their lowercased copies) and DE-COP probe, and the DE-COP paraphraser's
# two jobs (it is the paraphraser)
SMOLLM2_JOBS = [("prepare_model", "model=smollm2-135m"), ("prepare_model", "model=smollm2-135m-contaminated"),
                ("token_stats", "benchmark=novels, model=smollm2-135m-contaminated"),
                ("token_stats_lowercase", "benchmark=novels, model=smollm2-135m-contaminated"),
                ("decop_probe", "benchmark=novels, model=smollm2-135m-contaminated, mode=logit"),
                ("decop_items", "benchmark=novels"), ("ktd_pool", "benchmark=novels")]


@pytest.mark.slow
def test_ktd_probe_claims_the_gpu_of_its_reference_models(tmp_path):
    """ktd_probe loads probes.ktd.reference_models after the model under test, in the same job. A reference on
    `device: cuda` beside a model on the CPU claimed no GPU: the job saw none and stopped at the reference."""
    import yaml

    from workflow_helpers import dry_run_resources, make_workdir

    workdir = make_workdir(tmp_path, share_resources=False)
    cfg = yaml.safe_load((ROOT / "config/ci.yaml").read_text())
    cfg["models"]["smollm2-135m"]["device"] = "cuda"
    cfg["probes"]["ktd"]["reference_models"] = ["smollm2-135m"]
    (workdir / "config/ref.yaml").write_text(yaml.safe_dump(cfg))
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # the models under test (auto) claim nothing
    gpu = {job: res.get("gpu") for job, res in dry_run_resources(workdir, "config/ref.yaml", env=env).items()}
    assert gpu[("ktd_probe", "benchmark=novels, model=tiny-gpt2-small")] == 1
    assert gpu[("ktd_probe", "benchmark=novels, model=tiny-gpt2-small-contaminated")] == 1
    # ci's own reference, tiny-gpt2-small (auto), claims none, nor does its probe of the other model
    gpu = {job: res.get("gpu") for job, res in dry_run_resources(workdir, "config/ci.yaml", env=env).items()}
    assert gpu[("ktd_probe", "benchmark=novels, model=tiny-gpt2-small-contaminated")] == 0

@pytest.mark.slow
def test_a_models_mem_mb_is_asked_by_every_job_that_loads_it_and_no_other(tmp_path):
    """models.<name>.mem_mb raises the memory of the jobs that load the model: its own preparation and
    probes, its fine-tuned model's (which loads its weights), and jobs that load it in a role (the
    DE-COP paraphraser, KTD's pool); every other job keeps its rule's default."""
    import yaml

    from workflow_helpers import dry_run_resources, make_workdir

    workdir = make_workdir(tmp_path, share_resources=False)
    cfg = yaml.safe_load((ROOT / "config/ci.yaml").read_text())
    cfg["models"]["smollm2-135m"]["mem_mb"] = 32000  # the base and the DE-COP paraphraser
    cfg["models"]["tiny-gpt2-small-contaminated"]["mem_mb"] = 9000  # above the probes' 4000-6000, below 32000
    (workdir / "config/mem.yaml").write_text(yaml.safe_dump(cfg))
    mem = {job: res["mem_mb"] for job, res in dry_run_resources(workdir, "config/mem.yaml").items()
           if "mem_mb" in res}
    for job in SMOLLM2_JOBS:
        assert mem[job] == 32000, job
    assert mem[("ktd_probe", "benchmark=novels, model=tiny-gpt2-small-contaminated")] == 9000
    for rule in ("token_stats", "token_stats_lowercase"):
        assert mem[(rule, "benchmark=novels, model=tiny-gpt2-small-contaminated")] == 9000
        assert mem[(rule, "benchmark=novels, model=tiny-gpt2-small")] == 8000  # the rule's own default
    # the rules' own defaults elsewhere
    assert mem[("ktd_probe", "benchmark=novels, model=tiny-gpt2-small")] == 6000
    assert mem[("prepare_model", "model=tiny-gpt2-cb")] == 8000
    assert mem[("copybench_probe", "benchmark=books, model=tiny-gpt2-cb, mode=literal")] == 4000
    assert mem[("cloze_items", "benchmark=novels")] == 4000


def test_a_device_auto_model_whose_cluster_jobs_claim_no_gpu_is_named():
    """Submitted from a login node without GPUs, `device: auto` claims none: config/paper.yaml's 7B models asked
    SLURM for no GPU and ran on the CPU (or out of their time limits) without a word. The run's start names them,
    once each; models with a GPU claim, `device: cpu`, `gpus:` or an API backend are not named."""
    from memaudit.workflow_support import cpu_bound_auto_models

    config = {"models": {"big": {"device": "auto"}, "gpu": {"device": "cuda"}, "cpu": {"device": "cpu"},
                         "set": {"device": "auto", "gpus": 0}, "default": {},
                         "api": {"backend": "openai", "api": {"model_id": "x"}}}}
    runs = [(["big"], 0), (["big"], 0), (["gpu"], 1), (["cpu"], 0), (["set"], 0), (["default"], 0), (["api"], 0),
            ([], 0)]
    lines = cpu_bound_auto_models(config, runs)
    assert [line.split(".device")[0] for line in lines] == ["warning: models.big", "warning: models.default"]
    assert lines[0] == ("warning: models.big.device is auto and this host sees no GPU, so its jobs ask the cluster "
                        "for none and run on the CPU; set device: cuda (or gpus: N) where the model is meant for a "
                        "GPU, device: cpu to silence this")
    assert cpu_bound_auto_models(config, [(["big"], 1)]) == []  # this host sees one: the jobs claim it


def test_a_retried_job_is_given_more_time_than_the_limit_it_hit():
    """The profile retries a failed job once, and SLURM's TIMEOUT is a failure: the retry asked the same limit
    (a 13B model's probe, 30 minutes) and hit it again. The rule's own limit and the models' grow with the
    attempt; the profile's default is the user's expression, evaluated for the attempt by Snakemake."""
    from memaudit.jobs import job_runtime

    assert job_runtime(240, [], 1) == 240 and job_runtime(240, [], 2) == 480  # prepare_model's own
    assert job_runtime(None, [0], 2, profile=30) == 30  # no model runtime: the profile's, as evaluated
    assert job_runtime(None, [90], 1, profile=30) == 90 and job_runtime(None, [90], 2, profile=30) == 180
    assert job_runtime(120, [90, 600], 2) == 1200  # token_stats of a model with a runtime: the larger, doubled
    assert job_runtime(None, [90], 2, profile="2h") == 180  # a profile runtime not in minutes: the model's


@pytest.mark.slow
def test_a_models_runtime_is_asked_by_every_job_that_loads_it_and_no_other(tmp_path):
    """models.<name>.runtime (minutes, SLURM's --time) raises the time limit of the jobs that load the model,
    as mem_mb does their memory. Every probe job got the profile's 30 minutes whatever the model, and a
    7B model's probes hit it (a retry asked the same limit); a job without it keeps the profile's default
    (prepare_model and token_stats their rules' own)."""
    import yaml

    from workflow_helpers import dry_run_resources, make_workdir

    workdir = make_workdir(tmp_path, share_resources=False)
    cfg = yaml.safe_load((ROOT / "config/ci.yaml").read_text())
    cfg["models"]["smollm2-135m"]["runtime"] = 600  # the base and the DE-COP paraphraser
    cfg["models"]["tiny-gpt2-small-contaminated"]["runtime"] = 90  # above the profile's 30, below token_stats' 120
    (workdir / "config/runtime.yaml").write_text(yaml.safe_dump(cfg))
    profile = yaml.safe_load((ROOT / "profiles/slurm/config.yaml").read_text())["default-resources"]
    assert profile["runtime"] == 30
    runtime = {job: res.get("runtime") for job, res in dry_run_resources(
        workdir, "config/runtime.yaml", "--default-resources", "runtime=30").items()}
    for job in SMOLLM2_JOBS:
        assert runtime[job] == 600, job
    assert runtime[("ktd_probe", "benchmark=novels, model=tiny-gpt2-small-contaminated")] == 90
    for rule in ("token_stats", "token_stats_lowercase"):
        assert runtime[(rule, "benchmark=novels, model=tiny-gpt2-small-contaminated")] == 120
        assert runtime[(rule, "benchmark=novels, model=tiny-gpt2-small")] == 120  # the rule's own
    # the rules' own, else the profile's, elsewhere
    assert runtime[("ktd_probe", "benchmark=novels, model=tiny-gpt2-small")] == 30
    assert runtime[("prepare_model", "model=tiny-gpt2-cb")] == 240
    assert runtime[("copybench_probe", "benchmark=books, model=tiny-gpt2-cb, mode=literal")] == 30
    assert runtime[("cloze_items", "benchmark=novels")] == 30
    assert runtime[("metrics", "benchmark=novels, model=smollm2-135m-contaminated")] == 30
    # a profile's default given as an expression is evaluated as Snakemake evaluates it for other rules
    runtime = {job: res.get("runtime") for job, res in dry_run_resources(
        workdir, "config/runtime.yaml", "--default-resources", "runtime=attempt*45").items()}
    assert runtime[("ktd_probe", "benchmark=novels, model=tiny-gpt2-small")] == 45
    assert runtime[("ktd_probe", "benchmark=novels, model=tiny-gpt2-small-contaminated")] == 90
    # without a profile default, a job no model raises asks for no time limit (the partition's then)
    runtime = {job: res.get("runtime") for job, res in dry_run_resources(workdir, "config/runtime.yaml").items()}
    assert runtime[("ktd_probe", "benchmark=novels, model=tiny-gpt2-small")] is None
    assert runtime[("ktd_probe", "benchmark=novels, model=tiny-gpt2-small-contaminated")] == 90


# The rules that declare a `gpu` resource, read from the workflow itself (run in a subprocess: the API
# changes the working directory).
_GPU_RULES = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings
with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
    wf = api.workflow(resource_settings=ResourceSettings(cores=1),
                      config_settings=ConfigSettings(configfiles=[Path("config/ci.yaml")]),
                      snakefile=Path("Snakefile"), workdir=Path("."))
    print("GPU_RULES" + json.dumps({r.name: sorted(r.resources) for r in wf._workflow.rules if "gpu" in r.resources}))
"""


def test_the_slurm_profile_sends_every_rule_that_claims_gpus_to_the_gpu_partition():
    """A rule with a `gpu` resource left in the CPU partition asks sbatch for `--gpus=N` there, which a
    partition without GPUs refuses: KTD's, the cloze probes' and CopyBench's jobs of a local model failed
    at submission, after every other job had run."""
    import yaml

    proc = subprocess.run([sys.executable, "-c", _GPU_RULES], cwd=ROOT, capture_output=True, text=True)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("GPU_RULES")), None)
    assert proc.returncode == 0 and line is not None, proc.stderr[-3000:]
    declared = json.loads(line.removeprefix("GPU_RULES"))
    gpu_rules = sorted(declared)
    assert gpu_rules == ["cloze_items", "cloze_probe", "copybench_items", "copybench_probe", "copybench_qa_items",
                         "decop_items", "decop_probe", "ktd_pool", "ktd_probe", "prefix_probe", "prepare_model",
                         "token_stats", "token_stats_lowercase"]
    # each loads a model: its memory is the rule's, not the profile's 2000 MB default for small jobs
    assert [rule for rule in gpu_rules if "mem_mb" not in declared[rule]] == []
    profile = yaml.safe_load((ROOT / "profiles/slurm/config.yaml").read_text())
    assert profile["default-resources"]["slurm_partition"] == "cpu"
    assert {rule: res["slurm_partition"] for rule, res in profile["set-resources"].items()} == {
        rule: "gpu" for rule in gpu_rules}
    # docs/cluster.md names each of them among the jobs that claim GPUs
    doc = (ROOT / "docs/cluster.md").read_text()
    section = doc[doc.index("## Which jobs claim GPUs"):doc.index("## One machine")]
    assert [rule for rule in gpu_rules if f"`{rule}`" not in section] == []


# Parses the workflow as `snakemake` does, then prints the environment its jobs inherit.
_JOB_ENVIRONMENT = """
import os, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings
with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
    wf = api.workflow(resource_settings=ResourceSettings(cores=2), snakefile=Path("Snakefile"), workdir=Path("."),
                      config_settings=ConfigSettings(configfiles=[Path("config/ci.yaml")]))
    assert wf._workflow.rules  # (read on first use)
print("OMP_WAIT_POLICY=" + os.environ.get("OMP_WAIT_POLICY", "<unset>"))
"""


@pytest.mark.parametrize("given, inherited", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_jobs_inherit_a_sleeping_openmp_wait_policy_unless_the_user_set_one(given, inherited, tmp_path):
    """Two jobs running torch side by side on the same cores lost the cores their spinning OpenMP waiters
    took (SmolLM2's token statistics of 24 passages: 57-71 s for two processes at once, 4.3 s with PASSIVE):
    the workflow sets OMP_WAIT_POLICY=PASSIVE for every job it starts, where the environment sets none."""
    from workflow_helpers import make_workdir

    workdir = make_workdir(tmp_path, share_resources=False)
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | (
        {"OMP_WAIT_POLICY": given} if given else {})
    proc = subprocess.run([sys.executable, "-c", _JOB_ENVIRONMENT], cwd=workdir, capture_output=True, text=True,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == f"OMP_WAIT_POLICY={inherited}"
