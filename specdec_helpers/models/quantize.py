"""INT8 copies (W8A8) of the served models, for CPUs that multiply int8 natively: decoding is memory-bound, and
int8 weights are half of bf16's bytes. No calibration: the decoder layers' Linears get per-channel symmetric int8
weights, activations are quantized per token at run time; compressed-tensors writes the checkpoint vLLM reads.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from importlib import metadata
from pathlib import Path
from unittest import mock

from specdec_helpers.models.model_cache import MANIFEST_NAME, build_once, models_dir, read_json, sha256_of

#: part of the cache key: bump it when the scheme below changes, and every copy is rebuilt
SCHEME = "w8a8-int8-channel-token-dynamic-v1"
INT8_SUFFIX = "-w8a8"


def source_id(model_dir: Path) -> str:
    """What identifies the source model: its provisioning manifest, else its config and weight files' sizes."""
    manifest = model_dir / MANIFEST_NAME
    if manifest.is_file():
        text = manifest.read_text()
    else:
        files = sorted((f.name, f.stat().st_size) for f in model_dir.glob("*.safetensors"))
        text = (model_dir / "config.json").read_text() + json.dumps(files)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def is_int8_checkpoint(model_dir: Path) -> bool:
    """True for a folder this module wrote (or any compressed-tensors int8 checkpoint)."""
    return read_json(Path(model_dir) / "config.json").get("quantization_config", {}).get("format") == "int-quantized"


def quantize_int8(source: Path, out: Path) -> None:
    """Write the W8A8 copy of ``source`` into ``out`` (weights' scales from their own per-channel range)."""
    import torch
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (
        QuantizationArgs,
        QuantizationConfig,
        QuantizationScheme,
        apply_quantization_config,
    )
    from compressed_tensors.quantization.utils import calculate_qparams
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a one-time build: its per-tensor bars would fill the notebook
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.bfloat16)
    scheme = QuantizationScheme(
        targets=["Linear"], weights=QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="channel"),
        input_activations=QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="token", dynamic=True))
    apply_quantization_config(model, QuantizationConfig(config_groups={"group_0": scheme}, ignore=["lm_head"]))
    with torch.no_grad():  # static weights: their scales are their own min/max, no data needed
        for module in model.modules():
            args = getattr(getattr(module, "quantization_scheme", None), "weights", None)
            if args is not None:
                weight = module.weight
                scale, zero_point = calculate_qparams(weight.amin(dim=1, keepdim=True),
                                                      weight.amax(dim=1, keepdim=True), args)
                module.weight_scale.data.copy_(scale)
                module.weight_zero_point.data.copy_(zero_point)
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format="int-quantized")
    with mock.patch.dict(os.environ, TQDM_DISABLE="1"):  # tqdm reads it when a bar is made: no bars from inside
        compressor.compress_model(model)
        model.save_pretrained(out)
    compressor.update_config(str(out))
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    for extra in ("chat_template.jinja", "generation_config.json"):  # what save_pretrained may not rewrite
        if (source / extra).is_file() and not (out / extra).is_file():
            shutil.copy2(source / extra, out / extra)


def int8_path(model_dir: str | Path) -> Path:
    """Where the W8A8 copy of ``model_dir`` lives (or ``model_dir`` itself, already int8); nothing is built."""
    source = Path(model_dir).expanduser().resolve()
    return source if is_int8_checkpoint(source) else models_dir() / f"{source.name}{INT8_SUFFIX}"


def int8_checkpoint(model_dir: str | Path) -> Path:
    """The W8A8 copy of ``model_dir`` in the model cache, built once (about 30 s for the 1.5B on 2 cores)."""
    source, final = Path(model_dir).expanduser().resolve(), int8_path(model_dir)
    if final == source:  # already int8
        return source
    wanted = source_id(source)

    def is_current(folder: Path) -> bool:
        manifest = read_json(folder / MANIFEST_NAME)
        return manifest.get("source_id") == wanted and manifest.get("scheme") == SCHEME

    def build(tmp: Path) -> None:
        quantize_int8(source, tmp)
        manifest = {"key": final.name, "source": str(source), "source_id": wanted, "scheme": SCHEME,
                    "library": f"compressed-tensors {metadata.version('compressed-tensors')}",
                    "sha256": {f.name: sha256_of(f) for f in sorted(tmp.glob("*.safetensors"))}}
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2))

    return build_once(final, is_current, build)
