"""Helpers for the notebook series "Is Speculative Decoding Worth It?". Each part imports only those before it in
``LAYERS`` (tests/unit/test_layers.py checks every import, function-level ones too): numbers first, the proposers
vLLM runs inside its engine (numpy only), then the cost model (pure formulas and the rules that turn numbers into words), the model files, the servers, the run's records,
measuring, memory plans, the preflight, and the two modules the notebooks use last (README.md, "How it is built")."""

__version__ = "0.1.0"

#: the package's layers, lowest first: a module may import its own part and the parts before it, never a later one
LAYERS = ("stats", "proposers", "costmodel", "models", "engine", "report", "measure", "memory", "preflight", "setup_check", "demo")
