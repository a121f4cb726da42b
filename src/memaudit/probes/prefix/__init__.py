"""Prefix probing: does a model continue a passage's prefix with the passage's own words?

- :mod:`.runner`: scoring (ROUGE-L recall, longest shared word run), the request planner and the workflow job.
"""
