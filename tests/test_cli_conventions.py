"""Command-line conventions users of other tools expect: --version, short options, python -m,
options before RUN_DIR, plain help within 80 columns listing the exit statuses, completion,
and wrong values answered in our own words."""

from __future__ import annotations

import subprocess
import sys

import pytest
from paths import ENV as BASE_ENV
from paths import SAMPLES

from cell_otf2 import __version__

pytestmark = pytest.mark.slow  # each test starts the real command

SMALL = SAMPLES / "wraps-heartbeats"
ENV = {**BASE_ENV, "COLUMNS": "80"}
COMMANDS = ([], ["convert"], ["check"], ["inspect"], ["report"], ["simulate"])


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cell_otf2", *args], capture_output=True,
                          text=True, env=ENV, timeout=120)


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag):
    r = run(flag)
    assert r.returncode == 0 and r.stdout.strip() == f"cell2otf2 {__version__}"


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0] if c else "top")
def test_help_is_plain_and_fits_80_columns(command):
    r = run(*command, "-h")
    assert r.returncode == 0, r.stderr
    text = r.stdout
    for noise in ("<bool>", "<str>", "<int", "<path>", "<float", "{", "}", "╭", "<list"):
        assert noise not in text, (noise, text)
    assert max(map(len, text.splitlines())) <= 80, text
    if command in ([], ["convert"]):
        assert "Exit status: 0 converted" in text and "4 output" in text
    if command == []:
        assert "--install-completion" in text


def test_short_options_and_options_before_the_run(tmp_path):
    r = run("-q", "-o", str(tmp_path / "a.otf2"), str(SMALL))
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r.stderr
    r = run("-o", str(tmp_path / "a.otf2"), "-f", "-q", str(SMALL))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "a.otf2").exists()


@pytest.mark.parametrize("args,needle", [
    (["--dma-style", "foo"], "'foo' is not one of 'rma', 'messages'"),
    (["--alpha", "nan"], "--alpha"),
])
def test_wrong_values_in_our_own_words(tmp_path, args, needle):
    r = run(str(SMALL), "-o", str(tmp_path / "a.otf2"), *args)
    assert r.returncode == 2 and needle in r.stderr, r.stderr
    assert "Value error" not in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("args", [["--spes", "0"], ["--ranks", "0"], ["--workload", "nope"],
                                  ["--byte-order", "X"]])
def test_simulate_refuses_impossible_shapes(tmp_path, args):
    r = run("simulate", str(tmp_path / "s"), *args)
    assert r.returncode == 2, r.stderr
    assert "Value error" not in r.stderr and not (tmp_path / "s").exists()


def test_summary_counts_in_words_and_fits_100_columns():
    from cell_otf2.run.summary import Summary, plural

    assert [plural(n, "process") for n in (0, 1, 2)] == ["0 processes", "1 process",
                                                         "2 processes"]
    s = Summary(run_dir="run", archive="a.otf2", processes=1, locations=1, records_in=1,
                events_written=1, messages_matched=1, dma_transfers=1, order_violations=1,
                damage=["unresolved_wrap: " + "records after a decrementer step " * 6],
                stage_seconds={k: 1234.56 for k in ("read", "decode", "sync", "write")},
                converter_processes=2, locations_handed_over=3, events_handed_over=40)
    lines = s.lines()
    text = "\n".join(lines)
    for words in ("1 process,", "1 location,", "1 record read", "1 event written",
                  "1 message matched", "1 DMA transfer", "1 order violation", "(1 kind)"):
        assert words in text, words
    assert all(len(ln) <= 100 for ln in lines), [ln for ln in lines if len(ln) > 100]


#: a command line whose ``inspect`` fails with an unexpected exception (a bug, injected)
_BROKEN_INSPECT = (
    "import sys\n"
    "import cell_otf2.run.run_info as run_info\n"
    "def broken(run_dir):\n"
    "    raise RuntimeError('injected')\n"
    "run_info.inspect = broken\n"
    "from cell_otf2.cli import main\n"
    "main(sys.argv[1:])\n"
)


def run_broken(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _BROKEN_INSPECT, "inspect", str(SMALL), *args],
                          capture_output=True, text=True, env=env or ENV, timeout=120)


def test_internal_error_has_its_own_status_and_no_traceback():
    """An unexpected exception is exit 70 (not 3, which means unreadable input): one line
    that says how to see where it came from, no traceback."""
    r = run_broken()
    assert r.returncode == 70, r.stderr
    assert r.stderr.splitlines() == [
        "cell2otf2: error: internal error: RuntimeError: injected (a bug in cell2otf2; "
        "--debug or CELL2OTF2_DEBUG=1 prints its traceback)"]
    assert r.stdout == ""


@pytest.mark.parametrize("how", ["option", "environment"])
def test_debug_prints_the_traceback_of_an_internal_error(how):
    if how == "option":
        r = run_broken("--debug")
    else:
        r = run_broken(env={**ENV, "CELL2OTF2_DEBUG": "1"})
    assert r.returncode == 70, r.stderr
    assert "Traceback (most recent call last)" in r.stderr
    assert "in broken" in r.stderr  # where it was raised
    assert r.stderr.splitlines()[-1] == "cell2otf2: error: internal error: RuntimeError: injected"


def test_debug_changes_nothing_else(tmp_path):
    r = run("inspect", "--debug", str(SMALL))
    assert r.returncode == 0, r.stderr
    assert r.stdout == run("inspect", str(SMALL)).stdout
    r = run("-q", "--debug", "-o", str(tmp_path / "a.otf2"), str(SMALL))
    assert r.returncode == 0 and r.stdout == "", r.stderr


def test_the_command_line_changes_no_typer_class_and_no_excepthook():
    """The plain help layout is a command class of our own: importing and running the CLI
    leaves typer's classes and sys.excepthook as they were."""
    code = (
        "import sys, typer.core\n"
        "classes = (typer.core.TyperArgument, typer.core.TyperOption, typer.core.TyperCommand)\n"
        "before = [dict(vars(c)) for c in classes], sys.excepthook\n"
        "from cell_otf2.cli import main\n"
        "try:\n"
        "    main(['inspect', '-h'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(before == ([dict(vars(c)) for c in classes], sys.excepthook))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "True"
