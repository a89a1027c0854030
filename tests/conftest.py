"""Shared fixtures: the bundled sample runs by scenario name (``sample("fft-16spe")``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from paths import SAMPLES


@pytest.fixture
def sample() -> Callable[[str], Path]:
    """The path of a bundled sample run by its scenario name; fails for an unknown name."""

    def path(name: str) -> Path:
        p = SAMPLES / name
        assert (p / "run.json").is_file(), f"no sample run {name!r} in {SAMPLES}"
        return p

    return path
