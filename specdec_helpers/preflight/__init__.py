"""Check a run before any server starts: do the prompts fit, does the memory plan fit, do the models speak
the same vocabulary? A server takes 45 s to many minutes to start, and a run that does not fit fails late and
far from its cause (a prompt rejected, an answer silently cut, vLLM stopping after loading the weights, a
draft that almost never agrees). Free RAM is read by ``checks.available_ram_bytes``: patch it there."""

from specdec_helpers.preflight.checks import Request, check_run, resolve, run_checks
from specdec_helpers.preflight.report import PreflightError, PreflightReport

__all__ = ["PreflightError", "PreflightReport", "Request", "check_run", "resolve", "run_checks"]
