"""The model cache (``$SPECDEC_CACHE``, default ``~/.cache/specdec``) the providers share: where things live,
checksums, and :func:`build_once`, which never leaves a half-written model behind."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from filelock import FileLock

#: Written last into every provisioned model folder: its presence means "complete".
MANIFEST_NAME = "specdec-model.json"


class ModelError(RuntimeError):
    """A model could not be turned into a local directory; the message says what to do."""


def cache_root() -> Path:  # converted models, downloaded wheels and environments
    return Path(os.environ.get("SPECDEC_CACHE") or Path.home() / ".cache" / "specdec").expanduser()


def models_dir() -> Path:
    return cache_root() / "models"


def wheels_dir() -> Path:
    return cache_root() / "wheels"


def read_json(path: Path) -> dict:
    """A JSON file's content, or {} when it is missing or unreadable (a manifest not yet written)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


def sha256_of(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def build_once(final: Path, is_current: Callable[[Path], bool], build: Callable[[Path], None]) -> Path:
    """``final``, first built by ``build(tmp)`` in a temporary folder next to it unless ``is_current(final)``;
    one writer per model across processes (tests and notebooks may race), locked in ``$SPECDEC_CACHE/locks``."""
    if is_current(final):
        return final
    (cache_root() / "locks").mkdir(parents=True, exist_ok=True)
    with FileLock(cache_root() / "locks" / f"{final.name}.lock"):
        if is_current(final):  # another process built it while we waited
            return final
        if final.exists():  # an older build or an interrupted layout
            shutil.rmtree(final)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
        try:
            build(tmp)
            os.replace(tmp, final)  # complete, or not there at all
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final
