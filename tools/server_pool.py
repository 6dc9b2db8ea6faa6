"""The owner's side of a run's server pool (``specdec_helpers.engine.pool``): ``make run`` (and the test tiers) open
it for their kernels, stop its servers at the end, after a failure and on Ctrl-C, and report what it did. Kernels
only acquire, hand back and make room; they never need what is here."""

from __future__ import annotations

from typing import Any

from specdec_helpers.engine.pool import OWNER_ENV, POOL_ENV, Entry, ServerPool
from specdec_helpers.engine.processes import group_alive


class RunPool(ServerPool):
    """A run's pool as its owner (or a test watching it) sees it: the ledger's folder and the owner's pid."""

    def environment(self) -> dict[str, str]:
        """The variables that open this pool for a child process (a papermill kernel): ``active_pool`` reads them."""
        return {POOL_ENV: str(self.folder), OWNER_ENV: str(self.owner_pid)}

    def events(self) -> list[dict[str, Any]]:
        return self._read()["events"]

    def running(self) -> list[Entry]:
        return [e for e in self._read()["entries"].values() if e.alive()]

    def stop_idle(self) -> int:
        """Stop every idle server (another program is about to need the memory). Returns how many."""
        return self._locked_stop_idle_until(lambda _: False)

    def stop_all(self) -> list[int]:
        """Stop every shared server (end of run, Ctrl-C); safe to call twice. Returns the groups still alive."""
        with self.lock:
            data = self._read()
            groups = [e.pgid for e in data["entries"].values()]
            for entry in list(data["entries"].values()):
                self._stop(data, entry)
            self._write(data)
        return [g for g in groups if group_alive(g)]

    def summary(self) -> dict[str, Any]:
        """Starts and reuses, in total and per notebook: what ``make run`` reports."""
        events, per_notebook = self.events(), {}
        kinds = {"start": "start", "start-own": "own", "reuse": "reuse"}
        for event in (e for e in events if e["event"] in kinds):
            counts = per_notebook.setdefault(event["notebook"] or "-", dict.fromkeys(kinds.values(), 0))
            counts[kinds[event["event"]]] += 1
        count = {kind: sum(e["event"] == kind for e in events) for kind in kinds}
        return {"starts": count["start"] + count["start-own"], "shared_starts": count["start"],
                "own_starts": count["start-own"], "reuses": count["reuse"],
                "startup_s": round(sum(e["startup_s"] for e in events if e["event"] in ("start", "start-own")), 1),
                "per_notebook": per_notebook}
