"""The one native switch (cell_otf2/native/__init__.py): ``helper`` gives a compiled helper
where it is built and None once ``CELL2OTF2_NO_NATIVE`` is set, asked at every call; an
unknown name is refused; and a whole conversion run with the switch off in a fresh process
imports no compiled helper at all."""

from __future__ import annotations

import subprocess
import sys

import pytest
from paths import ENV, SAMPLES

from cell_otf2 import native


@pytest.mark.parametrize("name", native.HELPERS)
def test_the_switch_turns_every_helper_off(monkeypatch, native_ways, name):
    got = {way: native.helper(name) for way in native_ways(monkeypatch)}
    assert got["numpy"] is None
    if not native.switched_off() and native._built(name) is not None:
        assert got["native"] is native._built(name)
        assert got["native"].__name__ == f"cell_otf2.native._{name}"


def test_an_empty_variable_leaves_the_helpers_on(monkeypatch):
    monkeypatch.setenv(native.OFF_VARIABLE, "")
    assert not native.switched_off()
    assert native.helper("evtwrite") is native._built("evtwrite")


def test_an_unknown_helper_is_refused():
    with pytest.raises(ValueError, match="no compiled helper 'loops'"):
        native.helper("loops")


def test_switched_off_a_conversion_imports_no_helper(tmp_path):
    """In a fresh process with the switch off, a whole conversion runs on the numpy twins
    and the ctypes writer: no ``cell_otf2.native._*`` module is ever imported."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from cell_otf2.run.conversion import convert\n"
        f"convert(Path({str(SAMPLES / 'fft-16spe')!r}), Path({str(tmp_path / 'a.otf2')!r}))\n"
        "print(sorted(m for m in sys.modules if m.startswith('cell_otf2.native._')))\n")
    env = {**ENV, native.OFF_VARIABLE: "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True)
    assert out.stdout.splitlines()[-1] == "[]"
    assert (tmp_path / "a.otf2").is_file()
