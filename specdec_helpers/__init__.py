"""Helpers for the notebook series "Is Speculative Decoding Worth It?". The package is layered: each part imports
only the parts below it (pyproject.toml's [tool.importlinter] contracts, checked by import-linter in
tests/unit/test_layers.py): numbers first, the proposers vLLM runs inside its engine (numpy only), then the cost
model (pure formulas and the rules that turn numbers into words), the model files, the servers, the run's records,
measuring, memory plans, the preflight, and the two modules the notebooks use last (README.md, "How it is built")."""

__version__ = "0.1.0"
