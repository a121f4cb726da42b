"""Token-probability membership attacks (MIMIR's family): loss, zlib, lowercase, Min-K%, Min-K%++, reference.

- :mod:`.methods`: each method as a small class over stored token statistics;
- :mod:`.runner`: what the workflow's rules call (one forward pass per model and benchmark, every method from it).
"""
