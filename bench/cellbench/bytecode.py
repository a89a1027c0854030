"""The checkout's bytecode, compiled as ``pip install`` compiles an installed package's: a
timed command then starts as a user's does, not compiling every module of ``cell_otf2`` anew
(about 0.3 s of every command where the environment sets ``PYTHONDONTWRITEBYTECODE``, as
these machines do, or the checkout is fresh). Writes ``__pycache__`` beside the sources and
nothing else."""

from __future__ import annotations

import compileall
from pathlib import Path


def compile_package(root: Path) -> bool:
    """Compile every module of ``root / "cell_otf2"`` whose bytecode is missing or stale; True
    if all compiled."""
    return bool(compileall.compile_dir(str(root / "cell_otf2"), quiet=1))
