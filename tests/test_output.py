"""output: -o parsing, refusing existing archives, --force, and nothing left behind on failure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from otf2check import otf2_print_ok, read_events
from paths import snapshot
from writer_samples import sample_defs, sample_events

from cell_otf2.errors import OutputError, UsageError
from cell_otf2.run import output
from cell_otf2.run.output import ArchiveTarget
from cell_otf2.writer.archive import write_archive

#: the first bytes of an OTF2 anchor and of any other OTF2 file (big-endian writer)
ANCHOR_MARK, FILE_MARK = b"\x03BOTF2", b"\x03B"


def fake_archive(directory: Path, name: str, marker: str) -> None:
    """The three entries of an archive, recognizable as OTF2 files, with content that tells
    old from new."""
    (directory / f"{name}.otf2").write_bytes(ANCHOR_MARK + f" anchor {marker}".encode())
    (directory / f"{name}.def").write_bytes(FILE_MARK + f" defs {marker}".encode())
    (directory / name).mkdir()
    (directory / name / "0.evt").write_bytes(FILE_MARK + f" events {marker}".encode())


def test_parse_target():
    target = ArchiveTarget("out/sub/run.otf2")
    assert target.parent == Path("out/sub") and target.name == "run"
    assert target.entries == (
        Path("out/sub/run.otf2"), Path("out/sub/run.def"), Path("out/sub/run"),
    )
    assert ArchiveTarget("run.otf2").parent == Path(".")


@pytest.mark.parametrize("bad", ["out/run", "out/run.otf", "out/run.otf2/", ".otf2",
                                 "out/.otf2", "out/run.def"])
def test_target_must_end_in_otf2(bad):
    with pytest.raises(UsageError, match=r"must name the anchor file and end in '\.otf2'"):
        ArchiveTarget(bad)


def test_prepare_creates_a_missing_parent(tmp_path):
    target = ArchiveTarget(tmp_path / "a" / "b" / "run.otf2")
    target.prepare(force=False)
    assert (tmp_path / "a" / "b").is_dir()
    assert os.listdir(tmp_path / "a" / "b") == []


@pytest.mark.parametrize("which", [0, 1, 2])
def test_prepare_refuses_any_existing_entry(tmp_path, which):
    target = ArchiveTarget(tmp_path / "run.otf2")
    entry = target.entries[which]
    if which == 2:
        entry.mkdir()
    else:
        entry.write_bytes(ANCHOR_MARK if which == 0 else FILE_MARK)
    with pytest.raises(OutputError, match=r"already exists; use --force") as info:
        target.prepare(force=False)
    assert str(entry) in str(info.value)
    assert info.value.exit_status == 4
    target.prepare(force=True)  # --force accepts it


def test_prepare_refuses_a_parent_that_is_a_file_or_not_writable(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="not a directory"):
        ArchiveTarget(tmp_path / "file" / "run.otf2").prepare(force=False)
    with pytest.raises(OutputError, match="cannot create the output directory"):
        ArchiveTarget(tmp_path / "file" / "sub" / "run.otf2").prepare(force=False)
    # the tests run as root, for whom every directory is writable: simulate the check's answer
    monkeypatch.setattr(output.os, "access", lambda path, mode: False)
    with pytest.raises(OutputError, match="not writable"):
        ArchiveTarget(tmp_path / "run.otf2").prepare(force=False)


def test_staged_real_archive_moves_into_place(tmp_path):
    target = ArchiveTarget(tmp_path / "out" / "run.otf2")
    target.prepare(force=False)
    with target.staged() as tmp:
        assert tmp.parent == target.parent and tmp.name.startswith(".run.otf2.tmp-")
        write_archive(sample_defs(), sample_events(), tmp, target.name)
    assert sorted(os.listdir(target.parent)) == ["run", "run.def", "run.otf2"]
    otf2_print_ok(target.anchor)
    assert sum(read_events(target.anchor).counts.values()) == len(sample_events())


def test_force_replaces_the_old_archive(tmp_path):
    fake_archive(tmp_path, "run", "old")
    (tmp_path / "unrelated.txt").write_text("keep me")
    target = ArchiveTarget(tmp_path / "run.otf2")
    target.prepare(force=True)
    with target.staged() as tmp:
        fake_archive(tmp, "run", "new")
    assert snapshot(tmp_path) == {
        "run.otf2": ANCHOR_MARK + b" anchor new", "run.def": FILE_MARK + b" defs new",
        "run": None, os.path.join("run", "0.evt"): FILE_MARK + b" events new",
        "unrelated.txt": b"keep me",
    }


def test_force_replaces_a_partial_old_archive(tmp_path):
    (tmp_path / "run.def").write_bytes(FILE_MARK + b"stale defs only")
    target = ArchiveTarget(tmp_path / "run.otf2")
    target.prepare(force=True)
    with target.staged() as tmp:
        fake_archive(tmp, "run", "new")
    assert (tmp_path / "run.def").read_bytes() == FILE_MARK + b" defs new"
    assert sorted(os.listdir(tmp_path)) == ["run", "run.def", "run.otf2"]


@pytest.mark.parametrize("exc", [RuntimeError("writer failed"), KeyboardInterrupt()])
@pytest.mark.parametrize("force", [False, True])
def test_failure_inside_staged_leaves_everything_as_before(tmp_path, exc, force):
    if force:
        fake_archive(tmp_path, "run", "old")
    before = snapshot(tmp_path)
    target = ArchiveTarget(tmp_path / "run.otf2")
    target.prepare(force=force)
    with pytest.raises(type(exc)):
        with target.staged() as tmp:
            fake_archive(tmp, "run", "new")  # a complete new archive, then the failure
            raise exc
    assert snapshot(tmp_path) == before  # byte-identical, and no temporary directory


def test_failure_of_the_real_writer_leaves_nothing(tmp_path):
    events = sample_events()
    events["time"][1] = 0  # backwards on location 0: the writer refuses the table
    target = ArchiveTarget(tmp_path / "run.otf2")
    target.prepare(force=False)
    with pytest.raises(ValueError, match="backwards"):
        with target.staged() as tmp:
            write_archive(sample_defs(), events, tmp, target.name)
    assert os.listdir(tmp_path) == []


def test_failed_move_restores_the_old_archive(tmp_path, monkeypatch):
    fake_archive(tmp_path, "run", "old")
    before = snapshot(tmp_path)
    target = ArchiveTarget(tmp_path / "run.otf2")
    target.prepare(force=True)
    real_rename = os.rename

    def rename(src, dst):
        if Path(dst) == target.entries[2] and ".tmp-" in str(src):
            raise OSError(28, "No space left on device")
        real_rename(src, dst)

    monkeypatch.setattr(output.os, "rename", rename)
    with pytest.raises(OutputError, match="cannot move the archive into place.*restored"):
        with target.staged() as tmp:
            fake_archive(tmp, "run", "new")
    assert snapshot(tmp_path) == before


def test_writer_that_wrote_nothing_is_an_output_error(tmp_path):
    target = ArchiveTarget(tmp_path / "run.otf2")
    target.prepare(force=False)
    with pytest.raises(OutputError, match="did not produce run.otf2, run.def, run"):
        with target.staged():
            pass
    assert os.listdir(tmp_path) == []


def test_archive_appearing_meanwhile_is_not_overwritten_without_force(tmp_path):
    target = ArchiveTarget(tmp_path / "run.otf2")
    target.prepare(force=False)
    with pytest.raises(OutputError, match="appeared while converting"):
        with target.staged() as tmp:
            fake_archive(tmp, "run", "new")
            fake_archive(tmp_path, "run", "other")
    assert (tmp_path / "run.otf2").read_bytes() == ANCHOR_MARK + b" anchor other"
    assert sorted(os.listdir(tmp_path)) == ["run", "run.def", "run.otf2"]


@pytest.mark.parametrize("spilled", [False, True])
def test_a_full_disk_says_how_much_the_conversion_needs(tmp_path, spilled):
    """The archive's size alone, or with the node groups a larger run sets aside while it is
    converted (``SPILL_PER_INPUT_BYTE``)."""
    target = ArchiveTarget(tmp_path / "a.otf2")
    target.input_bytes = 10_000_000
    with pytest.raises(OutputError) as caught, target.staged():
        target.spilled = spilled  # as the converter sets it, before removing its spill
        full = OutputError("write failed")
        full.no_space = True
        raise full
    text = str(caught.value)
    assert text.startswith(f"no space left on the device writing {target.anchor}")
    assert "the archive needs about 8.5 MB" in text
    assert ("and about 25 MB more while converting" in text) is spilled
    assert os.listdir(tmp_path) == []


def _count_fsyncs(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def fsync(fd):
        calls.append(fd)
        return real(fd)

    monkeypatch.setattr(output.os, "fsync", fsync)
    return calls


def test_commit_syncs_the_file_system_once(tmp_path, monkeypatch):
    """Where libc has syncfs, the commit makes the staged files durable with one call on the
    staging directory's file system, not one fsync per file (the output folder's own entry
    is still synced after the moves)."""
    if output._libc_syncfs() is None:
        pytest.skip("no syncfs in this C library")
    synced = []
    real = output._libc_syncfs()
    monkeypatch.setattr(output, "_libc_syncfs", lambda: lambda fd: synced.append(fd) or real(fd))
    fsyncs = _count_fsyncs(monkeypatch)
    target = ArchiveTarget(tmp_path / "run.otf2")
    target.prepare(force=False)
    with target.staged() as tmp:
        fake_archive(tmp, "run", "new")
    assert len(synced) == 1
    assert len(fsyncs) == 1  # the output directory, after the moves
    assert sorted(os.listdir(tmp_path)) == ["run", "run.def", "run.otf2"]


def test_commit_without_syncfs_syncs_every_file(tmp_path, monkeypatch):
    monkeypatch.setattr(output, "_libc_syncfs", lambda: None)
    fsyncs = _count_fsyncs(monkeypatch)
    target = ArchiveTarget(tmp_path / "run.otf2")
    target.prepare(force=False)
    with target.staged() as tmp:
        fake_archive(tmp, "run", "new")
    # three files, the two staging directories, the output directory
    assert len(fsyncs) == 6
    assert (tmp_path / "run.otf2").read_bytes() == ANCHOR_MARK + b" anchor new"


def test_a_failed_sync_replaces_nothing(tmp_path, monkeypatch):
    """syncfs reporting a write the device did not take: an OutputError, the old archive kept,
    the staging directory gone."""
    import ctypes
    import errno

    def failing(fd):
        ctypes.set_errno(errno.EIO)
        return -1

    monkeypatch.setattr(output, "_libc_syncfs", lambda: failing)
    monkeypatch.setattr(output.ctypes, "get_errno", lambda: errno.EIO)
    fake_archive(tmp_path, "run", "old")
    target = ArchiveTarget(tmp_path / "run.otf2")
    target.prepare(force=True)
    with pytest.raises(OutputError, match="cannot write the archive: .*nothing was replaced"):
        with target.staged() as tmp:
            fake_archive(tmp, "run", "new")
    assert (tmp_path / "run.otf2").read_bytes() == ANCHOR_MARK + b" anchor old"
    assert sorted(os.listdir(tmp_path)) == ["run", "run.def", "run.otf2"]
