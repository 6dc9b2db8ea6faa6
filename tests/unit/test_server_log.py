"""A failed start's message names the cause that vLLM logged above the traceback that ends its log."""

from __future__ import annotations

import pytest

from specdec_helpers.engine.server_log import start_failure_excerpt

TRACEBACK = ["Traceback (most recent call last):", '  File "api_server.py", line 1, in <module>',
             "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"]


def _log(tmp_path, cause: list[str], filler: int = 50):
    path = tmp_path / "vllm-baseline.log"
    lines = ["(APIServer pid=1) INFO 12-06 12:43:56 [api_server.py:1] starting"] + cause
    path.write_text("\n".join(lines + ["(APIServer pid=1) INFO loading"] * filler + TRACEBACK) + "\n")
    return path


@pytest.mark.parametrize("exit_code", ["-9", "None"])
def test_a_killed_worker_is_named_with_the_memory_free(tmp_path, exit_code):
    path = _log(tmp_path, [
        f"(EngineCore pid=2) ERROR 12-06 12:44:24 [multiproc_executor.py:315] Worker proc VllmWorker-0 died "
        f"unexpectedly (exit code: {exit_code}), shutting down executor.",
        "(EngineCore pid=2) ERROR 12-06 12:44:24 [core.py:1510] Traceback (most recent call last):",
        '(EngineCore pid=2) ERROR 12-06 12:44:24 [core.py:1510]   File "core.py", line 1482, in run_engine_core'])
    message = start_failure_excerpt(path)
    first, *rest = message.splitlines()
    assert "out-of-memory killer" in first and "GiB of memory is free now" in first
    assert any(f"(exit code: {exit_code})" in line for line in rest[:3])
    assert not any('File "core.py"' in line or "Traceback" in line for line in rest[:3])  # frames are left out
    assert message.endswith(TRACEBACK[-1])


def test_a_worker_with_an_error_of_its_own_is_not_called_killed(tmp_path):
    path = _log(tmp_path, ["(EngineCore pid=2) ERROR 12-06 12:44:24 [core.py:1510] ValueError: Available memory on "
                           "node 0 (1.2/23.5 GiB) on kv cache allocation is less than requested memory for kv"])
    message = start_failure_excerpt(path)
    assert "out-of-memory killer" not in message
    assert message.splitlines()[1].endswith("less than requested memory for kv")


def test_a_short_log_is_its_tail_alone(tmp_path):
    path = _log(tmp_path, [], filler=2)
    assert start_failure_excerpt(path).splitlines()[0].startswith("Last lines of")
    assert start_failure_excerpt(tmp_path / "missing.log").startswith("(no log at")
