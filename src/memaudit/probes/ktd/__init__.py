"""KTD: knockoff inference for training-data detection with FDR control (the KTD paper).

- :mod:`.statistics`: Eq. 8's W, knockoff draws from the paraphrase pool, knockoff+ selection over
  draws, Lemma 1's symmetry checked on non-members;
- :mod:`.runner`: the probe job (importance scores Z of texts and knockoffs, the tables);
- :mod:`.plan`: the job list and config checks;
- :mod:`.summary`: the summary over every (benchmark, model) and its figures.
"""
