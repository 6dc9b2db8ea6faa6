"""Proposers that vLLM runs inside its engine (``method: "custom_class"``): plain Python on token ids, no model.
``lookup``: the reference of notebook 04's own-history proposer; ``traffic``: ours, which learns from the traffic."""
