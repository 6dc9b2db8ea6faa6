"""The preflight's report: one row per check, printed as a table (Markdown in a notebook)."""

from __future__ import annotations

from dataclasses import dataclass, field


class PreflightError(ValueError):
    """The run would fail or measure something else; ``report`` holds every check for display."""

    def __init__(self, message: str, report: "PreflightReport") -> None:
        super().__init__(message)
        self.report = report


@dataclass
class Check:
    """One line of the report: ``ok`` True (passed), False (refused) or None (not checked: ``fix`` says why)."""

    what: str
    value: str
    limit: str
    ok: bool | None
    fix: str = ""
    order: int = 50  # failures are listed by it: environment first, then models, prompts, memory


@dataclass
class PreflightReport:
    """Every check of one run, in the order they ran; ``notes`` are printed under the table."""

    profile: str
    target_model: str
    draft_models: list[str]
    platform: str
    hardware: str
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, what: str, value: str, limit: str, ok: bool | None, fix: str = "", order: int = 50) -> None:
        self.checks.append(Check(what, value, limit, ok, "" if ok else fix, order))

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def failures(self) -> list[Check]:
        return sorted((c for c in self.checks if c.ok is False), key=lambda c: c.order)

    def rows(self) -> list[dict[str, str]]:
        verdicts = {True: "OK", False: "REFUSED", None: "not checked"}
        return [{"check": c.what, "value": c.value, "limit": c.limit, "ok": verdicts[c.ok]} for c in self.checks]

    def title(self) -> str:
        return (f"Preflight for profile {self.profile} ({self.platform}, {self.hardware}): "
                f"{self.target_model} with {', '.join(self.draft_models) or 'no draft model'}")

    def message(self) -> str:  # the refusal, one bullet per problem (empty when all passed)
        n, bullets = len(self.failures), "\n".join(f"- {c.what}: {c.fix}" for c in self.failures)
        return (f"Preflight refused the run of profile {self.profile} before starting any server "
                f"({n} problem{'s' if n > 1 else ''}):\n{bullets}") if n else ""

    def __str__(self) -> str:
        rows = [("check", "value", "limit", "ok")] + [tuple(r.values()) for r in self.rows()]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        table = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        table.insert(1, "  ".join("-" * w for w in widths))
        notes = [f"note: {n}" for n in self.notes]
        return "\n".join([self.title(), *table, *notes, self.message() or "All checks passed."])

    def __repr__(self) -> str:
        return f"<PreflightReport {self.profile}: {'OK' if self.ok else f'{len(self.failures)} problem(s)'}>"

    def _repr_markdown_(self) -> str:
        esc = str.maketrans({"|": "\\|"})
        lines = [f"**{self.title().translate(esc)}**", "", "| check | value | limit | ok |", "|---|---|---|---|"]
        lines += [f"| {' | '.join(cell.translate(esc) for cell in r.values())} |" for r in self.rows()]
        return "\n".join(lines + [""] + [f"*note: {n.translate(esc)}*  " for n in self.notes])
