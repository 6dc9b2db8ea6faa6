"""The distillation recipe's training mix is seeded and disjoint from the evaluation sets, and its CLI
(``python -m recipes.distill_drafts``) writes that mix into the cache. No engine, no training."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from recipes.distill_drafts import mix

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "recipes.distill_drafts", *args], cwd=REPO, check=True,
                          env={**os.environ, "SPECDEC_CACHE": str(cache)}, capture_output=True, text=True,
                          timeout=300)


def test_training_mix_is_seeded_and_disjoint_from_the_evaluation_sets():
    first, again = mix.build_prompts(300), mix.build_prompts(300)
    assert first == again
    mix.check_disjoint(first)
    assert {p["subcategory"] for p in first} == set(mix.MIX)


def test_cli_writes_the_seeded_prompt_mix_into_the_cache(tmp_path):
    usage = _cli("--help", cache=tmp_path).stdout
    assert all(command in usage for command in ("prompts", "generate", "train", "evaluate"))
    _cli("--n", "40", "prompts", cache=tmp_path)
    expected = mix.build_prompts(40)
    written = tmp_path / "distill" / mix.mix_id(expected, mix.DEFAULT_SEED) / "prompts.jsonl"
    assert [json.loads(line) for line in written.read_text().splitlines()] == expected
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == [written]
