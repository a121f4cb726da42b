"""Per-sample gradient norms of the mean token log-likelihood: KTD's importance score (Eq. 6).

For a text ``x = x_1..x_n`` (after the context token, :func:`memaudit.models.token_stats.encode_scored`)
and the selected parameters ``theta_S``::

    g(x) = || d/d theta_S  (1/n) sum_t log p_theta(x_t | x_<t) ||_2

KTD (Eq. 6 of the knockoff paper, section 4.1.2) scores a text by ``Z = -g(x)``: a text the model
was trained on sits near a stationary point of the training loss, so its gradient is small.
:func:`per_sample_grad_norms` returns ``g`` itself (positive, float64); the caller negates it.
The mean over tokens (not the sum): the sum's norm grows with a text's token count and the
mean's shrinks with it, so neither is free of length; comparing a passage with knockoffs cut to
its word count (KTD's length matching) is what controls it, and the mean moves less with the
token counts that still differ.

Method: ghost norms (Goodfellow 2015; Li et al. 2022, "ghost clipping"; Opacus's fast gradient
clipping), not ``torch.func`` per-sample gradients. One ordinary batched forward and one backward
that computes only activation gradients; no weight gradient is ever formed. For a linear layer
with inputs ``a_t`` and output gradients ``g_t`` of one text, the weight gradient is
``G = sum_t g_t a_t^T`` and::

    ||G||_F^2 = sum_{t,s} (g_t . g_s) (a_t . a_s)

two ``T x T`` Gram matrices instead of an ``out x in`` matrix per text (per-sample gradients via
``vmap(grad(...))`` hold ``B x P`` floats: 4.3 GB for SmolLM2-135M at 8 texts, and more than 24 GB
from 45 texts on). An embedding's gradient has the same form with one-hot rows, so its Gram
matrix is token equality (``[x_t = x_s]``; no ``V x d`` matrix per text). Where ``T`` is large
against the layer (``T (in + out) > in * out``) the per-sample gradient is formed instead, a
memory-bounded slice of the batch at a time (:data:`CHUNK_BYTES`). Other modules that own
selected parameters directly (LayerNorm, RMSNorm, ...) get exact per-sample gradients from
``torch.func`` (``vmap`` over ``vjp`` of the module alone: a few thousand floats per text).
Tied weights (GPT-2 and SmolLM2 share ``lm_head`` with the token embedding) are one parameter
whose gradient sums both uses: its squared norm adds the cross terms ``2 <G_emb, G_head>``, from
the same Gram matrices. A peft DoRA layer (on a linear layer) is taken apart by hand
(:func:`_dora_parts`): its magnitude's gradient from the base and LoRA outputs, and the second use
it makes of the base layer's bias.

Why not ``vmap(grad(...))``: it forms every per-sample weight gradient (the loop's work, plus
``B x P`` floats of memory) and its batching rules are slower on a CPU. Measured on SmolLM2-135M,
4 Austen passages of ~130 tokens, one CPU thread: ``vmap(grad)`` 20.3 s and 6.8 GB peak, the
loop 11.9 s, ghost norms 8.3 s. On a CPU a batch gains little over one text at a time (the
matrices of a 130-token text already fill the cores), so what ghost norms save is the weight
gradients: at best the loop's forward + backward + weight gradients against forward + backward.

Memory: the saved activations of an ordinary training step, the batch's logits (bounded by
:data:`LOGIT_BYTES` through the tokens per batch) and ``B x T x T`` Gram matrices; independent of
the number of parameters. Each linear layer's and embedding's contribution is reduced as the
backward passes it, so its activation and output gradient are freed then. Measured: SmolLM2-135M,
all parameters, 8 texts of 512 tokens in one batch, 10 GB peak (a training step's activations;
``vmap(grad)`` adds 4.3 GB of per-sample gradients to that). ``batch_size`` scales it; the
:data:`LOGIT_BYTES` cap keeps SmolLM2 to 10 such texts a batch whatever ``batch_size`` says.

Padding cannot change a text's norm: texts are right-padded (:func:`memaudit.models.forward.right_padded`),
causal attention keeps real positions from seeing the padding, and the loss covers only the
text's predicted tokens, so every gradient at a padding position is zero. Computation is in
float32 (a model in another dtype is refused; :meth:`memaudit.backends.hf.HFBackend.gradient_norms`
upcasts a copy), in eval mode (dropout off). :func:`per_sample_grad_norms_loop` is the reference:
one forward and ``torch.autograd.grad`` per text.
"""

from __future__ import annotations

import contextlib
import fnmatch
import warnings
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from memaudit.errors import ConfigError

# Bytes of per-sample gradients formed at once where a layer's gradient is materialised.
CHUNK_BYTES = 256 * 2**20
# Bytes of float32 logits per batch (the loss keeps about three such tensors alive): caps the
# tokens per batch for large vocabularies.
LOGIT_BYTES = 2**30


def select_parameters(model, params="all") -> list[tuple[tuple[str, ...], object]]:
    """``[(names, tensor)]`` of the parameters ``params`` selects, each tensor once.

    ``"all"``: every floating-point parameter, trainable or not; ``"lora"``: peft LoRA adapter
    weights (a name containing ``lora_``); a list of glob patterns over the names of
    ``named_parameters()``. A tied tensor is one parameter with several names (``lm_head.weight``
    and ``transformer.wte.weight``); a pattern matching any of them selects it.
    """
    names: dict[int, list[str]] = {}
    tensors: dict[int, object] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
        tensors[id(p)] = p
    if params == "all":
        chosen = [k for k in names if tensors[k].is_floating_point()]
        if not chosen:
            raise ConfigError("params='all': the model has no floating-point parameters")
    elif params == "lora":
        chosen = [k for k in names if any("lora_" in n for n in names[k])]
        if not chosen:
            raise ConfigError("params='lora': the model has no LoRA adapter weights (no parameter name "
                              "contains 'lora_'); use 'all' or glob patterns")
    elif isinstance(params, str) or not all(isinstance(p, str) for p in params):
        raise ConfigError(f"params={params!r}: expected 'all', 'lora' or a list of glob patterns "
                          "over the model's parameter names")
    else:
        patterns = list(params)
        matches = {p: [k for k in names if any(fnmatch.fnmatchcase(n, p) for n in names[k])] for p in patterns}
        unmatched = [p for p in patterns if not matches[p]]
        if unmatched or not patterns:
            example = ", ".join(n for ns in list(names.values())[:3] for n in ns[:1])
            raise ConfigError(f"params: pattern(s) {unmatched or patterns} match no parameter of the model "
                              f"(names look like {example}, ...)")
        chosen = [k for k in names if any(k in matches[p] for p in patterns)]
    return [(tuple(names[k]), tensors[k]) for k in chosen]


@contextlib.contextmanager
def _requires_grad_only(model, tensors: Sequence):
    """Within the block, exactly ``tensors`` require gradients and the model is in eval mode."""
    saved = [(p, p.requires_grad) for p in model.parameters()]
    was_training = model.training
    chosen = {id(t) for t in tensors}
    try:
        for p, _ in saved:
            p.requires_grad_(id(p) in chosen)
        model.eval()
        yield
    finally:
        for p, flag in saved:
            p.requires_grad_(flag)
        model.train(was_training)


def _check_float32(selected) -> None:
    bad = sorted({str(t.dtype).removeprefix("torch.") for _, t in selected} - {"float32"})
    if bad:
        raise ValueError(f"gradient norms are computed in float32, but the selected parameters are {', '.join(bad)}: "
                         "pass a float32 copy (model.float()); HFBackend.gradient_norms makes one")


@contextlib.contextmanager
def _accurate_cuda_blas(device):
    """On a CUDA device, float32 matrix products through cuBLASLt for the block, then as before.

    Measured on an H100 (torch 2.11, CUDA 13; ``benchmarks/bench_grad_norms.py --float64-check``):
    with torch's default cuBLAS, float32 gradient norms of SmolLM2-135M were up to 2.2e-4
    (relative) off a float64 computation, the per-text reference loop up to 8.9e-5, so the two
    differed by 1.5e-4; through cuBLASLt both stayed within 4.6e-5 of float64, at the same speed.
    TF32 was off throughout. Where the library cannot be chosen (another build), nothing changes.
    """
    import torch

    if getattr(device, "type", str(device).split(":")[0]) != "cuda":
        yield
        return
    before = torch.backends.cuda.preferred_blas_library()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "an experimental feature"
            torch.backends.cuda.preferred_blas_library("cublaslt")
    except (RuntimeError, ValueError):  # pragma: no cover - builds without cuBLASLt
        yield
        return
    try:
        yield
    finally:
        torch.backends.cuda.preferred_blas_library(before)


def _encoded(tokenizer, texts: Sequence[str], model, max_tokens: int | None) -> list[list[int]]:
    """The ids the token statistics score (:func:`memaudit.models.token_stats.encode_scored`): a cut at
    ``max_tokens`` inside a multi-byte character keeps none of its tokens, so that KTD's gradient score
    and its loss score (from the token statistics) read the same tokens."""
    from memaudit.models.loading import clamp_tokens
    from memaudit.models.token_stats import encode_scored

    return [encode_scored(tokenizer, t, clamp_tokens(model, max_tokens))[0] for t in texts]


def per_sample_grad_norms_loop(model, tokenizer, texts: Sequence[str], *, params="all",
                               max_tokens: int | None = 512) -> np.ndarray:
    """The reference: one forward and one backward per text, ``||grad||_2`` over the selected parameters.

    The loss is the model's own (``labels=input_ids``: mean cross-entropy over the predicted
    tokens), the gradient ``torch.autograd.grad`` of it, so this shares nothing with the batched
    path but tokenisation and the parameter selection. NaN for a text with no token.
    """
    import torch

    selected = select_parameters(model, params)
    _check_float32(selected)
    tensors = [t for _, t in selected]
    device = tensors[0].device
    out = np.full(len(texts), np.nan)
    with _requires_grad_only(model, tensors), _accurate_cuda_blas(device):
        for i, ids in enumerate(_encoded(tokenizer, texts, model, max_tokens)):
            if len(ids) < 2:
                continue
            x = torch.tensor([ids], device=device)
            loss = model(input_ids=x, labels=x).loss
            grads = torch.autograd.grad(loss, tensors, allow_unused=True)
            out[i] = float(sum(g.double().square().sum() for g in grads if g is not None)) ** 0.5
    return out


# --- the batched path ---------------------------------------------------------------------------------


@dataclass
class _Factored:
    """Per-sample gradients ``G_b = U_b^T V_b`` (``rows x cols``), summed over positions.

    ``U`` is ``[B, T, rows]``, or given as token ids ``[B, T]`` (one-hot rows, an embedding).
    """

    V: object
    U: object = None
    ids: object = None
    rows: int = 0

    def u_gram(self, other: "_Factored"):
        """``U_b U'_b^T`` per sample, ``[B, T, T']``."""
        if self.ids is not None and other.ids is not None:
            return (self.ids[:, :, None] == other.ids[:, None, :]).to(self.V.dtype)
        if self.ids is not None:
            return other.u_gram(self).transpose(1, 2)
        if other.ids is not None:  # [b, t, s] = U[b, t, ids[b, s]]
            return self.U.gather(2, other.ids[:, None, :].expand(-1, self.U.shape[1], -1))
        return self.U @ other.U.transpose(1, 2)

    def dot(self, other: "_Factored"):
        """``<G_b, G'_b>`` per sample (float64) from Gram matrices: ``sum_{t,s} (U U'^T) (V V'^T)``."""
        return (self.u_gram(other).double() * (self.V @ other.V.transpose(1, 2)).double()).sum((1, 2))

    def dense(self, b: slice):
        """The per-sample gradients of the samples ``b``, ``[b, rows, cols]``."""
        import torch

        if self.ids is None:
            return torch.einsum("btr,btc->brc", self.U[b], self.V[b])
        V = self.V[b]
        out = V.new_zeros(V.shape[0], self.rows, V.shape[2])
        return out.scatter_add_(1, self.ids[b][:, :, None].expand(-1, -1, V.shape[2]), V)

    def cheaper_dense(self) -> bool:
        if self.ids is not None:
            return False
        T, r, c = self.V.shape[1], self.U.shape[2], self.V.shape[2]
        return T * (r + c) > r * c


def _slices(n: int, per_sample_bytes: int) -> list[slice]:
    """``range(n)`` in slices of at most :data:`CHUNK_BYTES` of per-sample data each."""
    step = max(1, CHUNK_BYTES // max(1, per_sample_bytes))
    return [slice(a, min(n, a + step)) for a in range(0, n, step)]


def _per_sample(n: int, per_sample_bytes: int, fn: Callable[[slice], object]):
    """``fn`` over :func:`_slices` of the batch, concatenated."""
    import torch

    return torch.cat([fn(b) for b in _slices(n, per_sample_bytes)])


def _sq_norm(part):
    """Squared Frobenius norm per sample (float64) of a factored or explicit per-sample gradient."""
    import torch

    if isinstance(part, _Factored):
        if not part.cheaper_dense():
            return part.dot(part)
        B, r, c = part.V.shape[0], part.U.shape[2], part.V.shape[2]
        # The norm is taken in float64 (``dtype=``, an upcast as it reads): float32's vector_norm over
        # half a million entries was off by 1e-4 relative (tiny GPT-2's tied output layer, against a
        # float64 reference), the dense gradient itself in float32 by 1e-8.
        return _per_sample(B, 4 * r * c, lambda b: torch.linalg.vector_norm(part.dense(b), dim=(1, 2),
                                                                          dtype=torch.float64) ** 2)
    return part.double().square().flatten(1).sum(1)


def _dot(p, q):
    """``<p_b, q_b>`` per sample (float64): the cross term of a parameter used twice (tied weights)."""
    if isinstance(p, _Factored) and isinstance(q, _Factored):
        return p.dot(q)
    if isinstance(q, _Factored):
        p, q = q, p
    if isinstance(p, _Factored):
        per = 4 * q[0].numel()
        return _per_sample(q.shape[0], per, lambda b: (p.dense(b).double() * q[b].double()).flatten(1).sum(1))
    return (p.double() * q.double()).flatten(1).sum(1)


def _linear_parts(module, x, g, chosen: set[int]) -> dict[int, object]:
    """Per-sample gradients of a Linear (``W: out x in``), a transformers Conv1D (``W: in x out``) or an Embedding."""
    import torch

    parts: dict[int, object] = {}
    w, bias = module.weight, getattr(module, "bias", None)
    if isinstance(module, torch.nn.Embedding):
        if module.max_norm is not None or module.scale_grad_by_freq or module.sparse:
            raise ConfigError(f"probes.ktd.params: {type(module).__name__} with max_norm, scale_grad_by_freq "
                              "or sparse "
                                      "gradients: leave it out of params")
        ids = x.reshape(x.shape[0], -1)
        g = g.reshape(ids.shape[0], ids.shape[1], -1)
        if module.padding_idx is not None:  # the embedding's backward never touches the padding row
            g = g * (ids != module.padding_idx)[:, :, None]
        if id(w) in chosen:
            parts[id(w)] = _Factored(V=g, ids=ids, rows=w.shape[0])
        return parts
    x = x.reshape(x.shape[0], -1, x.shape[-1])
    g = g.reshape(g.shape[0], -1, g.shape[-1])
    if id(w) in chosen:
        parts[id(w)] = _Factored(U=g, V=x) if isinstance(module, torch.nn.Linear) else _Factored(U=x, V=g)
    if bias is not None and id(bias) in chosen:
        parts[id(bias)] = g.sum(1)
    return parts


def _own_parameters(module) -> dict:
    """The parameters a call of ``module`` uses as its own: those it holds directly, and those of its
    ``ParameterDict`` and ``ParameterList`` children (containers that are never called: peft keeps
    an embedding's LoRA weights in them, ``lora_embedding_A.default``), by their names under ``module``."""
    import torch

    own = dict(module.named_parameters(recurse=False))
    for name, child in module.named_children():
        if isinstance(child, (torch.nn.ParameterDict, torch.nn.ParameterList)):
            own.update({f"{name}.{n}": p for n, p in child.named_parameters()})
    return own


def _scale_shift_parts(module, args: tuple, g, chosen: set[int]) -> dict[int, object] | None:
    """Per-sample gradients of a module ``y = f(x) * weight + bias`` (LayerNorm, RMSNorm), or None if it is not one.

    Then ``dL/dweight = sum_t g_t * f(x_t)`` and ``dL/dbias = sum_t g_t``, for the whole batch at
    once. The form is checked, not assumed from the class: the module, rerun with weight 1 and
    bias 0 (giving ``f(x)``), must double with weight 2 and reproduce its output with its own
    weights (Gemma's ``f(x) * (1 + weight)`` fails and takes the general path).
    """
    import torch
    from torch.func import functional_call

    own = _own_parameters(module)
    w, b = own.get("weight"), own.get("bias")
    if (w is None or set(own) - {"weight", "bias"} or len(args) != 1 or w.dim() != 1 or w.shape != g.shape[-1:]
            or (b is not None and b.shape != w.shape)):
        return None
    with torch.no_grad():
        shift = {} if b is None else {"bias": torch.zeros_like(b)}
        base = functional_call(module, {"weight": torch.ones_like(w), **shift}, args)
        doubled = functional_call(module, {"weight": torch.full_like(w, 2.0), **shift}, args)
        actual = functional_call(module, {n: p.detach() for n, p in own.items()}, args)
        scale = float(actual.abs().max()) + float(base.abs().max()) + 1e-30
        if not (torch.allclose(doubled, 2 * base, rtol=1e-5, atol=1e-6 * scale)
                and torch.allclose(actual, base * w + (0 if b is None else b), rtol=1e-4, atol=1e-5 * scale)):
            return None
    rows, d = g.shape[0], g.shape[-1]
    parts = {}
    if id(w) in chosen:
        parts[id(w)] = (g * base).reshape(rows, -1, d).sum(1)
    if b is not None and id(b) in chosen:
        parts[id(b)] = g.reshape(rows, -1, d).sum(1)
    return parts


def _generic_parts(module, args: tuple, g, chosen: set[int], kwargs: dict | None = None) -> dict[int, object]:
    """Exact per-sample gradients of a module's own selected parameters: ``vmap`` over ``vjp`` of the module alone.

    For small modules that are neither linear nor embeddings: per text, the module is rerun on
    its recorded input (positional arguments and the tensors among its keyword arguments, row by
    row; its other keyword arguments as they were) and pulled back along its recorded output
    gradient. LayerNorm and RMSNorm take the shortcut of :func:`_scale_shift_parts` (one batched
    call instead of ``vmap``: a tenth of the time).
    """
    import torch
    from torch.func import functional_call, vjp, vmap

    kwargs = kwargs or {}
    if _is_dora(module):
        return _dora_parts(module, args, kwargs, g, chosen)
    if not kwargs:
        fast = _scale_shift_parts(module, args, g, chosen)
        if fast is not None:
            return fast
    own = _own_parameters(module)
    mine = {n: p.detach() for n, p in own.items() if id(p) in chosen}
    rest = {n: p.detach() for n, p in own.items() if id(p) not in chosen}
    if not all(torch.is_tensor(a) for a in args):
        raise ConfigError(f"probes.ktd.params: per-sample gradients of {type(module).__name__}: "
                          "its call has non-tensor "
                                  "arguments; leave its parameters out of params")
    rows = g.shape[0]
    batched = {k: v for k, v in kwargs.items() if torch.is_tensor(v) and v.dim() and v.shape[0] == rows}
    fixed = {k: v for k, v in kwargs.items() if k not in batched}

    def one(params, g_b, kw_b, *a_b):
        def f(p):
            kw = {**fixed, **{k: v[None] for k, v in kw_b.items()}}
            return functional_call(module, {**p, **rest}, tuple(a[None] for a in a_b), kw)[0]

        return vjp(f, params)[1](g_b)[0]

    per_text = vmap(one, in_dims=(None, 0, 0) + (0,) * len(args))
    chunks = [per_text(mine, g[b], {k: v[b] for k, v in batched.items()}, *(a[b] for a in args))
              for b in _slices(rows, 4 * sum(p.numel() for p in mine.values()))]
    return {id(own[n]): torch.cat([c[n] for c in chunks]) for n in mine}


def _is_dora(module) -> bool:
    """A peft DoRA layer (``lora_magnitude_vector.<adapter>``, holding the magnitude vector)."""
    return type(module).__module__.startswith("peft.") and type(module).__name__.startswith("Dora")


def _dora_base_bias(module, kwargs: dict):
    """The base layer's bias, which a DoRA layer's call uses directly (it subtracts it from the base
    output it is handed), or None."""
    base_layer = kwargs.get("base_layer")
    return getattr(base_layer, "bias", None) if kwargs.get("base_result") is not None else None


def _check_dora(module) -> None:
    """A ConfigError for a DoRA layer other than a linear one (peft's embedding and convolution variants)."""
    name = type(module).__name__
    if name != "DoraLinearLayer":
        raise ConfigError(f"probes.ktd.params: per-sample gradients of peft's {name} (DoRA on an embedding or a "
                          "convolution) are not implemented; leave its lora_magnitude_vector out of params, or "
                          "put the DoRA adapter on linear layers only")


def _dora_parts(module, args: tuple, kwargs: dict, g, chosen: set[int]) -> dict[int, object]:
    """Per-sample gradients of a peft DoRA linear layer's magnitude ``m`` and of its base layer's bias.

    In eval mode the layer adds ``(s - 1) * base + s * scaling * lora`` to the base layer's output,
    with ``s = m / ||W + scaling * B A||`` (the norm detached, as peft and the DoRA paper do),
    ``base`` the base output less its bias and ``lora = B(A(x))``. So ``dL/dm = sum_t g_t * (base_t
    + scaling * lora_t) / norm`` and the bias, used here a second time, gets ``-(s - 1) * sum_t g_t``
    (added to its base layer's part as a tied weight's uses are). ``A`` and ``B`` are called as
    modules inside it and take the linear path; the base weight enters only the detached norm.
    """
    import torch

    _check_dora(module)
    base_result = kwargs.get("base_result")
    if base_result is None:  # pragma: no cover - peft passes it whenever the model is in eval mode
        raise ConfigError("probes.ktd.params: a DoRA layer called without its base output (training mode with "
                          "dropout): gradient norms run in eval mode")
    x = args[0] if args else kwargs["x"]
    lora_A, lora_B, scaling = kwargs["lora_A"], kwargs["lora_B"], kwargs["scaling"]
    m, bias = module.weight, _dora_base_bias(module, kwargs)
    with torch.no_grad():
        lora_weight = module.get_lora_weight(lora_A=lora_A, lora_B=lora_B).to(x.dtype)
        norm = module.get_weight_norm(weight=kwargs["base_layer"].weight.to(x.dtype), lora_weight=lora_weight,
                                      scaling=scaling).detach()
        rows, d = g.shape[0], g.shape[-1]
        g = g.reshape(rows, -1, d)
        parts: dict[int, object] = {}
        if id(m) in chosen:
            base = base_result if bias is None else base_result - bias
            h = (base + scaling * lora_B(lora_A(x))) / norm
            parts[id(m)] = (g * h.reshape(rows, -1, d)).sum(1)
        if bias is not None and id(bias) in chosen:
            parts[id(bias)] = -(g * (m.detach() / norm - 1)).sum(1)
    return parts


def _call_parameters(module, kwargs: dict) -> dict:
    """The parameters one call of ``module`` uses: its own (:func:`_own_parameters`), and for a DoRA
    layer its base layer's bias (:func:`_dora_base_bias`)."""
    own = _own_parameters(module)
    if _is_dora(module):
        bias = _dora_base_bias(module, kwargs)
        if bias is not None:
            own["base_layer.bias"] = bias
    return own


def _is_ghost_module(module) -> bool:
    """Exactly a Linear, Embedding or transformers Conv1D: a subclass may change the forward
    (Gemma's embedding multiplies its output by a constant) and takes the general path."""
    import torch
    from transformers.pytorch_utils import Conv1D

    return type(module) in (torch.nn.Linear, torch.nn.Embedding, Conv1D)


def _identity_function():
    """An identity ``(x, anchor) -> x`` whose backward hands the incoming gradient to ``receive``."""
    import torch

    class Identity(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, anchor, receive):
            ctx.receive = receive
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            ctx.receive(grad)
            return grad, grad.new_zeros(()), None

    return Identity


class _Batch:
    """The squared per-sample gradient norms of one padded batch, gathered during one backward.

    A forward hook on every module owning selected parameters records its inputs and passes
    its output through an identity that also takes ``anchor`` (a scalar requiring grad); asking
    ``torch.autograd.grad`` for the anchor's gradient runs the backward through every recorded
    output and stops: no parameter's gradient is requested, so none is computed. Each
    identity's backward receives its output's gradient; a linear layer's or embedding's
    contribution is reduced to per-sample numbers at once (its activation and gradient are
    freed as the backward moves on). Other modules, and weights used more than once (tied),
    wait for the end of the backward: the former run ``torch.func`` (not inside the autograd
    engine), the latter need cross terms between their uses.
    """

    def __init__(self, rows: int, device, chosen: set[int]):
        import torch

        self.rows, self.chosen = rows, chosen
        self.anchor = torch.zeros((), device=device, requires_grad=True)
        self.identity = _identity_function()
        self.calls: list = []  # (module, recorded positional args, recorded keyword args) per call
        self.total = torch.zeros(rows, dtype=torch.float64, device=device)
        self.later: list = []  # (call index, output gradient) of the calls handled after the backward
        self.multi: set[int] = set()  # parameters used by more than one call

    def per_row(self, a):
        """``a`` detached, a tensor shared by the batch (``[1, ...]``) expanded to every row.

        GPT-2's position embeddings are one ``[1, T, d]`` output broadcast over the batch:
        expanded here, their gradient arrives per row instead of summed over the rows.
        """
        return a.detach().expand(self.rows, *a.shape[1:]) if a.dim() and a.shape[0] == 1 else a.detach()

    def hook(self, module, args, kwargs, out):
        import torch

        if _is_dora(module):
            _check_dora(module)
        if not torch.is_tensor(out):
            raise ConfigError(f"probes.ktd.params: per-sample gradients of {type(module).__name__}: "
                              "its output is not one "
                                      "tensor; leave its parameters out of params")
        i = len(self.calls)
        self.calls.append((module, tuple(self.per_row(a) if torch.is_tensor(a) else a for a in args),
                           {k: self.per_row(v) if torch.is_tensor(v) else v for k, v in kwargs.items()}))
        if out.dim() and out.shape[0] == 1:
            out = out.expand(self.rows, *out.shape[1:])
        return self.identity.apply(out, self.anchor, lambda grad: self.receive(i, grad))

    def before_backward(self) -> None:
        seen: dict[int, int] = {}
        for module, _, kwargs in self.calls:
            for p in _call_parameters(module, kwargs).values():
                seen[id(p)] = seen.get(id(p), 0) + 1
        self.multi = {k for k, count in seen.items() if count > 1 and k in self.chosen}

    def receive(self, i: int, grad) -> None:
        module, args, kwargs = self.calls[i]
        owned = {id(p) for p in _call_parameters(module, kwargs).values()}
        if not _is_ghost_module(module) or owned & self.multi:
            self.later.append((i, grad))
            return
        for part in _linear_parts(module, args[0], grad, self.chosen).values():
            self.total += _sq_norm(part)
        self.calls[i] = (module, (), {})  # the activation is no longer needed

    def finish(self):
        parts: dict[int, list] = {}
        for i, grad in self.later:
            module, args, kwargs = self.calls[i]
            found = (_linear_parts(module, args[0], grad, self.chosen) if _is_ghost_module(module)
                     else _generic_parts(module, args, grad, self.chosen, kwargs))
            for k, part in found.items():
                parts.setdefault(k, []).append(part)
        for ps in parts.values():
            for j, p in enumerate(ps):
                self.total += _sq_norm(p)
                for q in ps[j + 1:]:  # a tied weight: ||G1 + G2||^2 = ||G1||^2 + ||G2||^2 + 2 <G1, G2>
                    self.total += 2 * _dot(p, q)
        return self.total


def _batch_sq_norms(model, ids, lengths: Sequence[int], owners: Sequence, chosen: set[int]):
    """Squared gradient norms (float64, ``[B]``) of each row's mean token log-likelihood."""
    import torch

    B, W = ids.shape
    batch = _Batch(B, ids.device, chosen)
    handles = [m.register_forward_hook(batch.hook, with_kwargs=True) for m in owners]
    try:
        # No attention mask: the padding is on the right and attention is causal, so no real
        # position sees it, and without a mask the attention runs its causal kernel (20% of
        # SmolLM2's forward on a CPU goes to the masked one).
        logits = model(input_ids=ids).logits
    finally:
        for h in handles:
            h.remove()
    # Row b predicts tokens 1..n_b: position t's target is token t + 1, none from position n_b on
    # (its last token and the padding). The loss is the sum over rows of each row's mean.
    n = torch.as_tensor(lengths, device=ids.device) - 1
    targets = torch.cat([ids[:, 1:], ids.new_zeros(B, 1)], 1)
    targets = targets.masked_fill(torch.arange(W, device=ids.device)[None, :] >= n[:, None], -100)
    # On the contiguous [B * W, V] logits: cross-entropy over a strided [B, V, W] view is computed
    # less accurately (ten times the loop's float32 error in the gradient norms of SmolLM2).
    nll = torch.nn.functional.cross_entropy(logits.reshape(B * W, -1), targets.reshape(-1), reduction="none")
    loss = (nll.view(B, W).sum(1) / n.clamp_min(1)).sum()
    del logits, nll
    batch.before_backward()
    torch.autograd.grad(loss, batch.anchor)
    return batch.finish()


def _owners(model, chosen: set[int]) -> list:
    """The modules whose calls use selected parameters: those that own one (:func:`_own_parameters`),
    and the DoRA layers of a peft layer whose base layer's bias is selected (:func:`_dora_parts`)."""
    out = [m for m in model.modules() if any(id(p) in chosen for p in _own_parameters(m).values())]
    for m in model.modules():
        bias = getattr(getattr(m, "base_layer", None), "bias", None)
        dora = getattr(m, "lora_magnitude_vector", None)
        if bias is not None and id(bias) in chosen and dora is not None:
            out += [d for d in dora.values() if d not in out]
    return out


def per_sample_grad_norms(model, tokenizer, texts: Sequence[str], *, params="all", batch_size: int = 8,
                          max_tokens: int | None = 512) -> np.ndarray:
    """``||d/d theta (mean token log-likelihood of text)||_2`` for each text (float64; KTD's ``Z = -`` this).

    ``params`` selects ``theta`` (:func:`select_parameters`: ``"all"``, ``"lora"`` or glob patterns).
    Texts are encoded as the token statistics encode them (context token first, cut to
    ``max_tokens`` text tokens and to the model's positions) and run ``batch_size`` at a time in
    length buckets (fewer where the batch's logits would pass :data:`LOGIT_BYTES`). The model
    must be float32; it is left as it was (mode, ``requires_grad``). NaN for a text with no token.
    """
    from memaudit.models.forward import right_padded
    from memaudit.models.token_stats import length_buckets

    selected = select_parameters(model, params)
    _check_float32(selected)
    chosen = {id(t) for _, t in selected}
    owners = _owners(model, chosen)
    encoded = _encoded(tokenizer, texts, model, max_tokens)
    lengths = [len(e) for e in encoded]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    device = selected[0][1].device
    vocab = getattr(getattr(model, "config", None), "vocab_size", None) or 1
    max_batch_tokens = max(max(lengths, default=1), LOGIT_BYTES // (4 * vocab))
    out = np.full(len(texts), np.nan)
    with _requires_grad_only(model, []), _accurate_cuda_blas(device):
        for batch in length_buckets(lengths, batch_size, max_batch_tokens):
            batch = [i for i in batch if lengths[i] >= 2]
            if not batch:
                continue
            ids, _ = right_padded(encoded, batch, pad)
            sq = _batch_sq_norms(model, ids.to(device), [lengths[i] for i in batch], owners, chosen)
            out[batch] = sq.clamp_min(0).sqrt().cpu().numpy()
    return out
