"""The series' one way to measure a speedup: every candidate request sits next to the baseline's request for the same
prompt in time, so the machine's drift (tens of percent within minutes on shared machines and laptops) hits both:
all servers up, blocks in ABBA order (:func:`measure.requests.interleaved_order`), or where memory holds only one
server a sandwich (baseline, candidate, baseline: the drift between the two baseline blocks bounds the ratio's error,
:func:`sandwich_drift`)."""

from __future__ import annotations

import contextlib
from typing import Callable, Mapping, NamedTuple, Sequence

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


class ServerPasses(NamedTuple):
    """What :func:`measure_servers` measured: each candidate's paired pass, the load rows, every request once."""

    passes: dict[str, pd.DataFrame]  # per candidate: its rows and the baseline rows they pair with
    load_rows: list  # what ``load`` returned, in the order it ran
    requests: pd.DataFrame  # every request once; ``paired_with`` names the candidate(s) its baseline request served


def measure_servers(baseline: VLLMServer, candidates: Mapping[str, VLLMServer], prompts: Sequence, *, fit: int,
                    load: Callable[[list[VLLMServer]], list], load_with: str, **options) -> ServerPasses:
    """Every candidate paired with the running ``baseline`` on ``prompts`` (:func:`measure_paired`, ``options`` passed
    on), and ``load([servers])`` run while the candidate ``load_with`` is up, for as many servers as memory holds:

    - ``fit`` above the number of candidates: all of them up next to the baseline, one pass in which each block's
      baseline request pairs with every candidate; then the others stop and ``load([baseline, load_with])`` runs;
    - ``fit`` 2 (or more, not all): each candidate in turn next to the baseline, ``load([baseline, load_with])``
      right after ``load_with``'s pass, before that candidate stops;
    - ``fit`` 1: a sandwich per candidate (the baseline stops), then ``load([load_with])`` alone, then the baseline
      starts again (warmed up) for ``load([baseline])``.

    The baseline is running when this returns (every later ratio pairs with it)."""
    if load_with not in candidates:
        raise ValueError(f"load_with {load_with!r} is not one of the candidates {list(candidates)}")
    names, loaded = list(candidates), candidates[load_with]
    if fit > len(names):  # one pass; one baseline request per block serves every candidate
        with loaded:
            with contextlib.ExitStack() as others:
                for name in names:
                    if name != load_with:
                        others.enter_context(candidates[name])
                rows = measure_paired(baseline, [candidates[n] for n in names], prompts, together=True, **options)
            load_rows = list(load([baseline, loaded]))
        passes = {name: rows[rows["server"].isin(["baseline", name])] for name in names}
        shared = " and ".join(names)
        return ServerPasses(passes, load_rows, rows.assign(paired_with=rows["server"].replace({"baseline": shared})))
    passes, load_rows = {}, []
    if fit >= 2:  # each candidate next to the baseline in turn, each pass with baseline requests of its own
        for name, server in candidates.items():
            with server:  # up for its pass and, for ``load_with``, the load right after it
                passes[name] = measure_paired(baseline, [server], prompts, together=True, **options)
                if name == load_with:
                    load_rows += load([baseline, server])
    else:  # one server at a time: a sandwich per candidate, then the load on each server alone
        passes = {name: measure_paired(baseline, [candidates[name]], prompts, together=False, **options)
                  for name in names}
        with loaded:
            warm_up(loaded)
            load_rows += load([loaded])
        baseline.start()
        warm_up(baseline)
        load_rows += load([baseline])
    requests = pd.concat([rows.assign(paired_with=name) for name, rows in passes.items()], ignore_index=True)
    return ServerPasses(passes, load_rows, requests)
