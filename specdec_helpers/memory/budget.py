"""Memory budget for serving a target model, and optionally a draft model, with vLLM.

Why this module exists
----------------------
Speculative decoding is not free in memory. The draft model's weights and, less obviously,
the draft model's KV cache live on the same GPU as the target's. vLLM (v1) gives every
engine one budget, ``total GPU memory x gpu_memory_utilization``, takes the weights and a
reserve for activations out of it, and turns *all* of the rest into one pool of KV-cache
blocks shared by every layer of both models. So every token a request keeps in the cache
costs ``kv_bytes_per_token(target) + kv_bytes_per_token(draft)``, and the draft shows up
as fewer requests that can run at once. This module computes that arithmetic from the
models' ``config.json`` files, so a notebook can show it as a stacked bar before anyone
starts a server, and can check vLLM's own start-up log ("GPU KV cache size: N tokens")
against it.

Units: ``GB`` means 1e9 bytes throughout, as GPU vendors state memory. vLLM's logs speak
GiB (2**30 bytes); divide bytes by ``GIB`` to compare. Vendors' "80 GB" is for most cards
nearer 80 GiB, so a real card reports a few percent more bytes than ``memory_gb x 1e9``:
the budgets here are slightly conservative.

The talk this series started from, as an example (see :func:`talk_setup`)::

    >>> servers = talk_setup()
    >>> round(servers["baseline"].target_weights_gb, 1)      # Llama-3.1-8B in bf16
    16.1
    >>> round(servers["speculative"].draft_weights_gb, 1)    # Llama-3.2-1B in bf16
    2.5
    >>> servers["speculative"].max_concurrent_seqs < servers["baseline"].max_concurrent_seqs
    True

Only the standard library is used, so the calculator runs anywhere the notebooks do.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterable, Mapping
from typing import Any, Union

__all__ = [
    "DTYPE_BYTES",
    "GB",
    "GIB",
    "DEFAULT_FIXED_OVERHEAD_GB",
    "DEFAULT_PREFILL_CHUNK_TOKENS",
    "DEFAULT_MAX_NUM_SEQS",
    "UnknownModelError",
    "UnknownGPUError",
    "ConfigError",
    "BudgetError",
    "ContextTooLongError",
    "GPUSpec",
    "ModelShape",
    "Budget",
    "known_models",
    "load_model_config",
    "known_gpus",
    "gpu_spec",
    "match_gpu",
    "model_shape",
    "weight_bytes",
    "kv_bytes_per_token",
    "kv_tokens_for_space",
    "estimate_overhead_gb",
    "plan_budget",
    "max_context_len",
    "talk_setup",
]

# --------------------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------------------

#: Bytes per stored value. int4 is half a byte: two weights share one byte.
DTYPE_BYTES: dict[str, float] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int4": 0.5}

#: Spellings people (and config.json's ``torch_dtype``) use for the same dtypes.
_DTYPE_ALIASES: dict[str, str] = {
    "float32": "fp32",
    "float": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "float8_e4m3fn": "fp8",
    "int8": "fp8",  # one byte per weight, same arithmetic
    "awq": "int4",
    "gptq": "int4",
}

GB = 1e9
GIB = 2**30

#: Fixed part of the reserve, per GPU: the CUDA context and other memory torch does not
#: allocate (cuBLAS workspaces, NCCL buffers under tensor parallelism) and the CUDA graphs
#: vLLM captures for decoding. On an H100, vLLM's start-up log for an 8B model typically
#: shows a few hundred MB of non-torch memory and 0.3-1 GiB of CUDA graphs; 1.5 GB covers
#: both with some room.
DEFAULT_FIXED_OVERHEAD_GB = 1.5

#: vLLM profiles one forward pass of ``max_num_batched_tokens`` tokens to find the peak
#: activation memory; 8192 is the chunked-prefill budget vLLM's server uses by default on
#: GPUs, so the activation estimate sizes one prefill chunk of this many tokens.
DEFAULT_PREFILL_CHUNK_TOKENS = 8192

#: vLLM's default ``max_num_seqs``: the sampler holds float32 logits for this many rows.
DEFAULT_MAX_NUM_SEQS = 256

_DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "models"
_CONFIG_DIR = _DATA_DIR / "configs"
_GPU_FILE = _DATA_DIR / "gpus.json"

# Families whose MLP is gated (gate_proj, up_proj, down_proj: three matrices).
_GATED_MLP_TYPES = frozenset(
    {
        "llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3",
        "gemma3_text", "phi3", "olmo", "olmo2", "granite", "cohere", "internlm2",
        "smollm3", "exaone",
    }
)
# Families with an RMSNorm on each head's queries and keys (q_norm, k_norm of head_dim).
_QK_NORM_TYPES = frozenset({"qwen3"})


# --------------------------------------------------------------------------------------
# Errors: each a ValueError, so callers that only know "bad input" still catch them.
# --------------------------------------------------------------------------------------


class UnknownModelError(ValueError):
    """A model name that is neither in the catalog nor a path to a config.json."""


class UnknownGPUError(ValueError):
    """A GPU name that is not in ``data/models/gpus.json``."""


class ConfigError(ValueError):
    """A config.json that lacks a field the calculator needs, or describes a model it
    cannot size (for example a mixture of experts)."""


class BudgetError(ValueError):
    """The requested setup does not fit: vLLM would refuse to start with it."""


class ContextTooLongError(BudgetError):
    """Weights fit, but the KV pool cannot hold one sequence of the requested context.

    ``max_context_len`` is the longest context (``max_model_len``) that would fit, in whole
    KV blocks (0 when not even one block fits), so a caller can lower the setting to it.
    """

    def __init__(self, message: str, max_context_len: int) -> None:
        super().__init__(message)
        self.max_context_len = max_context_len


# --------------------------------------------------------------------------------------
# Model catalog
# --------------------------------------------------------------------------------------


def _norm_key(name: str) -> str:
    """Fold a model or GPU name for matching: case and punctuation do not matter."""
    return re.sub(r"[^a-z0-9.]", "", name.lower())


def known_models() -> list[str]:
    """Hub ids of the models whose config.json ships with the project (offline copies).

    The files are named ``<org>--<name>.json``; the hub id is recovered from the
    ``_source`` field each copy carries, falling back to the file name.
    """
    names = []
    for path in sorted(_CONFIG_DIR.glob("*.json")):
        try:
            source = json.loads(path.read_text()).get("_source")
        except (OSError, json.JSONDecodeError):
            source = None
        names.append(source or path.stem.replace("--", "/", 1))
    return sorted(names, key=str.lower)


def _catalog_index() -> dict[str, Path]:
    """Map every accepted spelling of a catalog model to its file.

    Accepted: the hub id ("Qwen/Qwen3-8B"), the file key ("Qwen--Qwen3-8B") and the bare
    model name ("Qwen3-8B") when no two organisations share it.
    """
    index: dict[str, Path] = {}
    bare: dict[str, list[Path]] = {}
    for path in sorted(_CONFIG_DIR.glob("*.json")):
        key = path.stem
        index[_norm_key(key)] = path
        index[_norm_key(key.replace("--", "/", 1))] = path
        bare.setdefault(_norm_key(key.split("--", 1)[-1]), []).append(path)
    for name, paths in bare.items():
        if len(paths) == 1:
            index.setdefault(name, paths[0])
    return index


def load_model_config(name_or_path: Union[str, Path]) -> dict[str, Any]:
    """Return a model's config.json as a dict (a fresh copy the caller may change).

    ``name_or_path`` may be a catalog key (``"Qwen--Qwen3-8B"``), a hub id
    (``"Qwen/Qwen3-8B"``, matched case-insensitively, no network involved), a bare name
    that is unique in the catalog (``"Qwen3-8B"``), a path to a config.json, or a
    directory holding one (a model saved with ``save_pretrained``). Paths win over names,
    so a local directory called like a hub id is read from disk.

    Raises:
        UnknownModelError: not a path and not in the catalog; the message lists the
            catalog so a typo is easy to spot.
        FileNotFoundError: a directory without a config.json.
    """
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        candidate = path / "config.json"
        if not candidate.is_file():
            raise FileNotFoundError(f"{path} has no config.json; is it a saved model directory?")
        return json.loads(candidate.read_text())
    if path.is_file():
        return json.loads(path.read_text())

    found = _catalog_index().get(_norm_key(str(name_or_path)))
    if found is None:
        known = ", ".join(known_models())
        raise UnknownModelError(
            f"unknown model {str(name_or_path)!r}: not a path to a config.json and not in the "
            f"catalog. Known models: {known}. For another model pass its config.json path "
            f"or its directory (or the config as a dict)."
        )
    return json.loads(found.read_text())


# --------------------------------------------------------------------------------------
# GPUs
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GPUSpec:
    """One GPU: memory as the vendor states it (GB = 1e9 bytes) and peak memory bandwidth.

    Bandwidth is here because decoding is memory-bound: one decode step reads every
    weight once, so ``bandwidth / weight bytes`` bounds tokens per second per sequence.
    """

    name: str
    memory_gb: float
    bandwidth_gb_s: float
    notes: str = ""


def _gpu_table() -> dict[str, dict[str, Any]]:
    table = json.loads(_GPU_FILE.read_text())
    return {k: v for k, v in table.items() if not k.startswith("_")}


# Other names people use for the same cards.
_GPU_ALIASES = {
    "rtxpro6000": "RTX PRO 6000 Blackwell",
    "rtxpro6000blackwellworkstationedition": "RTX PRO 6000 Blackwell",
    "rtxpro6000blackwellserveredition": "RTX PRO 6000 Blackwell",
    "h100sxm": "H100",
    "h100sxm5": "H100",
    "h100sxm80gb": "H100",
    "h10080gb": "H100",
    "h100pcie80gb": "H100 PCIe",
    "a100": "A100 80GB",
    "a100sxm": "A100 80GB",
    "geforcertx5090": "RTX 5090",
    "nvidial4": "L4",
    "nvidiah100": "H100",
    "nvidiah200": "H200",
    "nvidiab200": "B200",
    "nvidial40s": "L40S",
    "nvidiaa10g": "A10G",
}


def known_gpus() -> list[str]:
    """Names of the GPUs in ``data/models/gpus.json``."""
    return list(_gpu_table())


def gpu_spec(name: Union[str, GPUSpec]) -> GPUSpec:
    """Look a GPU up by name; case, spaces and hyphens do not matter ("h100", "H-100").

    A :class:`GPUSpec` passes through unchanged, so callers can describe a card that is
    not in the table: ``GPUSpec("my card", memory_gb=48, bandwidth_gb_s=960)``.

    Raises:
        UnknownGPUError: the message lists the known GPUs.
    """
    if isinstance(name, GPUSpec):
        return name
    table = _gpu_table()
    by_key = {_norm_key(k): k for k in table}
    key = _norm_key(str(name))
    canonical = by_key.get(key) or _GPU_ALIASES.get(key)
    if canonical is None or canonical not in table:
        raise UnknownGPUError(
            f"unknown GPU {str(name)!r}. Known GPUs: {', '.join(table)}. "
            f"For another card pass GPUSpec(name, memory_gb, bandwidth_gb_s)."
        )
    row = table[canonical]
    return GPUSpec(
        name=canonical,
        memory_gb=float(row["memory_gb"]),
        bandwidth_gb_s=float(row["bandwidth_gb_s"]),
        notes=str(row.get("notes", "")),
    )


# How nvidia-smi (and torch.cuda.get_device_name) spell the cards in the table; checked in
# order on the folded name, after "nvidia", "geforce" and the ", 81559 MiB" tail are dropped.
_DETECTED_GPU_PATTERNS: tuple[tuple[str, str | None], ...] = (
    (r"rtxpro6000", "RTX PRO 6000 Blackwell"),
    (r"rtx5090", "RTX 5090"),
    (r"h100.*nvl", None),  # 94 GB, 3.9 TB/s: not in the table
    (r"h100.*pcie", "H100 PCIe"),
    (r"h100", "H100"),
    (r"h200", "H200"),
    (r"gh200", None),
    (r"b200", "B200"),
    (r"a100.*80g", "A100 80GB"),
    (r"l40s", "L40S"),
    (r"^l4$", "L4"),
    (r"a10g", "A10G"),
)


def match_gpu(detected: str | None) -> GPUSpec | None:
    """The catalog entry for a GPU name as a driver reports it, or None when the card is not
    in ``data/models/gpus.json`` (or nothing was detected).

    nvidia-smi says ``"NVIDIA H100 80GB HBM3"``, ``"NVIDIA A100-SXM4-80GB"`` or
    ``"NVIDIA RTX PRO 6000 Blackwell Workstation Edition"``, sometimes followed by the memory
    (``", 81559 MiB"``); the table says ``"H100"``. Cards that share a name but not a bandwidth
    (the 40 GB A100, the H100 NVL) give None rather than a wrong datasheet number.

    >>> match_gpu("NVIDIA H100 80GB HBM3, 81559 MiB").name
    'H100'
    >>> match_gpu("NVIDIA A100-SXM4-40GB") is None
    True
    """
    if not detected:
        return None
    name = str(detected).split(",")[0]
    try:
        return gpu_spec(name)
    except UnknownGPUError:
        pass
    key = _norm_key(name)
    for prefix in ("nvidia", "geforce"):
        key = key.removeprefix(prefix)
    for pattern, canonical in _DETECTED_GPU_PATTERNS:
        if re.search(pattern, key):
            return gpu_spec(canonical) if canonical else None
    return None


# --------------------------------------------------------------------------------------
# Model shape and parameter count
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    """The numbers from a config.json that decide a decoder's memory.

    ``parameter_count`` is computed from these shapes rather than trusted from a model
    card, so a notebook can show where the parameters are (embeddings vs layers) and so
    any config.json, including a learner's own, can be sized.
    """

    name: str
    model_type: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied_embeddings: bool
    gated_mlp: bool
    attention_bias: bool = False
    o_proj_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    torch_dtype: str = "bf16"

    @property
    def embedding_params(self) -> int:
        """Input embedding table: one row of ``hidden`` values per vocabulary entry."""
        return self.vocab * self.hidden

    @property
    def lm_head_params(self) -> int:
        """Output projection; zero when it shares the embedding table (tied)."""
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    @property
    def attention_params_per_layer(self) -> int:
        """q, k, v, o projections, their biases where the family has them, q/k norms."""
        q_out = self.heads * self.head_dim
        kv_out = self.kv_heads * self.head_dim
        n = self.hidden * q_out + 2 * self.hidden * kv_out + q_out * self.hidden
        if self.attention_bias:
            n += q_out + 2 * kv_out
        if self.o_proj_bias:
            n += self.hidden
        if self.qk_norm:
            n += 2 * self.head_dim
        return n

    @property
    def mlp_params_per_layer(self) -> int:
        """Gated MLP (SwiGLU): gate, up and down matrices; otherwise up and down."""
        matrices = 3 if self.gated_mlp else 2
        n = matrices * self.hidden * self.intermediate
        if self.mlp_bias:
            n += (matrices - 1) * self.intermediate + self.hidden
        return n

    @property
    def params_per_layer(self) -> int:
        """One decoder layer, including its two norms (before attention and before MLP)."""
        return self.attention_params_per_layer + self.mlp_params_per_layer + 2 * self.hidden

    @property
    def parameter_count(self) -> int:
        """All parameters: embeddings + layers + final norm + untied LM head."""
        return (
            self.embedding_params
            + self.layers * self.params_per_layer
            + self.hidden  # final norm
            + self.lm_head_params
        )


def _first(config: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if key in config and config[key] is not None:
            return config[key]
    return None


def model_shape(config: Union[Mapping[str, Any], str, Path, "ModelShape"]) -> ModelShape:
    """Read the shape of a dense decoder from its config.json.

    Accepts the config dict (or, for convenience, anything :func:`load_model_config`
    accepts). Multimodal configs that keep the language model under ``text_config`` are
    read from there. Missing ``num_key_value_heads`` means plain multi-head attention
    (as in transformers); missing ``head_dim`` means ``hidden / heads``.

    Llama, Qwen, Mistral and SmolLM2 configs are counted exactly; other families (GPT-2
    style LayerNorms with biases, learned position tables) are approximate.

    Raises:
        ConfigError: names every missing field, or says why the model cannot be sized.
    """
    if isinstance(config, ModelShape):
        return config
    if isinstance(config, (str, Path)):
        config = load_model_config(config)
    cfg: Mapping[str, Any] = config
    if "hidden_size" not in cfg and isinstance(cfg.get("text_config"), Mapping):
        cfg = {**cfg["text_config"], "_source": config.get("_source")}

    name = str(_first(config, "_source", "_name_or_path") or "custom model")
    model_type = str(cfg.get("model_type") or "")

    if _first(cfg, "num_experts", "num_local_experts", "n_routed_experts"):
        raise ConfigError(
            f"{name} is a mixture-of-experts model; this calculator sizes dense decoders only"
        )

    fields = {
        "hidden_size": _first(cfg, "hidden_size", "n_embd", "d_model"),
        "num_hidden_layers": _first(cfg, "num_hidden_layers", "n_layer", "num_layers"),
        "num_attention_heads": _first(cfg, "num_attention_heads", "n_head"),
        "intermediate_size": _first(cfg, "intermediate_size", "ffn_dim", "ffn_hidden_size"),
        "vocab_size": _first(cfg, "vocab_size"),
    }
    # GPT-2 writes n_inner: null to mean 4 x hidden.
    if fields["intermediate_size"] is None and "n_inner" in cfg and fields["hidden_size"]:
        fields["intermediate_size"] = cfg["n_inner"] or 4 * int(fields["hidden_size"])
    missing = [k for k, v in fields.items() if v is None]
    if missing:
        raise ConfigError(
            f"config for {name} lacks {', '.join(missing)}: the calculator needs them to size "
            f"the model (is this a decoder-only language model's config.json?)"
        )

    hidden = int(fields["hidden_size"])
    heads = int(fields["num_attention_heads"])
    kv_heads = _first(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv")
    if kv_heads is None:
        kv_heads = 1 if cfg.get("multi_query") else heads
    head_dim = _first(cfg, "head_dim")
    if head_dim is None:
        if hidden % heads:
            raise ConfigError(
                f"config for {name} has no head_dim and hidden_size {hidden} is not a multiple "
                f"of num_attention_heads {heads}"
            )
        head_dim = hidden // heads

    hidden_act = str(_first(cfg, "hidden_act", "activation_function") or "").lower()
    gated = model_type in _GATED_MLP_TYPES or hidden_act in {"silu", "swish", "swiglu"}
    # Qwen2 always has q/k/v biases and writes no attention_bias field; Llama-style
    # configs that set attention_bias put a bias on o_proj as well.
    attention_bias = bool(cfg.get("attention_bias", model_type == "qwen2"))
    o_proj_bias = attention_bias and model_type != "qwen2"

    dtype = str(_first(cfg, "torch_dtype", "dtype") or "bfloat16")
    return ModelShape(
        name=name,
        model_type=model_type,
        layers=int(fields["num_hidden_layers"]),
        hidden=hidden,
        intermediate=int(fields["intermediate_size"]),
        heads=heads,
        kv_heads=int(kv_heads),
        head_dim=int(head_dim),
        vocab=int(fields["vocab_size"]),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        gated_mlp=gated,
        attention_bias=attention_bias,
        o_proj_bias=o_proj_bias,
        mlp_bias=bool(cfg.get("mlp_bias", False)),
        qk_norm=model_type in _QK_NORM_TYPES or bool(cfg.get("qk_norm", False)),
        torch_dtype=_DTYPE_ALIASES.get(dtype.lower(), dtype.lower()),
    )


# --------------------------------------------------------------------------------------
# Bytes
# --------------------------------------------------------------------------------------


def _dtype_bytes(dtype: str, shape: ModelShape | None = None) -> float:
    """Bytes per value for a dtype name; ``"auto"`` means the model's own torch_dtype
    (what vLLM's ``dtype="auto"`` and ``kv_cache_dtype="auto"`` do)."""
    key = str(dtype).lower()
    if key == "auto":
        if shape is None:
            raise ValueError('dtype "auto" needs a model to take the dtype from')
        key = shape.torch_dtype
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)} or 'auto'")
    return DTYPE_BYTES[key]


def _canonical_dtype(dtype: str, shape: ModelShape | None = None) -> str:
    key = str(dtype).lower()
    if key == "auto" and shape is not None:
        key = shape.torch_dtype
    return _DTYPE_ALIASES.get(key, key)


def weight_bytes(shape: ModelShape, dtype: str = "bf16") -> float:
    """Bytes of weights for one full copy of the model.

    For 16- and 32-bit dtypes this is simply ``parameter_count x bytes``. For fp8 and
    int4, only the layers' linear weights are stored narrow: vLLM's fp8 and the usual
    AWQ/GPTQ checkpoints keep the embedding table, the LM head and the norms in 16 bits,
    because quantizing them costs accuracy and saves little. (Quantization scales add
    another ~1-3% that is not counted.) Without this, a small model's int4 size would be
    badly understated: Llama-3.2-1B's embeddings are a fifth of its parameters.
    """
    per_value = _dtype_bytes(dtype, shape)
    if per_value >= 2:
        return float(shape.parameter_count) * per_value
    sixteen_bit = shape.embedding_params + shape.lm_head_params + (2 * shape.layers + 1) * shape.hidden
    narrow = shape.parameter_count - sixteen_bit
    return float(sixteen_bit) * 2 + float(narrow) * per_value


def _kv_heads_per_gpu(shape: ModelShape, tensor_parallel: int) -> int:
    # vLLM splits KV heads across tensor-parallel ranks and replicates them when there are
    # fewer heads than ranks (each rank keeps at least one).
    return max(1, shape.kv_heads // tensor_parallel)


def kv_bytes_per_token(
    shape: ModelShape, kv_dtype: str = "bf16", tensor_parallel: int = 1
) -> float:
    """KV-cache bytes one token costs, per GPU: ``2 (K and V) x layers x kv_heads x
    head_dim x bytes``.

    With tensor parallelism each GPU holds only its share of the KV heads, which is why
    a second GPU buys context as well as room for weights.
    """
    return (
        2.0
        * shape.layers
        * _kv_heads_per_gpu(shape, tensor_parallel)
        * shape.head_dim
        * _dtype_bytes(kv_dtype, shape)
    )


ModelLike = Union[str, Path, Mapping[str, Any], ModelShape]


def _as_shapes(shape_or_shapes: Union[ModelLike, Iterable[ModelLike]]) -> list[ModelShape]:
    if isinstance(shape_or_shapes, (str, Path, Mapping, ModelShape)):
        return [model_shape(shape_or_shapes)]
    return [model_shape(s) for s in shape_or_shapes]


def kv_tokens_for_space(
    shape_or_shapes: Union[ModelLike, Iterable[ModelLike]],
    kv_space_bytes: float,
    block_size: int = 16,
    kv_dtype: str = "auto",
    tensor_parallel: int = 1,
) -> int:
    """How many tokens a KV space holds, in whole blocks, for one model or several
    sharing one pool (target + draft).

    vLLM v1 cuts the space into blocks of ``block_size`` tokens; a block of the shared
    pool holds those tokens for every layer of every model, so the pool holds
    ``floor(space / (block_size x sum of bytes per token)) x block_size`` tokens. Compare
    with vLLM's log line "GPU KV cache size: N tokens" (the CPU build prints the same).

    On a CPU, vLLM takes the space from ``VLLM_CPU_KVCACHE_SPACE`` in GiB::

        kv_tokens_for_space("HuggingFaceTB/SmolLM2-135M-Instruct", 1 * GIB, kv_dtype="fp32")

    ``kv_dtype="auto"`` uses each model's own dtype, as vLLM's default does.
    """
    shapes = _as_shapes(shape_or_shapes)
    if block_size < 1:
        raise ValueError("block_size must be a positive number of tokens")
    per_token = sum(kv_bytes_per_token(s, kv_dtype, tensor_parallel) for s in shapes)
    if kv_space_bytes <= 0:
        return 0
    blocks = math.floor(kv_space_bytes / (block_size * per_token))
    return blocks * block_size


def estimate_overhead_gb(
    shapes: Union[ModelLike, Iterable[ModelLike]],
    tensor_parallel: int = 1,
    activation_dtype: str = "bf16",
    prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
) -> float:
    """The reserve vLLM keeps out of the KV pool, per GPU, in GB (an estimate).

    ``DEFAULT_FIXED_OVERHEAD_GB`` (1.5 GB: CUDA context, non-torch buffers, CUDA graphs)
    plus the activation peak vLLM measures when it profiles one prefill chunk:

    * the widest live tensors sit in the MLP: gate and up outputs and the activated
      product, ``3 x intermediate / tensor_parallel`` values per token, plus about four
      ``hidden``-wide tensors (input, residual, attention output, norm);
    * the sampler's float32 logits, ``max_num_seqs x vocab x 4`` bytes.

    Target and draft run one after the other, so the peak is the larger model's, not the
    sum. For Llama-3.1-8B this gives about 2.6 GB; vLLM's log reports the measured value
    ("Available KV cache memory"), and ``plan_budget(overhead_gb=...)`` takes a number
    directly when you have one.
    """
    act = _dtype_bytes(activation_dtype)
    peak = 0.0
    for s in _as_shapes(shapes):
        per_token = 3 * s.intermediate / tensor_parallel + 4 * s.hidden
        activations = prefill_chunk_tokens * per_token * act
        logits = max_num_seqs * s.vocab * 4
        peak = max(peak, activations + logits)
    return DEFAULT_FIXED_OVERHEAD_GB + peak / GB


# --------------------------------------------------------------------------------------
# The budget
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """Where one vLLM engine's memory goes, per GPU, in GB (1e9 bytes).

    ``*_without_draft`` fields answer "what would the same engine hold with no draft?":
    the draft's weights go back to the KV pool and each token costs only the target's KV
    bytes. The difference in ``max_concurrent_seqs`` is what the draft costs in requests
    that can run at once.
    """

    gpu: GPUSpec
    gpu_memory_utilization: float
    tensor_parallel: int
    context_len: int
    block_size: int
    weight_dtype: str
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
    kv_pool_gb_without_draft: float
    kv_tokens_without_draft: int
    max_concurrent_seqs_without_draft: int

    @property
    def kv_bytes_per_token(self) -> float:
        """What one cached token costs in the shared pool: target plus draft."""
        return self.target_kv_bytes_per_token + self.draft_kv_bytes_per_token

    @property
    def weights_gb(self) -> float:
        return self.target_weights_gb + self.draft_weights_gb

    @property
    def not_given_gb(self) -> float:
        """Card memory outside this engine's budget (left for other processes)."""
        return self.gpu.memory_gb - self.usable_gb

    @property
    def draft_concurrency_cost(self) -> int:
        """Sequences of ``context_len`` tokens the draft takes away."""
        return self.max_concurrent_seqs_without_draft - self.max_concurrent_seqs

    def as_rows(self) -> list[dict[str, Any]]:
        """Rows ``{"component", "gb"}`` for a stacked bar of one GPU; they add up to the
        card's memory. The KV pool is split into the target's and the draft's shares in
        proportion to their bytes per token, so the draft's hidden cost is visible."""
        per_token = self.kv_bytes_per_token
        draft_share = self.draft_kv_bytes_per_token / per_token if per_token else 0.0
        rows = [
            ("target weights", self.target_weights_gb),
            ("draft weights", self.draft_weights_gb),
            ("activations & overhead", self.overhead_gb),
            ("KV cache (target)", self.kv_pool_gb * (1 - draft_share)),
            ("KV cache (draft)", self.kv_pool_gb * draft_share),
            ("not given to vLLM", self.not_given_gb),
        ]
        if self.draft is None:
            rows = [r for r in rows if not r[0].startswith("draft") and r[0] != "KV cache (draft)"]
        return [{"component": c, "gb": round(gb, 3)} for c, gb in rows]

    def summary(self) -> str:
        """A few plain sentences for a notebook cell or a log."""
        gpus = f"{self.tensor_parallel} x {self.gpu.name}" if self.tensor_parallel > 1 else self.gpu.name
        per = " per GPU" if self.tensor_parallel > 1 else ""
        head = (
            f"On {gpus} ({self.gpu.memory_gb:g} GB x {self.gpu_memory_utilization:g} = "
            f"{self.usable_gb:.1f} GB usable{per}): "
        )
        if self.draft is None:
            weights = f"{self.target} weights take {self.target_weights_gb:.1f} GB"
        else:
            weights = (
                f"{self.target} weights take {self.target_weights_gb:.1f} GB and the draft "
                f"{self.draft} {self.draft_weights_gb:.1f} GB"
            )
        body = (
            f"{weights}; {self.overhead_gb:.1f} GB is reserved for activations and overhead; "
            f"the KV cache gets {self.kv_pool_gb:.1f} GB = {self.kv_tokens:,} tokens, "
            f"{self.max_concurrent_seqs} sequences of {self.context_len:,} tokens at once."
        )
        if self.draft is not None:
            body += (
                f" Without the draft: {self.kv_tokens_without_draft:,} tokens, "
                f"{self.max_concurrent_seqs_without_draft} sequences; the draft costs "
                f"{self.draft_concurrency_cost} concurrent sequences."
            )
        return head + body


def _resolve(model: ModelLike) -> tuple[str, ModelShape]:
    shape = model_shape(model)
    if isinstance(model, (str, Path)) and shape.name == "custom model":
        return str(model), shape
    return shape.name, shape


def _check_split(shape: ModelShape, tensor_parallel: int) -> None:
    # vLLM refuses tensor-parallel sizes that do not divide the attention heads.
    if shape.heads % tensor_parallel:
        raise BudgetError(
            f"{shape.name} has {shape.heads} attention heads, which do not split over "
            f"tensor_parallel={tensor_parallel} GPUs; vLLM needs the head count to be a "
            f"multiple of tensor_parallel"
        )
    if shape.kv_heads % tensor_parallel and tensor_parallel % shape.kv_heads:
        raise BudgetError(
            f"{shape.name} has {shape.kv_heads} KV heads; tensor_parallel={tensor_parallel} "
            f"must divide them or be a multiple of them"
        )


def _suggest_tp(
    shapes: list[ModelShape], weight_dtype: str, reserve_gb: float, usable_gb: float, current: int
) -> int:
    """The smallest power-of-two tensor-parallel size above ``current`` whose weight
    share fits next to the reserve and whose split vLLM accepts; ``current * 2`` when
    even 64 GPUs would not do, so the message always names a next step."""
    total = sum(weight_bytes(s, weight_dtype) for s in shapes) / GB
    tp = current * 2
    while tp <= 64:
        splits = all(s.heads % tp == 0 for s in shapes)
        if splits and total / tp + reserve_gb <= usable_gb:
            return tp
        tp *= 2
    return current * 2


def plan_budget(
    target: ModelLike,
    draft: ModelLike | None = None,
    gpu: Union[str, GPUSpec] = "H100",
    gpu_memory_utilization: float = 0.9,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
    context_len: int = 8192,
    tensor_parallel: int = 1,
    overhead_gb: float | None = None,
    block_size: int = 16,
) -> Budget:
    """Plan one vLLM engine's memory, per GPU, the way vLLM v1 does it.

    1. The engine may use ``memory x gpu_memory_utilization`` of each GPU. (Two servers on
       one card, as in the talk, each get their own fraction; the fractions must add up
       to at most 1.)
    2. Weights of target and draft, split over ``tensor_parallel`` GPUs, come off first.
    3. Then the reserve for activations and overhead. ``overhead_gb=None`` uses
       :func:`estimate_overhead_gb`: 1.5 GB fixed (CUDA context, non-torch buffers, CUDA
       graphs) plus the activation peak of one 8192-token prefill chunk and the sampler's
       logits, about 2.6 GB for an 8B model. It is an estimate; pass the number from
       vLLM's log to reproduce a real server.
    4. Everything left is one KV pool shared by all layers of both models, so a token
       costs ``kv_bytes_per_token(target) + kv_bytes_per_token(draft)``.

    ``target`` and ``draft`` take a catalog name, a hub id, a path, a config dict or a
    :class:`ModelShape`. ``weight_dtype`` applies to both models (see
    :func:`weight_bytes` for fp8/int4); ``kv_dtype`` is vLLM's ``kv_cache_dtype``.

    Not counted: the few extra slots per sequence that speculation needs for proposed
    tokens, and prefix-cache sharing, which lets many requests share one prompt's blocks.

    Raises:
        BudgetError: weights plus reserve exceed the usable memory; the KV pool cannot
            hold one sequence of ``context_len`` tokens (vLLM refuses to start then too);
            or the heads do not split over ``tensor_parallel`` GPUs.
        UnknownGPUError, UnknownModelError, ConfigError: bad names or configs.
    """
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError("gpu_memory_utilization is a fraction of the card: 0 < u <= 1")
    if tensor_parallel < 1 or int(tensor_parallel) != tensor_parallel:
        raise ValueError("tensor_parallel must be a whole number of GPUs, at least 1")
    if context_len < 1:
        raise ValueError("context_len must be at least one token")
    tensor_parallel = int(tensor_parallel)

    spec = gpu_spec(gpu)
    target_name, t_shape = _resolve(target)
    d_name, d_shape = _resolve(draft) if draft is not None else (None, None)
    shapes = [t_shape] + ([d_shape] if d_shape is not None else [])
    for s in shapes:
        _check_split(s, tensor_parallel)

    act_dtype = "fp32" if _canonical_dtype(weight_dtype, t_shape) == "fp32" else "bf16"
    usable_gb = spec.memory_gb * gpu_memory_utilization
    t_weights = weight_bytes(t_shape, weight_dtype) / tensor_parallel / GB
    d_weights = weight_bytes(d_shape, weight_dtype) / tensor_parallel / GB if d_shape else 0.0
    if overhead_gb is None:
        reserve = estimate_overhead_gb(shapes, tensor_parallel, act_dtype)
        reserve_alone = estimate_overhead_gb([t_shape], tensor_parallel, act_dtype)
    else:
        reserve = reserve_alone = float(overhead_gb)

    need = t_weights + d_weights + reserve
    if need > usable_gb:
        per = " per GPU" if tensor_parallel > 1 else ""
        raise BudgetError(
            f"weights need {t_weights + d_weights:.1f} GB{per} (plus {reserve:.1f} GB reserved "
            f"for activations and overhead), the card gives {usable_gb:.1f} GB at this "
            f"utilization ({spec.memory_gb:g} GB x {gpu_memory_utilization:g}); try "
            f"tensor_parallel={_suggest_tp(shapes, weight_dtype, reserve, usable_gb, tensor_parallel)}, "
            f"a lower dtype or a bigger GPU"
        )

    t_kv = kv_bytes_per_token(t_shape, kv_dtype, tensor_parallel)
    d_kv = kv_bytes_per_token(d_shape, kv_dtype, tensor_parallel) if d_shape else 0.0
    kv_pool_gb = usable_gb - need
    blocks_per_seq = math.ceil(context_len / block_size)

    kv_tokens = math.floor(kv_pool_gb * GB / (block_size * (t_kv + d_kv))) * block_size
    max_seqs = (kv_tokens // block_size) // blocks_per_seq
    if max_seqs < 1:
        raise ContextTooLongError(
            f"the KV cache gets {kv_pool_gb:.2f} GB = {kv_tokens:,} tokens, less than one "
            f"sequence of context_len={context_len:,}; vLLM would refuse to start. Lower "
            f"context_len (max_model_len) to at most {max(kv_tokens, 0):,}, raise "
            f"gpu_memory_utilization, use kv_dtype='fp8' or more GPUs",
            max_context_len=max(kv_tokens, 0),
        )

    pool_alone_gb = usable_gb - t_weights - reserve_alone
    tokens_alone = math.floor(pool_alone_gb * GB / (block_size * t_kv)) * block_size
    seqs_alone = (tokens_alone // block_size) // blocks_per_seq

    return Budget(
        gpu=spec,
        gpu_memory_utilization=gpu_memory_utilization,
        tensor_parallel=tensor_parallel,
        context_len=context_len,
        block_size=block_size,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        target=target_name,
        draft=d_name,
        usable_gb=usable_gb,
        target_weights_gb=t_weights,
        draft_weights_gb=d_weights,
        overhead_gb=reserve,
        kv_pool_gb=kv_pool_gb,
        target_kv_bytes_per_token=t_kv,
        draft_kv_bytes_per_token=d_kv,
        kv_tokens=kv_tokens,
        max_concurrent_seqs=max_seqs,
        kv_pool_gb_without_draft=pool_alone_gb,
        kv_tokens_without_draft=tokens_alone,
        max_concurrent_seqs_without_draft=seqs_alone,
    )


def max_context_len(
    target: ModelLike,
    draft: ModelLike | None = None,
    **plan_kwargs: Any,
) -> int:
    """The longest ``max_model_len`` one sequence can have on this budget, in whole KV blocks.

    vLLM refuses to start when its KV pool cannot hold one full sequence of ``max_model_len``
    tokens, so a server that only needs short requests (a setup check, a smoke run) should ask
    for no more context than this. Takes the same keywords as :func:`plan_budget` (``gpu``,
    ``gpu_memory_utilization``, ``kv_dtype``, ``tensor_parallel``, ``overhead_gb``, ...);
    ``context_len`` is ignored.

    Returns 0 when the weights fit but not even one KV block does. Raises :class:`BudgetError`
    when the weights themselves do not fit (the message says what to change).
    """
    plan_kwargs.pop("context_len", None)
    block = int(plan_kwargs.get("block_size", 16))
    try:
        return plan_budget(target, draft, context_len=block, **plan_kwargs).kv_tokens
    except ContextTooLongError as exc:
        return exc.max_context_len


def talk_setup(
    gpu: Union[str, GPUSpec] = "RTX PRO 6000 Blackwell",
    gpu_memory_utilization: float = 0.45,
    context_len: int = 8192,
    overhead_gb: float | None = None,
) -> dict[str, Budget]:
    """The talk's demo: two vLLM servers side by side on one 96 GB RTX PRO 6000 Blackwell,
    each at ``gpu_memory_utilization=0.45``.

    * ``"baseline"``: Llama-3.1-8B-Instruct alone (16 GB of bf16 weights);
    * ``"speculative"``: the same target with Llama-3.2-1B-Instruct as draft (2.5 GB).

    Two servers are needed because vLLM cannot switch speculation per request. Each
    server sees only its 43.2 GB, so the speculative one pays for the draft's weights and
    KV cache out of the same share: compare ``max_concurrent_seqs`` of the two.
    """
    common = dict(
        gpu=gpu,
        gpu_memory_utilization=gpu_memory_utilization,
        context_len=context_len,
        overhead_gb=overhead_gb,
    )
    return {
        "baseline": plan_budget("meta-llama/Llama-3.1-8B-Instruct", **common),
        "speculative": plan_budget(
            "meta-llama/Llama-3.1-8B-Instruct", draft="meta-llama/Llama-3.2-1B-Instruct", **common
        ),
    }
