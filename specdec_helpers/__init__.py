"""Helpers for the notebook series "Is Speculative Decoding Worth It?".

What the notebooks import, by responsibility (each subpackage imports only those above it):

stats        medians, spread and bootstrap intervals (no project imports)
engine       start and stop vLLM servers, never leaving one running; the CPU sampling fix
report       the run folder, recorded values, provenance, "what you should see"
models       model names -> one resolved model (directory, config, tokenizer), provisioned once
measure      prompts, timed requests, /metrics counters, prefill/decode phases, concurrent load
memory       weights and KV caches of a target and a draft in one budget
costmodel    the cost model, acceptance summaries, candidates, the verdict
preflight    checks before any server starts; setup_check and demo serve notebooks 00 and demo

The series runner, the reference builder, the demo page and the preflight CLI are in ``tools/``;
the draft distillation is in ``recipes/distill_drafts/``.
"""

__version__ = "0.1.0"
