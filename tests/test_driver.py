"""The driver's node groups and spill (``node_groups``, ``spill``): how nodes are grouped, a
spilled group reads back as it was, the spill directory is gone after a conversion and after a
failure in the middle of one, a full disk is an error that says so, a run without
``fallocate`` converts the same, a small run is one group, and the writer refuses a location
in two groups. That every team and grouping writes the same archive is
``tests/test_equivalence.py``."""

from __future__ import annotations

import dataclasses
import errno
import os
from pathlib import Path

import numpy as np
import pytest
from archive_compare import same_archive, summary_body
from cellbench.analysis import analyze

from cell_otf2 import convert
from cell_otf2.errors import OutputError
from cell_otf2.input.manifest import load_manifest
from cell_otf2.run import driver, node_groups
from cell_otf2.run import spill as spill_module
from cell_otf2.writer.archive import write_archive
from cell_otf2.writer.checks import WriterInputError
from cell_otf2.writer.events import EventGroups


def one_group(run: Path, anchor: Path, report: Path, dma_style: str = "rma",
              alpha: float = 0.5) -> list[str]:
    """The run converted as one group, in memory (these runs are far below
    ``IN_MEMORY_BYTES``). Returns the summary's lines."""
    return convert(run, anchor, report=report, dma_style=dma_style, alpha=alpha).lines()


def streamed(run: Path, anchor: Path, report: Path, monkeypatch, group_bytes: int,
             dma_style: str = "rma", alpha: float = 0.5) -> list[str]:
    monkeypatch.setattr(driver, "GROUP_BYTES", group_bytes)
    monkeypatch.setattr(driver, "IN_MEMORY_BYTES", 0)  # these runs are small: group anyway
    return convert(run, anchor, report=report, dma_style=dma_style, alpha=alpha).lines()


def _body(lines: list[str]) -> list[str]:
    return summary_body("\n".join(lines))


@pytest.fixture(scope="module")
def runs(simulated) -> dict[str, Path]:
    return {"four_nodes": simulated("four-nodes"), "damaged": simulated("damaged-three-nodes"),
            "switches": simulated("switches-hybrid")}


def test_node_groups(runs):
    man = load_manifest(runs["four_nodes"])  # 8 ranks, 2 per node
    sizes = [100] * 8
    assert node_groups.node_groups(man, sizes, 0) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert node_groups.node_groups(man, sizes, 400) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert node_groups.node_groups(man, sizes, 10**9) == [list(range(8))]
    sizes[2] = 1000  # a node larger than the limit is a group of its own
    assert node_groups.node_groups(man, sizes, 400) == [[0, 1], [2, 3], [4, 5, 6, 7]]


def test_spill_round_trip_and_cleanup(runs, tmp_path, monkeypatch):
    """Spilled groups are read back as they were written; the spill directory lives in the
    staging directory and is gone after the conversion and after a failure in the middle."""
    seen: list[Path] = []
    real_save = spill_module.Spill._save

    def save(self, g, state):
        real_save(self, g, state)
        seen.append(self.directory)

    monkeypatch.setattr(spill_module.Spill, "_save", save)
    out = tmp_path / "out"
    streamed(runs["four_nodes"], out / "a.otf2", tmp_path / "r.json", monkeypatch, 0)
    assert seen and all(d.parent.parent == out for d in seen)
    assert sorted(p.name for p in out.iterdir()) == ["a", "a.def", "a.otf2"]

    def broken(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(driver, "emit", broken)  # after every group was spilled
    seen.clear()
    with pytest.raises(KeyboardInterrupt):
        streamed(runs["four_nodes"], tmp_path / "x" / "a.otf2", tmp_path / "x.json",
                 monkeypatch, 0)
    assert seen and not (tmp_path / "x").exists()


@pytest.mark.parametrize("mapped", [False, True])
def test_spill_keeps_every_array(runs, tmp_path, mapped):
    """A group's state saved and loaded equals the state it was (records with their times
    kept apart once the records are on disk; or a mapped file from the start)."""
    pipe = analyze(runs["four_nodes"])
    spill = spill_module.Spill(tmp_path / "spill")
    dec = pipe.decoded
    if mapped:
        table = spill.record_table(0)(dec.records.size)
        assert not table.view(np.uint8).any()  # zeroed
        table[:] = pipe.decoded.records
        dec = dataclasses.replace(dec, records=table, _cache={})
    state = spill_module.GroupState(dec, pipe.matches, pipe.sync, timed=True)
    spill.put(0, state)
    spill.evict()
    back = spill.get(0)
    assert np.array_equal(back.dec.records, pipe.decoded.records)
    assert np.array_equal(back.dec.anchors, pipe.decoded.anchors)
    assert np.array_equal(back.matches.dma, pipe.matches.dma)
    assert np.array_equal(back.result.usable, pipe.sync.usable)
    assert back.dec.records_total == pipe.decoded.records_total
    back.dec.records["time"] += 1  # only the times change once the records are on disk
    del back
    spill.evict()
    again = spill.get(0)
    assert np.array_equal(again.dec.records["time"], pipe.decoded.records["time"] + 1)
    assert (tmp_path / "spill" / "group0" / "records.bin").exists() == mapped
    del again
    spill.close()
    assert not (tmp_path / "spill").exists()


def test_writer_refuses_a_location_in_two_groups(tmp_path):
    from writer_samples import sample_defs, sample_events

    events = sample_events()
    locs = np.unique(events["loc"])
    with pytest.raises(WriterInputError, match="written before"):
        write_archive(sample_defs(), EventGroups([(locs, events), (locs[:1], events[:0])]),
                      tmp_path, "trace")


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EOPNOTSUPP])
def test_spill_without_space_or_without_fallocate(runs, tmp_path, monkeypatch, code):
    """No space for a group's record table: an ``OutputError`` that says so, nothing left
    behind. A file system without ``fallocate``: the tables stay in memory until spilled
    with ``np.save``, same archive."""

    def refuse(fd, offset, length):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(spill_module.os, "posix_fallocate", refuse)
    run = runs["four_nodes"]
    if code == errno.ENOSPC:
        with pytest.raises(OutputError, match="No space left on device.*2.5 times"):
            streamed(run, tmp_path / "out" / "a.otf2", tmp_path / "s.json", monkeypatch, 0)
        assert not (tmp_path / "out").exists()
        return
    got = streamed(run, tmp_path / "s" / "a.otf2", tmp_path / "s.json", monkeypatch, 0)
    monkeypatch.undo()  # the reference: one group, in memory
    ref = one_group(run, tmp_path / "m" / "a.otf2", tmp_path / "m.json")
    assert _body(got) == _body(ref)
    same_archive(tmp_path / "m" / "a.otf2", tmp_path / "s" / "a.otf2")


def test_small_run_is_one_group(runs, tmp_path, monkeypatch):
    """A run of at most IN_MEMORY_BYTES of dumps is converted as one group: nothing is
    spilled (no spill space needed), whatever GROUP_BYTES says."""
    seen = []
    real = node_groups.node_groups

    def spy(man, sizes, limit=node_groups.GROUP_BYTES, ranks=None):
        groups = real(man, sizes, limit, ranks)
        seen.append(groups)
        return groups

    monkeypatch.setattr(driver, "GROUP_BYTES", 1)
    monkeypatch.setattr(driver, "node_groups", spy)
    convert(runs["four_nodes"], tmp_path / "a.otf2")
    assert len(seen) == 1 and len(seen[0]) == 1
    monkeypatch.setattr(driver, "IN_MEMORY_BYTES", 0)
    convert(runs["four_nodes"], tmp_path / "b.otf2")
    assert len(seen[1]) == 4  # one group per node once the run counts as large
