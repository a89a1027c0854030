"""``cell2otf2 report ARCHIVE -o DIR`` follows the output rules of ``convert``: DIR is new or
empty, or a previous report replaced with ``--force``; a user's own files (an ``index.html`` or
``contexts.csv`` of theirs) are never written over, and a failure leaves DIR as it was. The
archive is read by the real command in a subprocess."""

from __future__ import annotations

import subprocess
import sys

import pytest
from paths import ENV, SAMPLES, snapshot

pytest.importorskip("matplotlib")
pytestmark = pytest.mark.slow  # each test starts the real command

SMALL = SAMPLES / "wraps-heartbeats"


def run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cell_otf2", *args], capture_output=True,
                          text=True, env=ENV, timeout=300, cwd=cwd)


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    out = tmp_path_factory.mktemp("arch")
    r = run(str(SMALL), "-o", str(out / "a.otf2"), "-q")
    assert r.returncode == 0, r.stderr
    return out / "a.otf2"


def test_a_users_files_are_never_replaced(archive, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "index.html").write_text("<html>my own page</html>\n")
    (mine / "contexts.csv").write_text("my,own,table\n")
    before = snapshot(mine)
    for force in ([], ["--force"]):
        r = run("report", str(archive), "-o", str(mine), *force)
        assert r.returncode == 4, r.stderr
        assert "never written into, not even with --force" in r.stderr
        assert "Traceback" not in r.stderr and r.stdout == ""
        assert snapshot(mine) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


def test_new_empty_and_previous_report(archive, tmp_path):
    rep = tmp_path / "rep"
    r = run("report", str(archive), "-o", str(rep), "-q")
    assert r.returncode == 0 and r.stdout == "", r.stderr
    first = snapshot(rep)
    assert "index.html" in first and "contexts.csv" in first
    r = run("report", str(archive), "-o", str(rep), "-q")
    assert r.returncode == 4 and "holds a previous report; use --force" in r.stderr
    assert snapshot(rep) == first
    r = run("report", str(archive), "-o", str(rep), "-q", "-f")
    assert r.returncode == 0, r.stderr
    assert snapshot(rep) == first  # the same report again, replaced whole
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run("report", str(archive), "-o", str(empty), "-q")
    assert r.returncode == 0 and (empty / "index.html").is_file(), r.stderr
    # a previous report with one foreign file added is no longer a report
    (rep / "notes.txt").write_text("mine\n")
    r = run("report", str(archive), "-o", str(rep), "-q", "-f")
    assert r.returncode == 4 and "'notes.txt'" in r.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_file_a_link_or_the_archive_itself_is_refused(archive, tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path)
    for target, words in ((tmp_path / "file", "is not a folder"),
                          (tmp_path / "link", "symbolic link"),
                          (archive.parent, "holds the archive")):
        r = run("report", str(archive), "-o", str(target), "-f")
        assert r.returncode == 4 and words in r.stderr, r.stderr
    assert (tmp_path / "file").read_text() == "x"


def test_a_failed_report_leaves_the_previous_one(archive, tmp_path):
    rep = tmp_path / "rep"
    assert run("report", str(archive), "-o", str(rep), "-q").returncode == 0
    before = snapshot(rep)
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    r = run("report", str(archive), "-o", str(rep), "-f", "--sync-report", str(bad))
    assert r.returncode == 3, r.stderr
    assert snapshot(rep) == before


def test_unreadable_archives_in_our_words(archive, tmp_path):
    """No "[OTF2] src/...: error:" line and no "INVALID (1)" ever reaches the user."""
    (tmp_path / "junk.otf2").write_bytes(b"\x03BOTF2" + b"\0" * 200)  # a broken anchor
    (tmp_path / "text.otf2").write_text("hello\n")
    cases = ((archive.with_suffix(".def"), "the anchor is"),
             (archive.with_suffix(""), "is a folder"),
             (tmp_path / "text.otf2", "is not an OTF2 anchor file"),
             (tmp_path / "junk.otf2", "cannot read this archive"))
    for path, words in cases:
        r = run("report", str(path), "-o", str(tmp_path / "r"))
        assert r.returncode == 3, r.stderr
        assert words in r.stderr, r.stderr
        assert "[OTF2]" not in r.stderr and "INVALID" not in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1, r.stderr
        assert not (tmp_path / "r").exists()
