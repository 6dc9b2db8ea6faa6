"""``make preflight``: check a whole profile's run before any server starts.

    python -m tools.preflight --profile cpu-coder [--smoke] [--servers N] [--set NAME=VALUE]

Exits 0 when the run fits and 2, with the reasons, when it does not.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from specdec_helpers.measure.load import LOAD_PROMPTS_PER_CLASS
from specdec_helpers.measure.phases import ITL_PROMPT_TOKENS, VERIFY_BASE_TOKENS
from specdec_helpers.preflight import PreflightReport, Request, run_checks


def profile_requests(params: dict[str, Any]) -> list[Request]:
    """The requests the series' notebooks send for one profile's parameters (sizes from the notebooks'
    own constants)."""
    from specdec_helpers.measure.prompts import load_prompt_sets, load_prompts, select

    max_tokens = int(params.get("max_tokens", 0))
    per_class = params.get("prompts_per_class")
    requests: list[Request] = []
    source = (load_prompts(params["prompts_file"]) if params.get("prompts_file")
              else load_prompt_sets(["structured", "creative"]))
    chosen = {p.id: p for p in select(source, limit_per_class=per_class)}
    if not params.get("prompts_file"):  # notebook 06's load test: structured prompts
        load_test = select(load_prompt_sets(["structured"]), limit_per_class=LOAD_PROMPTS_PER_CLASS)
        chosen.update({p.id: p for p in load_test})
    for p in chosen.values():
        requests.append(Request(p.id, p, max_tokens or p.max_tokens, group="prompt sets", parameter="", largest=None))
    answer = int(params.get("context_answer_tokens", max_tokens or 32))
    # notebook 06's long documents: sized in target tokens (prompts.long_document_for_tokens builds
    # each at most that long)
    for length in params.get("context_lengths") or []:
        requests.append(Request(f"{length:,}-token long document", [0] * int(length), answer,
                                group="long documents (context_lengths)", parameter="context_lengths",
                                largest=lambda room: f"the largest length that fits is {room:,} tokens"))
    for length in params.get("prompt_lengths", []):
        requests.append(Request(f"{length}-token prefill prompt", [0] * int(length), 1,
                                group="prefill (prompt_lengths)", parameter="prompt_lengths",
                                largest=lambda room: f"the largest length that fits is {room:,} tokens"))
    if max_tokens:
        requests.append(Request(f"{ITL_PROMPT_TOKENS}-token prompt + max_tokens (decode timing)",
                                [0] * ITL_PROMPT_TOKENS, max_tokens, group="decode timing", parameter="fixed"))
    ns = params.get("verify_ns") or []
    if ns:
        requests.append(Request(f"{VERIFY_BASE_TOKENS} cached + {max(ns)} new tokens (verify cost)",
                                [0] * (VERIFY_BASE_TOKENS + max(ns)), 1, group="verify cost (verify_ns)",
                                parameter="verify_ns",
                                largest=lambda room: f"the largest n that fits is {room - VERIFY_BASE_TOKENS:,}"))
    return requests


def check_profile(name: str, smoke: bool = False, overrides: dict[str, Any] | None = None,
                  servers: int = 2) -> PreflightReport:
    """Run every check for a whole profile (what ``make preflight`` does); returns the report,
    even when it refuses (look at ``report.ok``)."""
    from tools.profiles import load_profile

    params = load_profile(name, smoke=smoke)
    params.update(overrides or {})
    drafts = [params.get("draft_model")] + list(params.get("draft_candidates") or [])
    return run_checks(profile=name, target_model=params["target_model"], drafts=[d for d in drafts if d],
                      requests=profile_requests(params), max_model_len=int(params["max_model_len"]), servers=servers,
                      gpu_memory_utilization=float(params.get("gpu_memory_utilization", 0.45)),
                      cpu_kv_cache_gib=float(params.get("cpu_kv_cache_gib", 1)), gpu_name=params.get("gpu_name"),
                      chat_template_kwargs=params.get("chat_template_kwargs") or None,
                      served_format=str(params.get("served_format", "auto")))


def main(argv: list[str] | None = None) -> int:
    """``python -m tools.preflight --profile X [--smoke] [--set NAME=VALUE]``: 0 when the
    run fits, 2 (with the reasons) when it does not."""
    parser = argparse.ArgumentParser(description="Check a profile's run before any server starts.")
    parser.add_argument("--profile", default="cpu-coder")
    parser.add_argument("--smoke", action="store_true", help="with the smoke (test) parameters")
    parser.add_argument("--servers", type=int, default=2,
                        help="servers running at once (2: baseline and speculative side by side)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="override a parameter, as for the runner")
    args = parser.parse_args(argv)
    from tools.profiles import ProfileError, parse_overrides

    try:
        report = check_profile(args.profile, smoke=args.smoke, overrides=parse_overrides(args.set),
                               servers=args.servers)
    except (ProfileError, ValueError, OSError) as exc:
        print(f"preflight could not check profile {args.profile}: {exc}", file=sys.stderr)
        return 2
    print(report)
    return 0 if report.ok else 2


if __name__ == "__main__":
    sys.exit(main())
