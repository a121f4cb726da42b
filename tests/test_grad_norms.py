"""Per-sample gradient norms (KTD's Eq. 6): the batched ghost norms against one backward per text.

Every model here is random and tiny (seconds on a CPU); the batched path must give the loop's
norms within 1e-4 relative, whatever the padding, tied weights, LoRA adapters or selection.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import TINY_TEXTS
from memaudit.errors import ConfigError
from memaudit.models.grad_norms import per_sample_grad_norms, per_sample_grad_norms_loop, select_parameters

# Different lengths (so that a batch is padded), one text of a single token.
TEXTS = [t[:25 + 17 * i] for i, t in enumerate(TINY_TEXTS[:7])] + ["a"]
RTOL = 1e-4


def _agree(model, tok, texts=TEXTS, *, batch_size=4, **kwargs):
    ours = per_sample_grad_norms(model, tok, texts, batch_size=batch_size, **kwargs)
    loop = per_sample_grad_norms_loop(model, tok, texts, **kwargs)
    assert ours.dtype == np.float64 and ours.shape == (len(texts),)
    assert np.all(loop > 0)
    np.testing.assert_allclose(ours, loop, rtol=RTOL, atol=0)
    return ours


def _tiny_gpt2(tok, **overrides):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(1)
    cfg = dict(vocab_size=len(tok), n_positions=128, n_embd=32, n_layer=2, n_head=2,
               bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    return GPT2LMHeadModel(GPT2Config(**{**cfg, **overrides})).eval()


def test_batched_norms_equal_the_loop_and_padding_changes_nothing(tiny_model):
    model, tok = tiny_model
    batched = _agree(model, tok)
    # A text alone, in a batch of one, has the norm it has among longer and shorter texts.
    alone = [per_sample_grad_norms(model, tok, [t], batch_size=1)[0] for t in (TEXTS[0], TEXTS[5])]
    np.testing.assert_allclose(alone, batched[[0, 5]], rtol=RTOL)
    # The model is left as it was: mode and requires_grad.
    assert not model.training and all(p.requires_grad for p in model.parameters())


def test_tied_embeddings_count_both_uses(tiny_model):
    model, tok = tiny_model
    assert model.lm_head.weight is model.transformer.wte.weight  # GPT-2 ties its output layer to the input
    [(names, tensor)] = select_parameters(model, ["lm_head.*"])
    assert set(names) == {"transformer.wte.weight", "lm_head.weight"} and tensor is model.lm_head.weight
    tied = _agree(model, tok, params=["lm_head.*"])
    # Untied, the same weights give a different gradient: the embedding's part is no longer added.
    untied = _tiny_gpt2(tok, tie_word_embeddings=False)
    untied.load_state_dict(model.state_dict())
    assert untied.lm_head.weight is not untied.transformer.wte.weight
    head_only = _agree(untied, tok, params=["lm_head.*"])
    assert np.all(np.abs(head_only / tied - 1) > 1e-3)


def test_llama_rmsnorm_and_an_embedding_padding_row(tiny_model):
    """A tied Llama whose embedding's padding row is the context token: that row gets no gradient
    from the input side (but does from the output side); RMSNorm goes through the torch.func path."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    _, tok = tiny_model
    torch.manual_seed(2)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=True, pad_token_id=tok.bos_token_id, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id)
    model = LlamaForCausalLM(cfg).eval()
    assert model.model.embed_tokens.padding_idx == tok.bos_token_id
    with torch.no_grad():  # initialised to zero, the row would leave position 0 a zero vector in every layer
        model.model.embed_tokens.weight[tok.bos_token_id] = torch.randn(32) * 0.02
    _agree(model, tok, texts=TEXTS + ["<|endoftext|> the <|endoftext|>"])
    _agree(model, tok, params=["*norm*"])


def test_gemma_norms_and_scaled_embedding_take_the_general_path(tiny_model):
    """Gemma's RMSNorm is ``f(x) * (1 + weight)`` and its embedding multiplies by sqrt(width): neither is the
    plain form the shortcuts assume, so both must be recognised as different and still come out exact."""
    import torch
    from transformers import GemmaConfig, GemmaForCausalLM

    from memaudit.models import grad_norms

    _, tok = tiny_model
    torch.manual_seed(3)
    cfg = GemmaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=128,
                      pad_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    model = GemmaForCausalLM(cfg).eval()
    with torch.no_grad():  # initialised to zero, (1 + weight) would be 1 everywhere; the padding row as in Llama
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(0, 0.3)
        model.model.embed_tokens.weight[tok.eos_token_id] = torch.randn(32) * 0.02
    assert not grad_norms._is_ghost_module(model.model.embed_tokens)
    _agree(model, tok)
    _agree(model, tok, params=["*norm*"])


def test_lora_adapters_only(tiny_model):
    from peft import LoraConfig, get_peft_model

    _, tok = tiny_model
    model = get_peft_model(_tiny_gpt2(tok), LoraConfig(r=4, target_modules=["c_attn", "c_fc"], lora_dropout=0.2,
                                                       fan_in_fan_out=True, init_lora_weights=False))
    model.train()  # dropout must be off all the same
    lora = _agree(model, tok, params="lora")
    assert model.training
    assert len(select_parameters(model, "lora")) == 8  # A and B of 2 modules in 2 layers
    everything = per_sample_grad_norms(model, tok, TEXTS, params="all")
    assert np.all(everything > lora)


def test_lora_of_an_embedding_counts_its_parameter_dict(tiny_model):
    """peft keeps an embedding's adapters in ParameterDicts (``wte.lora_embedding_A.default``), which are
    never called: they belong to the LoRA embedding's call, not to a module of their own. They were left
    out, and the adapters' norm of the first text came out 0.0039 against the loop's 0.052."""
    from peft import LoraConfig, get_peft_model

    _, tok = tiny_model
    model = get_peft_model(_tiny_gpt2(tok), LoraConfig(r=4, target_modules=["wte", "c_attn"], fan_in_fan_out=True,
                                                       init_lora_weights=False))
    names = [n for names, _ in select_parameters(model, "lora") for n in names]
    assert "base_model.model.transformer.wte.lora_embedding_A.default" in names and len(names) == 6
    _agree(model, tok, params="lora")
    _agree(model, tok, params=["*.wte.lora_embedding_*"])
    _agree(model, tok, params="all")


def _backward_loop(model, tok, texts, params):
    """The naive reference: per text, ``loss.backward()`` and the norm of the selected ``.grad``s."""
    import torch

    from memaudit.models.token_stats import encode

    selected = [t for _, t in select_parameters(model, params)]
    for p in model.parameters():
        p.requires_grad_(any(p is t for t in selected))
    model.eval()
    out = []
    for text in texts:
        ids = torch.tensor([encode(tok, text, None)])
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()
        out.append(float(sum(t.grad.double().square().sum() for t in selected if t.grad is not None)) ** 0.5)
    model.zero_grad(set_to_none=True)
    return np.array(out)


def _dora(model, targets):
    """``model`` with a DoRA adapter on ``targets``; magnitudes moved off their initial value (the
    weight's norm, where the base bias's second use inside DoRA cancels out)."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(3)
    model = get_peft_model(model, LoraConfig(r=4, target_modules=targets, fan_in_fan_out=True, use_dora=True,
                                             init_lora_weights=False))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_magnitude_vector" in name:
                p.mul_(1 + 0.5 * torch.rand_like(p))
    return model


@pytest.mark.parametrize("params", ["lora", "all", ["*lora_magnitude_vector*"], ["*c_attn.base_layer.bias"]])
def test_dora_adapters_equal_a_loop_of_backward(tiny_model, params):
    """DoRA's magnitude layer is called with keyword arguments (the LoRA modules, the base output):
    rerun without them it raised a TypeError. It uses the base layer's bias a second time (it subtracts
    it from the base output): left out, the bias's norm was 28% off the loop's."""
    _, tok = tiny_model
    model = _dora(_tiny_gpt2(tok), ["c_attn", "c_fc"])
    assert len(select_parameters(model, ["*lora_magnitude_vector*"])) == 4  # 2 modules in 2 layers
    ours = per_sample_grad_norms(model, tok, TEXTS, params=params, batch_size=4)
    loop = _backward_loop(model, tok, TEXTS, params)
    assert np.all(loop > 0) and np.max(np.abs(ours / loop - 1)) <= RTOL
    np.testing.assert_allclose(ours, per_sample_grad_norms_loop(model, tok, TEXTS, params=params), rtol=RTOL)


def test_dora_on_llama_and_on_an_embedding(tiny_model):
    """SmolLM2's architecture (no biases) with DoRA on every projection; DoRA on an embedding (peft's
    magnitude layer then returns a tuple) is refused, naming it, rather than computed wrong."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    _, tok = tiny_model
    torch.manual_seed(2)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    model = _dora(LlamaForCausalLM(cfg).eval(), ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                  "down_proj"])
    ours = per_sample_grad_norms(model, tok, TEXTS, params="lora", batch_size=4)
    assert np.max(np.abs(ours / _backward_loop(model, tok, TEXTS, "lora") - 1)) <= RTOL
    embedded = _dora(_tiny_gpt2(tok), ["wte", "c_attn"])
    with pytest.raises(ConfigError, match="per-sample gradients of peft's DoraEmbeddingLayer .DoRA on an embedding"):
        per_sample_grad_norms(embedded, tok, TEXTS, params="lora")


def test_glob_selection(tiny_model):
    model, tok = tiny_model
    names = [n for names, _ in select_parameters(model, ["*.h.1.*", "transformer.ln_f.*"]) for n in names]
    assert names and all(".h.1." in n or n.startswith("transformer.ln_f.") for n in names)
    last = _agree(model, tok, params=["*.h.1.*", "transformer.ln_f.*"])
    # Squared norms add over disjoint selections.
    parts = [per_sample_grad_norms(model, tok, TEXTS, params=p) for p in (["*.h.1.*"], ["transformer.ln_f.*"])]
    np.testing.assert_allclose(parts[0] ** 2 + parts[1] ** 2, last ** 2, rtol=RTOL)
    _agree(model, tok, params=["transformer.wpe.*"])  # one [1, T, d] output shared by the batch


def test_the_output_layer_by_hand(tiny_model):
    """Untied GPT-2, output layer only: d/dW (1/n) sum_t log softmax(W h_t)[y_t] = (1/n) sum_t (e_{y_t} - p_t) h_t^T."""
    import torch

    from memaudit.models.token_stats import encode

    _, tok = tiny_model
    model = _tiny_gpt2(tok, tie_word_embeddings=False)
    text = TEXTS[3]
    ids = torch.tensor([encode(tok, text, None)])
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
    h = out.hidden_states[-1][0, :-1].double().numpy()  # after the final layer norm
    logits = out.logits[0, :-1].double().numpy()
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    onehot = np.eye(p.shape[1])[ids[0, 1:].numpy()]
    grad = (onehot - p).T @ h / len(h)
    expected = np.linalg.norm(grad)
    [ours] = per_sample_grad_norms(model, tok, [text], params=["lm_head.*"])
    assert ours == pytest.approx(expected, rel=1e-5)
    assert per_sample_grad_norms_loop(model, tok, [text], params=["lm_head.*"])[0] == pytest.approx(expected, rel=1e-5)


def test_bad_selections_name_what_was_asked(tiny_model):
    model, tok = tiny_model
    with pytest.raises(ConfigError, match=r"\['\*\.h\.9\.\*'\] match no parameter"):
        per_sample_grad_norms(model, tok, TEXTS, params=["lm_head.*", "*.h.9.*"])
    with pytest.raises(ConfigError, match="params='lora': the model has no LoRA adapter weights"):
        per_sample_grad_norms(model, tok, TEXTS, params="lora")
    with pytest.raises(ConfigError, match="params='lm_head.weight': expected 'all', 'lora' or a list"):
        per_sample_grad_norms_loop(model, tok, TEXTS, params="lm_head.weight")


def test_empty_text_is_nan_and_other_dtypes_are_refused(tiny_model):
    import torch

    model, tok = tiny_model
    norms = per_sample_grad_norms(model, tok, ["", TEXTS[0]])
    assert np.isnan(norms[0]) and norms[1] > 0
    bf16 = _tiny_gpt2(tok).to(torch.bfloat16)
    with pytest.raises(ValueError, match="computed in float32, but the selected parameters are bfloat16"):
        per_sample_grad_norms(bf16, tok, TEXTS)


def test_hf_backend_serves_gradient_norms_and_api_backends_do_not(tiny_model):
    import copy

    import torch

    from memaudit.backends.anthropic_backend import AnthropicBackend
    from memaudit.backends.base import GRADIENT_NORMS, backend_capabilities, check_probe_support
    from memaudit.backends.hf import HFBackend
    from memaudit.backends.openai_backend import OpenAIBackend

    model, tok = tiny_model
    backend = HFBackend({}, model=model, tokenizer=tok, batch_size=3)
    assert GRADIENT_NORMS in HFBackend.capabilities and GRADIENT_NORMS in backend_capabilities("hf")
    np.testing.assert_allclose(backend.gradient_norms(TEXTS, params=["*.h.1.*"]),
                               per_sample_grad_norms_loop(model, tok, TEXTS, params=["*.h.1.*"]), rtol=RTOL)
    # A bfloat16 model is upcast on a copy; the backend's own model stays as loaded.
    bf16 = _tiny_gpt2(tok).to(torch.bfloat16)
    low = HFBackend({}, model=bf16, tokenizer=tok)
    np.testing.assert_allclose(low.gradient_norms(TEXTS[:3]),
                               per_sample_grad_norms(copy.deepcopy(bf16).float(), tok, TEXTS[:3]), rtol=RTOL)
    assert low.model.dtype == torch.bfloat16
    for cls, name in ((OpenAIBackend, "openai"), (AnthropicBackend, "anthropic")):
        assert GRADIENT_NORMS not in cls.capabilities and GRADIENT_NORMS not in backend_capabilities(name)
        with pytest.raises(ConfigError, match=f"{cls.__name__} cannot serve gradient_norms"):
            cls.gradient_norms(object.__new__(cls), TEXTS)
        with pytest.raises(ConfigError, match=f"needs gradient_norms, which model 'api' \\(backend '{name}'\\)"):
            check_probe_support("ktd", {GRADIENT_NORMS}, "api", name)


def test_hf_backend_lora_reads_the_adapter_its_loading_merged(tiny_model_dir, tiny_model, tmp_path):
    """A LoRA fine-tune's load spec names an adapter, which loading merges into the weights: params
    'lora' found no adapter weight and was a ConfigError for every such model."""
    from peft import LoraConfig, PeftModel, get_peft_model

    from memaudit.backends.hf import HFBackend
    from memaudit.models.loading import load_causal_lm

    _, tok = tiny_model
    base, _ = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
    get_peft_model(base, LoraConfig(r=4, target_modules=["c_attn"], fan_in_fan_out=True,
                                    init_lora_weights=False)).save_pretrained(tmp_path / "adapter")
    backend = HFBackend({"path": str(tiny_model_dir), "adapter": str(tmp_path / "adapter")}, device="cpu")
    assert not any("lora_" in n for n, _ in backend.model.named_parameters())  # merged
    unmerged = PeftModel.from_pretrained(load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")[0],
                                         str(tmp_path / "adapter")).eval()
    np.testing.assert_allclose(backend.gradient_norms(TEXTS, params="lora"),
                               per_sample_grad_norms_loop(unmerged, tok, TEXTS, params="lora"), rtol=RTOL)
    assert not any("lora_" in n for n, _ in backend.model.named_parameters())


def test_hf_backend_lora_reads_a_dora_adapter(tiny_model_dir, tiny_model, tmp_path):
    """An external DoRA adapter named by a model's load spec (``adapter``): KTD's params 'lora' reads it
    unmerged, and its norms are the naive loop's."""
    from peft import PeftModel

    from memaudit.backends.hf import HFBackend
    from memaudit.models.loading import load_causal_lm

    _, tok = tiny_model
    base, _ = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
    _dora(base, ["c_attn", "c_fc"]).save_pretrained(tmp_path / "dora")
    backend = HFBackend({"path": str(tiny_model_dir), "adapter": str(tmp_path / "dora")}, device="cpu")
    unmerged = PeftModel.from_pretrained(load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")[0],
                                         str(tmp_path / "dora")).eval()
    assert len(select_parameters(unmerged, ["*lora_magnitude_vector*"])) == 4
    ours = backend.gradient_norms(TEXTS, params="lora")
    loop = _backward_loop(unmerged, tok, TEXTS, "lora")
    assert np.all(loop > 0) and np.max(np.abs(ours / loop - 1)) <= RTOL


def test_a_cut_inside_a_multibyte_character_keeps_none_of_its_tokens(tmp_path):
    """A cut at max_tokens among a character's byte tokens scores the text up to the character, as the
    token statistics do (token_stats.encode_scored): KTD's gradient and loss scores read the same tokens.
    Before, the gradient read one or two of the three bytes of 本."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from memaudit.models.tiny import train_bpe_tokenizer

    tok = train_bpe_tokenizer(["hello world"] * 5, 260, tmp_path)
    text = "ab 日本"  # tokens end at characters 1, 2, 3, 4, 4, 4, 5, 5, 5
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=1, n_head=2)).eval()
    cut = [per_sample_grad_norms(model, tok, [text], max_tokens=n)[0] for n in (6, 7, 8)]
    whole_chars = per_sample_grad_norms(model, tok, ["ab 日"], max_tokens=None)[0]
    np.testing.assert_allclose(cut, [whole_chars] * 3, rtol=1e-6)
    loop = per_sample_grad_norms_loop(model, tok, [text], max_tokens=7)[0]
    np.testing.assert_allclose(loop, whole_chars, rtol=RTOL)
    assert per_sample_grad_norms(model, tok, [text], max_tokens=9)[0] != pytest.approx(whole_chars, rel=1e-3)
