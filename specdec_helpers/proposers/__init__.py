"""Proposers that vLLM runs inside its engine (``method: "custom_class"``): plain Python on token ids, no model.
``traffic``: ours, which learns from the traffic it serves. vLLM 0.32 builds such a class once as
``Class(vllm_config)``, calls ``load_model(target)`` and, after every engine step, ``propose(...)``, which returns at
most k token ids per batch row: notebook 04 writes one in a cell (the tests' copy: tests/lookup_proposer.py)."""
