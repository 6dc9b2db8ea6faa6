"""What the memory calculator knows, offline: config.json copies (data/models/configs), GPU datasheets
(data/models/gpus.json), dtypes and a decoder's shape. Names match loosely (case and punctuation do not matter).
"""
from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

__all__ = ["DTYPE_BYTES", "UnknownModelError", "UnknownGPUError", "ConfigError", "GPUSpec", "ModelShape",
           "known_models", "load_model_config", "known_gpus", "gpu_spec", "match_gpu", "model_shape"]

#: Bytes per stored value. int4 is half a byte: two weights share one byte.
DTYPE_BYTES: dict[str, float] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
_DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "models"
_CONFIG_DIR = _DATA_DIR / "configs"
# GPU aliases and driver-name patterns, dtype spellings, MLP and q/k-norm families (what each means: its _about).
_TABLES: dict[str, Any] = json.loads((_DATA_DIR / "lookup_tables.json").read_text())
_GPUS: dict[str, dict[str, Any]] = {k: v for k, v in json.loads((_DATA_DIR / "gpus.json").read_text()).items()
                                    if not k.startswith("_")}


class UnknownModelError(ValueError):
    """A model name that is neither in the catalog nor a path to a config.json."""


class UnknownGPUError(ValueError):
    """A GPU name that is not in ``data/models/gpus.json``."""


class ConfigError(ValueError):
    """A config.json that lacks a field the calculator needs, or a model it cannot size (MoE)."""


def _norm_key(name: str) -> str:
    return re.sub(r"[^a-z0-9.]", "", name.lower())


def known_models() -> list[str]:
    """Hub ids of the shipped config.json copies: ``org--name.json`` holds ``org/name``'s (its ``_source``)."""
    return sorted((path.stem.replace("--", "/", 1) for path in _CONFIG_DIR.glob("*.json")), key=str.lower)


def _catalog_index() -> dict[str, Path]:
    """Every spelling of a catalog model: hub id, file key (``org--name``), bare name if unique."""
    index: dict[str, Path] = {}
    bare: dict[str, list[Path]] = {}
    for path in sorted(_CONFIG_DIR.glob("*.json")):
        index[_norm_key(path.stem)] = path
        index[_norm_key(path.stem.replace("--", "/", 1))] = path
        bare.setdefault(_norm_key(path.stem.split("--", 1)[-1]), []).append(path)
    for name, paths in bare.items():
        if len(paths) == 1:
            index.setdefault(name, paths[0])
    return index


def load_model_config(name_or_path: Union[str, Path]) -> dict[str, Any]:
    """A model's config.json as a fresh dict, from a path (file or model directory) or a catalog name."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} has no config.json; is it a saved model directory?")
        path = path / "config.json"
    if path.is_file():
        return json.loads(path.read_text())
    found = _catalog_index().get(_norm_key(str(name_or_path)))
    if found is None:
        raise UnknownModelError(f"unknown model {str(name_or_path)!r}: not a path to a config.json and not in the "
                                f"catalog. Known models: {', '.join(known_models())}. For another model pass its "
                                f"config.json path or its directory (or the config as a dict).")
    return json.loads(found.read_text())


@dataclass(frozen=True)
class GPUSpec:
    """One GPU: memory as the vendor states it (GB = 1e9 bytes) and peak bandwidth, which bounds decoding."""

    name: str
    memory_gb: float
    bandwidth_gb_s: float


def known_gpus() -> list[str]:
    return list(_GPUS)


def gpu_spec(name: Union[str, GPUSpec]) -> GPUSpec:
    """Look a GPU up by name or alias, loosely; a :class:`GPUSpec` (a card not in the table) passes through."""
    if isinstance(name, GPUSpec):
        return name
    key = _norm_key(str(name))
    canonical = {_norm_key(k): k for k in _GPUS}.get(key) or _TABLES["gpu_aliases"].get(key)
    if canonical is None or canonical not in _GPUS:
        raise UnknownGPUError(f"unknown GPU {str(name)!r}. Known GPUs: {', '.join(_GPUS)}. "
                              f"For another card pass GPUSpec(name, memory_gb, bandwidth_gb_s).")
    row = _GPUS[canonical]
    return GPUSpec(name=canonical, memory_gb=float(row["memory_gb"]), bandwidth_gb_s=float(row["bandwidth_gb_s"]))


def match_gpu(detected: str | None) -> GPUSpec | None:
    """The table's entry for a GPU as a driver names it ("NVIDIA H100 80GB HBM3, 81559 MiB"), or None (also for
    cards that share a name but not a datasheet)."""
    if not detected:
        return None
    name = str(detected).split(",")[0]
    with contextlib.suppress(UnknownGPUError):
        return gpu_spec(name)
    key = _norm_key(name).removeprefix("nvidia").removeprefix("geforce")
    for pattern, canonical in _TABLES["detected_gpu_patterns"]:
        if re.search(pattern, key):
            return gpu_spec(canonical) if canonical else None
    return None


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a config.json that decide a decoder's memory (``parameter_count`` computed from them)."""

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
        return self.vocab * self.hidden

    @property
    def lm_head_params(self) -> int:  # zero when tied to the embedding table
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    @property
    def parameter_count(self) -> int:  # embeddings + layers + final norm + untied LM head
        q_out, kv_out = self.heads * self.head_dim, self.kv_heads * self.head_dim
        # A layer: q, k, v, o projections (with the family's biases and q/k norms), the MLP, two norms.
        attention = 2 * self.hidden * q_out + 2 * self.hidden * kv_out
        if self.attention_bias:
            attention += q_out + 2 * kv_out
        if self.o_proj_bias:
            attention += self.hidden
        if self.qk_norm:
            attention += 2 * self.head_dim
        matrices = 3 if self.gated_mlp else 2  # gated (SwiGLU): gate, up and down; otherwise up and down
        mlp = matrices * self.hidden * self.intermediate
        if self.mlp_bias:
            mlp += (matrices - 1) * self.intermediate + self.hidden
        per_layer = attention + mlp + 2 * self.hidden
        return self.embedding_params + self.layers * per_layer + self.hidden + self.lm_head_params


def _first(config: Mapping[str, Any], *keys: str) -> Any:
    return next((config[k] for k in keys if config.get(k) is not None), None)


def model_shape(config: Union[Mapping[str, Any], str, Path, ModelShape]) -> ModelShape:
    """A dense decoder's shape from its config (or what :func:`load_model_config` takes); multimodal configs: their
    ``text_config``. Llama, Qwen, Mistral and SmolLM2 are counted exactly, GPT-2-style families approximately."""
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
        raise ConfigError(f"{name} is a mixture-of-experts model; this calculator sizes dense decoders only")

    fields = {"hidden_size": _first(cfg, "hidden_size", "n_embd", "d_model"),
              "num_hidden_layers": _first(cfg, "num_hidden_layers", "n_layer", "num_layers"),
              "num_attention_heads": _first(cfg, "num_attention_heads", "n_head"),
              "intermediate_size": _first(cfg, "intermediate_size", "ffn_dim", "ffn_hidden_size"),
              "vocab_size": _first(cfg, "vocab_size")}
    # GPT-2 writes n_inner: null to mean 4 x hidden.
    if fields["intermediate_size"] is None and "n_inner" in cfg and fields["hidden_size"]:
        fields["intermediate_size"] = cfg["n_inner"] or 4 * int(fields["hidden_size"])
    missing = [k for k, v in fields.items() if v is None]
    if missing:
        raise ConfigError(f"config for {name} lacks {', '.join(missing)}: the calculator needs them to size "
                          f"the model (is this a decoder-only language model's config.json?)")
    hidden, heads = int(fields["hidden_size"]), int(fields["num_attention_heads"])
    kv_heads = _first(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv")
    if kv_heads is None:
        kv_heads = 1 if cfg.get("multi_query") else heads
    head_dim = _first(cfg, "head_dim")
    if head_dim is None:
        if hidden % heads:
            raise ConfigError(f"config for {name} has no head_dim and hidden_size {hidden} is not a multiple "
                              f"of num_attention_heads {heads}")
        head_dim = hidden // heads
    hidden_act = str(_first(cfg, "hidden_act", "activation_function") or "").lower()
    # Qwen2 always has q/k/v biases and writes no attention_bias field; Llama-style configs that
    # set attention_bias put a bias on o_proj as well.
    attention_bias = bool(cfg.get("attention_bias", model_type == "qwen2"))
    dtype = str(_first(cfg, "torch_dtype", "dtype") or "bfloat16").lower()
    return ModelShape(
        name=name, model_type=model_type, layers=int(fields["num_hidden_layers"]), hidden=hidden,
        intermediate=int(fields["intermediate_size"]), heads=heads, kv_heads=int(kv_heads), head_dim=int(head_dim),
        vocab=int(fields["vocab_size"]), tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        gated_mlp=model_type in _TABLES["gated_mlp_types"] or hidden_act in {"silu", "swish", "swiglu"},
        attention_bias=attention_bias, o_proj_bias=attention_bias and model_type != "qwen2",
        mlp_bias=bool(cfg.get("mlp_bias", False)), torch_dtype=canonical_dtype(dtype),
        qk_norm=model_type in _TABLES["qk_norm_types"] or bool(cfg.get("qk_norm", False)))


def canonical_dtype(dtype: str, shape: ModelShape | None = None) -> str:
    """A dtype's canonical name (a key of DTYPE_BYTES when known); ``"auto"`` is the model's own, as in vLLM."""
    key = str(dtype).lower()
    if key == "auto" and shape is not None:
        key = shape.torch_dtype
    return _TABLES["dtype_aliases"].get(key, key)


def dtype_bytes(dtype: str, shape: ModelShape | None = None) -> float:
    """Bytes per value of a dtype name or alias (``"auto"`` needs the ``shape`` to take it from)."""
    if shape is None and str(dtype).lower() == "auto":
        raise ValueError('dtype "auto" needs a model to take the dtype from')
    key = canonical_dtype(dtype, shape)
    if key not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)} or 'auto'")
    return DTYPE_BYTES[key]
