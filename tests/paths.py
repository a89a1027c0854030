"""Where the tests find the repository and its bundled sample runs (imported by the test
modules; ``tests`` is on pytest's ``pythonpath``)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"
#: the environment of a subprocess that imports this checkout's ``cell_otf2`` (and the
#: benchmarks' support package ``cellbench``, from bench/)
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "bench")])}


def snapshot(directory: Path) -> dict[str, bytes | None]:
    """Every entry below ``directory``: relative path -> file bytes (None for a directory)."""
    out: dict[str, bytes | None] = {}
    for root, dirs, files in os.walk(directory):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), directory)] = None
        for f in files:
            path = os.path.join(root, f)
            out[os.path.relpath(path, directory)] = Path(path).read_bytes()
    return out
