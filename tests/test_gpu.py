"""On a machine with NVIDIA GPUs: per-job GPU binding with the real device ids, and the HF backend on
CUDA giving the CPU's numbers. Skipped where no GPU is visible (CI has none); run with
``pytest -m gpu tests/test_gpu.py`` on a GPU machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from memaudit.devices import visible_gpus

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not visible_gpus(), reason="no NVIDIA GPU visible")]

# One workflow job as workflow_support starts it: claim `gpus` devices, then initialise CUDA and say
# which physical device (by UUID) it got, hold it `hold` seconds, and release it by exiting.
JOB = textwrap.dedent("""
    import json, os, sys, time
    from memaudit.devices import bind_job_devices
    gpus, hold, out = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    t_ask = time.time()
    ids = bind_job_devices(gpus)
    t_got = time.time()
    import torch
    seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
    uuids = [str(torch.cuda.get_device_properties(i).uuid) for i in range(seen)]
    if seen:
        x = torch.ones(1024, 1024, device="cuda")
        assert float((x @ x).sum()) == 1024.0 ** 3
    time.sleep(hold)
    json.dump({"ids": ids, "visible_env": os.environ.get("CUDA_VISIBLE_DEVICES"), "seen": seen,
               "uuids": uuids, "t_ask": t_ask, "t_got": t_got, "t_end": time.time()}, open(out, "w"))
""")


def nvidia_smi_uuids() -> list[str]:
    """The driver's GPU UUIDs by index (``nvidia-smi -L``), without the ``GPU-`` prefix torch omits."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"], check=True,
                         capture_output=True, text=True).stdout
    rows = [line.split(",") for line in out.strip().splitlines()]
    return [uuid.strip().removeprefix("GPU-") for _, uuid in sorted(rows, key=lambda r: int(r[0]))]


def run_jobs(tmp_path: Path, claims: list[int], hold: float) -> list[dict]:
    env = {**os.environ, "MEMAUDIT_GPU_LOCK_DIR": str(tmp_path / "locks"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.pop("SLURM_JOB_ID", None)
    procs = []
    for i, gpus in enumerate(claims):
        out = tmp_path / f"job{i}.json"
        procs.append((subprocess.Popen([sys.executable, "-c", JOB, str(gpus), str(hold), str(out)], env=env), out))
    for proc, _ in procs:
        assert proc.wait(timeout=300) == 0
    return [json.loads(out.read_text()) for _, out in procs]


def test_jobs_get_their_own_physical_gpus_and_wait_for_a_free_one(tmp_path):
    """One more job than GPUs, each claiming one: every job sees exactly one device, the one it locked
    (its UUID is the driver's for that index); no two jobs hold a device at once; the extra job waits
    for a device to come free and then gets it. A job claiming none sees no GPU."""
    physical = nvidia_smi_uuids()
    n = len(physical)
    jobs = run_jobs(tmp_path, [1] * (n + 1) + [0], hold=3.0)
    gpu_jobs, cpu_job = jobs[:-1], jobs[-1]
    for job in gpu_jobs:
        assert len(job["ids"]) == 1 and job["visible_env"] == job["ids"][0]
        assert job["seen"] == 1
        assert job["uuids"] == [physical[int(job["ids"][0])]]
    # No device is held by two jobs at once
    for dev in {job["ids"][0] for job in gpu_jobs}:
        spans = sorted((j["t_got"], j["t_end"]) for j in gpu_jobs if j["ids"][0] == dev)
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert start >= end - 0.05
    # All n devices were used, and the job that came last waited about one hold for its device
    assert {job["ids"][0] for job in gpu_jobs} == {str(i) for i in range(n)}
    waits = sorted(j["t_got"] - j["t_ask"] for j in gpu_jobs)
    assert waits[-1] >= 2.0 and waits[0] < 2.0
    assert cpu_job["ids"] == [] and cpu_job["visible_env"] == "" and cpu_job["seen"] == 0


def test_a_job_claiming_more_gpus_than_visible_fails_with_the_count(tmp_path):
    from memaudit.devices import DeviceError, claim_gpus

    with pytest.raises(DeviceError, match=rf"claims {len(visible_gpus()) + 1} GPU\(s\) but only"):
        claim_gpus(len(visible_gpus()) + 1, visible_gpus(), locks=tmp_path)


def test_hf_backend_on_cuda_matches_the_cpu(tiny_model_dir):
    """Token statistics, per-sample gradient norms and greedy generation of the tiny GPT-2: the GPU in
    float32 gives the CPU's numbers; ``dtype: auto`` on a GPU with bfloat16 picks bfloat16."""
    import torch

    from conftest import TINY_TEXTS
    from memaudit.backends.base import GenerationParams
    from memaudit.backends.hf import HFBackend
    from memaudit.models.loading import resolve_dtype

    spec = {"path": str(tiny_model_dir)}
    cpu = HFBackend(spec, name="tiny", dtype="float32", device="cpu")
    gpu = HFBackend(spec, name="tiny", dtype="float32", device="cuda")
    assert gpu.device.startswith("cuda") and cpu.device == "cpu"
    texts = TINY_TEXTS[:4]
    a, b = cpu.token_stats(texts), gpu.token_stats(texts)
    np.testing.assert_array_equal(a.offsets, b.offsets)
    assert np.abs(a.logprob - b.logprob).max() < 1e-4
    assert np.abs(a.sigma - b.sigma).max() < 1e-3
    ga, gb = cpu.gradient_norms(texts), gpu.gradient_norms(texts)
    assert np.abs(np.asarray(ga) / np.asarray(gb) - 1).max() < 1e-4
    params = GenerationParams(max_new_tokens=12, chat=False)
    prompts = [t[:40] for t in texts]
    assert ([g.meta["token_ids"] for g in cpu.generate_batched(prompts, params)]
            == [g.meta["token_ids"] for g in gpu.generate_batched(prompts, params)])
    assert resolve_dtype("auto", "cuda") == ("bfloat16" if torch.cuda.get_device_capability()[0] >= 8 else "float32")


def test_sampling_on_cuda_draws_what_the_cpu_draws(tiny_model_dir):
    """The continuous-batching sampler with temperature (DE-COP's local paraphraser) on a model on the
    GPU: it used to hand CUDA probabilities to ``torch.multinomial`` with its CPU generator, a
    RuntimeError ("Expected a 'cuda' device type for generator but found 'cpu'"); it draws on the
    CPU, from the same seeded stream, so in float32 the samples are the CPU's."""
    from memaudit.models.loading import load_causal_lm
    from memaudit.models.sampling import sample

    spec = {"path": str(tiny_model_dir)}
    (cpu, tok), (gpu, _) = load_causal_lm(spec, device="cpu"), load_causal_lm(spec, device="cuda")
    prompts = [tok(t)["input_ids"] for t in ("Call me Ishmael.", "It is a truth universally", "Emma")]
    kwargs = dict(eos_ids=[tok.eos_token_id], pad_id=tok.eos_token_id, temperature=1.0, top_k=50, top_p=0.9,
                  seed=5, max_rows=4)
    a = sample(cpu, prompts, [3, 2, 3], [15, 15, 15], **kwargs)
    b = sample(gpu, prompts, [3, 2, 3], [15, 15, 15], **kwargs)
    assert a == b and len({tuple(s) for s in a[0]}) > 1


def test_gradient_norms_on_cuda_match_float64_and_leave_the_blas_choice_as_it_was(tiny_model_dir):
    """Both gradient-norm paths on the GPU within 1e-5 of a float64 computation (they run their
    float32 products through cuBLASLt), and torch's BLAS preference is restored afterwards."""
    import copy

    import torch

    from conftest import TINY_TEXTS
    from memaudit.models.grad_norms import per_sample_grad_norms, per_sample_grad_norms_loop
    from memaudit.models.loading import load_causal_lm
    from memaudit.models.token_stats import encode

    model, tok = load_causal_lm({"path": str(tiny_model_dir)}, dtype="float32", device="cuda")
    exact = copy.deepcopy(model).double()
    ref = []
    for text in TINY_TEXTS[:4]:
        x = torch.tensor([encode(tok, text, 127)], device="cuda")
        grads = torch.autograd.grad(exact(input_ids=x, labels=x).loss, list(exact.parameters()), allow_unused=True)
        ref.append(float(sum(g.square().sum() for g in grads if g is not None)) ** 0.5)
    before = torch.backends.cuda.preferred_blas_library()
    ours = per_sample_grad_norms(model, tok, TINY_TEXTS[:4], batch_size=4, max_tokens=127)
    loop = per_sample_grad_norms_loop(model, tok, TINY_TEXTS[:4], max_tokens=127)
    assert torch.backends.cuda.preferred_blas_library() == before
    assert np.abs(ours / np.asarray(ref) - 1).max() < 1e-5
    assert np.abs(loop / np.asarray(ref) - 1).max() < 1e-5
