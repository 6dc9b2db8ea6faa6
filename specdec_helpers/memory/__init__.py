"""Memory of a target and a draft with their KV caches: ``catalog``, ``budget``, ``plots``, ``kv_capacity``."""

from specdec_helpers.memory import budget, catalog
from specdec_helpers.memory.budget import *  # noqa: F401,F403  (the budget API, as ``memory.plan_budget``)
from specdec_helpers.memory.catalog import *  # noqa: F401,F403

__all__ = catalog.__all__ + budget.__all__
