"""The series' one way to measure a speedup: every candidate request sits next to the baseline's request for the same
prompt in time, so the machine's drift (tens of percent within minutes on shared machines and laptops) hits both.

``together``: every server is up and each (prompt, repeat) block runs the baseline and the candidates in ABBA order
(:func:`measure.requests.interleaved_order`), after every server has seen every prompt once
(:func:`measure.requests.prime`). Where memory holds only one server, a sandwich: the baseline's block,
each candidate's, the baseline's again; the drift between the two baseline blocks bounds the ratio's error and is
reported (:func:`sandwich_drift`), and the baseline that pairs with a candidate is the mean of its two blocks.
"""

from __future__ import annotations

import contextlib
from typing import Sequence

import numpy as np
import pandas as pd

from specdec_helpers.engine.serving import VLLMServer
from specdec_helpers.measure.requests import measure_prompts, prime, warm_up

INTERLEAVED, SANDWICH = "interleaved", "sandwich"


def measure_paired(baseline: VLLMServer, candidates: Sequence[VLLMServer], prompts: Sequence, *, together: bool,
                   temperature: float | Sequence[float] = 0.0, repeats: int = 1, max_tokens: int | None = None,
                   provenance: dict | None = None, progress: bool = True) -> pd.DataFrame:
    """Rows of the baseline and every candidate on ``prompts`` at each ``temperature``; ``design`` says how they were
    paired, ``sandwich`` (for that design) which baseline block a row belongs to. Servers this call starts, it stops; a
    running baseline stays up in the interleaved design (a notebook keeps it across candidates) and is released for a
    sandwich (one sandwich for every temperature: three server starts, not three per temperature)."""
    temperatures = [float(temperature)] if isinstance(temperature, (int, float)) else [float(t) for t in temperature]
    options = dict(repeats=repeats, max_tokens=max_tokens, provenance=provenance, progress=progress)

    def measure(servers: list[VLLMServer]) -> pd.DataFrame:
        return pd.concat([measure_prompts(servers, prompts, temperature=t, **options) for t in temperatures],
                         ignore_index=True)

    if together:
        with contextlib.ExitStack() as stack:
            for server in [baseline, *candidates]:
                if not server.running:
                    stack.enter_context(server)
                warm_up(server)
                prime(server, prompts)
            return measure([baseline, *candidates]).assign(design=INTERLEAVED, sandwich="")
    blocks = []
    baseline.stop()  # one server at a time: the baseline comes back for the closing block
    for role, server in [("before", baseline), *(("", c) for c in candidates), ("after", baseline)]:
        with server:
            warm_up(server)
            prime(server, prompts)
            blocks.append(measure([server]).assign(design=SANDWICH, sandwich=role))
    return pd.concat(blocks, ignore_index=True)


def sandwich_drift(rows: pd.DataFrame, value: str = "engine_decode_tokens_per_s") -> float:
    """Median over prompts of the baseline's ``value`` after / before the candidates ran (1.0: no drift; NaN for an
    interleaved measurement). A speedup from a sandwich is uncertain by at least this much."""
    base = rows[(rows["design"] == SANDWICH) & (rows["sandwich"] != "")]
    if base.empty:
        return float("nan")
    wide = base.pivot_table(index=["prompt_id", "repeat", "temperature"], columns="sandwich", values=value)
    return float(np.nanmedian(wide["after"] / wide["before"])) if {"before", "after"} <= set(wide) else float("nan")
