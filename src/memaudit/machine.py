"""What a measurement ran on: the ``machine`` of every benchmark's JSON (``results/bench/*.json``).

A ratio of two timings depends on the CPU's vector units (AVX2 only, AVX512-BF16, AMX), on the
environment knobs that cap them (an AVX2-only CPU is imitated on an AMX one with
``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2``), on the dtype and on the threads. The docs
quote numbers "on the Zen 5 EPYC" or "with AVX2 imitated"; only the JSON can back that.
"""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Mapping

# x86 flags that decide float32 and bfloat16 speed, reported as /proc/cpuinfo spells them
CPU_FLAGS_OF_INTEREST = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")
# settings that cap the instruction set or the threads the kernels use
ISA_ENV = ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "OMP_NUM_THREADS",
           "MKL_NUM_THREADS")
LIBRARIES = ("torch", "transformers", "peft", "openai", "snakemake")


def cpu_report(cpuinfo: str | None = None) -> dict:
    """The CPU's model name and which of :data:`CPU_FLAGS_OF_INTEREST` it has, from ``cpuinfo``
    (default ``/proc/cpuinfo``; both None where it cannot be read, as off Linux)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return {"cpu_model": None, "cpu_flags": None}
    model, flags = None, None
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model is None:
            model = value.strip()
        elif key.strip() == "flags" and flags is None:
            flags = sorted(set(value.split()).intersection(CPU_FLAGS_OF_INTEREST))
    return {"cpu_model": model, "cpu_flags": flags}


def machine_report(*, dtype: str | list[str] | None, device: str = "cpu", cpuinfo: str | None = None,
                   env: Mapping[str, str] | None = None) -> dict:
    """CPU model and flags, the instruction-set and thread settings in ``env`` (default ``os.environ``)
    with the one that forces bfloat16 emulation, CPU count, torch's threads (when the benchmark imported
    torch), ``dtype`` and ``device`` of the timed models (None: no model), the GPU's name on ``cuda``,
    and the versions of Python, the platform and the libraries installed."""
    from memaudit.models.loading import bf16_emulation_forced

    env = os.environ if env is None else env
    torch = sys.modules.get("torch")
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        **cpu_report(cpuinfo),
        "isa_env": {k: env[k] for k in ISA_ENV if k in env},
        "bf16_emulation_forced_by": bf16_emulation_forced(env),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "dtype": dtype,
        "device": device,
        "gpu": torch.cuda.get_device_name(device) if torch is not None and str(device).startswith("cuda") else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
    }
