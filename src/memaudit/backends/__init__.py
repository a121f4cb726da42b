"""Model backends: one interface (:class:`~memaudit.backends.base.Backend`) over local and API models.

Every probe, planner and script opens a model with :func:`open_backend` (given its
name and the config) and tells API models apart with :func:`is_api_model`.
"""

from memaudit.backends.base import is_api_model
from memaudit.backends.resolve import open_backend

__all__ = ["is_api_model", "open_backend"]
