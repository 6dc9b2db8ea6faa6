"""Model names -> local directories vLLM loads: offline PyPI GGUF wheels, shipped drafts, the hub."""

from specdec_helpers.models.resolve import resolve_model

__all__ = ["resolve_model"]
