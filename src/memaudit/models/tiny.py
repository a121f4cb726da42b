"""Tiny GPT-2-style models trained from scratch, with their own byte-level BPE tokenizer.

They are trained on the *pretraining pool* -- documents disjoint from every
benchmark's members and non-members -- so that a tiny base model has seen
neither group and is a clean null control, and several sizes give an
AUC-against-size trend in minutes on a CPU.
"""

from __future__ import annotations

import logging
import math
import random
import time
from pathlib import Path
from typing import Callable, Sequence

from memaudit.checkpoints import TrainingCheckpoint

log = logging.getLogger(__name__)

SPECIAL = "<|endoftext|>"
MAX_GRAD_NORM = 1.0  # every step's gradients are clipped to this norm


def train_bpe_tokenizer(texts: Sequence[str], vocab_size: int, out_dir: Path):
    """Train a byte-level BPE tokenizer (``tokenizers``) and save it as a transformers tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[SPECIAL],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=SPECIAL, eos_token=SPECIAL,
                                   unk_token=SPECIAL, pad_token=SPECIAL)
    fast.save_pretrained(out_dir)
    return fast


def pack_blocks(token_lists: Sequence[Sequence[int]], block: int, eos_id: int) -> list[list[int]]:
    """Concatenate documents (separated by EOS) and cut into blocks of ``block`` tokens."""
    stream: list[int] = []
    for ids in token_lists:
        stream.append(eos_id)
        stream.extend(ids)
    return [stream[i:i + block] for i in range(0, len(stream) - block + 1, block)]


def train_tiny_gpt2(texts: Sequence[str], out_dir: Path, *, n_layer: int, n_embd: int, n_head: int,
                    n_positions: int, vocab_size: int, epochs: float, lr: float, batch_size: int,
                    max_tokens: int | None, seed: int, checkpoint: TrainingCheckpoint | None = None,
                    progress: Callable[[str], None] = log.info) -> dict:
    """Train a GPT-2 from scratch on ``texts``; save model and tokenizer in ``out_dir``.

    Returns a training record (tokens seen, losses per logging step, seconds).
    A ``checkpoint`` saves and resumes the run as in :func:`memaudit.models.finetune.finetune`.
    """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from memaudit.checkpoints import (GracefulStop, optimizer_state, restore_optimizer_state, restore_rng_state,
                                      rng_state, texts_digest)
    from memaudit.io import atomic_dir

    checkpoint = checkpoint or TrainingCheckpoint(None)
    torch.manual_seed(seed)
    random.seed(seed)
    with atomic_dir(out_dir) as tmp_dir:
        tok = train_bpe_tokenizer(texts, vocab_size, tmp_dir)
        ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
        blocks = pack_blocks(ids, n_positions, tok.eos_token_id)
        if max_tokens:
            blocks = blocks[: max(1, max_tokens // n_positions)]
        if not blocks:
            raise ValueError("pretraining pool too small for one block of n_positions tokens")
        cfg = GPT2Config(vocab_size=len(tok), n_positions=n_positions, n_embd=n_embd, n_layer=n_layer,
                         n_head=n_head, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                         # GPT-2's tanh-approximated GELU as one fused kernel: GPT2Config's default
                         # "gelu_new" computes the same formula in seven element-wise operations
                         # (max |diff| 2.4e-7): a sixth of a training step by the profiler on an
                         # AVX2-only CPU, 6-15% of a demo fine-tune's time there (docs/timings.md, session 69)
                         activation_function="gelu_pytorch_tanh")
        model = GPT2LMHeadModel(cfg)
        data = torch.tensor(blocks, dtype=torch.long)
        # The tokenizer is retrained on resume; the digest proves it cut the same blocks.
        data_digest = texts_digest([" ".join(map(str, b)) for b in blocks])
        steps_per_epoch = math.ceil(len(data) / batch_size)
        total = max(1, int(round(epochs * steps_per_epoch)))
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
        warmup = max(1, total // 20)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / total))))
        gen = torch.Generator().manual_seed(seed)
        model.train()
        losses, t0, step = [], time.time(), 0
        epoch, order, pos = 0, None, 0  # pos: batches of the current epoch's order already taken
        resumed_from = None
        state = checkpoint.load()
        if state is not None and (state["total"], state["data_digest"]) == (total, data_digest):
            restore_optimizer_state(state, model, opt, sched)
            restore_rng_state(state["rng"])
            gen.set_state(state["generator"])
            step, epoch, order, pos = int(state["step"]), int(state["epoch"]), state["order"], int(state["pos"])
            losses = list(state["losses"])
            t0 -= float(state["seconds"])
            resumed_from = step
            progress(f"resumed from checkpoint at step {step}/{total} (epoch {epoch}, batch {pos}/{steps_per_epoch}) "
                     f"in {checkpoint.directory}")
        elif state is not None:
            progress("checkpoint does not match this run's data or plan; starting over")
        with GracefulStop() as stop:
            while step < total:
                if order is None or pos >= steps_per_epoch:
                    order = torch.randperm(len(data), generator=gen)
                    epoch, pos = epoch + 1, 0
                batch = data[order[pos * batch_size:(pos + 1) * batch_size]]
                loss = model(input_ids=batch, labels=batch).loss
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
                opt.step()
                sched.step()
                opt.zero_grad(set_to_none=True)
                step += 1
                pos += 1
                if step % max(1, total // 10) == 0 or step == total:
                    losses.append({"step": step, "loss": loss.item()})
                    progress(f"pretrain step {step}/{total} loss {loss.item():.3f} "
                             f"({time.time() - t0:.0f}s)")
                checkpoint.after_step(stop, step=step, total=total, epoch_end=pos >= steps_per_epoch,
                                      what="pretraining", state=lambda: {
                                          **optimizer_state(model, opt, sched), "step": step, "epoch": epoch,
                                          "pos": pos, "order": order, "total": total, "data_digest": data_digest,
                                          "rng": rng_state(), "generator": gen.get_state(), "losses": losses,
                                          "seconds": time.time() - t0})
        model.eval()
        model.save_pretrained(tmp_dir)
    return {"blocks": len(data), "tokens": int(data.numel()), "steps": total,
            "n_params": int(sum(p.numel() for p in model.parameters())),
            "optimizer": {"name": "AdamW", "betas": list(opt.defaults["betas"]), "eps": opt.defaults["eps"],
                          "weight_decay": opt.defaults["weight_decay"], "max_grad_norm": MAX_GRAD_NORM,
                          "warmup_steps": warmup, "schedule": "linear warmup, then cosine to zero"},
            "losses": losses, "seconds": time.time() - t0, "resumed_from_step": resumed_from}
