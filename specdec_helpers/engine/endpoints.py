"""How a vLLM server process is reached and what it answers besides chat: its host, a free port, ``/health`` and
the prefix-cache reset. Below both :mod:`engine.serving` (one server) and :mod:`engine.pool` (a run's shared
servers), which reach servers the same way."""

from __future__ import annotations

import contextlib
import socket

import requests

HOST = "127.0.0.1"  # servers listen on the loopback only: dev mode's endpoints are not for the network


class ServerError(RuntimeError):
    """A vLLM server could not be started or used; the message says why."""


def free_port(port: int = 0) -> int:
    """A port that was free a moment ago on 127.0.0.1: ``port`` (OSError if it is taken), or with 0 one the OS picks."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, port))
        return sock.getsockname()[1]


def healthy(base_url: str, timeout_s: float = 2.0) -> bool:
    with contextlib.suppress(requests.RequestException):
        return requests.get(f"{base_url}/health", timeout=timeout_s).status_code == 200
    return False


def reset_prefix_cache(base_url: str, name: str) -> None:
    """``POST /reset_prefix_cache`` on the server at ``base_url`` (dev mode, which every VLLMServer runs in), or a
    ServerError that says why not."""
    try:
        reply = requests.post(f"{base_url}/reset_prefix_cache", timeout=30)
    except requests.RequestException as exc:
        raise ServerError(f"could not reset the prefix cache of {name} at {base_url}: {exc}") from exc
    if reply.status_code != 200:
        raise ServerError(f"{name} at {base_url} refused to reset its prefix cache ({reply.status_code}: "
                          f"{reply.text[:200]}); was it started with VLLM_SERVER_DEV_MODE=1?")
