"""The writer's compiled per-event loop (native/_evtwrite.c) writes byte-identical archives.

Every sample run and a simulated hybrid (MPI + SPEs) and context-switch run, each with DMA as
RMA records and as messages, is converted twice (the ``native_ways`` fixture): through the C
loop and through the ctypes path (``CELL2OTF2_NO_NATIVE`` set); every file of the two
archives must be equal byte for byte, but for the anchor file's random trace identifier
(different in any two conversions); the same for a hand-built table of every event kind with
extreme values. Also: the one-pass C input check passes exactly the tables the numpy checks
pass, and without the extension the writer falls back to the ctypes path silently.
"""

from __future__ import annotations

from pathlib import Path

import _otf2
import numpy as np
import pytest
from writer_samples import sample_defs, sample_events

from cell_otf2 import convert, native
from cell_otf2.errors import OutputError
from cell_otf2.model import EVENT_DTYPE, Ev
from cell_otf2.writer import capi, checks
from cell_otf2.writer import events as writer_events
from cell_otf2.writer.archive import write_archive
from cell_otf2.writer.open_archive import OpenArchive

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
SIMULATED = {
    "hybrid": dict(workload="hybrid", ranks=4, nodes=2, spes=2, phases=2, chunks=4),
    "context-switch": dict(workload="fft", spes=6, spus=2, phases=2, chunks=6),
}

needs_compiled = pytest.mark.native("evtwrite")


def trace_id_masked(anchor: Path) -> bytes:
    """The anchor file with its trace identifier (8 random bytes OTF2 draws for every archive)
    zeroed."""
    reader = _otf2.Reader_Open(str(anchor))
    try:
        trace_id = _otf2.Reader_GetTraceId(reader).to_bytes(8, "little")
    finally:
        _otf2.Reader_Close(reader)
    data = anchor.read_bytes()
    assert data.count(trace_id) == 1
    return data.replace(trace_id, bytes(8))


def archive_files(anchor: Path) -> dict[str, bytes]:
    """Every file of the archive ``anchor`` (the anchor file with its trace identifier masked,
    the .def file, the event folder), by path relative to the archive's directory."""
    base = anchor.parent
    stem = anchor.with_suffix("")
    files = {anchor.name: trace_id_masked(anchor)}
    for path in [stem.with_suffix(".def"), *sorted(p for p in stem.rglob("*") if p.is_file())]:
        files[str(path.relative_to(base))] = path.read_bytes()
    return files


def assert_same_archives(a: Path, b: Path) -> None:
    files_a, files_b = archive_files(a), archive_files(b)
    assert sorted(files_a) == sorted(files_b)
    assert len(files_a) >= 3
    for name, data in files_a.items():
        assert data == files_b[name], f"{name} differs"


def both_paths(write, monkeypatch, native_ways) -> None:
    """``write("native")`` through the C loop, then ``write("numpy")`` through the ctypes
    path."""
    ctypes_calls = []
    original = writer_events.add_other_event_writers
    monkeypatch.setattr(writer_events, "add_other_event_writers",
                        lambda *a: ctypes_calls.append(1) or original(*a))
    for way in native_ways(monkeypatch):
        write(way)
        assert bool(ctypes_calls) == (way == "numpy")


def convert_both(run: Path, out: Path, monkeypatch, native_ways, **options
                 ) -> tuple[Path, Path]:
    both_paths(lambda way: convert(run, out / way / "a.otf2", **options), monkeypatch,
               native_ways)
    return out / "native" / "a.otf2", out / "numpy" / "a.otf2"


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    sim = pytest.importorskip("cell_otf2.sim.run")
    runs = {}
    for name, case in SIMULATED.items():
        runs[name] = tmp_path_factory.mktemp(name) / "run"
        sim.simulate_run(runs[name], seed=11, **case)
    return runs


def test_compiled_loop_is_used_when_it_runs():
    assert capi.use_compiled(capi.c_api()) is (native.helper("evtwrite") is not None)


@needs_compiled
@pytest.mark.parametrize("dma_style", ["rma", "messages"])
@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.iterdir() if p.is_dir()))
def test_samples_byte_identical(sample, dma_style, tmp_path, monkeypatch, native_ways):
    a, b = convert_both(SAMPLES / sample, tmp_path, monkeypatch, native_ways,
                        dma_style=dma_style)
    assert_same_archives(a, b)


@needs_compiled
@pytest.mark.parametrize("dma_style", ["rma", "messages"])
@pytest.mark.parametrize("name", sorted(SIMULATED))
def test_simulated_runs_byte_identical(simulated, name, dma_style, tmp_path, monkeypatch,
                                       native_ways):
    a, b = convert_both(simulated[name], tmp_path, monkeypatch, native_ways,
                        dma_style=dma_style)
    assert_same_archives(a, b)


@needs_compiled
def test_every_kind_with_extreme_values_byte_identical(tmp_path, monkeypatch, native_ways):
    """The hand-built table of writer_samples (every Ev kind) repeated 3000 times, so
    locations span several progress chunks, with random values up to each parameter's limit."""
    one = sample_events()
    rng = np.random.default_rng(5)
    events = np.concatenate([one] * 3000)
    events = events[np.argsort(events["loc"], kind="stable")]
    events["time"] += np.arange(events.size, dtype=np.int64) * 1000
    for kinds, column, high in [
        ((Ev.MPI_SEND, Ev.MPI_RECV, Ev.MPI_ISEND, Ev.MPI_IRECV), "p2", 1 << 32),  # tag
        ((Ev.MPI_SEND, Ev.MPI_RECV, Ev.MPI_ISEND, Ev.MPI_IRECV, Ev.MPI_COLL_END), "p3", 1 << 64),
        ((Ev.MPI_ISEND, Ev.MPI_IRECV, Ev.MPI_ISEND_COMPLETE, Ev.MPI_IRECV_REQUEST, Ev.MPI_COLL_END),
         "p4", 1 << 64),
        ((Ev.RMA_GET, Ev.RMA_PUT), "p2", 1 << 64), ((Ev.RMA_GET, Ev.RMA_PUT), "p3", 1 << 64),
        ((Ev.RMA_GET, Ev.RMA_PUT), "p4", 1 << 64), ((Ev.RMA_GET, Ev.RMA_PUT), "p5", 1 << 64),
        ((Ev.RMA_GET, Ev.RMA_PUT), "p6", 1 << 64), ((Ev.RMA_OP_COMPLETE_BLOCKING,), "p3", 1 << 64),
        ((Ev.METRIC,), "p1", 1 << 64), ((Ev.ENTER_OFF_SPU,), "p1", 1 << 64),
        ((Ev.MPI_COLL_END,), "p1", 1 << 8),
    ]:
        sel = np.isin(events["type"], kinds)
        events[column][sel] = rng.integers(0, high, sel.sum(), dtype=np.uint64, endpoint=False)
    monkeypatch.setattr(writer_events, "PROGRESS_EVENTS", 7000)
    both_paths(lambda way: write_archive(sample_defs(), events, tmp_path / way, "t"),
               monkeypatch, native_ways)
    assert_same_archives(tmp_path / "native" / "t.otf2", tmp_path / "numpy" / "t.otf2")


@needs_compiled
def test_compiled_check_agrees_with_the_numpy_checks(monkeypatch):
    """Single-field corruptions of the every-kind table, near each rule's limits: the one-pass
    C check passes a table exactly when the numpy checks (the writer's messages) pass it."""
    defs, good = sample_defs(), sample_events()
    rng = np.random.default_rng(3)
    values = {"loc": [0, 3, 4, 1 << 31], "type": [0, 1, 15, 16, 99], "ref": [0, 1, 3, 11, 12],
              "time": [-1, 0, 149, 1 << 40],
              **{f"p{k}": [0, 1, 2, 3, 4, 255, 256, (1 << 32) - 1, 1 << 32, (1 << 64) - 1]
                 for k in range(1, 7)}}
    seen = set()
    for _ in range(1500):
        events = good.copy()
        column = str(rng.choice(list(values)))
        i = int(rng.integers(events.size))
        value = values[column][int(rng.integers(len(values[column])))]
        events[column][i] = value
        compiled_ok = checks._compiled_check(defs, events)
        monkeypatch.setenv(native.OFF_VARIABLE, "1")
        try:
            checks.check_events(defs, events)
            numpy_ok = True
        except checks.WriterInputError:
            numpy_ok = False
        monkeypatch.delenv(native.OFF_VARIABLE)
        assert compiled_ok == numpy_ok, (column, i, value, Ev(int(good["type"][i])).name)
        seen.add(numpy_ok)
    assert seen == {True, False}


@needs_compiled
@pytest.mark.parametrize("compiled", [True, False])
def test_a_library_error_stops_the_location_with_one_message(tmp_path, compiled):
    """Rows the checks would refuse (time going backwards), handed to the loop directly: the
    library's error code stops the writing and becomes one OutputError, on both paths."""
    rows = np.zeros(6, EVENT_DTYPE)
    rows["type"] = [Ev.ENTER, Ev.LEAVE, Ev.ENTER, Ev.LEAVE, Ev.ENTER, Ev.LEAVE]
    rows["time"] = [10, 20, 5, 30, 40, 50]
    api = capi.c_api()
    assert capi.use_compiled(api)  # the C loop bound
    errors = capi.library_errors()
    errors.clear()
    archive = OpenArchive(tmp_path, "e")
    attrs = _otf2.AttributeList_New()
    per_type = np.zeros(max(Ev) + 1, dtype=np.int64)
    try:
        writer, at = archive.location_writer(0)
        with pytest.raises(OutputError, match="the OTF2 library failed"):
            writer_events._write_location_events(api, at, capi.address(attrs), rows,
                                                 per_type if compiled else None)
        archive.close_location_writer(writer)
    finally:
        _otf2.AttributeList_Delete(attrs)
        archive.close()
        errors.clear()
    if compiled:  # counted up to the event that failed
        assert per_type[Ev.ENTER] == 2 and per_type[Ev.LEAVE] == 1


def test_without_the_extension_the_ctypes_path_writes_silently(tmp_path, monkeypatch, capfd):
    run = SAMPLES / "fft-16spe"
    monkeypatch.setattr(native, "_built", lambda name: None)  # as if built without a compiler
    calls = []
    original = writer_events.add_other_event_writers
    monkeypatch.setattr(writer_events, "add_other_event_writers",
                        lambda *a: calls.append(1) or original(*a))
    s = convert(run, tmp_path / "a.otf2")
    assert not capi.use_compiled(capi.c_api()) and calls  # the ctypes path wrote the events
    out, err = capfd.readouterr()
    assert out == err == ""
    assert s.events_written > 0
