"""dtype: auto -- bfloat16 only where the hardware computes it natively (memaudit.models.loading.resolve_dtype)."""

from __future__ import annotations

import json

import pytest
import torch

from memaudit.errors import ConfigError
from memaudit.models import loading
from memaudit.models.loading import bf16_emulation_forced, cpu_bf16_flags, cpu_has_native_bf16, resolve_dtype

# Trimmed /proc/cpuinfo of three kinds of x86 CPU (two logical CPUs each, as the file lists every one)
AVX2_ONLY = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu vme sse sse2 avx avx2 fma bmi2
bugs\t\t: sysret_ss_attrs

processor\t: 1
model name\t: AMD EPYC
flags\t\t: fpu vme sse sse2 avx avx2 fma bmi2
"""
AVX512_BF16 = AVX2_ONLY.replace("bmi2", "bmi2 avx512f avx512_vnni avx512_bf16")
AMX = AVX2_ONLY.replace("bmi2", "bmi2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8")
# a flag that only looks like one: a substring match would take it for amx_bf16
LOOKALIKE = AVX2_ONLY.replace("bmi2", "bmi2 xamx_bf16_x") + "power management: amx_bf16\n"


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_cpu_flag_probe_reads_the_flags_lines():
    assert cpu_bf16_flags(AVX2_ONLY) == set()
    assert cpu_bf16_flags(AVX512_BF16) == {"avx512_bf16"}
    assert cpu_bf16_flags(AMX) == {"avx512_bf16", "amx_bf16"}
    assert cpu_bf16_flags(LOOKALIKE) == set()
    assert cpu_bf16_flags("") == set()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_explicit_dtypes_pass_through(dtype, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: pytest.fail("an explicit dtype asks no hardware"))
    for device in ("cpu", "auto", "cuda", "cuda:1"):
        assert resolve_dtype(dtype, device, cpuinfo=AVX2_ONLY, env={}) == dtype


def test_unknown_dtype_is_a_config_error():
    with pytest.raises(ConfigError, match="'fp8'"):
        resolve_dtype("fp8", "cpu")


@pytest.mark.parametrize("cpuinfo, expected", [(AVX2_ONLY, "float32"), (AVX512_BF16, "bfloat16"),
                                               (AMX, "bfloat16"), (LOOKALIKE, "float32"), ("", "float32")])
def test_auto_on_cpu_follows_the_flags(cpuinfo, expected, no_cuda):
    for device in ("cpu", "auto"):  # auto without CUDA is the CPU
        assert resolve_dtype("auto", device, cpuinfo=cpuinfo, env={}) == expected


@pytest.mark.parametrize("env", [{"ONEDNN_MAX_CPU_ISA": "AVX2"}, {"ONEDNN_MAX_CPU_ISA": "avx512_core_vnni"},
                                 {"ONEDNN_MAX_CPU_ISA": "SSE41"}, {"ATEN_CPU_CAPABILITY": "avx2"},
                                 {"ATEN_CPU_CAPABILITY": "default"},
                                 {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX", "ATEN_CPU_CAPABILITY": "avx2"}])
def test_emulation_knobs_make_a_bf16_cpu_choose_float32(env, no_cuda):
    assert bf16_emulation_forced(env) is not None
    assert not cpu_has_native_bf16(AMX, env)
    assert resolve_dtype("auto", "cpu", cpuinfo=AMX, env=env) == "float32"


@pytest.mark.parametrize("env", [{}, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"},
                                 {"ONEDNN_MAX_CPU_ISA": "avx512_core_amx"}, {"ONEDNN_MAX_CPU_ISA": "ALL"},
                                 {"ATEN_CPU_CAPABILITY": "avx512"}])
def test_knobs_at_or_above_bf16_leave_the_choice(env, no_cuda):
    assert bf16_emulation_forced(env) is None
    assert resolve_dtype("auto", "cpu", cpuinfo=AMX, env=env) == "bfloat16"


def test_unreadable_cpuinfo_means_float32(monkeypatch, no_cuda):
    """Off Linux there is no /proc/cpuinfo: no native bfloat16 is assumed."""
    def missing(self):
        raise FileNotFoundError(self)

    monkeypatch.setattr(loading.Path, "read_text", missing)
    assert not cpu_has_native_bf16(env={})
    assert resolve_dtype("auto", "cpu", env={}) == "float32"


@pytest.mark.parametrize("major, expected", [(7, "float32"), (8, "bfloat16"), (9, "bfloat16")])
def test_auto_on_a_gpu_that_only_emulates_bfloat16_is_float32(major, expected, monkeypatch):
    """A V100 or T4 (compute capability 7.x) computes bfloat16 by emulation, which torch's
    is_bf16_supported() counts as support by default: auto was bfloat16 there."""
    from types import SimpleNamespace

    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(major=major))
    monkeypatch.setattr(torch.cuda, "_check_bf16_tensor_supported", lambda device: True)  # emulation works
    for device in ("auto", "cuda", "cuda:0"):
        assert resolve_dtype("auto", device, cpuinfo=AMX, env={}) == expected


def test_auto_on_cuda_asks_the_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for supported, expected in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, s=supported, **k: s)
        for device in ("auto", "cuda", "cuda:0"):  # the CPU's flags play no part
            assert resolve_dtype("auto", device, cpuinfo=AVX2_ONLY if supported else AMX, env={}) == expected
    # an explicit cpu device on a GPU machine is decided by the CPU
    assert resolve_dtype("auto", "cpu", cpuinfo=AVX2_ONLY, env={}) == "float32"


def test_auto_on_an_absent_cuda_device_is_float32(no_cuda):
    assert resolve_dtype("auto", "cuda", cpuinfo=AMX, env={}) == "float32"


def test_backend_and_finetuned_manifest_record_the_dtype_used(tiny_model_dir, tmp_path, monkeypatch, no_cuda):
    from memaudit.backends.hf import HFBackend
    from memaudit.io import write_json
    from memaudit.models.prepare import prepare_finetuned_model

    monkeypatch.setattr(loading, "cpu_has_native_bf16", lambda *a, **k: True)  # as on an AMX machine
    backend = HFBackend({"path": str(tiny_model_dir)}, dtype="auto", device="cpu")
    assert backend.dtype == "bfloat16" and next(backend.model.parameters()).dtype == torch.bfloat16
    assert {"dtype": "bfloat16", "device": "cpu"}.items() <= backend.describe().items()

    monkeypatch.setattr(loading, "cpu_has_native_bf16", lambda *a, **k: False)  # as on an AVX2-only one
    assert HFBackend({"path": str(tiny_model_dir)}, dtype="auto", device="cpu").describe()["dtype"] == "float32"
    base = tmp_path / "base.json"
    write_json(base, {"load": {"path": str(tiny_model_dir)}})
    entry = {"dtype": "auto", "base": "tiny", "finetune": {
        "method": "full", "epochs": 1, "lr": 1e-3, "duplication": 1, "batch_size": 2, "max_length": 32,
        "lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.0, "target_modules": "all-linear", "members_of": ["x"]}}
    manifest = prepare_finetuned_model("tiny-ft", entry, base, ["A member text for the test."], tmp_path / "ft",
                                       device="cpu")
    written = json.loads((tmp_path / "ft" / "manifest.json").read_text())
    assert written["dtype"] == "auto" and written["dtype_used"] == "float32" == manifest["dtype_used"]
    assert written["training"]["precision"] == "float32"

    monkeypatch.setattr(loading, "cpu_has_native_bf16", lambda *a, **k: True)
    written = prepare_finetuned_model("tiny-ft", entry, base, ["A member text for the test."], tmp_path / "ft2",
                                      device="cpu")
    assert written["dtype_used"] == "bfloat16" and written["training"]["precision"] == "bfloat16-mixed"
