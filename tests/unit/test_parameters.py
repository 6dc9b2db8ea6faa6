"""Every notebook's parameters cell as papermill reads it: parsed without a warning (papermill prints one for a line it
cannot read, and then cannot type a ``-p`` value for it), each typed like the values the profile files give it."""

from __future__ import annotations

import logging
from pathlib import Path

import papermill
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PROFILES = {p.stem: yaml.safe_load(p.read_text()) for p in sorted((ROOT / "params").glob("*.yaml"))}
TYPES = {"int": int, "float": (int, float), "str": str, "bool": bool, "list": list, "dict": dict}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_papermill_parses_every_parameter_and_the_profiles_give_its_type(notebook, caplog):
    with caplog.at_level(logging.WARNING, logger="papermill"):
        declared = papermill.inspect_notebook(str(notebook))
    assert not [r.getMessage() for r in caplog.records], "papermill could not parse a parameter line"
    assert declared, f"{notebook.name} has no parameters cell"
    for name, spec in declared.items():
        kind = spec["inferred_type_name"]
        assert kind in TYPES, f"{notebook.name}: {name} has no type annotation papermill reads ({kind})"
        for profile, values in PROFILES.items():
            if name in values and values[name] is not None:
                assert isinstance(values[name], TYPES[kind]), (
                    f"params/{profile}.yaml gives {name} = {values[name]!r}, but {notebook.name} declares {kind}")
