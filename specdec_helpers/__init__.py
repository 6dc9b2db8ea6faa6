"""Helpers for the notebook series "Is Speculative Decoding Worth It?".

The notebooks import what they need from the submodules; each module does one job:

models      model names -> local directories (offline PyPI GGUF for cpu-tiny, hub for GPUs)
drafts      distilled draft models for the CPU profile
serving     start/stop vLLM servers (baseline and speculative), never leaving one running
metrics     vLLM's speculative-decoding counters from /metrics (prometheus_client's parser)
measure     timed streaming requests with acceptance attributed per request
theory      the speculative-decoding cost model (expected tokens, speedup, best k)
memory      weight and KV-cache budget of a target and a draft on one GPU
prompts     prompt sets (JSONL) with line-numbered validation errors
stats       medians, spread and bootstrap confidence intervals
record      values recorded in a notebook for tests and the run report
runs        the run folder (tables, figures, logs)
runner      papermill execution of the series and index.html
"""

__version__ = "0.1.0"
