"""memaudit: audit language models for memorised training data.

Sign convention (one place, used everywhere): every detector score is oriented
so that **higher = more likely a member** of the training data. Losses,
perplexities and ratios where lower means member are negated or inverted at the
point where the score is defined (see :mod:`memaudit.probes.token_prob.methods`).
Labels: ``1`` = member (seen in training), ``0`` = non-member.
"""

__version__ = "0.1.0"

MEMBER = 1
NONMEMBER = 0
