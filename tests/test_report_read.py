"""The report's event read-back: the C callbacks (``_evtread``) and the Python ones read the
same columns; whole loads agree between them, between batch sizes and between the array and the
one-event-at-a-time Enter/Leave paths; and an archive whose regions do not nest (Leaves of
regions not open, of regions open further out, regions left open) gives the exact numbers worked
out by hand."""

from __future__ import annotations

import dataclasses

import _otf2
import numpy as np
import otf2
import pytest
from otf2.events import Enter, Leave
from paths import SAMPLES

from cell_otf2.report import load
from cell_otf2.run.conversion import convert

compiled = pytest.mark.skipif(load._evtread is None, reason="_evtread is not built")


def differences(a, b, path: str = "") -> list[str]:
    """Where two ``Loaded`` (or their parts) differ: dtype, shape or bytes of arrays, else
    equality."""
    if dataclasses.is_dataclass(a):
        return [d for f in dataclasses.fields(a)
                for d in differences(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")]
    if isinstance(a, np.ndarray):
        same = a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
        return [] if same else [path]
    return [] if a == b else [path]


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    """MPI messages, mailboxes, DMA as RMA, several nodes."""
    out = tmp_path_factory.mktemp("hybrid")
    convert(SAMPLES / "two-nodes-hybrid", out / "a.otf2")
    return out / "a.otf2"


def raw_columns(anchor, use_c: bool) -> list[np.ndarray]:
    batches = []
    reader = otf2.reader.Reader(str(anchor))
    try:
        locs = list(reader.definitions.locations)
        load._read_events(reader, locs, _otf2, lambda *cols: batches.append(
            [np.array(c) for c in cols]), use_c)
    finally:
        reader.close()
    return [np.concatenate(col) for col in zip(*batches, strict=True)]


@compiled
def test_compiled_and_python_callbacks_read_the_same_columns(hybrid):
    c, py = raw_columns(hybrid, True), raw_columns(hybrid, False)
    assert len(c) == len(py) == len(load.RAW_COLUMNS)
    for (name, code), a, b in zip(load.RAW_COLUMNS, c, py, strict=True):
        assert a.dtype == b.dtype == np.dtype(code), name
        assert np.array_equal(a, b), name
    kinds = set(np.unique(c[0]).tolist())
    assert {load.K.ENTER, load.K.LEAVE, load.K.SEND, load.K.RECV, load.K.GET,
            load.K.RMA_DONE} <= kinds


@pytest.mark.parametrize("max_events", [10**9, 500])
def test_loads_agree_across_paths_and_batch_sizes(hybrid, monkeypatch, max_events):
    ways = [False, True] if load._evtread is not None else [False]
    ref = load.load_archive(hybrid, max_events=max_events, compiled=ways[-1])
    assert ref.sampled == (max_events < ref.total_events)
    for use_c in ways:
        assert not differences(ref, load.load_archive(hybrid, max_events, compiled=use_c))
    monkeypatch.setattr(load, "BATCH", 777)  # windows, stacks and channels span batches
    for use_c in ways:
        assert not differences(ref, load.load_archive(hybrid, max_events, compiled=use_c))
    monkeypatch.setattr(load, "STACK_ROOM", 1)  # the compiled stacks grow as they fill
    assert not differences(ref, load.load_archive(hybrid, max_events, compiled=ways[-1]))
    init = load._Events.__init__
    monkeypatch.setattr(load._Events, "__init__",  # the log grows past the events defined
                        lambda self, *a, **k: init(self, *a, **{**k, "n_events": 5}))
    assert not differences(ref, load.load_archive(hybrid, max_events, compiled=ways[-1]))
    monkeypatch.setattr(load._Events, "__init__", init)
    monkeypatch.setattr(load._Events, "_regions", lambda *_a: None)  # every batch walked
    assert not differences(ref, load.load_archive(hybrid, max_events, compiled=False))


def write_badly_nested(path) -> None:
    """Two locations, three regions; times are ticks. l0: Enter r0 @1, Enter r1 @2, Leave r0
    @3 (closes r1 too), Leave r2 @4 (not open), Enter r2 @5, Enter r0 @6 (both left open).
    l1: Leave r1 @1 (not open), Enter r1 @2, Leave r1 @4."""
    with otf2.writer.open(str(path), timer_resolution=1000) as trace:
        d = trace.definitions
        node = d.system_tree_node("node", parent=d.system_tree_node("machine"))
        group = d.location_group("p0", system_tree_parent=node)
        locs = [d.location(f"l{i}", group=group) for i in range(2)]
        regions = [d.region(f"r{i}") for i in range(3)]
        events = {0: [(Enter, 0, 1), (Enter, 1, 2), (Leave, 0, 3), (Leave, 2, 4), (Enter, 2, 5),
                      (Enter, 0, 6)],
                  1: [(Leave, 1, 1), (Enter, 1, 2), (Leave, 1, 4)]}
        for i, seq in events.items():
            w = trace.event_writer_from_location(locs[i])
            for cls, r, t in seq:
                w(cls(t, regions[r]))


@pytest.mark.parametrize("batch", [65536, 2])
@pytest.mark.parametrize("use_c", [pytest.param(True, marks=compiled), False])
def test_regions_that_do_not_nest(tmp_path, monkeypatch, batch, use_c):
    write_badly_nested(tmp_path / "a")
    monkeypatch.setattr(load, "BATCH", batch)
    monkeypatch.setattr(load, "STACK_ROOM", 1)  # compiled: stacks grown mid-batch
    got = load.load_archive(tmp_path / "a" / "traces.otf2", compiled=use_c)
    e = got.exact
    assert e.visits.tolist() == [[1, 0, 0], [0, 1, 0]]
    assert e.inclusive.tolist() == [[2, 0, 0], [0, 2, 0]]
    assert e.longest.tolist() == [[2, 0, 0], [0, 2, 0]]
    assert e.exclusive.tolist() == [[1, 1, 1], [0, 2, 0]]
    assert e.stray_leaves.tolist() == [1, 1]
    assert e.unclosed.tolist() == [2, 0]
    assert e.outermost.tolist() == [[1, 0, 1], [0, 1, 0]]
    assert e.first.tolist() == [1, 1] and e.last.tolist() == [6, 4]
    ev = got.events
    assert list(zip(ev["loc"].tolist(), ev["time"].tolist(), ev["state"].tolist(),
                    strict=True)) == [(0, 1, 0), (1, 1, -1), (0, 2, 1), (1, 2, 1), (0, 3, -1),
                                      (0, 4, -1), (1, 4, -1), (0, 5, 2), (0, 6, 0)]
    monkeypatch.setattr(load, "BATCH", 65536)
    assert not differences(got, load.load_archive(tmp_path / "a" / "traces.otf2",
                                                  compiled=False))
