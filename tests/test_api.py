"""The Python API (``cell_otf2.convert``, ``cell_otf2.inspect``), the ``report`` command's
wiring and its missing-matplotlib message, and Ctrl-C on the command line."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import types
from pathlib import Path

import pytest
from paths import interruptible

import cell_otf2
from cell_otf2 import cli as cli_mod
from cell_otf2 import signals
from cell_otf2.cli import main as cli_main
from cell_otf2.errors import CellOtf2Error

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def cli(args: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        cli_main(args)
    return int(exc.value.code or 0)


def python(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=ENV, cwd=ROOT, timeout=timeout)


def test_import_is_cheap_and_inspect_needs_no_writer():
    code = """
import sys
import cell_otf2
heavy = ("numpy", "scipy", "otf2", "matplotlib", "typer")
print(sorted(m for m in heavy if m in sys.modules))
info = cell_otf2.inspect(sys.argv[1])
print(type(info).__name__, info.totals["records"])
print(sorted(m for m in ("otf2", "matplotlib") if m in sys.modules))
"""
    r = python(code, str(SAMPLES / "fft-16spe"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["[]", "RunInfo 16950", "[]"]


def test_convert_and_inspect_are_plain_functions_whichever_import_came_first(tmp_path):
    code = """
import sys
from cell_otf2.run.conversion import convert as run_conversion  # the modules first
from cell_otf2.run.run_info import RunInfo
import cell_otf2
from cell_otf2 import convert, inspect
from cell_otf2.run.summary import Summary
s = cell_otf2.convert(sys.argv[1], sys.argv[2])
print(type(s).__name__, s.processes, callable(convert), callable(inspect),
      callable(run_conversion))
print(isinstance(inspect(sys.argv[1]), RunInfo), Summary is cell_otf2.Summary)
"""
    r = python(code, str(SAMPLES / "wraps-heartbeats"), str(tmp_path / "a.otf2"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["Summary 1 True True True", "True True"]
    assert (tmp_path / "a.otf2").exists()


def test_convert_changes_nothing_process_wide(tmp_path):
    """The API neither tunes the caller's allocator (mallopt) nor chooses an MPI transport
    nor configures logging, and writes nothing on stderr: only the command line does those
    (cell_otf2.process_setup, cli_common.configure_logging)."""
    code = """
import ctypes, logging, os, sys
calls = []
real_cdll = ctypes.CDLL
class Watched(real_cdll):
    def __getattr__(self, name):
        if name == "mallopt":
            calls.append(name)
        return super().__getattr__(name)
ctypes.CDLL = Watched
import cell_otf2.process_setup as setup
for name in ("tune_malloc", "single_host_transport", "one_blas_thread"):
    setattr(setup, name, lambda *a, _n=name: calls.append(_n))
before = dict(os.environ)
root = logging.getLogger()
handlers = (list(root.handlers), list(logging.getLogger("cell_otf2").handlers))
import cell_otf2
summary = cell_otf2.convert(sys.argv[1], sys.argv[2])
print(summary.lossy, calls, dict(os.environ) == before,
      handlers == (list(root.handlers), list(logging.getLogger("cell_otf2").handlers)))
"""
    r = python(code, str(SAMPLES / "wraps-heartbeats"), str(tmp_path / "a.otf2"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["False [] True True"]
    assert r.stderr == ""


def test_the_command_defers_numpy_extras_that_scipy_asks_for(tmp_path):
    """The command (``process_setup.defer_numpy_extras``) keeps numpy's optional submodules
    unloaded through ``scipy.sparse``'s import (which a conversion makes where the compiled
    graph loops are missing) and the whole conversion of a two-node run; each still works in
    full on first use."""
    code = """
import sys, types
from cell_otf2.process_setup import NUMPY_EXTRAS, defer_numpy_extras
print(defer_numpy_extras())
import scipy.sparse.csgraph
import cell_otf2
cell_otf2.convert(sys.argv[1], sys.argv[2])
loaded = [n for n in NUMPY_EXTRAS if type(sys.modules["numpy." + n]) is types.ModuleType]
print(loaded)
import numpy
print(int(numpy.polynomial.Polynomial([1, 2])(1)), callable(numpy.testing.assert_array_equal))
print(type(sys.modules["numpy.testing"]) is types.ModuleType)
"""
    r = python(code, str(SAMPLES / "two-nodes-hybrid"), str(tmp_path / "a.otf2"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["4", "[]", "3 True", "True"]


def numbers(line: str) -> list[float]:
    return [float(x) for x in re.findall(r"\d+(?:\.\d+)?", line)]


def test_api_summary_equals_the_cli_summary(tmp_path, capsys):
    run = SAMPLES / "context-switch-compensated"
    report = tmp_path / "api.json"
    s = cell_otf2.convert(run, tmp_path / "api" / "a.otf2", report=report,
                          read_delay_ticks=0, alpha=0.25, dma_style="messages")
    assert isinstance(s, cell_otf2.Summary) and s.lossy is False
    assert cli([str(run), "-o", str(tmp_path / "cli" / "a.otf2"), "--read-delay-ticks", "0",
                "--alpha", "0.25", "--dma-style", "messages",
                "--report", str(tmp_path / "cli.json")]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert numbers(printed[1]) == [s.processes, s.locations, s.records_in, s.events_written]
    assert numbers(printed[2]) == [s.messages_matched, s.dma_transfers, s.dma_completed]
    got = numbers(printed[3])
    assert got == pytest.approx([s.intervals_bounded, s.intervals, round(s.relaxation_ticks, 2),
                                 s.order_violations])
    assert numbers(printed[4]) == pytest.approx([
        round(s.bound_worst_ticks, 1), round(s.bound_worst_us, 3), round(s.bound_mean_ticks, 1),
        round(s.bound_mean_us, 3)])
    assert printed[5] == "  lost or unusable records: none"
    api, via_cli = (json.loads(p.read_text()) for p in (report, tmp_path / "cli.json"))
    assert api == via_cli  # same options reached the pipeline
    d = s.to_dict()
    assert json.loads(json.dumps(d)) == d and d["lossy"] is False
    assert d["events_written"] == s.events_written and "stage_seconds" in d


def test_api_options_reach_the_pipeline(tmp_path):
    run = SAMPLES / "fft-16spe"
    wide = cell_otf2.convert(run, tmp_path / "a.otf2", read_delay_ticks=8)
    narrow = cell_otf2.convert(run, tmp_path / "b.otf2")  # default: slot order exact
    assert narrow.bound_mean_ticks < wide.bound_mean_ticks  # the delay loosens slot order
    with pytest.raises(CellOtf2Error):  # exists: exit status 4 on the command line
        cell_otf2.convert(run, tmp_path / "a.otf2")
    again = cell_otf2.convert(run, tmp_path / "a.otf2", force=True)
    assert again.events_written == wide.events_written


@pytest.mark.parametrize("options", [{"alpha": 1.5}, {"alpha": -0.1},
                                     {"read_delay_ticks": -1}, {"read_delay_ticks": math.inf},
                                     {"read_delay_ticks": math.nan},
                                     {"read_delay_ticks": 2.0**31 + 1},
                                     {"dma_style": "carrier pigeon"}])
def test_api_rejects_options_out_of_range(tmp_path, options):
    name = next(iter(options))
    with pytest.raises(ValueError, match="read delay" if name == "read_delay_ticks" else name):
        cell_otf2.convert(SAMPLES / "fft-16spe", tmp_path / "a.otf2", **options)
    assert not (tmp_path / "a.otf2").exists()
    with pytest.raises(TypeError):
        cell_otf2.convert(SAMPLES / "fft-16spe", tmp_path / "a.otf2", speed=2)


def test_api_refusal_is_a_cell_otf2_error(tmp_path):
    with pytest.raises(CellOtf2Error, match="run.json"):
        cell_otf2.inspect(tmp_path)
    with pytest.raises(CellOtf2Error, match="run.json"):
        cell_otf2.convert(tmp_path, tmp_path / "out" / "a.otf2")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------
# cell2otf2 report
# ---------------------------------------------------------------------------------------------


def test_report_without_matplotlib_says_how_to_install_it(tmp_path):
    """With matplotlib unimportable, conversion still works and report exits 2 with the
    install command."""
    code = """
import sys
sys.modules["matplotlib"] = None  # import matplotlib now fails, find_spec finds nothing
from cell_otf2.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    print("status", exc.code)
"""
    archive = tmp_path / "a.otf2"
    conv = python(code, str(SAMPLES / "wraps-heartbeats"), "-o", str(archive), "--quiet")
    assert conv.stdout.strip() == "status 0" and archive.exists(), conv.stderr
    r = python(code, "report", str(archive), "-o", str(tmp_path / "report"))
    assert r.stdout.strip() == "status 2"
    assert r.stderr == "cell2otf2 report needs matplotlib: pip install 'cell2otf2[report]'\n"
    assert not (tmp_path / "report").exists()


def test_report_calls_the_renderer_and_prints_what_it_wrote(tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    calls = []

    import cell_otf2.report.progress as progress

    def render_report(archive, out_dir, *, max_events=200_000, sync_report=None,
                      progress=None, force=False):
        calls.append((archive, out_dir, max_events, sync_report))
        assert progress is not None and not progress.enabled  # stderr is not a terminal
        return types.SimpleNamespace(index_html=out_dir / "index.html",
                                     figures=[out_dir / "timeline.png", out_dir / "waits.png"],
                                     csv=out_dir / "contexts.csv")

    fake = types.ModuleType("cell_otf2.report")
    fake.render_report = render_report
    monkeypatch.setitem(sys.modules, "cell_otf2.report", fake)
    monkeypatch.setitem(sys.modules, "cell_otf2.report.progress", progress)
    monkeypatch.setattr(cell_otf2, "report", fake, raising=False)
    out = tmp_path / "r"
    assert cli(["report", "x.otf2", "-o", str(out)]) == 0
    assert cli(["report", "x.otf2", "-o", str(out), "--max-events", "500",
                "--sync-report", "s.json"]) == 0
    assert calls == [(Path("x.otf2"), out, 200_000, None),
                     (Path("x.otf2"), out, 500, Path("s.json"))]
    lines = capsys.readouterr().out.splitlines()
    assert lines[:4] == [f"cell2otf2 report: {out / 'index.html'}", f"  {out / 'timeline.png'}",
                         f"  {out / 'waits.png'}", f"  {out / 'contexts.csv'}"]
    assert cli(["report", "x.otf2", "-o", str(out), "--max-events", "0"]) == 2
    assert cli(["report", "x.otf2"]) == 2  # -o is required


# ---------------------------------------------------------------------------------------------
# Ctrl-C
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["convert", "inspect", "check"])
def test_ctrl_c_in_a_command(tmp_path, capsys, monkeypatch, command):
    import cell_otf2.input.dumps
    import cell_otf2.run.check
    import cell_otf2.run.run_info

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    for module in (cell_otf2.input.dumps, cell_otf2.run.run_info):
        monkeypatch.setattr(module, "read_dump", interrupt)
    run = str(SAMPLES / "wraps-heartbeats")
    args = {"convert": [run, "-o", str(tmp_path / "o" / "a.otf2")],
            "inspect": ["inspect", run], "check": ["check", run]}[command]
    assert cli(args) == signals.EXIT_INTERRUPTED == 130
    out, err = capsys.readouterr()
    assert err == "cell2otf2: interrupted\n" and out == ""
    assert not (tmp_path / "o").exists()


def test_ctrl_c_that_typer_handles_itself(capsys, monkeypatch):
    """A KeyboardInterrupt typer sees (outside our commands' wrapper) still gets the message."""
    import typer

    app = typer.Typer()

    @app.command("convert")
    def bare(run_dir: str) -> None:
        raise KeyboardInterrupt

    @app.command("check")  # present: main registers nothing more
    def other() -> None:
        pass

    monkeypatch.setattr(cli_mod, "app", app)
    status = cli(["run"])
    assert (status, capsys.readouterr().err) == (130, "cell2otf2: interrupted\n")


@pytest.mark.parametrize("sig, status, line", [
    (signal.SIGINT, 130, "cell2otf2: interrupted"),
    (signal.SIGTERM, 143, "cell2otf2: interrupted (SIGTERM)")])
def test_interruption_that_breaks_a_start_up_import(sig, status, line):
    """A signal that stops a C extension's import during start-up (numpy's, which turns it
    into "ImportError: ... failed") is one line and the signal's status, not a traceback:
    the command's ``__main__`` asks ``signals.received`` what broke the import. Without a
    signal, such an error stays what it is."""
    code = """
import os, signal, sys, time
import cell_otf2.process_setup as setup
from cell_otf2 import __main__ as entry
which = sys.argv[1]
def broken_import():
    if which != "none":
        try:
            os.kill(os.getpid(), int(which))
            time.sleep(5)
        except KeyboardInterrupt:
            pass
    raise ImportError("initialization failed")
setup.defer_numpy_extras = broken_import
sys.argv = ["cell2otf2", "--version"]
entry.main()
"""
    r = python(code, str(int(sig)))
    assert (r.returncode, r.stderr) == (status, line + "\n")
    r = python(code, "none")
    assert r.returncode == 1 and "ImportError: initialization failed" in r.stderr


def test_real_sigint_during_conversion(tmp_path):
    """SIGINT to a running cell2otf2: message, status 130, the output path as it was."""
    code = """
import sys, time
import cell_otf2.input.dumps as dumps
def slow(*args, **kwargs):
    print("reading", flush=True)
    time.sleep(60)
dumps.read_dump = slow
from cell_otf2.cli import main
main(sys.argv[1:])
"""
    out = tmp_path / "out" / "a.otf2"
    p = subprocess.Popen([sys.executable, "-c", code, str(SAMPLES / "fft-16spe"), "-o",
                          str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=ENV, cwd=ROOT, preexec_fn=interruptible)
    try:
        assert p.stdout.readline() == "reading\n"
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 130 and err == "cell2otf2: interrupted\n"
    assert not (tmp_path / "out").exists()
