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

log = logging.getLogger(__name__)

SPECIAL = "<|endoftext|>"


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
                    max_tokens: int | None, seed: int,
                    progress: Callable[[str], None] = log.info) -> dict:
    """Train a GPT-2 from scratch on ``texts``; save model and tokenizer in ``out_dir``.

    Returns a training record (tokens seen, losses per logging step, seconds).
    """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    random.seed(seed)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = train_bpe_tokenizer(texts, vocab_size, out_dir)
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    blocks = pack_blocks(ids, n_positions, tok.eos_token_id)
    if max_tokens:
        blocks = blocks[: max(1, max_tokens // n_positions)]
    if not blocks:
        raise ValueError("pretraining pool too small for one block of n_positions tokens")
    cfg = GPT2Config(vocab_size=len(tok), n_positions=n_positions, n_embd=n_embd, n_layer=n_layer,
                     n_head=n_head, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg)
    data = torch.tensor(blocks, dtype=torch.long)
    steps_per_epoch = math.ceil(len(data) / batch_size)
    total = max(1, int(round(epochs * steps_per_epoch)))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    warmup = max(1, total // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / total))))
    gen = torch.Generator().manual_seed(seed)
    model.train()
    losses, t0, step = [], time.time(), 0
    while step < total:
        order = torch.randperm(len(data), generator=gen)
        for i in range(0, len(order), batch_size):
            if step >= total:
                break
            batch = data[order[i:i + batch_size]]
            loss = model(input_ids=batch, labels=batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            if step % max(1, total // 10) == 0 or step == total:
                losses.append({"step": step, "loss": loss.item()})
                progress(f"pretrain step {step}/{total} loss {loss.item():.3f} "
                         f"({time.time() - t0:.0f}s)")
    model.eval()
    model.save_pretrained(out_dir)
    return {"blocks": len(data), "tokens": int(data.numel()), "steps": total,
            "n_params": int(sum(p.numel() for p in model.parameters())),
            "losses": losses, "seconds": time.time() - t0}
