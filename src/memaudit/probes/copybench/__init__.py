"""CopyBench: literal and non-literal copying, fact recall and fluency (Chen et al. 2024)."""
