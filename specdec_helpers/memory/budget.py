"""Memory budget for serving a target model, and optionally a draft, with vLLM (v1): the engine gets ``GPU memory x
gpu_memory_utilization``, takes the weights and an activation reserve out and turns the rest into one KV pool for
both models, so a draft shows up as fewer requests at once. ``GB`` is 1e9 bytes as vendors state memory.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from specdec_helpers.engine.install import KV_BLOCK_TOKENS
from specdec_helpers.memory.catalog import GPUSpec, ModelShape, canonical_dtype, dtype_bytes, gpu_spec, model_shape

__all__ = ["GB", "GIB", "DEFAULT_FIXED_OVERHEAD_GB", "DEFAULT_PREFILL_CHUNK_TOKENS", "DEFAULT_MAX_NUM_SEQS",
           "BudgetError", "ContextTooLongError", "Budget", "weight_bytes", "kv_bytes_per_token", "kv_tokens_for_space",
           "estimate_overhead_gb", "plan_budget", "max_context_len", "talk_setup"]

GB = 1e9
GIB = 2**30
#: Fixed reserve per GPU: CUDA context, non-torch memory (a few 100 MB for an 8B on an H100), CUDA graphs (0.3-1 GiB).
DEFAULT_FIXED_OVERHEAD_GB = 1.5
#: vLLM profiles one forward pass of ``max_num_batched_tokens`` (8192 on GPUs) for the activation peak.
DEFAULT_PREFILL_CHUNK_TOKENS = 8192
#: vLLM's default ``max_num_seqs``: the sampler holds float32 logits for this many rows.
DEFAULT_MAX_NUM_SEQS = 256

ModelLike = Union[str, Path, Mapping[str, Any], ModelShape]


class BudgetError(ValueError):
    """The requested setup does not fit: vLLM would refuse to start with it."""


class ContextTooLongError(BudgetError):
    """Weights fit, but the KV pool cannot hold one sequence; ``max_context_len`` is the longest that fits."""

    def __init__(self, message: str, max_context_len: int) -> None:
        super().__init__(message)
        self.max_context_len = max_context_len


def weight_bytes(shape: ModelShape, dtype: str = "bf16") -> float:
    """Bytes of one copy of the weights. In fp8 and int4 only the layers' linear weights are narrow (vLLM's fp8 and
    AWQ/GPTQ checkpoints keep embeddings, LM head and norms in 16 bits); quantization scales are not counted."""
    per_value = dtype_bytes(dtype, shape)
    if per_value >= 2:
        return float(shape.parameter_count) * per_value
    sixteen_bit = shape.embedding_params + shape.lm_head_params + (2 * shape.layers + 1) * shape.hidden
    return float(sixteen_bit) * 2 + float(shape.parameter_count - sixteen_bit) * per_value


def kv_bytes_per_token(shape: ModelShape, kv_dtype: str = "bf16", tensor_parallel: int = 1) -> float:
    """KV-cache bytes of one token per GPU: 2 (K and V) x layers x KV heads x head_dim x bytes, the KV heads split
    over tensor-parallel ranks (each keeps at least one)."""
    kv_heads = max(1, shape.kv_heads // tensor_parallel)
    return 2.0 * shape.layers * kv_heads * shape.head_dim * dtype_bytes(kv_dtype, shape)


def _as_shapes(shape_or_shapes: Union[ModelLike, Iterable[ModelLike]]) -> list[ModelShape]:
    if isinstance(shape_or_shapes, (str, Path, Mapping, ModelShape)):
        return [model_shape(shape_or_shapes)]
    return [model_shape(s) for s in shape_or_shapes]


def kv_tokens_for_space(shape_or_shapes: Union[ModelLike, Iterable[ModelLike]], kv_space_bytes: float,
                        block_size: int = KV_BLOCK_TOKENS["gpu"], kv_dtype: str = "auto",
                        tensor_parallel: int = 1) -> int:
    """Tokens a KV space holds in whole blocks (``block_size`` tokens of every layer of every model sharing the pool,
    as vLLM v1 cuts it); ``kv_dtype="auto"``: each model's own dtype."""
    if block_size < 1:
        raise ValueError("block_size must be a positive number of tokens")
    per_token = sum(kv_bytes_per_token(s, kv_dtype, tensor_parallel) for s in _as_shapes(shape_or_shapes))
    return math.floor(kv_space_bytes / (block_size * per_token)) * block_size if kv_space_bytes > 0 else 0


def estimate_overhead_gb(shapes: Union[ModelLike, Iterable[ModelLike]], tensor_parallel: int = 1,
                         activation_dtype: str = "bf16") -> float:
    """An estimate of the reserve vLLM keeps out of the KV pool, per GPU, in GB: the fixed part plus the larger
    model's peak in one prefill chunk (MLP gate, up and output, ~4 hidden-wide tensors, float32 logits)."""
    act = dtype_bytes(activation_dtype)
    peak = max((DEFAULT_PREFILL_CHUNK_TOKENS * (3 * s.intermediate / tensor_parallel + 4 * s.hidden) * act
               + DEFAULT_MAX_NUM_SEQS * s.vocab * 4 for s in _as_shapes(shapes)), default=0.0)
    return DEFAULT_FIXED_OVERHEAD_GB + peak / GB


@dataclass(frozen=True)
class Budget:
    """Where one vLLM engine's memory goes, per GPU, in GB; ``*_without_draft``: the same engine with no draft."""

    gpu: GPUSpec
    gpu_memory_utilization: float
    tensor_parallel: int
    context_len: int
    block_size: int
    kv_dtype: str
    target: str
    draft: str | None
    usable_gb: float
    target_weights_gb: float
    draft_weights_gb: float
    overhead_gb: float
    kv_pool_gb: float
    target_kv_bytes_per_token: float
    draft_kv_bytes_per_token: float
    kv_tokens: int
    max_concurrent_seqs: int
    kv_tokens_without_draft: int
    max_concurrent_seqs_without_draft: int

    @property
    def kv_bytes_per_token(self) -> float:  # in the shared pool: target plus draft
        return self.target_kv_bytes_per_token + self.draft_kv_bytes_per_token

    @property
    def draft_concurrency_cost(self) -> int:  # sequences of ``context_len`` tokens the draft takes away
        return self.max_concurrent_seqs_without_draft - self.max_concurrent_seqs

    def as_rows(self) -> list[dict[str, Any]]:
        """Rows ``{"component", "gb"}`` of a stacked bar adding up to the card; the KV pool split by bytes per token."""
        draft_share = self.draft_kv_bytes_per_token / self.kv_bytes_per_token if self.kv_bytes_per_token else 0.0
        rows = [
            ("target weights", self.target_weights_gb),
            ("draft weights", self.draft_weights_gb),
            ("activations & overhead", self.overhead_gb),
            ("KV cache (target)", self.kv_pool_gb * (1 - draft_share)),
            ("KV cache (draft)", self.kv_pool_gb * draft_share),
            ("not given to vLLM", self.gpu.memory_gb - self.usable_gb),  # left for other processes
        ]
        return [{"component": c, "gb": round(gb, 3)} for c, gb in rows if self.draft is not None or "draft" not in c]

    def summary(self) -> str:  # a few plain sentences
        gpus = f"{self.tensor_parallel} x {self.gpu.name}" if self.tensor_parallel > 1 else self.gpu.name
        per = " per GPU" if self.tensor_parallel > 1 else ""
        draft = f" and the draft {self.draft} {self.draft_weights_gb:.1f} GB" if self.draft is not None else ""
        text = (f"On {gpus} ({self.gpu.memory_gb:g} GB x {self.gpu_memory_utilization:g} = {self.usable_gb:.1f} GB "
                f"usable{per}): {self.target} weights take {self.target_weights_gb:.1f} GB{draft}; "
                f"{self.overhead_gb:.1f} GB is reserved for activations and overhead; the KV cache gets "
                f"{self.kv_pool_gb:.1f} GB = {self.kv_tokens:,} tokens, {self.max_concurrent_seqs} sequences of "
                f"{self.context_len:,} tokens at once.")
        return text if self.draft is None else text + (
            f" Without the draft: {self.kv_tokens_without_draft:,} tokens, {self.max_concurrent_seqs_without_draft} "
            f"sequences; the draft costs {self.draft_concurrency_cost} concurrent sequences.")


def _resolve(model: ModelLike) -> tuple[str, ModelShape]:
    shape = model_shape(model)
    unnamed = isinstance(model, (str, Path)) and shape.name == "custom model"
    return (str(model) if unnamed else shape.name), shape


def _suggest_tp(shapes: list[ModelShape], weight_dtype: str, reserve_gb: float, usable_gb: float, current: int) -> int:
    """The smallest power-of-two multiple of ``current`` up to 64 whose weight share fits next to the reserve and
    whose head split vLLM accepts; ``current * 2`` when none does."""
    total = sum(weight_bytes(s, weight_dtype) for s in shapes) / GB
    candidates = (tp for tp in (current * 2**i for i in range(1, 7)) if tp <= 64)
    fits = (tp for tp in candidates if all(s.heads % tp == 0 for s in shapes) and total / tp + reserve_gb <= usable_gb)
    return next(fits, current * 2)


def plan_budget(target: ModelLike, draft: ModelLike | None = None, gpu: Union[str, GPUSpec] = "H100",
                gpu_memory_utilization: float = 0.9, weight_dtype: str = "bf16", kv_dtype: str = "bf16",
                context_len: int = 8192, tensor_parallel: int = 1, overhead_gb: float | None = None,
                block_size: int = KV_BLOCK_TOKENS["gpu"]) -> Budget:
    """Plan one vLLM engine's memory, per GPU, the way vLLM v1 does. Models: a catalog name, hub id, path, config
    dict or :class:`ModelShape`. ``overhead_gb=None`` estimates the reserve (vLLM's logged one reproduces a server).
    Not counted: speculation's extra slots, prefix-cache sharing. :class:`BudgetError` says what to change."""
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError("gpu_memory_utilization is a fraction of the card: 0 < u <= 1")
    if tensor_parallel < 1 or int(tensor_parallel) != tensor_parallel:
        raise ValueError("tensor_parallel must be a whole number of GPUs, at least 1")
    if context_len < 1:
        raise ValueError("context_len must be at least one token")
    tensor_parallel, spec = int(tensor_parallel), gpu_spec(gpu)
    target_name, t_shape = _resolve(target)
    d_name, d_shape = _resolve(draft) if draft is not None else (None, None)
    shapes = [s for s in (t_shape, d_shape) if s is not None]
    for s in shapes:  # vLLM splits the heads over the GPUs
        if s.heads % tensor_parallel:
            raise BudgetError(f"{s.name} has {s.heads} attention heads, which do not split over tensor_parallel="
                              f"{tensor_parallel} GPUs; vLLM needs the head count to be a multiple of tensor_parallel")
        if s.kv_heads % tensor_parallel and tensor_parallel % s.kv_heads:
            raise BudgetError(f"{s.name} has {s.kv_heads} KV heads; tensor_parallel={tensor_parallel} "
                              f"must divide them or be a multiple of them")
    act_dtype = "fp32" if canonical_dtype(weight_dtype, t_shape) == "fp32" else "bf16"
    usable_gb = spec.memory_gb * gpu_memory_utilization
    t_weights, d_weights = (weight_bytes(s, weight_dtype) / tensor_parallel / GB if s else 0.0
                            for s in (t_shape, d_shape))
    if overhead_gb is None:
        reserve = estimate_overhead_gb(shapes, tensor_parallel, act_dtype)
        reserve_alone = estimate_overhead_gb([t_shape], tensor_parallel, act_dtype)
    else:
        reserve = reserve_alone = float(overhead_gb)
    need = t_weights + d_weights + reserve
    if need > usable_gb:
        per = " per GPU" if tensor_parallel > 1 else ""
        tp = _suggest_tp(shapes, weight_dtype, reserve, usable_gb, tensor_parallel)
        raise BudgetError(f"weights need {t_weights + d_weights:.1f} GB{per} (plus {reserve:.1f} GB reserved for "
                          f"activations and overhead), the card gives {usable_gb:.1f} GB at this utilization "
                          f"({spec.memory_gb:g} GB x {gpu_memory_utilization:g}); try tensor_parallel={tp}, "
                          f"a lower dtype or a bigger GPU")
    t_kv, d_kv = (kv_bytes_per_token(s, kv_dtype, tensor_parallel) if s else 0.0 for s in (t_shape, d_shape))
    kv_pool_gb = usable_gb - need
    blocks_per_seq = math.ceil(context_len / block_size)
    kv_tokens = kv_tokens_for_space(shapes, kv_pool_gb * GB, block_size, kv_dtype, tensor_parallel)
    max_seqs = (kv_tokens // block_size) // blocks_per_seq
    if max_seqs < 1:
        raise ContextTooLongError(f"the KV cache gets {kv_pool_gb:.2f} GB = {kv_tokens:,} tokens, less than one "
                                  f"sequence of context_len={context_len:,}; vLLM would refuse to start. Lower "
                                  f"context_len (max_model_len) to at most {kv_tokens:,}, raise "
                                  f"gpu_memory_utilization, use kv_dtype='fp8' or more GPUs", max_context_len=kv_tokens)
    tokens_alone = kv_tokens_for_space(t_shape, (usable_gb - t_weights - reserve_alone) * GB, block_size, kv_dtype,
                                       tensor_parallel)
    return Budget(gpu=spec, gpu_memory_utilization=gpu_memory_utilization, tensor_parallel=tensor_parallel,
                  context_len=context_len, block_size=block_size, kv_dtype=kv_dtype,
                  target=target_name, draft=d_name, usable_gb=usable_gb, target_weights_gb=t_weights,
                  draft_weights_gb=d_weights, overhead_gb=reserve, kv_pool_gb=kv_pool_gb,
                  target_kv_bytes_per_token=t_kv, draft_kv_bytes_per_token=d_kv, kv_tokens=kv_tokens,
                  max_concurrent_seqs=max_seqs, kv_tokens_without_draft=tokens_alone,
                  max_concurrent_seqs_without_draft=(tokens_alone // block_size) // blocks_per_seq)


def max_context_len(target: ModelLike, draft: ModelLike | None = None, **plan_kwargs: Any) -> int:
    """The longest ``max_model_len`` that fits, in whole KV blocks (0: none), with :func:`plan_budget`'s keywords."""
    plan_kwargs.pop("context_len", None)
    try:  # one block of context: the plan's kv_tokens is then the answer
        return plan_budget(target, draft, context_len=int(plan_kwargs.get("block_size", 16)), **plan_kwargs).kv_tokens
    except ContextTooLongError as exc:
        return exc.max_context_len


def talk_setup() -> dict[str, Budget]:
    """The talk's demo as this project reconstructs it: two servers on one Blackwell card. The talk states only
    "about 16 GB" of baseline weights and a "2.5" GB draft; the models (Llama-3.1-8B-Instruct, with
    Llama-3.2-1B-Instruct), the 96 GB RTX PRO 6000 and 0.45 each are inferred from those sizes (notebook 03)."""
    return {setup: plan_budget("meta-llama/Llama-3.1-8B-Instruct", draft, gpu="RTX PRO 6000 Blackwell",
                               gpu_memory_utilization=0.45, context_len=8192)
            for setup, draft in (("baseline", None), ("speculative", "meta-llama/Llama-3.2-1B-Instruct"))}
