"""DE-COP (Duarte et al., 2024): is a document in a model's training data?

The model is asked to pick the verbatim passage among three paraphrases; a
document whose passages it picks far more often than clean (unseen) documents
is suspect. Modules, in pipeline order:

- :mod:`.construct`: passages of ~64/128/256 tokens from books and papers (.txt, .epub, PDF);
- :mod:`.loaders`: the published BookTection/arXivTection CSVs (or Hugging Face datasets) and BookMIA JSONL;
- :mod:`.paraphrase`: three paraphrases per passage with the paper's prompts, and quality control;
- :mod:`.prompts`: the paper's question prompts, orderings (24 permutations or a 4-rotation Latin square),
  answer parsing;
- :mod:`.scoring`: logit, black-box and likelihood modes;
- :mod:`.analysis`: calibration (Algorithm 1), per-document accuracy and verbatim probability, the exact
  test against the clean documents and Benjamini-Hochberg;
- :mod:`.runner`: what the workflow's DE-COP rules call.
"""
