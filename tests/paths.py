"""Where the tests find the repository and its bundled sample runs (imported by the test
modules; ``tests`` is on pytest's ``pythonpath``)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"
#: the environment of a subprocess that imports this checkout's ``cell_otf2`` (and the
#: benchmarks' support package ``cellbench``, from bench/)
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "bench")])}


def interruptible() -> None:
    """``preexec_fn`` of a child the tests will interrupt: Ctrl-C (SIGINT) and SIGQUIT at
    their defaults, as a terminal starts a command, even when the test run itself was started
    with them ignored (a background job of a non-interactive shell is; its children inherit
    that, and cell2otf2, like every program, leaves an ignored SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


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
