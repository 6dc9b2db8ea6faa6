"""Proposers that vLLM runs inside its engine (``method: "custom_class"``): plain Python on token ids, no model.

The contract vLLM 0.32 holds such a class to: it imports the class named in ``--speculative-config '{"method":
"custom_class", "model": "module.Class", ...}'`` (its folder on the server's PYTHONPATH), builds it once as
``Class(vllm_config)``, calls ``load_model(target)`` (the CPU model runner always does) and, after every engine step,
``propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=...)``: per batch row the tokens
accepted this step (empty: no draft for that row), the row's history length, and the histories themselves (row i:
``token_ids_cpu[i, :num_tokens_no_spec[i]]``). It returns one list of at most k token ids per row. ``traffic``: ours,
which learns from the traffic; notebook 04 writes an own-history lookup proposer in a cell (the tests' reference of
it: tests/lookup_proposer.py)."""
