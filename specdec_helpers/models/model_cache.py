"""The model cache every provider shares: where things live, locks, atomic writes, checksums.

Providers (``wheel_models``, ``drafts``) import from here, never from ``resolve``, which chooses
between them. Models are built in a temporary folder and renamed into ``$SPECDEC_CACHE`` (default
``~/.cache/specdec``), so an interrupted run never leaves a half-written model behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from filelock import FileLock

#: Written last into every provisioned model folder: its presence means "complete".
MANIFEST_NAME = "specdec-model.json"


class ModelError(RuntimeError):
    """A model could not be turned into a local directory; the message says what to do."""


def cache_root() -> Path:
    """The folder for converted models, downloaded wheels and environments."""
    return Path(os.environ.get("SPECDEC_CACHE") or Path.home() / ".cache" / "specdec").expanduser()


def models_dir() -> Path:
    return cache_root() / "models"


def wheels_dir() -> Path:
    return cache_root() / "wheels"


def sha256_of(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def locked(name: str) -> FileLock:
    """One writer per model across processes (tests and notebooks may race): ``with locked(key):``."""
    (cache_root() / "locks").mkdir(parents=True, exist_ok=True)
    return FileLock(cache_root() / "locks" / f"{name}.lock")


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
