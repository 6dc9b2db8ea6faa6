"""Memory budget of a target and a draft with their KV caches (``budget``), its plots, vLLM's KV log."""

from specdec_helpers.memory.budget import *  # noqa: F401,F403  (the budget API, as ``memory.plan_budget``)
from specdec_helpers.memory.budget import __all__  # noqa: F401
