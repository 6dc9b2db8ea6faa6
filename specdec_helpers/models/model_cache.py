"""The model cache every provider shares: where things live, locks, atomic writes, checksums.

Providers (``wheel_models`` for GGUF files shipped in PyPI wheels, ``drafts`` for the distilled
drafts that ship with this repository) import from here and never from ``models``, the resolver
that chooses between them: that keeps the dependency one-way.

Everything lands in ``$SPECDEC_CACHE`` (default ``~/.cache/specdec``). Writes are atomic: a model
is built in a temporary folder and renamed into place, so an interrupted run never leaves a
half-written model behind, and a second call returns at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

#: Written last into every provisioned model folder: its presence means "complete".
MANIFEST_NAME = "specdec-model.json"


class ModelError(RuntimeError):
    """A model could not be turned into a local directory; the message says what to do."""


def cache_root() -> Path:
    """The folder for converted models, downloaded wheels and environments."""
    root = os.environ.get("SPECDEC_CACHE") or Path.home() / ".cache" / "specdec"
    return Path(root).expanduser()


def models_dir() -> Path:
    return cache_root() / "models"


def wheels_dir() -> Path:
    return cache_root() / "wheels"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextmanager
def locked(name: str) -> Iterator[None]:
    """Serialise provisioning of one model across processes (tests and notebooks may race)."""
    lock_dir = cache_root() / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def atomic_directory(final: Path) -> Iterator[Path]:
    """Yield a temporary folder next to ``final``; rename it into place only on success."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    try:
        yield tmp
        if final.exists():  # someone else finished first; theirs is as good as ours
            shutil.rmtree(tmp)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
