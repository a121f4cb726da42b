"""Prefix probing: does a model continue a passage's prefix with the passage's own words?

- :mod:`.plan`: the method names and config checks (no numpy or pandas: read by every config check).
- :mod:`.runner`: scoring (ROUGE-L recall, longest shared word run), the request planner and the workflow job.
"""
