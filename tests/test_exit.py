"""The command ends without the interpreter's teardown once its work is written
(``cell_otf2.__main__._exit``): the status and every byte of output are what the ordinary exit
gives, and the ordinary exit is kept wherever the teardown still has work to do."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from paths import ENV, SAMPLES

from cell_otf2 import __main__ as entry

SMALL = SAMPLES / "wraps-heartbeats"


#: libraries that act at exit, which ``_exit`` leaves to the ordinary exit
AT_EXIT = ("mpi4py", "matplotlib", "multiprocessing")


@pytest.fixture
def exits(monkeypatch):
    """``os._exit`` recorded instead of taken, in a process as the command's is: none of the
    libraries that act at exit loaded (earlier tests of the suite load some)."""
    taken: list[int] = []
    monkeypatch.setattr(entry.os, "_exit", taken.append)
    for name in AT_EXIT:
        monkeypatch.delitem(sys.modules, name, raising=False)
    return taken


@pytest.fixture
def alone(monkeypatch):
    """No other thread running (earlier tests of the suite may leave some)."""
    import threading

    monkeypatch.setattr(threading, "active_count", lambda: 1)


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (1, 1), (4, 4), (130, 130)])
def test_status_kept(exits, alone, code, status):
    entry._exit(SystemExit(code))
    assert exits == [status]


@pytest.mark.parametrize("code", ["a message", -1, 256])
def test_a_status_the_interpreter_must_render_takes_the_ordinary_exit(exits, alone, code):
    entry._exit(SystemExit(code))
    assert exits == []


@pytest.mark.parametrize("module", AT_EXIT)
def test_libraries_that_act_at_exit_keep_the_ordinary_exit(exits, alone, monkeypatch, module):
    monkeypatch.setitem(sys.modules, module, object())
    entry._exit(SystemExit(0))
    assert exits == []


def test_a_running_thread_keeps_the_ordinary_exit(exits):
    import threading

    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        entry._exit(SystemExit(0))
    finally:
        stop.set()
        worker.join()
    assert exits == []


@pytest.mark.slow
def test_the_command_delivers_all_its_output_and_status(tmp_path):
    """The summary as JSON through a pipe, whole, then the same conversion refused (exit 4)."""
    out = tmp_path / "a.otf2"
    cmd = [sys.executable, "-m", "cell_otf2", str(SMALL), "-o", str(out), "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=120)
    assert r.returncode in (0, 1), r.stderr
    summary = json.loads(r.stdout)
    assert summary["records_in"] > 0 and summary["events_written"] > 0
    again = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=120)
    assert again.returncode == 4 and "already exists" in again.stderr
