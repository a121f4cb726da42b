"""Datasets: raw documents, member/non-member benchmarks and the passage records probes read."""

from memaudit.datasets.types import Document, Passage

__all__ = ["Document", "Passage"]
