"""Where the tests find the repository and its bundled sample runs (imported by the test
modules; ``tests`` is on pytest's ``pythonpath``)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"
#: the environment of a subprocess that imports this checkout's ``cell_otf2``
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
