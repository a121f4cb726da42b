"""Controlled contamination: fine-tune a base model on a benchmark's members only.

LoRA (``peft``) stores just the adapter; ``full`` stores the whole model (used
for the tiny models). Each member document is tokenised exactly as the probes
tokenise it (see :func:`memaudit.models.token_stats.encode`), split into chunks
of ``max_length`` tokens, and repeated ``duplication`` times per epoch -- the
knob that sets how strongly the members are memorised.

By default every chunk starts at the start of its document, so each passage is
always seen at the same positions. ``packing=True`` trains as pretraining does:
the members are concatenated (the context token between them) in a new random order
each epoch and cut into windows from a random offset, so a passage is seen at
ever-changing positions and after ever-changing text. A small model with learned
positions memorised the first way continues a member text when prompted with its
opening words but rarely from a sentence in its middle; packed, it does both
(the demo's CopyBench story beginnings are such sentences: docs/probes/copybench.md).
"""

from __future__ import annotations

import logging
import math
import random
import time
from pathlib import Path
from typing import Callable, Sequence

from memaudit.checkpoints import TrainingCheckpoint
from memaudit.errors import ConfigError

log = logging.getLogger(__name__)

# Every step's gradients are clipped to this norm; AdamW decays no weight (a fine-tune only moves the base).
MAX_GRAD_NORM = 1.0
WEIGHT_DECAY = 0.0


def member_chunks(tokenizer, texts: Sequence[str], max_length: int) -> list[list[int]]:
    from memaudit.models.token_stats import encode

    chunks = []
    for text in texts:
        ids = encode(tokenizer, text, max_tokens=None)
        # Every chunk starts with the context token so its first text token is trained.
        ctx, body = ids[:1], ids[1:]
        step = max_length - 1
        # Every piece, one token long too: a document's last token (or a one-token document) is a member's.
        chunks.extend(ctx + body[i:i + step] for i in range(0, len(body), step))
    return chunks


def packed_chunks(bodies: Sequence[Sequence[int]], ctx: Sequence[int], max_length: int, duplication: int,
                  rng: random.Random) -> list[list[int]]:
    """One epoch's windows for ``packing``: the ``bodies`` (token ids without the context token)
    ``duplication`` times each, in a random order, joined by ``ctx`` (the context token) into one
    stream rotated by a random offset and cut into windows of ``max_length - 1`` tokens, each led by
    ``ctx`` like :func:`member_chunks`' chunks. The number of windows is the same every epoch."""
    order = [b for b in bodies for _ in range(duplication)]
    rng.shuffle(order)
    stream = [t for b in order for t in list(b) + list(ctx)]
    step = max_length - 1
    if not stream:
        return []
    offset = rng.randrange(min(step, len(stream)))
    stream = stream[offset:] + stream[:offset]
    return [list(ctx) + stream[i:i + step] for i in range(0, len(stream), step)]


def epoch_order(lengths: Sequence[int], batch_size: int, rng: random.Random, copies: int = 1) -> list[int]:
    """One epoch's chunk order: batches of similar length, in random order.

    Chunks are shuffled, sorted by length (ties stay shuffled) and cut into batches of
    ``batch_size``; the full batches are shuffled and the one partial batch, if any, goes
    last, so batch ``k`` of the epoch is always ``order[k * batch_size:(k + 1) * batch_size]``.
    On the demo's members (documents of 1-3 chunks of up to 256 tokens) random batches
    were 54% padding; these are 1%.

    ``lengths`` may hold ``copies`` copies of the chunks one after another (``duplication``): each
    copy is sorted on its own, ties in one shuffled order for all, and the copies follow one another,
    so a chunk's copies fall in different batches wherever there are ``batch_size`` chunks. Sorted
    together, a chunk's copies (one length, often the only chunks of it) sat side by side: one member
    twice in one step, a larger weight on one gradient rather than another exposure.
    """
    if copies < 1 or len(lengths) % copies:
        raise ValueError(f"{len(lengths)} chunks are not {copies} copies of the same chunks")
    per_copy = len(lengths) // copies
    ties = list(range(per_copy))
    rng.shuffle(ties)
    rank = {chunk: r for r, chunk in enumerate(ties)}
    order = sorted(range(len(lengths)), key=lambda i: (i // per_copy, -lengths[i], rank[i % per_copy]))
    batches = [order[k:k + batch_size] for k in range(0, len(order), batch_size)]
    partial = [batches.pop()] if batches and len(batches[-1]) < batch_size else []
    rng.shuffle(batches)
    return [i for batch in batches + partial for i in batch]


def _linear_layers(model) -> list[tuple[str, object]]:
    """(name, module) of what peft's all-linear adapts: every ``nn.Linear`` or GPT-2 ``Conv1D`` but
    the output layer."""
    import torch
    from transformers.pytorch_utils import Conv1D  # GPT-2's linear layers

    output = model.get_output_embeddings()
    return [(name, module) for name, module in model.named_modules()
            if isinstance(module, (torch.nn.Linear, Conv1D)) and module is not output]


def _lora_layer_types() -> tuple[type, ...]:
    """The layer types peft's LoRA adapts (its ``dispatch_default``; its error for another lists the same)."""
    import torch
    from transformers.pytorch_utils import Conv1D

    nn = torch.nn
    return nn.Linear, nn.Embedding, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.MultiheadAttention, Conv1D


def target_modules_problem(model, target_modules) -> str | None:
    """What is wrong with a list of ``target_modules`` for ``model``, or None (a pattern or all-linear: peft's).

    peft adapts the layers a list names (a module's name or its last dotted parts, as peft matches them) and
    says nothing of a name that matches none as long as another matches: a typo then trained fewer layers
    than the manifest's resolved targets list. A name of a module LoRA cannot adapt was peft's ValueError
    quoting the module's repr."""
    if isinstance(target_modules, str):
        return None
    modules = list(model.named_modules())
    missing = []
    for target in target_modules:
        found = [m for name, m in modules if name == target or name.endswith(f".{target}")]
        if not found:
            missing.append(target)
        elif other := next((m for m in found if not isinstance(m, _lora_layer_types())), None):
            return f"{target!r} is a {type(other).__name__} in {type(model).__name__}, which LoRA cannot adapt"
    if not missing:
        return None
    if len(missing) == len(target_modules):
        return f"no such layer in {type(model).__name__}"
    return f"no layer {', '.join(map(repr, missing))} in {type(model).__name__}"


def lora_layer_settings(model, target_modules, lora_layers: int | None) -> dict:
    """``LoraConfig`` keywords for adapters in the last ``lora_layers`` transformer layers.

    Gradients then flow back only through those layers: below the lowest adapter nothing needs
    one, so autograd stops there and a step costs the forward pass plus ``lora_layers / L`` of
    the backward one. peft takes ``layers_to_transform`` only with a list of module names, so
    ``"all-linear"`` becomes the names of the linear layers inside the transformer blocks (what
    peft's all-linear picks: every ``nn.Linear`` or GPT-2 ``Conv1D`` but the output layer).
    None: every layer, as given.
    """
    if lora_layers is None:
        return {"target_modules": target_modules}
    n_layers = getattr(model.config, "num_hidden_layers", None)  # GPT-2's n_layer answers to it too
    if not n_layers:
        raise ConfigError(f"finetune.lora_layers: the model's config names no number of layers "
                         f"({type(model.config).__name__})")
    if not 1 <= int(lora_layers) <= int(n_layers):
        raise ConfigError(f"finetune.lora_layers: {lora_layers} layers asked for, the model has {n_layers}")
    if isinstance(target_modules, str):
        if target_modules != "all-linear":
            raise ConfigError(f"finetune.lora_layers needs finetune.target_modules as a list of module names "
                             f"or all-linear, not the pattern {target_modules!r}")
        target_modules = sorted({name.rsplit(".", 1)[-1] for name, _ in _linear_layers(model)})
    return {"target_modules": list(target_modules),
            "layers_to_transform": list(range(int(n_layers) - int(lora_layers), int(n_layers)))}


def targets_conv1d(model, target_modules) -> bool:
    """Whether the LoRA targets are GPT-2's ``Conv1D`` layers (weights stored input-major), which
    peft's ``fan_in_fan_out`` must say: left False, peft sets it for each such layer with a warning
    in every job's log. ``target_modules`` is a list of module names or ``"all-linear"``; another
    pattern, or targets of both kinds, leaves it to peft (False)."""
    from transformers.pytorch_utils import Conv1D

    if isinstance(target_modules, str) and target_modules != "all-linear":
        return False
    names = None if isinstance(target_modules, str) else set(target_modules)
    kinds = {isinstance(module, Conv1D) for name, module in _linear_layers(model)
             if names is None or name.rsplit(".", 1)[-1] in names}
    return kinds == {True}


def finetune(model, tokenizer, texts: Sequence[str], out_dir: Path, *, method: str, epochs: float,
             lr: float, duplication: int, batch_size: int, max_length: int, lora_r: int = 16,
             lora_alpha: int = 32, lora_dropout: float = 0.0, target_modules="all-linear",
             seed: int = 0, checkpoint: TrainingCheckpoint | None = None, autocast: str | None = None,
             packing: bool = False, lora_layers: int | None = None,
             progress: Callable[[str], None] = log.info) -> dict:
    """Fine-tune ``model`` on ``texts`` and save the adapter (lora) or the model (full) in ``out_dir``.

    With a ``checkpoint`` the run saves its state every ``checkpoint.every_steps``
    steps, at each epoch end and on SIGTERM/SIGINT (then raising
    :class:`~memaudit.errors.JobInterrupted`), and resumes from a saved state:
    the weights, optimizer, scheduler, RNGs and the epoch's batch order with the
    position in it, so the resumed run takes the same steps an uninterrupted one would.

    ``autocast`` ("bfloat16" or "float16") trains in mixed precision: the weights and the
    optimizer stay in the model's dtype (float32) and the matrix products run in half
    precision (float16 with the loss scaled by ``torch.amp.GradScaler``, whose skipped steps leave the
    learning-rate schedule where it was) -- on a CPU with AMX or AVX512-BF16 about 1.6x faster per step, on an AVX2-only
    CPU (emulated bfloat16) about 20x slower. "auto" is bfloat16 where the model's device
    computes it natively, else no autocast (:func:`memaudit.models.loading.resolve_dtype`).

    ``lora_layers`` (LoRA only) puts the adapters in the last that many transformer layers
    (:func:`lora_layer_settings`); None: in every layer.

    ``packing`` cuts each epoch's windows from the concatenated members (:func:`packed_chunks`);
    epoch ``e``'s windows come from ``random.Random(f"{seed}:packing:{e}")``, so a resumed run
    rebuilds the ones it was training on.
    """
    import contextlib

    import torch

    from memaudit.checkpoints import (GracefulStop, optimizer_state, restore_optimizer_state, restore_rng_state,
                                      rng_state)
    from memaudit.io import atomic_dir

    checkpoint = checkpoint or TrainingCheckpoint(None)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    lora = None
    if method == "lora":
        from peft import LoraConfig, get_peft_model

        def no_such_layer(problem: str) -> ConfigError:
            linear = sorted({name.rsplit(".", 1)[-1] for name, _ in _linear_layers(model)})
            return ConfigError(f"finetune.target_modules {target_modules!r}: {problem}; its linear layers are "
                               f"{', '.join(linear)} (or all-linear)")

        if problem := target_modules_problem(model, target_modules):
            raise no_such_layer(problem)
        settings = lora_layer_settings(model, target_modules, lora_layers)
        cfg = LoraConfig(r=lora_r, lora_alpha=lora_alpha, lora_dropout=lora_dropout, task_type="CAUSAL_LM",
                         fan_in_fan_out=targets_conv1d(model, settings["target_modules"]), **settings)
        try:
            model = get_peft_model(model, cfg)
        except ValueError as exc:  # peft's NoMatchingPeftModuleError names neither the key nor what would match
            if "not found in the base model" not in str(exc):
                raise
            raise no_such_layer(f"no such layer in {type(model).__name__}") from None
        # as peft resolved it (all-linear: the layers it found), for the manifest
        cfg = model.peft_config["default"]
        lora = {"r": cfg.r, "alpha": cfg.lora_alpha, "dropout": cfg.lora_dropout,
                "target_modules": sorted(cfg.target_modules) if not isinstance(cfg.target_modules, str)
                else cfg.target_modules, "layers_to_transform": cfg.layers_to_transform,
                "fan_in_fan_out": cfg.fan_in_fan_out}
    elif method != "full":
        raise ValueError(f"unknown fine-tuning method {method!r}")
    from memaudit.models.loading import clamp_tokens

    asked, max_length = max_length, clamp_tokens(model, max_length, reserve=0)
    if max_length != asked:
        progress(f"finetune.max_length {asked} is more than the model's {max_length} positions: "
                 f"chunks of {max_length} tokens")
    if packing:
        from memaudit.models.token_stats import encode

        encoded = [encode(tokenizer, t, max_tokens=None) for t in texts]
        bodies = [ids[1:] for ids in encoded if len(ids) > 1]
        ctx = encoded[0][:1] if encoded else []

        def epoch_chunks(e: int) -> list[list[int]]:
            return packed_chunks(bodies, ctx, max_length, duplication, random.Random(f"{seed}:packing:{e}"))

        chunks = epoch_chunks(1)
    else:
        chunks = member_chunks(tokenizer, texts, max_length) * duplication
    if not chunks:
        raise ValueError("no member text to fine-tune on")
    steps_per_epoch = math.ceil(len(chunks) / batch_size)
    total = max(1, int(round(epochs * steps_per_epoch)))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=WEIGHT_DECAY)
    warmup = max(1, total // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    pad = tokenizer.pad_token_id
    device = next(model.parameters()).device
    if autocast is not None:
        from memaudit.models.loading import resolve_dtype

        autocast = resolve_dtype(autocast, device.type)
        autocast = autocast if autocast in ("bfloat16", "float16") else None
    # float16 gradients underflow to zero below 6e-8 (bfloat16's range is float32's): the loss is scaled up
    # before the backward pass and the gradients down before clipping and the step, as torch.amp prescribes.
    # Disabled (float32, bfloat16) it scales nothing and steps the optimizer as it is.
    scaler = torch.amp.GradScaler(device.type, enabled=autocast == "float16")
    model.train()
    t0, step, losses, n_tokens = time.time(), 0, [], 0
    # The current epoch's summed loss and target tokens: its mean is the final loss a manifest reports (the
    # last batch alone is the epoch's partial batch of the shortest chunks, epoch_order)
    epoch_nll, epoch_targets = 0.0, 0
    epoch, order, pos = 0, None, 0  # pos: batches of the current epoch's order already taken
    resumed_from = None
    state = checkpoint.load()
    # a state saved before the epoch's loss was kept (no epoch_nll) would report a part of an epoch: start over
    if state is not None and (state["total"], state["n_chunks"]) == (total, len(chunks)) and "epoch_nll" in state:
        restore_optimizer_state(state, model, opt, sched)
        if "grad_scaler" in state:
            scaler.load_state_dict(state["grad_scaler"])
        restore_rng_state(state["rng"], rng)
        step, epoch, order, pos = int(state["step"]), int(state["epoch"]), list(state["order"]), int(state["pos"])
        losses, n_tokens = list(state["losses"]), int(state["tokens"])
        epoch_nll, epoch_targets = float(state["epoch_nll"]), int(state["epoch_targets"])
        t0 -= float(state["seconds"])
        resumed_from = step
        if packing and epoch > 0:
            chunks = epoch_chunks(epoch)  # the windows the saved epoch order indexes
        progress(f"resumed from checkpoint at step {step}/{total} (epoch {epoch}, batch {pos}/{steps_per_epoch}) "
                 f"in {checkpoint.directory}")
    elif state is not None:  # the key covers the settings, so only a code change gets here
        progress("checkpoint does not match this run's plan; starting over")
    with GracefulStop() as stop:
        while step < total:
            if order is None or pos >= steps_per_epoch:
                if packing:
                    chunks = epoch_chunks(epoch + 1)
                order = epoch_order([len(c) for c in chunks], batch_size, rng,
                                    copies=1 if packing else duplication)
                epoch, pos, epoch_nll, epoch_targets = epoch + 1, 0, 0.0, 0
            rows = [chunks[i] for i in order[pos * batch_size:(pos + 1) * batch_size]]
            width = max(len(r) for r in rows)
            ids = torch.full((len(rows), width), pad, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for j, r in enumerate(rows):
                ids[j, :len(r)] = torch.tensor(r)
                mask[j, :len(r)] = 1
            labels = ids.masked_fill(mask == 0, -100)
            with (torch.autocast(device.type, dtype=getattr(torch, autocast)) if autocast
                  else contextlib.nullcontext()):
                out = model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device))
            scaler.scale(out.loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
            scale = scaler.get_scale()  # 1.0 throughout when disabled
            scaler.step(opt)  # skipped where a float16 gradient overflowed; the scale then halves
            scaler.update()
            if scaler.get_scale() >= scale:  # the schedule counts the updates made, not the batches
                sched.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            pos += 1
            n_tokens += int(mask.sum())
            targets = int(mask.sum()) - len(rows)  # every token but each row's first is predicted
            epoch_nll, epoch_targets = epoch_nll + out.loss.item() * targets, epoch_targets + targets
            if step % max(1, total // 10) == 0 or step == total:
                losses.append({"step": step, "loss": out.loss.item()})
                progress(f"fine-tune ({method}) step {step}/{total} loss {out.loss.item():.3f} "
                         f"({time.time() - t0:.0f}s, {n_tokens / max(1e-9, time.time() - t0):.0f} tok/s)")
            checkpoint.after_step(stop, step=step, total=total, epoch_end=pos >= steps_per_epoch,
                                  what="fine-tuning", state=lambda: {
                                      **optimizer_state(model, opt, sched), "step": step, "epoch": epoch,
                                      "pos": pos, "order": order, "total": total, "n_chunks": len(chunks),
                                      "rng": rng_state(rng), "losses": losses, "tokens": n_tokens,
                                      "epoch_nll": epoch_nll, "epoch_targets": epoch_targets,
                                      "seconds": time.time() - t0,
                                      **({"grad_scaler": scaler.state_dict()} if scaler.is_enabled() else {})})
    model.eval()
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        if method == "full":
            tokenizer.save_pretrained(tmp)
    precision = f"{autocast}-mixed" if autocast else str(model.dtype).split(".")[-1]
    return {"method": method, "packing": packing, "precision": precision, "max_length": max_length,
            "chunks": len(chunks), "steps": total, "tokens": n_tokens,
            "losses": losses, "final_epoch_loss": epoch_nll / max(1, epoch_targets),
            "seconds": time.time() - t0, "resumed_from_step": resumed_from,
            "trainable_params": int(sum(p.numel() for p in params)),
            "optimizer": {"name": "AdamW", "betas": list(opt.defaults["betas"]), "eps": opt.defaults["eps"],
                          "weight_decay": WEIGHT_DECAY, "max_grad_norm": MAX_GRAD_NORM, "warmup_steps": warmup,
                          "schedule": "linear warmup, then constant"},
            **({"lora": lora} if lora is not None else {})}
