"""Model names -> local directories vLLM loads: offline PyPI GGUF wheels, shipped drafts, the hub."""

from specdec_helpers.models.model_cache import MANIFEST_NAME, ModelError, cache_root, sha256_of
from specdec_helpers.models.resolve import UnknownModelError, describe_model, resolve_model
from specdec_helpers.models.wheel_models import OFFLINE_MODELS

__all__ = ["MANIFEST_NAME", "ModelError", "OFFLINE_MODELS", "UnknownModelError", "cache_root",
           "describe_model", "resolve_model", "sha256_of"]
