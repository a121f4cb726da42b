"""A benchmark's speed-up counts only if both ways compute the same thing: the LoRA benchmark's
last-N step and all-layers step give the same loss and adapter gradients, and the throughput
benchmark's batched token statistics and generations are those of one text at a time."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from bench_helpers import BENCHMARKS, load_benchmark

TEXTS = ["It is a truth universally acknowledged, that a single man in possession of a good fortune must be "
         "in want of a wife.",
         "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition, seemed "
         "to unite some of the best blessings of existence.",
         "Call me Ishmael."]


def lora_pair(model_dir):
    """The tiny GPT-2 with adapters in all its layers and in its last one, as the benchmark sets them up."""
    import torch
    from peft import LoraConfig, get_peft_model

    from memaudit.models.finetune import lora_layer_settings
    from memaudit.models.loading import load_causal_lm

    models = {}
    for key, layers in (("all", None), ("last", 1)):
        torch.manual_seed(1 if key == "all" else 2)  # different adapter draws: the check must copy them
        base, _ = load_causal_lm({"path": str(model_dir)}, dtype="float32", device="cpu")
        models[key] = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, task_type="CAUSAL_LM",
                                                      **lora_layer_settings(base, "all-linear", layers)))
        models[key].train()
    ids = torch.randint(0, models["all"].config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    return models, ids


def test_lora_layers_last_n_step_has_the_all_layers_gradients(tiny_model_dir):
    models, ids = lora_pair(tiny_model_dir)
    got = load_benchmark("bench_lora_layers").same_step(models, ids)
    n_layers = models["all"].config.num_hidden_layers
    n_all = sum(p.requires_grad for p in models["all"].parameters())
    assert got["n_compared"] == n_all // n_layers > 0  # the last layer's adapters, A and B of each module
    assert got["loss_abs_diff"] == pytest.approx(0.0, abs=1e-6)
    assert got["max_abs_grad"] > 0
    assert got["max_rel_grad_diff"] <= load_benchmark("bench_lora_layers").TARGET_GRAD_REL_DIFF
    assert all(p.grad is None for m in models.values() for p in m.parameters())  # left zeroed


def test_lora_layers_check_fails_when_the_steps_differ(tiny_model_dir):
    import torch

    models, ids = lora_pair(tiny_model_dir)
    with torch.no_grad():  # the last-N model's own last layer changed: its adapters' gradients change
        block = models["last"].base_model.model.transformer.h[-1]
        block.mlp.c_fc.base_layer.weight.mul_(1.5)
    got = load_benchmark("bench_lora_layers").same_step(models, ids)
    assert got["max_rel_grad_diff"] > 1e-2


def test_throughput_compares_batched_with_one_at_a_time(tiny_model, monkeypatch):
    import memaudit.models.loading as loading

    bench = load_benchmark("bench_throughput")
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # it imports bench_token_prob's timer, as run from there
    monkeypatch.setattr(loading, "load_causal_lm", lambda spec, dtype, device: tiny_model)
    args = SimpleNamespace(batch_size=2, repeats=1, new_tokens=6, max_rows=3, one_prompts=3)
    rows, raw = bench.measure_device({}, "cpu", "float32", TEXTS, args)
    agree = raw["agreement"]
    assert [r["op"] for r in rows] == ["token_stats", "token_stats_one", "generate", "generate_one"]
    assert (agree["device"], agree["dtype"], agree["n_compared"]) == ("cpu", "float32", 3)
    assert agree["max_abs_diff_batched"] <= bench.TARGET_ABS_DIFF
    assert agree["same_texts"] == 3
