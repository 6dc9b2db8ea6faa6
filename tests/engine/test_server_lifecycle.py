"""Server lifecycle on real vLLM engines: clear errors, and nothing left running."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest
from conftest import our_children

from specdec_helpers.engine import cpu
from specdec_helpers.engine.server_log import KILLED
from specdec_helpers.engine.serving import (
    PortInUseError,
    ServerError,
    ServerStartError,
    VLLMServer,
)
from specdec_helpers.models.quantize import int8_path


def test_missing_draft_directory_is_named(target_dir, tmp_path):
    with pytest.raises(ServerError, match="Draft model directory"):
        VLLMServer(target_dir, speculative_config={"method": "draft_model", "model": str(tmp_path / "nope"),
                                                   "num_speculative_tokens": 2})


def test_port_in_use_is_reported(target_dir, tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        before = len(our_children())
        with pytest.raises(PortInUseError, match=f"Port {port}"):
            VLLMServer(target_dir, port=port, log_dir=tmp_path).start()
        assert len(our_children()) == before


def test_server_that_dies_at_start_shows_its_log_and_leaves_nothing(target_dir, tmp_path):
    before = len(our_children())
    server = VLLMServer(target_dir, name="broken", log_dir=tmp_path, extra_args=["--max-num-seqs", "-3"])
    with pytest.raises(ServerStartError) as info:
        server.start()
    message = str(info.value)
    assert "exited with code" in message and "Last lines of" in message
    assert "max" in message.lower()  # the tail quotes vLLM's own complaint
    assert not server.running
    assert len(our_children()) == before


def test_a_worker_killed_while_starting_is_named_with_the_free_memory(target_dir, tmp_path):
    """What CI saw when two test workers' servers outgrew the machine: the kernel's OOM killer stopped a server's
    worker mid-start, and the log's tail held only the API server's traceback ("See root cause above"). Here the
    worker is killed by the same signal the OOM killer sends where CI's was: once it sizes its KV cache (killed
    earlier, while it loads the model, vLLM reports a failed initialisation without the exit code)."""
    import signal
    import threading

    import psutil

    before = len(our_children())
    server = VLLMServer(target_dir, name="killed", log_dir=tmp_path, max_model_len=1024, dtype="float32")
    killed = []

    def kill_the_worker() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not killed:
            log = server.log_path.read_text(errors="replace") if server.log_path.exists() else ""
            if server.process is not None and "for KV cache" in log:
                for child in psutil.Process(server.process.pid).children(recursive=True):
                    if child.name().startswith("VLLM::Worker"):
                        os.kill(child.pid, signal.SIGKILL)
                        killed.append(child.pid)
            time.sleep(0.2)

    killer = threading.Thread(target=kill_the_worker, daemon=True)
    killer.start()
    with pytest.raises(ServerStartError) as info:
        server.start()
    killer.join(timeout=5)
    message = str(info.value)
    assert killed, "the worker was never seen, so nothing was killed"
    assert "out-of-memory killer" in message and "GiB of memory is free now" in message
    assert "First errors in" in message and KILLED.search(message)
    assert not server.running
    assert len(our_children()) == before


def test_start_timeout_stops_the_process(target_dir, tmp_path):
    before = len(our_children())
    server = VLLMServer(target_dir, name="slow", log_dir=tmp_path, startup_timeout_s=3)
    with pytest.raises(ServerStartError, match="did not become healthy within 3 s"):
        server.start()
    time.sleep(1)
    assert len(our_children()) == before


def test_command_isolates_the_server_and_carries_request_defaults(target_dir, tmp_path, monkeypatch):
    # relative paths must survive the server's own working folder (its log folder)
    monkeypatch.chdir(target_dir.parent)
    spec = {"method": "draft_model", "model": target_dir.name, "num_speculative_tokens": 2}
    server = VLLMServer(target_dir.name, log_dir=tmp_path, speculative_config=spec, dtype="float32",
                        chat_template_kwargs={"enable_thinking": False})
    cmd = server.command()
    assert cmd[1:4] == ["-P", "-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[cmd.index("--model") + 1] == os.path.abspath(target_dir)
    assert json.loads(cmd[cmd.index("--speculative-config") + 1])["model"] == os.path.abspath(target_dir)
    # served as int8, both name the absolute path of their int8 copy (built at start, not here)
    int8 = VLLMServer(target_dir.name, log_dir=tmp_path, speculative_config=spec, dtype="int8").command()
    copy = str(int8_path(os.path.abspath(target_dir)))
    assert int8[int8.index("--model") + 1] == copy and copy.endswith("-w8a8") and os.path.isabs(copy)
    assert json.loads(int8[int8.index("--speculative-config") + 1])["model"] == copy
    assert json.loads(cmd[cmd.index("--default-chat-template-kwargs") + 1]) == {"enable_thinking": False}
    assert server.environment()["PYTHONSAFEPATH"] == "1"
    assert "--default-chat-template-kwargs" not in VLLMServer(target_dir, log_dir=tmp_path).command()


def test_server_ignores_modules_in_the_working_folder_and_stops_when_the_body_raises(target_dir, tmp_path,
                                                                                      monkeypatch):
    """Three promises of one real server (one engine start): a notebook folder with a click.py
    (uvicorn imports click) does not break it; a ``with`` block stops it, and everything it
    started, even when the body raises (as when a learner presses stop in the middle of a cell);
    and the temporary files vLLM makes at every start go away with it."""
    work = tmp_path / "notebook-folder"
    work.mkdir()
    (work / "click.py").write_text('raise ImportError("the click.py of the working folder was imported")\n')
    monkeypatch.chdir(work)
    before = len(our_children())
    with pytest.raises(KeyboardInterrupt):
        with VLLMServer(target_dir, name="isolated", log_dir=tmp_path / "logs", max_model_len=512,
                        chat_template_kwargs={"enable_thinking": False}) as server:
            assert server.running and server.startup_s > 0
            assert len(our_children()) > before  # API server and engine core
            reply = server.client().chat.completions.create(
                model=server.served_model_name, messages=[{"role": "user", "content": "Say hi."}], max_tokens=4)
            assert reply.usage.completion_tokens >= 1
            temp_dir = server.temp_dir
            assert any(temp_dir.glob("vllm_dist_*")), "vLLM's temporary files belong in the server's own folder"
            raise KeyboardInterrupt
    assert not server.running
    assert len(our_children()) == before
    assert not temp_dir.exists()  # removed with the server: nothing piles up in /tmp
    log = server.log_path.read_text()
    assert "Application startup complete" in log and "working folder was imported" not in log


def test_cpu_servers_use_every_core_unless_told(target_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    cores = sorted(os.sched_getaffinity(0))
    default = cpu.cpu_threads_default()
    # vLLM's own "auto" keeps a core back; ours names every usable core
    named = set()
    for part in default.split(","):
        first, _, last = part.partition("-")
        named.update(range(int(first), int(last or first) + 1))
    assert named == set(cores)
    assert VLLMServer(target_dir, log_dir=tmp_path).environment()["VLLM_CPU_OMP_THREADS_BIND"] == default
    assert VLLMServer(target_dir, log_dir=tmp_path, cpu_threads_bind="0").environment()["VLLM_CPU_OMP_THREADS_BIND"] == "0"
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")
    assert VLLMServer(target_dir, log_dir=tmp_path).environment()["VLLM_CPU_OMP_THREADS_BIND"] == "0"


def test_auto_dtype_is_float32_on_a_cpu_without_fast_bf16(target_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(cpu, "cpu_has_int8_dot", lambda: False)
    monkeypatch.setattr(cpu, "cpu_has_fast_bf16", lambda: False)
    cmd = VLLMServer(target_dir, log_dir=tmp_path).command()
    assert cmd[cmd.index("--dtype") + 1] == "float32"
    cmd = VLLMServer(target_dir, log_dir=tmp_path, dtype="bf16").command()
    assert cmd[cmd.index("--dtype") + 1] == "bfloat16"  # an explicit choice is kept
    monkeypatch.setattr(cpu, "cpu_has_fast_bf16", lambda: True)
    cmd = VLLMServer(target_dir, log_dir=tmp_path).command()
    assert cmd[cmd.index("--dtype") + 1] == "bfloat16"
    assert cmd[cmd.index("--model") + 1] == str(target_dir.resolve())  # not int8: no copy

