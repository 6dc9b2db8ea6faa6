"""Tests for specdec_helpers.memory: every expected number is worked out by hand in a
comment next to it, from the published config.json values in data/models/configs."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from specdec_helpers import memory as m
from specdec_helpers.memory import (
    GB,
    GIB,
    BudgetError,
    ConfigError,
    GPUSpec,
    UnknownGPUError,
    UnknownModelError,
)

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA_1B = "meta-llama/Llama-3.2-1B-Instruct"
LLAMA_70B = "meta-llama/Llama-3.3-70B-Instruct"
SMOL_135M = "HuggingFaceTB/SmolLM2-135M-Instruct"

CONFIG_DIR = Path(m.__file__).resolve().parents[2] / "data" / "models" / "configs"

# A card with round numbers so budgets can be checked by hand.
TEST_GPU = GPUSpec("test card", memory_gb=40, bandwidth_gb_s=1000)


# ---------------------------------------------------------------- catalog and configs


def test_catalog_lists_every_shipped_config():
    expected = {
        LLAMA_8B, LLAMA_1B, LLAMA_70B,
        "Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-8B", "Qwen/Qwen3-14B",
        "Qwen/Qwen3-32B",
        SMOL_135M, "HuggingFaceTB/SmolLM2-360M-Instruct", "HuggingFaceTB/SmolLM2-1.7B-Instruct",
        "Qwen/Qwen2.5-Coder-1.5B-Instruct", "Qwen/Qwen2.5-Coder-0.5B-Instruct",
    }
    assert expected <= set(m.known_models())


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_each_config_copy_names_its_source_and_parses(path):
    cfg = json.loads(path.read_text())
    # File key = hub id with "/" replaced by "--".
    assert cfg["_source"].replace("/", "--") == path.stem
    shape = m.model_shape(cfg)
    assert shape.layers > 0 and shape.kv_heads <= shape.heads


@pytest.mark.parametrize(
    "name", [LLAMA_8B, "meta-llama--Llama-3.1-8B-Instruct", "META-LLAMA/llama-3.1-8b-instruct",
             "Llama-3.1-8B-Instruct"]
)
def test_load_model_config_accepts_hub_id_key_and_bare_name(name):
    cfg = m.load_model_config(name)
    assert cfg["hidden_size"] == 4096 and cfg["num_key_value_heads"] == 8


def test_load_model_config_reads_a_file_and_a_directory(tmp_path):
    cfg = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 100, "model_type": "llama"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert m.load_model_config(tmp_path) == cfg
    assert m.load_model_config(tmp_path / "config.json") == cfg
    assert m.load_model_config(str(tmp_path)) == cfg


def test_load_model_config_directory_without_config(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        m.load_model_config(tmp_path)


def test_load_model_config_returns_a_fresh_copy():
    cfg = m.load_model_config("Qwen/Qwen3-8B")
    cfg["hidden_size"] = 1
    assert m.load_model_config("Qwen/Qwen3-8B")["hidden_size"] == 4096


def test_unknown_model_lists_known_ones():
    with pytest.raises(UnknownModelError) as err:
        m.load_model_config("acme/NoSuchModel-7B")
    msg = str(err.value)
    assert "acme/NoSuchModel-7B" in msg
    assert "Qwen/Qwen3-8B" in msg and LLAMA_8B in msg
    assert isinstance(err.value, ValueError)


# ---------------------------------------------------------------- GPUs


def test_gpu_lookup_is_case_insensitive():
    assert m.gpu_spec("h100").name == "H100"
    spec = m.gpu_spec("rtx pro 6000 blackwell")
    assert (spec.name, spec.memory_gb, spec.bandwidth_gb_s) == ("RTX PRO 6000 Blackwell", 96, 1792)
    pcie = m.gpu_spec("H100 pcie")
    assert (pcie.memory_gb, pcie.bandwidth_gb_s) == (80, 2000)
    assert m.gpu_spec(TEST_GPU) is TEST_GPU


def test_gpu_table_has_the_promised_cards():
    names = set(m.known_gpus())
    assert {"RTX PRO 6000 Blackwell", "B200", "H100", "H200", "L40S", "L4", "A10G",
            "RTX 5090"} <= names
    for name in names:
        spec = m.gpu_spec(name)
        assert spec.memory_gb > 0 and spec.bandwidth_gb_s > 0


def test_unknown_gpu_lists_known_ones():
    with pytest.raises(UnknownGPUError) as err:
        m.gpu_spec("Voodoo2")
    msg = str(err.value)
    assert "Voodoo2" in msg and "H100" in msg and "L4" in msg and "RTX PRO 6000 Blackwell" in msg
    assert isinstance(err.value, ValueError)


# ---------------------------------------------------------------- shapes and parameters


def test_llama_8b_shape_and_parameter_count():
    s = m.model_shape(m.load_model_config(LLAMA_8B))
    # No head_dim in the config: 4096 / 32 heads = 128.
    assert (s.layers, s.hidden, s.heads, s.kv_heads, s.head_dim) == (32, 4096, 32, 8, 128)
    assert s.gated_mlp and not s.tied_embeddings
    # embeddings 128256 x 4096 = 525,336,576 (twice: untied LM head)
    # per layer: q 4096x4096 = 16,777,216; k, v 4096x1024 = 4,194,304 each; o 16,777,216
    #            MLP 3 x 4096 x 14336 = 176,160,768; two norms 8,192 -> 218,112,000
    # 32 layers = 6,979,584,000; final norm 4,096
    # total 1,050,673,152 + 6,979,584,000 + 4,096 = 8,030,261,248 (about 8.03e9)
    assert s.parameter_count == 8_030_261_248


def test_llama_1b_tied_embeddings_counted_once():
    s = m.model_shape(LLAMA_1B)
    assert s.tied_embeddings and s.head_dim == 64
    # embeddings 128256 x 2048 = 262,668,288 (tied: no separate LM head)
    # per layer: q, o 2048x2048 = 4,194,304 each; k, v 2048x512 = 1,048,576 each
    #            MLP 3 x 2048 x 8192 = 50,331,648; norms 4,096 -> 60,821,504; x16 = 973,144,064
    # total 262,668,288 + 973,144,064 + 2,048 = 1,235,814,400 (about 1.24e9)
    assert s.parameter_count == 1_235_814_400
    assert s.lm_head_params == 0


def test_qwen3_small_counts_qk_norm_and_ties():
    s = m.model_shape("Qwen/Qwen3-0.6B")
    assert s.qk_norm and s.tied_embeddings and s.head_dim == 128
    # embeddings 151936 x 1024 = 155,582,464
    # per layer: q 1024x2048 = 2,097,152; k, v 1024x1024 = 1,048,576 each; o 2048x1024 = 2,097,152
    #            q_norm + k_norm 2 x 128 = 256; MLP 3 x 1024 x 3072 = 9,437,184; norms 2,048
    #            -> 15,730,944; x28 = 440,466,432
    # total 155,582,464 + 440,466,432 + 1,024 = 596,049,920 (about 0.6e9)
    assert s.parameter_count == 596_049_920


def test_smollm2_135m_parameter_count():
    # embeddings 49152 x 576 = 28,311,552 (tied)
    # per layer: q, o 576x576 = 331,776 each; k, v 576x192 = 110,592 each -> 884,736
    #            MLP 3 x 576 x 1536 = 2,654,208; norms 1,152 -> 3,540,096; x30 = 106,202,880
    # total 28,311,552 + 106,202,880 + 576 = 134,515,008 (about 134.5e6)
    assert m.model_shape(SMOL_135M).parameter_count == 134_515_008


def test_qwen2_style_qkv_bias_is_counted():
    # Qwen2.5-0.5B's shape; Qwen2 configs have q/k/v biases without saying attention_bias.
    cfg = {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
           "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
           "vocab_size": 151936, "tie_word_embeddings": True, "hidden_act": "silu"}
    s = m.model_shape(cfg)
    assert s.attention_bias and not s.o_proj_bias and s.head_dim == 64
    # embeddings 151936 x 896 = 136,134,656
    # per layer: q, o 896x896 = 802,816 each; k, v 896x128 = 114,688 each; biases 896+128+128
    #            MLP 3 x 896 x 4864 = 13,074,432; norms 1,792 -> 14,912,384; x24 = 357,897,216
    # total 136,134,656 + 357,897,216 + 896 = 494,032,768 (Qwen2.5-0.5B's published count)
    assert s.parameter_count == 494_032_768
    # Without the biases it would be 24 x 1,152 smaller.
    no_bias = m.model_shape({**cfg, "attention_bias": False})
    assert s.parameter_count - no_bias.parameter_count == 24 * 1_152


def test_non_gated_mlp_uses_two_matrices():
    base = {"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
            "intermediate_size": 256, "vocab_size": 10, "tie_word_embeddings": True}
    gated = m.model_shape({**base, "model_type": "llama"})
    plain = m.model_shape({**base, "model_type": "gpt2", "activation_function": "gelu_new"})
    assert gated.gated_mlp and not plain.gated_mlp
    # One 64 x 256 matrix fewer.
    assert gated.parameter_count - plain.parameter_count == 64 * 256


def test_text_config_is_read_from_multimodal_configs():
    inner = m.load_model_config("Qwen/Qwen3-8B")
    wrapped = {"model_type": "some_vl", "_source": "x/vl", "text_config": inner}
    assert m.model_shape(wrapped).parameter_count == m.model_shape(inner).parameter_count


def test_missing_fields_are_named():
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4,
           "intermediate_size": 128}
    with pytest.raises(ConfigError) as err:
        m.model_shape(cfg)
    assert "hidden_size" in str(err.value) and "vocab_size" in str(err.value)
    assert "num_hidden_layers" not in str(err.value)
    assert isinstance(err.value, ValueError)


def test_mixture_of_experts_is_refused():
    cfg = dict(m.load_model_config("Qwen/Qwen3-8B"), num_experts=128)
    with pytest.raises(ConfigError, match="mixture-of-experts"):
        m.model_shape(cfg)


# ---------------------------------------------------------------- bytes


def test_kv_bytes_per_token_llama_8b():
    # 2 (K and V) x 32 layers x 8 KV heads x 128 head_dim x 2 bytes = 131,072
    s = m.model_shape(LLAMA_8B)
    assert m.kv_bytes_per_token(s) == 131_072
    assert m.kv_bytes_per_token(s, "fp8") == 65_536
    assert m.kv_bytes_per_token(s, "fp32") == 262_144


def test_kv_bytes_per_token_small_models():
    # Llama-3.2-1B: 2 x 16 x 8 x 64 x 2 = 32,768
    assert m.kv_bytes_per_token(m.model_shape(LLAMA_1B)) == 32_768
    # Qwen3-0.6B: 2 x 28 x 8 x 128 x 2 = 114,688 -- almost as much as Qwen3-8B's
    # 2 x 36 x 8 x 128 x 2 = 147,456: a small draft is not small in KV cache.
    assert m.kv_bytes_per_token(m.model_shape("Qwen/Qwen3-0.6B")) == 114_688
    assert m.kv_bytes_per_token(m.model_shape("Qwen/Qwen3-8B")) == 147_456


def test_weight_bytes_bf16_matches_the_talk():
    # 8,030,261,248 x 2 = 16.06 GB ("16 GB" in the talk); 1,235,814,400 x 2 = 2.47 GB ("2.5 GB")
    assert m.weight_bytes(m.model_shape(LLAMA_8B), "bf16") == 16_060_522_496
    assert m.weight_bytes(m.model_shape(LLAMA_1B), "bf16") == pytest.approx(2.4716e9, rel=1e-4)


def test_weight_bytes_quantized_keeps_embeddings_in_16_bit():
    s = m.model_shape(LLAMA_1B)
    # 16-bit part: embeddings 262,668,288 + norms (2 x 16 + 1) x 2048 = 67,584 -> 262,735,872
    #   x 2 bytes = 525,471,744
    # int4 part: 1,235,814,400 - 262,735,872 = 973,078,528 x 0.5 = 486,539,264
    # total 1,012,011,008
    assert m.weight_bytes(s, "int4") == 1_012_011_008
    # A naive params x 0.5 would claim 0.62 GB.
    assert m.weight_bytes(s, "int4") > s.parameter_count * 0.5


def test_unknown_dtype_is_refused():
    with pytest.raises(ValueError, match="unknown dtype"):
        m.weight_bytes(m.model_shape(LLAMA_1B), "int3")


def test_kv_tokens_for_space_cpu_example():
    # SmolLM2-135M in fp32: 2 x 30 layers x 3 KV heads x 64 x 4 bytes = 46,080 bytes/token.
    # VLLM_CPU_KVCACHE_SPACE=1 -> 1 GiB = 1,073,741,824 bytes; a block of 16 tokens is
    # 737,280 bytes; 1,073,741,824 / 737,280 = 1456.4 -> 1456 blocks = 23,296 tokens.
    assert m.kv_tokens_for_space(SMOL_135M, 1 * GIB, kv_dtype="fp32") == 23_296


def test_kv_tokens_for_space_shared_pool():
    # Target + draft share one pool: 131,072 + 32,768 = 163,840 bytes/token;
    # 1e9 / (16 x 163,840) = 381.47 -> 381 blocks = 6,096 tokens.
    tokens = m.kv_tokens_for_space([LLAMA_8B, LLAMA_1B], 1e9, kv_dtype="bf16")
    assert tokens == 6_096
    assert m.kv_tokens_for_space(LLAMA_8B, 1e9, kv_dtype="bf16") > tokens
    assert m.kv_tokens_for_space(LLAMA_8B, 0) == 0


def test_overhead_estimate_for_8b():
    # 1.5 GB fixed + one 8192-token prefill chunk: 8192 x (3 x 14336 + 4 x 4096) x 2 bytes
    # = 973,078,528, plus logits 256 x 128256 x 4 = 131,334,144 -> 2.604 GB
    assert m.estimate_overhead_gb(LLAMA_8B) == pytest.approx(2.604412672)
    # The draft does not add: the two models run one after the other.
    assert m.estimate_overhead_gb([LLAMA_8B, LLAMA_1B]) == pytest.approx(2.604412672)


# ---------------------------------------------------------------- budgets


def test_budget_by_hand_without_draft():
    b = m.plan_budget(LLAMA_8B, gpu=TEST_GPU, gpu_memory_utilization=1.0, overhead_gb=2.0)
    # pool = 40 - 16.060522496 - 2 = 21.939477504 GB; a block is 16 x 131,072 = 2,097,152 B
    # 21,939,477,504 / 2,097,152 = 10461.6 -> 10,461 blocks = 167,376 tokens
    # a sequence of 8192 tokens needs 512 blocks: 10,461 // 512 = 20
    assert b.kv_pool_gb == pytest.approx(21.939477504)
    assert b.kv_tokens == 167_376
    assert b.max_concurrent_seqs == 20
    assert b.draft is None and b.draft_weights_gb == 0
    assert b.max_concurrent_seqs_without_draft == b.max_concurrent_seqs


def test_draft_reduces_concurrency_by_hand():
    b = m.plan_budget(LLAMA_8B, draft=LLAMA_1B, gpu=TEST_GPU, gpu_memory_utilization=1.0,
                      overhead_gb=2.0)
    # pool = 40 - 16.060522496 - 2.4716288 - 2 = 19.467848704 GB
    # a block holds 16 tokens of both models: 16 x (131,072 + 32,768) = 2,621,440 B
    # 19,467,848,704 / 2,621,440 = 7426.4 -> 7,426 blocks = 118,816 tokens; 7,426 // 512 = 14
    assert b.kv_bytes_per_token == 163_840
    assert b.kv_tokens == 118_816
    assert b.max_concurrent_seqs == 14
    # Without the draft, the same engine holds the numbers of the test above.
    assert b.kv_tokens_without_draft == 167_376
    assert b.max_concurrent_seqs_without_draft == 20
    assert b.draft_concurrency_cost == 6


def test_tensor_parallel_halves_per_gpu_weights_and_kv():
    tp2 = m.plan_budget(LLAMA_70B, gpu="H200", tensor_parallel=2, overhead_gb=2.0)
    tp4 = m.plan_budget(LLAMA_70B, gpu="H200", tensor_parallel=4, overhead_gb=2.0)
    # 70,553,706,496 params x 2 bytes = 141.1 GB; / 2 = 70.55 GB; / 4 = 35.28 GB per GPU
    assert tp2.target_weights_gb == pytest.approx(70.553706496)
    assert tp4.target_weights_gb == pytest.approx(tp2.target_weights_gb / 2)
    # KV heads split too: 2 x 80 x (8/2) x 128 x 2 = 163,840 vs 2 x 80 x (8/4) x 128 x 2 = 81,920
    assert tp2.target_kv_bytes_per_token == 163_840
    assert tp4.target_kv_bytes_per_token == 81_920
    assert tp4.kv_tokens > 2 * tp2.kv_tokens


def test_kv_heads_replicate_when_fewer_than_gpus():
    s = m.model_shape(LLAMA_70B)  # 8 KV heads
    # 16 GPUs: each keeps one KV head: 2 x 80 x 1 x 128 x 2 = 40,960
    assert m.kv_bytes_per_token(s, tensor_parallel=16) == 40_960


def test_budget_that_does_not_fit_says_why():
    with pytest.raises(BudgetError) as err:
        m.plan_budget(LLAMA_70B, gpu="L4")
    msg = str(err.value)
    # weights 141.1 GB; L4 gives 24 x 0.9 = 21.6 GB
    assert "141.1 GB" in msg and "21.6 GB" in msg and "24 GB x 0.9" in msg
    assert "tensor_parallel=" in msg and "bigger GPU" in msg
    assert isinstance(err.value, ValueError)


def test_budget_with_no_room_for_one_sequence():
    # L4: 21.6 GB - 16.06 GB weights - 2.6 GB reserve = 2.9 GB = about 22,000 tokens of
    # KV cache, fewer than one 131,072-token sequence: vLLM would refuse to start.
    with pytest.raises(BudgetError, match="less than one"):
        m.plan_budget(LLAMA_8B, gpu="L4", context_len=131_072)
    assert m.plan_budget(LLAMA_8B, gpu="L4", context_len=8192).max_concurrent_seqs >= 1


def test_heads_that_do_not_split_are_refused():
    # SmolLM2-135M has 9 attention heads: they do not split over 2 GPUs.
    with pytest.raises(BudgetError, match="9 attention heads"):
        m.plan_budget(SMOL_135M, gpu="L4", tensor_parallel=2)


def test_bad_utilization_is_refused():
    with pytest.raises(ValueError):
        m.plan_budget(LLAMA_8B, gpu_memory_utilization=1.5)


def test_budget_accepts_config_dicts_and_shapes():
    cfg = m.load_model_config(LLAMA_8B)
    by_name = m.plan_budget(LLAMA_8B, overhead_gb=2.0)
    by_dict = m.plan_budget(cfg, overhead_gb=2.0)
    by_shape = m.plan_budget(m.model_shape(cfg), overhead_gb=2.0)
    assert by_name.kv_tokens == by_dict.kv_tokens == by_shape.kv_tokens
    assert by_dict.target == LLAMA_8B


def test_rows_add_up_to_the_card():
    b = m.plan_budget("Qwen/Qwen3-8B", draft="Qwen/Qwen3-0.6B", gpu="H100")
    rows = b.as_rows()
    assert all(set(r) == {"component", "gb"} for r in rows)
    assert sum(r["gb"] for r in rows) == pytest.approx(80, abs=0.01)
    kv = {r["component"]: r["gb"] for r in rows}
    # KV split in proportion to bytes/token: 114,688 / (147,456 + 114,688) = 0.4375 is draft.
    draft_share = kv["KV cache (draft)"] / (kv["KV cache (draft)"] + kv["KV cache (target)"])
    assert draft_share == pytest.approx(0.4375, abs=1e-3)
    solo = m.plan_budget("Qwen/Qwen3-8B", gpu="H100").as_rows()
    assert not any("draft" in r["component"] for r in solo)


def test_summary_is_plain_words():
    b = m.plan_budget(LLAMA_8B, draft=LLAMA_1B, gpu="H100")
    text = b.summary()
    assert "H100" in text and "Without the draft" in text
    assert f"{b.max_concurrent_seqs} sequences" in text


def test_talk_setup_two_servers_on_one_card():
    servers = m.talk_setup()
    base, spec = servers["baseline"], servers["speculative"]
    assert base.gpu.name == "RTX PRO 6000 Blackwell"
    # Two servers at 0.45 each: 96 x 0.45 = 43.2 GB each, 86.4 GB together <= 96 GB.
    assert base.usable_gb == pytest.approx(43.2) and spec.usable_gb == pytest.approx(43.2)
    assert base.usable_gb + spec.usable_gb <= base.gpu.memory_gb
    assert round(base.target_weights_gb) == 16          # "16 GB" of bf16 weights
    assert round(spec.draft_weights_gb, 1) == 2.5        # "2.5 GB"
    # The speculative server pays for the draft's weights and KV out of the same 43.2 GB.
    assert spec.max_concurrent_seqs < base.max_concurrent_seqs
    assert spec.max_concurrent_seqs_without_draft == base.max_concurrent_seqs
    # Hand check of the baseline: 43.2 - 16.0605 - 2.6044 = 24.535 GB of KV cache;
    # / (16 x 131,072) = 11,699 blocks = 187,184 tokens; 11,699 // 512 = 22 sequences.
    assert base.kv_tokens == 187_184 and base.max_concurrent_seqs == 22


def test_bandwidth_bound_is_available_from_the_spec():
    # Decode reads every weight once per step: 1792 GB/s / 16.06 GB = about 111 steps/s at most.
    spec = m.gpu_spec("RTX PRO 6000 Blackwell")
    steps = spec.bandwidth_gb_s * GB / m.weight_bytes(m.model_shape(LLAMA_8B))
    assert math.isclose(steps, 111.6, rel_tol=1e-2)


# ---------------------------------------------------------------- the default CPU pair (Qwen2.5-Coder)

QWEN_CODER_15B = "Qwen/Qwen2.5-Coder-1.5B-Instruct"
QWEN_CODER_05B = "Qwen/Qwen2.5-Coder-0.5B-Instruct"


def test_qwen2_coder_pair_shapes_and_parameter_counts():
    # 1.5B: GQA with 2 KV heads of 128 (1536 / 12); q/k/v biases (qwen2); tied embeddings.
    # embeddings 151,936 x 1,536 = 233,373,696
    # per layer: q 1536x1536 + 1536, k and v 1536x256 + 256 each, o 1536x1536 = 5,507,584;
    #   MLP 3 x 1536 x 8960 = 41,287,680; two norms 3,072 -> 46,798,336; x 28 = 1,310,353,408
    # final norm 1,536 -> total 1,543,714,304 (Qwen's model card: 1.54B)
    big = m.model_shape(QWEN_CODER_15B)
    assert (big.layers, big.kv_heads, big.head_dim, big.tied_embeddings) == (28, 2, 128, True)
    assert big.attention_bias and not big.o_proj_bias
    assert big.parameter_count == 1_543_714_304
    # 0.5B: head_dim 64 (896 / 14), 2 KV heads, 24 layers; 494,032,768 (model card: 0.49B)
    small = m.model_shape(QWEN_CODER_05B)
    assert (small.layers, small.kv_heads, small.head_dim, small.tied_embeddings) == (24, 2, 64, True)
    assert small.parameter_count == 494_032_768


def test_qwen2_coder_pair_kv_bytes_and_shared_pool():
    # 2 x 28 x 2 x 128 x 2 bytes = 28,672 per token; 2 x 24 x 2 x 64 x 2 = 12,288
    big, small = m.model_shape(QWEN_CODER_15B), m.model_shape(QWEN_CODER_05B)
    assert m.kv_bytes_per_token(big, "bf16") == 28_672
    assert m.kv_bytes_per_token(small, "bf16") == 12_288
    # 2 GiB = 2,147,483,648 bytes; blocks of 16 tokens:
    # alone: floor(2,147,483,648 / (16 x 28,672)) = 4,681 blocks = 74,896 tokens
    # shared: floor(2,147,483,648 / (16 x 40,960)) = 3,276 blocks = 52,416 tokens (70% of alone)
    assert m.kv_tokens_for_space(big, 2 * GIB, kv_dtype="bf16") == 74_896
    assert m.kv_tokens_for_space([big, small], 2 * GIB, kv_dtype="bf16") == 52_416


# ---------------------------------------------------------------- the longest context that fits


def test_max_context_len_matches_the_plan():
    # The numbers: an 8B target drafting for itself at 0.45 of an 80 GB card leaves
    # about 4,800 (Llama) or 2,400 (Qwen3) KV tokens, far below a 32K max_model_len.
    assert m.max_context_len(LLAMA_8B, LLAMA_8B, gpu="H100", gpu_memory_utilization=0.45) == 4_848
    assert m.max_context_len("Qwen/Qwen3-8B", "Qwen/Qwen3-8B", gpu="H100", gpu_memory_utilization=0.45) == 2_400
    # It is the kv_tokens of the plan, so one sequence of exactly that length fits and one block more does not.
    fits = m.max_context_len(LLAMA_8B, LLAMA_1B, gpu="H100", gpu_memory_utilization=0.45)
    assert m.plan_budget(LLAMA_8B, LLAMA_1B, gpu="H100", gpu_memory_utilization=0.45,
                         context_len=fits).max_concurrent_seqs == 1
    with pytest.raises(m.ContextTooLongError) as err:
        m.plan_budget(LLAMA_8B, LLAMA_1B, gpu="H100", gpu_memory_utilization=0.45, context_len=fits + 16)
    assert err.value.max_context_len == fits and f"at most {fits:,}" in str(err.value)


def test_max_context_len_when_weights_do_not_fit():
    # Two copies of the 8B (32.1 GB) on a 48 GB card at 0.45 (21.6 GB): the weights do not fit.
    with pytest.raises(BudgetError, match="weights need"):
        m.max_context_len(LLAMA_8B, LLAMA_8B, gpu="L40S", gpu_memory_utilization=0.45)
    # Weights fit but not one KV block: 0. One 16-token block of the 8B's KV is 16 x 131,072 bytes
    # = 2.1 MB; leave 1 MB of pool (reserve given as a number) and 3 MB.
    card = GPUSpec("round card", memory_gb=20, bandwidth_gb_s=1)
    weights_gb = m.weight_bytes(m.model_shape(LLAMA_8B), "bf16") / GB  # 16.06 GB
    usable = 20 * 0.9
    assert m.max_context_len(LLAMA_8B, gpu=card, overhead_gb=usable - weights_gb - 0.001) == 0
    assert m.max_context_len(LLAMA_8B, gpu=card, overhead_gb=usable - weights_gb - 0.003) == 16


# ---------------------------------------------------------------- GPUs as drivers name them


@pytest.mark.parametrize("detected, expected", [
    ("NVIDIA H100 80GB HBM3, 81559 MiB", "H100"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", None),  # 94 GB, another bandwidth: not the table's H100
    ("NVIDIA A100-SXM4-80GB", "A100 80GB"),
    ("NVIDIA A100-SXM4-40GB", None),
    ("NVIDIA H200", "H200"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA L40", None),
    ("NVIDIA A10G", "A10G"),
    ("NVIDIA GeForce RTX 5090", "RTX 5090"),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 97887 MiB", "RTX PRO 6000 Blackwell"),
    ("NVIDIA B200", "B200"),
    ("H100", "H100"),
    ("Tesla T4", None),
    (None, None),
    ("", None),
])
def test_match_gpu_reads_driver_names(detected, expected):
    spec = m.match_gpu(detected)
    assert (spec.name if spec else None) == expected
