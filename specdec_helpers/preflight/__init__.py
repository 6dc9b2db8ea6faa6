"""Check a run before any server starts: do the prompts and the memory plan fit, do the models share a vocabulary?
A run that does not fit fails late and far from its cause. Free RAM: ``checks.available_ram_bytes`` (patch it)."""

from specdec_helpers.preflight.checks import Request, run_checks
from specdec_helpers.preflight.report import PreflightError, PreflightReport
from specdec_helpers.preflight.settings import RunSettings, planned_gpu

__all__ = ["PreflightError", "PreflightReport", "Request", "RunSettings", "planned_gpu", "run_checks"]
