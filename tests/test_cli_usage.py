"""The command line as users of typer/click tools expect it: the same argument names everywhere,
``-q`` and ``--json`` on every command that prints a summary, defaults shown, whole help lines
in the command list, completion of every option's values, our own words (no validation library's
"Value error", no bare errno text for a folder like /proc), plurals right, and ``simulate``
saying what it will write before it writes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from paths import ENV as BASE_ENV
from paths import SAMPLES

pytestmark = pytest.mark.slow  # each test starts the real command

SMALL = SAMPLES / "wraps-heartbeats"
ENV = {**BASE_ENV, "COLUMNS": "80"}


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cell_otf2", *args], capture_output=True,
                          text=True, env=env or ENV, timeout=300)


def test_command_list_lines_are_whole():
    r = run("-h")
    listing = r.stdout.split("Commands:")[1].split("Exit status")[0]
    rows = [line for line in listing.splitlines() if line.strip()]
    assert [row.split()[0] for row in rows] == ["convert", "check", "inspect", "report",
                                               "simulate"]
    for row in rows:
        assert not row.rstrip().endswith("..."), row


@pytest.mark.parametrize("command,argument", [
    (["convert"], "RUN_DIR"), (["check"], "RUN_DIR"), (["inspect"], "RUN_DIR"),
    (["report"], "ARCHIVE"), (["simulate"], "OUT_DIR")])
def test_the_same_argument_names(command, argument):
    text = run(*command, "-h").stdout
    usage = text.splitlines()[0]
    assert usage.endswith(f"[OPTIONS] {argument}"), usage
    assert re.search(rf"^  {argument}\s", text, re.MULTILINE), text
    assert not re.search(r"^\s+(run_dir|archive|out_dir)\s", text, re.MULTILINE), text


def test_quiet_and_json_on_every_summary(tmp_path):
    r = run("check", "-q", str(SMALL))
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    r = run("check", "--json", str(SMALL))
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["processes"] == 1 and got["damage"] == [] and got["lossy"] is False
    r = run("check", str(SMALL))
    assert ": 1 process, " in r.stdout  # was "1 processes"
    r = run(str(SMALL), "-o", str(tmp_path / "a.otf2"), "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["processes"] == 1 and summary["lossy"] is False
    assert summary["intervals_bounded"] == summary["intervals"] == 4
    r = run(str(SMALL), "-o", str(tmp_path / "a.otf2"), "--json", "-q", "-f")
    assert (r.returncode, r.stdout) == (0, "")


def test_defaults_shown_for_simulate():
    text = run("simulate", "-h").stdout
    flat = re.sub(r"\s+", " ", text)
    for option in ("--spes", "--ranks", "--nodes", "--phases"):
        assert re.search(rf"{option} INT [^[]*\[default: \(the workload's\)", flat), option


@pytest.mark.parametrize("words,expected", [
    ("cell2otf2 simulate --workload h", ["hybrid"]),
    ("cell2otf2 simulate --damage unm", ["unmatched-mailbox", "unmatched-mpi"]),
    ("cell2otf2 simulate --topology ", ["ring", "chain"]),
    ("cell2otf2 convert --dma-style ", ["rma", "messages"]),
])
def test_choices_complete_in_the_shell(words, expected):
    env = {**ENV, "_CELL2OTF2_COMPLETE": "complete_bash", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1))}
    r = run(env=env)
    assert r.stdout.split() == expected, (r.stdout, r.stderr)


def test_wrong_values_in_our_own_words(tmp_path):
    r = run("simulate", str(tmp_path / "x"), "--damage", "foo")
    assert r.returncode == 2
    assert "Value error" not in r.stderr
    assert "'foo' is not one of 'truncate', 'gap'" in r.stderr


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="no /proc here")
@pytest.mark.parametrize("command", [
    [str(SMALL), "-o", "/proc/x.otf2"], ["simulate", "/proc/x"]])
def test_a_virtual_file_system_is_named(command):
    r = run(*command)
    assert r.returncode == 4
    assert "virtual file system" in r.stderr and "No such file" not in r.stderr, r.stderr


def test_simulate_says_the_size_before_writing(tmp_path):
    r = run("simulate", str(tmp_path / "s"), "--spes", "2", "--phases", "2")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    said = re.fullmatch(r"cell2otf2 simulate: writing ([\d.]+) (kB|MB) of dumps \(([\d,]+) "
                        r"records\) into .*", r.stdout.splitlines()[0])
    assert said and r.stdout.splitlines()[1].startswith("simulated fft"), r.stdout
    size = float(said.group(1)) * (1e3 if said.group(2) == "kB" else 1e6)
    written = sum(p.stat().st_size for p in (tmp_path / "s").glob("*.cbt"))
    assert abs(size - written) <= 0.06 * written
    r = run("simulate", str(tmp_path / "q"), "--spes", "2", "--phases", "2", "-q")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    r = run("simulate", str(tmp_path / "j"), "--spes", "2", "--phases", "2", "--json")
    assert json.loads(r.stdout)["contexts"] == 2
