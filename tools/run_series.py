"""Execute the notebook series with papermill into a run folder, and write its index.html.

    python -m tools.run_series --profile cpu-coder [--smoke] [--notebooks 00 01]

``make run`` calls this. Each notebook gets the profile's parameters that it declares (papermill
would warn about the others), plus ``run_dir``. A notebook that fails does not stop the others;
the run exits non-zero and index.html shows which one failed and where its log is.

The notebooks share their vLLM servers (``specdec_helpers.engine.pool``, owned here through
``tools.server_pool``): one server per configuration for the whole run, stopped at its end, after a
failure and on Ctrl-C; ``--own-servers`` gives every notebook its own, as in JupyterLab.
``servers.json`` in the run folder lists every start and reuse.

Before any notebook starts, the profile's preflight (``make preflight``) checks what every notebook
needs at the least, one server: a run that cannot start here (a GPU profile without a GPU, models
that cannot be fetched, a prompt longer than ``max_model_len``) stops at once with the reasons and
exit code 2, instead of failing in every notebook with a stack trace.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from specdec_helpers.engine.pool import NOTEBOOK_ENV
from specdec_helpers.report.record import read_records
from specdec_helpers.report.runs import REPO_ROOT, resolve_run_dir
from tools.profiles import PER_NOTEBOOK, load_profile, notebook_overrides, parse_overrides
from tools.server_pool import RunPool

NOTEBOOKS_DIR = REPO_ROOT / "notebooks"


@dataclass
class NotebookRun:
    name: str
    output: Path
    seconds: float = 0.0
    ok: bool = True
    error: str = ""
    records: dict[str, Any] = field(default_factory=dict)


def find_notebooks(selection: list[str] | None = None) -> list[Path]:
    """Notebooks in order; ``selection`` holds prefixes like '00' or full names."""
    found = sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))
    if selection:
        found = [p for p in found if any(p.name.startswith(s) for s in selection)]
        if not found:
            have = [p.name for p in NOTEBOOKS_DIR.glob("*.ipynb")]
            raise SystemExit(f"No notebook matches {selection}; have: {have}")
    return found


def uses_shared_servers(notebook: Path) -> bool:
    """False for a notebook whose metadata says every server it starts is its own (``shared=False``): 01
    checks its loop against a float32 server, a configuration no other notebook asks for."""
    meta = json.loads(notebook.read_text()).get("metadata", {}).get("specdec", {})
    return bool(meta.get("shared_servers", True))


def execution_order(notebooks: list[Path]) -> list[Path]:
    """The order ``make run`` executes them in: notebooks with only servers of their own first (they would
    otherwise stop the idle shared servers to make room, and the next notebooks would start those again),
    then the others in their order. Every notebook stands alone, so the order changes no result."""
    return ([n for n in notebooks if not uses_shared_servers(n)] +
            [n for n in notebooks if uses_shared_servers(n)])


def notebook_parameters(notebook: Path, params: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """The subset of ``params`` the notebook declares in its parameters cell (with the profile's
    ``per_notebook`` values for it), plus run_dir."""
    import papermill

    declared = papermill.inspect_notebook(str(notebook))
    params = params | notebook_overrides(params, notebook.name)
    chosen = {k: v for k, v in params.items() if k in declared}
    if "run_dir" in declared:
        chosen["run_dir"] = str(run_dir)
    return chosen


def use_this_clone() -> None:
    """Kernels and the servers they start import this clone's specdec_helpers, whichever clone the shared
    environment's editable install points at now (with_env.sh re-points it at every call from another clone)."""
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(REPO_ROOT) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, paths)])


_KERNEL_FOLDERS: list[Path] = []


def kernel_manager_class() -> type:
    """Kernels on Unix domain sockets in a private folder instead of TCP ports on loopback, where a POSIX system has
    them: only this user can reach such a kernel, and ipykernel has no warning about unencrypted TCP to print (a
    warning a user could not act on). Elsewhere jupyter_client's default (TCP on loopback)."""
    from jupyter_client import AsyncKernelManager

    if os.name != "posix":
        return AsyncKernelManager

    class PrivateSocketKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.transport = "ipc"  # socket files <ip>-<port>: a short path (a socket path has ~100 bytes at most)
            folder = Path(tempfile.mkdtemp(prefix="specdec-kernel-"))
            _KERNEL_FOLDERS.append(folder)  # removed by execute() once the notebook has run
            self.ip = str(folder / "ipc")

    return PrivateSocketKernelManager


def execute(notebook: Path, params: dict[str, Any], run_dir: Path, timeout_s: int = 3600) -> NotebookRun:
    import papermill

    use_this_clone()
    out_dir = run_dir / "notebooks"
    out_dir.mkdir(parents=True, exist_ok=True)
    run = NotebookRun(name=notebook.stem, output=out_dir / notebook.name)
    started = time.perf_counter()
    try:
        papermill.execute_notebook(
            str(notebook), str(run.output), parameters=notebook_parameters(notebook, params, run_dir),
            kernel_name="python3", cwd=str(NOTEBOOKS_DIR), execution_timeout=timeout_s,
            progress_bar=False, log_output=False, kernel_manager_class=kernel_manager_class(),
        )
    except Exception as exc:  # papermill saves the notebook up to the failing cell
        run.ok = False
        run.error = f"{type(exc).__name__}: {exc}"[-2000:]
    finally:
        while _KERNEL_FOLDERS:
            shutil.rmtree(_KERNEL_FOLDERS.pop(), ignore_errors=True)
    run.seconds = time.perf_counter() - started
    if run.output.exists():
        run.records = read_records(run.output)
        _export_html(run.output)
    return run


def _export_html(notebook: Path) -> None:
    try:
        from nbconvert import HTMLExporter

        body, _ = HTMLExporter().from_filename(str(notebook))
        notebook.with_suffix(".html").write_text(body)
    except Exception:  # the .ipynb is still linked; an export failure must not fail the run
        traceback.print_exc()


def combine_results(run_dir: Path) -> Path | None:
    """All notebooks' tidy tables in one CSV (a `table` column says which table a row is from)."""
    import pandas as pd

    tables = sorted((run_dir / "results").glob("*.csv"))
    if not tables:
        return None
    frames = [pd.read_csv(t).assign(table=t.stem) for t in tables]
    path = run_dir / "results.csv"
    pd.concat(frames, ignore_index=True, sort=False).to_csv(path, index=False)
    return path


def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        text = json.dumps(value)
        return text if len(text) < 160 else text[:157] + "..."
    return str(value)


INDEX_TEMPLATE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Is speculative decoding worth it? Run {{ name }}</title>
<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:1.5em auto;padding:0 1em;line-height:1.4}
table{border-collapse:collapse}td{border:1px solid #ccc;padding:2px 8px;font-size:85%;vertical-align:top}
.err{background:#fee;padding:.5em;white-space:pre-wrap}.flag{background:#fff6dd;padding:.5em}
figure{display:inline-block;width:48%;margin:0 1% 1em 0;vertical-align:top}img{width:100%}
.lead img{max-width:760px}small{font-weight:normal;color:#555}h2{margin-top:1.4em}
.finding{margin:.2em 0 .8em}details{margin:.5em 0}</style></head><body>
<h1>Is speculative decoding worth it?</h1>
<p>Run <code>{{ name }}</code> of profile <b>{{ profile }}</b>{% if hardware %} on {{ hardware }}{% endif %}:
{{ ok_count }} of {{ runs | length }} notebooks ran, in {{ minutes }} min.</p>
{% if failed %}<div class="err"><b>Failed:</b> {{ failed | join(", ") }} (their sections below show the error; the
findings are those of the notebooks that ran).</div>{% endif %}
{% if disagreements %}<div class="err"><b>This run does not agree with itself.</b> The same configuration, measured
twice on the same prompts, gave results whose spreads do not overlap: the machine changed between the two (shared
machines and laptops drift by tens of percent within minutes). Read differences smaller than these as noise.
<ul>{% for line in disagreements %}<li>{{ line }}</li>{% endfor %}</ul></div>{% endif %}
{% if flagged %}<p class="flag">{{ flagged }}</p>{% endif %}
<h2>What this run found</h2>
{% if noise_floor %}<p class="flag"><b>Noise floor.</b> {{ noise_floor }}</p>{% endif %}
{% for f in findings %}<section class="lead"><h3>{{ f.title }} <small><a href="#{{ f.stem }}">notebook
{{ f.stem[:2] }}</a></small></h3>
<ul class="finding">{% for line in f.lines %}<li>{{ md(line) }}</li>{% endfor %}</ul>
{% if f.figure %}<img src="figures/{{ f.figure }}" alt="{{ f.figure }}">{% endif %}</section>
{% else %}<p>(no notebook of this run recorded findings)</p>{% endfor %}
<h2>Notebook by notebook</h2>
{% for run in runs -%}
<h3 id="{{ run.name }}">{{ run.name }} <small>{{ "ok" if run.ok else "FAILED" }}, {{ "%.1f" | format(run.seconds / 60) }}
min,{% for link in run.links %} <a href="notebooks/{{ link.name }}">{{ link.suffix[1:] }}</a>{% endfor %}</small></h3>
{%- if run.error %}<pre class="err">{{ run.error }}</pre>{% endif -%}
{% if run.lines %}<ul class="finding">{% for line in run.lines %}<li>{{ md(line) }}</li>{% endfor %}</ul>{% endif %}
{% for figure in run.figures %}<figure><img src="figures/{{ figure.name }}" alt="{{ figure.stem }}">
<figcaption>{{ figure.stem }}</figcaption></figure>{% endfor %}
<details><summary>its {{ run.records | length }} recorded values (raw)</summary>
<table>{% for key, value in run.records.items() %}<tr><td>{{ key }}</td><td>{{ show(value) }}</td></tr>
{%- endfor %}</table></details>
{% endfor %}
<h2>The run</h2>
{% if servers %}<p>vLLM servers: {{ servers.starts }} started ({{ servers.shared_starts }} shared by the notebooks,
{{ servers.own_starts }} a notebook's own; {{ servers.startup_s }} s of start-up),
{{ servers.reuses }} reused by a later notebook; <a href="servers.json">servers.json</a> lists each.</p>{% endif %}
{% if results %}<p><a href="results.csv">results.csv</a>: every measured row, with provenance.</p>{% endif %}
<details><summary>parameters</summary><code>{{ params }}</code></details>
</body></html>
"""

#: the report's opening, in this order: notebook, title, the record holding its generated sentences, its figure
FINDINGS = (("07_is_it_worth_it", "The verdict for these prompts", "findings", None),
            ("05_structured_vs_creative", "Structured output against creative writing", "findings",
             "05_acceptance_and_speedup.png"),
            ("04_choosing_a_draft", "Which way of drafting pays", "findings", None),
            ("06_context_and_concurrency", "Where the gain fades", "takeaways", None))


def disagreements(runs: list[NotebookRun]) -> list[str]:
    """Where a run measured one configuration twice and the two disagree beyond their spread (04's ``self_check``,
    07's ``run_agreement``), one line each, for the top of index.html."""
    lines = []
    for run in runs:
        check = run.records.get("self_check")
        if isinstance(check, dict) and check.get("ranges_overlap") is False:
            lines.append(f"{run.name}: {check.get('what')}: {check.get('section_3')}x in section 3 and "
                         f"{check.get('k_sweep')}x in the k sweep; their ranges over the prompts do not overlap")
        for pair in run.records.get("run_agreement") or []:
            if isinstance(pair, dict) and pair.get("agree") is False:
                lines.append(f"{run.name}, {pair.get('class')}: {pair.get('first')} {pair.get('first_speedup')}x and "
                             f"{pair.get('second')} {pair.get('second_speedup')}x; their intervals do not overlap")
    return lines


def _inline_markdown(text: str) -> Any:
    """The notebooks' sentences for HTML: escaped, with their **bold** and `code`."""
    import re

    from markupsafe import Markup, escape

    html = str(escape(text))
    html = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", html)
    return Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", html))


def _flagged(runs: list[NotebookRun]) -> str | None:
    """One line for the pairs the physics guard left out, per notebook (None when none was)."""
    counts = {}
    for r in runs:
        n = sum(int(c.get("n_flagged") or 0) for c in r.records.get("candidates", []) if isinstance(c, dict))
        n += len(r.records.get("flagged") or []) + len(r.records.get("context_flagged") or [])
        n += int(r.records.get("k_sweep_flagged") or 0)  # 04's k sweep
        if n:
            counts[r.name[:2]] = n
    if not counts:
        return None
    return (f"Flagged: {sum(counts.values())} measured pair(s) faster than the physics bound allows (drift or a "
            "difference between servers, not speculation), left out of every statistic: " + ", ".join(f"notebook {k}: {n}" for k, n in counts.items())
            + ".")


def noise_floor(runs: list[NotebookRun]) -> str | None:
    """04's A/A control in one line (two identical baseline servers, paired like every candidate): the ratios a
    speedup must clear before it says anything; None when 04 did not run it."""
    rows = next((r.records.get("aa_control") for r in runs if r.records.get("aa_control")), None)
    if not rows:
        return None
    parts = []
    for row in rows:
        if row.get("ratio") in ("end to end", "decode (engine)") and row.get("median") is not None:
            low = row.get("ci_low")
            interval = (f"95% interval {low:.2f}-{row['ci_high']:.2f}" if isinstance(low, (int, float)) and low == low
                        else f"range {row['min']:.2f}-{row['max']:.2f}")
            parts.append(f"{row['ratio']} {row['median']:.2f}x ({interval}, {row['pairs']} pairs)")
    return ("Two identical baseline servers, measured like every candidate (notebook 04's A/A control): "
            + "; ".join(parts) + ". A speedup inside that spread is not told apart from nothing.") if parts else None


def write_index(run_dir: Path, runs: list[NotebookRun], profile: str, params: dict[str, Any],
                servers: dict[str, Any] | None = None) -> Path:
    """The run's report: first what it found, in the notebooks' own generated sentences (07's verdict, 05's speedups
    with their figure, 04's candidates, 06's crossover) and anything it flagged; then each notebook with its figures
    and, collapsed, its raw records."""
    import jinja2

    by_name = {r.name: r for r in runs}
    figures = sorted((run_dir / "figures").glob("*.png"))
    findings = [{"stem": stem, "title": title, "lines": list(by_name[stem].records.get(record) or []),
                 "figure": figure if figure and (run_dir / "figures" / figure).exists() else None}
                for stem, title, record, figure in FINDINGS if stem in by_name and by_name[stem].records.get(record)]
    lines_of = {stem: record for stem, _, record, _ in FINDINGS}
    hardware = next((r.records["hardware"] for r in runs if isinstance(r.records.get("hardware"), str)), None)
    template = jinja2.Environment(autoescape=True).from_string(INDEX_TEMPLATE)
    page = template.render(
        name=run_dir.name, profile=profile, hardware=hardware, disagreements=disagreements(runs),
        params=json.dumps(params), show=_format, md=_inline_markdown, servers=servers, findings=findings,
        flagged=_flagged(runs), noise_floor=noise_floor(runs), failed=[r.name for r in runs if not r.ok], ok_count=sum(r.ok for r in runs),
        minutes=f"{sum(r.seconds for r in runs) / 60:.1f}", results=(run_dir / "results.csv").exists(),
        runs=[{"name": r.name, "ok": r.ok, "seconds": r.seconds, "error": r.error, "records": r.records,
               "lines": list(r.records.get(lines_of.get(r.name, "findings")) or []) if r.name not in
               {f["stem"] for f in findings} else [],
               "figures": [f for f in figures if f.name[:3] == r.name[:3]],
               "links": [p for p in (r.output.with_suffix(".html"), r.output) if p.exists()]} for r in runs])
    path = run_dir / "index.html"
    path.write_text(page)
    return path


def preflight_refusal(profile: str, smoke: bool, overrides: dict[str, Any]) -> str | None:
    """The preflight's report when no notebook of this run could start here; None when it can.

    Checked for one server at a time, the least every notebook needs: a notebook that wants two at
    once checks that itself and, on a CPU, measures them one after the other when they do not fit.
    It runs in a child process: on a first run the check downloads and converts the models, and the
    memory that takes goes back to the machine when the child exits (held by this process for the
    whole run, it left no room for a third shared server, which was stopped and started again).
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
        return child.submit(_preflight_refusal, profile, smoke, overrides).result()


def _preflight_refusal(profile: str, smoke: bool, overrides: dict[str, Any]) -> str | None:
    from tools.preflight import check_profile
    from tools.profiles import ProfileError

    try:
        report = check_profile(profile, smoke=smoke, overrides=overrides, servers=1)
    except (ProfileError, ValueError, OSError) as exc:
        return f"preflight could not check profile {profile}: {exc}"
    return None if report.ok else str(report)


def prompts_file_notice(params: dict[str, Any], notebooks: list[Path]) -> str | None:
    """What a user's ``prompts_file`` becomes, said on the console before anything starts: how many of its
    prompts each notebook measures (a profile's ``prompts_per_class`` may leave some out, and the notebook's
    report says so too) and about how long the answers take. None without a prompts file."""
    from specdec_helpers.measure.prompts import load_prompts, select
    from tools.profiles import notebook_overrides

    if not params.get("prompts_file"):
        return None
    source = load_prompts(params["prompts_file"])
    lines = [f"prompts file {params['prompts_file']}: {len(source)} prompts"]
    for notebook in notebooks:
        values = {**params, **notebook_overrides(params, notebook.name)}
        per_class = values.get("prompts_per_class")
        chosen = select(source, limit_per_class=per_class)
        servers = 1 + len(values.get("draft_candidates") or [])
        requests = servers * len(chosen) * int(values.get("repeats", 1))
        tokens = requests * int(values.get("max_tokens", 0))
        line = (f"  {notebook.stem}: measures {len(chosen)} of them on {servers} server(s), {requests} requests, "
                f"up to {tokens:,} answer tokens (about {tokens / 10 / 60:.0f}-{tokens / 2 / 60:.0f} min at 2-10 "
                "tokens/s on a CPU, plus server start-up)")
        if len(chosen) < len(source):
            largest = max(sum(p.cls == c for p in source) for c in {p.cls for p in source})
            line += (f"; {len(source) - len(chosen)} left out by prompts_per_class={per_class}: "
                     f"SET=\"prompts_per_class={largest}\" measures them all")
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu-coder")
    parser.add_argument("--smoke", action="store_true", help="small parameters (the tests' sizes)")
    parser.add_argument("--notebooks", nargs="*", help="prefixes, e.g. 00 03")
    parser.add_argument("--out", default=str(REPO_ROOT / "runs"), help="parent folder of run folders")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="override a parameter (VALUE is read as YAML), e.g. --set prompts_file=my.jsonl")
    parser.add_argument("--own-servers", action="store_true",
                        help="every notebook starts and stops its own servers (no sharing across notebooks)")
    parser.add_argument("--no-preflight", action="store_true",
                        help="skip the profile check before the first notebook (each notebook still checks itself)")
    args = parser.parse_args(argv)

    params = load_profile(args.profile, smoke=args.smoke)
    overrides = parse_overrides(args.set)
    params.update(overrides)
    for values in (params.get(PER_NOTEBOOK) or {}).values():  # --set wins over a notebook's own values too
        for name in overrides:
            values.pop(name, None)
    refusal = None if args.no_preflight else preflight_refusal(args.profile, args.smoke, overrides)
    if refusal:
        print(refusal, file=sys.stderr)
        again = f"make preflight PROFILE={args.profile}" + (" SMOKE=1" if args.smoke else "") + (
            f' SET="{" ".join(args.set)}"' if args.set else "")
        print(f"\nNo notebook was started: profile {args.profile} cannot run here as it stands (the reasons "
              f"above say what to change). `{again}` repeats this check.", file=sys.stderr)
        return 2
    notebooks = find_notebooks(args.notebooks)
    notice = prompts_file_notice(params, notebooks)
    if notice:
        print(notice, flush=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = resolve_run_dir(Path(args.out) / f"{stamp}-{args.profile}{'-smoke' if args.smoke else ''}")
    print(f"run folder: {run_dir}")
    runs, servers = run_notebooks(notebooks, params, run_dir, share_servers=not args.own_servers,
                                  expected=expected_times(args.profile, args.smoke, overrides))
    combine_results(run_dir)
    index = write_index(run_dir, runs, args.profile, params, servers)
    print(f"report: {index}")
    return 0 if all(r.ok for r in runs) else 1


def expected_times(profile: str, smoke: bool, overrides: dict[str, Any] | None = None
                   ) -> tuple[dict[str, float], str]:
    """Each notebook's run time in the reference run of this profile and this machine's CPU class (what ``make run``
    announces before a notebook starts), and which reference that is; ({}, why not) where there is none. A
    ``--set`` (your prompts file, more prompts) changes the work, so the reference's times would mislead."""
    from specdec_helpers.report.reference import load_reference, machine_class, reference_file

    if smoke:
        return {}, "no reference for the smoke parameters"
    if overrides:
        return {}, f"no reference run with {', '.join(sorted(overrides))} set"
    path, same_class = reference_file(profile, cpu_class=machine_class())
    reference = load_reference(path) if path else None
    if reference is None:
        return {}, f"no reference run for profile {profile} yet"
    prov = reference.get("provenance") or {}
    where = f"reference {path.stem}, {prov.get('hardware', '?')}" + ("" if same_class else ", another CPU class")
    return {stem: float(n["seconds"]) for stem, n in reference["notebooks"].items() if n.get("seconds")}, where


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def run_notebooks(notebooks: list[Path], params: dict[str, Any], run_dir: Path,
                  share_servers: bool = True, expected: tuple[dict[str, float], str] = ({}, "")
                  ) -> tuple[list[NotebookRun], dict[str, Any] | None]:
    """Execute ``notebooks`` in order, sharing one pool of servers between them; every server is stopped
    before this returns (a failed notebook, Ctrl-C or SIGTERM included). Returns the runs and the pool's
    summary (starts, reuses, per notebook), also written to ``servers.json``."""
    runs: list[NotebookRun] = []
    pool = RunPool(run_dir / "servers", os.getpid()) if share_servers else None
    saved = {k: os.environ.get(k) for k in (*(pool.environment() if pool else {}), NOTEBOOK_ENV)}
    main_thread = threading.current_thread() is threading.main_thread()
    previous_sigterm = signal.signal(signal.SIGTERM, _exit_on_sigterm) if main_thread else None
    try:
        if pool:
            os.environ.update(pool.environment())  # papermill's kernels inherit it
        ordered = execution_order(notebooks) if pool else list(notebooks)
        if ordered != list(notebooks):
            first = [n.stem for n in ordered if not uses_shared_servers(n)]
            print(f"running {', '.join(first)} first: it starts only servers of its own, which need the memory "
                  "the shared servers would hold (the report keeps the notebooks' order)", flush=True)
        times, where = expected
        if times and all(n.stem in times for n in ordered):
            print(f"expected: {_minutes(sum(times[n.stem] for n in ordered))} in all ({where})", flush=True)
        for notebook in ordered:
            before = times.get(notebook.stem)
            print(f"{notebook.stem}: running, expected {_minutes(before) if before else '? (' + where + ')'}",
                  flush=True)
            os.environ[NOTEBOOK_ENV] = notebook.stem
            run = execute(notebook, params, run_dir)
            error = f": {run.error[:300]}" if run.error else ""
            print(f"{notebook.stem}: {'ok' if run.ok else 'FAILED'} in {_minutes(run.seconds)}"
                  + (f" (expected {_minutes(before)})" if before else "") + error, flush=True)
            runs.append(run)
        position = {n.stem: i for i, n in enumerate(notebooks)}
        runs.sort(key=lambda r: position.get(r.name, len(position)))
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous_sigterm)
        for name, value in saved.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
        summary = None
        if pool:
            pool.stop_all()  # (and if this failed, each server's guard stops it once this process exits)
            summary = pool.summary()
            (run_dir / "servers.json").write_text(json.dumps({**summary, "events": pool.events()}, indent=1))
            print(f"vLLM servers: {summary['starts']} started ({summary['shared_starts']} shared, "
                  f"{summary['own_starts']} a notebook's own; {summary['startup_s']:.0f} s of start-up), "
                  f"{summary['reuses']} reused")
    return runs, summary


def _exit_on_sigterm(signum, frame) -> None:  # so that the finally block above stops the servers
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    sys.exit(main())
