"""The compiled per-event loops of emit (native/_emitloops.c) and their numpy twins give
the same tables (both ways through the ``native_ways`` fixture): whole event tables of sample
runs (with context switches, DMA as RMA and as messages, lost records whose regions are
repaired) built both ways, byte for byte, and the kernels themselves on parameters of every
integer width and sign."""

from __future__ import annotations

import numpy as np
import pytest
from cellbench.analysis import analyze
from paths import SAMPLES

from cell_otf2.damage import DamageLog
from cell_otf2.emit import kernels
from cell_otf2.emit.events import emit
from cell_otf2.model import EVENT_DTYPE, RECORD_DTYPE, DmaStyle


@pytest.fixture(scope="module", params=["context-switch-restored", "two-nodes-hybrid",
                                        "damaged-gap-truncate"])
def pipe(request):
    return analyze(SAMPLES / request.param)


def both_ways(monkeypatch, native_ways, fn):
    return [fn() for _way in native_ways(monkeypatch)]


@pytest.mark.parametrize("style", [DmaStyle.RMA, DmaStyle.MESSAGES])
def test_tables_agree_with_numpy(monkeypatch, native_ways, pipe, style):
    def build():
        damage = DamageLog()
        _, table, stats = emit(pipe.decoded, pipe.matches, pipe.sync, damage, style)
        _, pieces, _ = emit(pipe.decoded, pipe.matches, pipe.sync, DamageLog(), style,
                            chunk_events=300)
        pieces.reuse_buffer = True
        joined = b"".join(p.tobytes() for p in pieces)
        return table.tobytes(), joined, stats.by_type, damage.entries()

    compiled, numpy = both_ways(monkeypatch, native_ways, build)
    assert compiled == numpy
    assert compiled[0] == compiled[1]


def test_fill_rows_agrees_with_numpy(monkeypatch, native_ways):
    rng = np.random.default_rng(5)
    records = np.zeros(50, RECORD_DTYPE)
    for name in ("a", "b", "c", "d"):
        records[name] = rng.integers(0, 2**63, records.size) * 2 + 1
    records["loc"] = np.sort(rng.integers(0, 4, records.size))
    records["time"] = rng.integers(-5, 10**12, records.size)
    rec = np.sort(rng.choice(records.size, 30, replace=False)).astype(np.int32)
    pos = (np.arange(rec.size) * 2 + 3).astype(np.int32)
    f_ins = np.array([3, 10, 10, 40], dtype=np.int64)
    cols = {"ref": rng.integers(0, 2**32, rec.size).astype(np.int64),
            "p1": rng.integers(-2**31, 2**31, rec.size).astype(np.int32),
            "p2": kernels.RecordBits(("d", 0, 0xFF, 0), ("a", 0, (1 << 64) - 1, 8)),
            "p3": rng.integers(0, 2**16, rec.size).astype(np.uint16),
            "p4": lambda rows: rows["b"] >> np.uint64(3),
            "p5": 7}

    def fill():
        e = np.zeros(rec.size * 2 + 10, EVENT_DTYPE)
        bounds = np.array([0, 20, 40, 70], dtype=np.int64)
        other = (rec[:5] + 1, pos[:5] + 1, 3, 0, {"ref": 2, "p6": np.arange(5.0)})  # numpy
        kernels.fill_rows(e, records, [(rec, pos, 9, 4, cols), other], 2, 64, f_ins, 3,
                          bounds)
        return e.tobytes()

    compiled, numpy = both_ways(monkeypatch, native_ways, fill)
    assert compiled == numpy


def test_layout_agrees_with_numpy(monkeypatch, native_ways):
    rec = np.array([0, 2, 2, 2, 5, 7, 7], dtype=np.int32)

    def layout():
        base = np.empty(10, dtype=np.int32)
        poss = kernels.layout_own(base, [rec, rec[::3].copy(), np.array([], np.int32), rec],
                                  np.int32)
        return base.tolist(), [p.tolist() for p in poss]

    compiled, numpy = both_ways(monkeypatch, native_ways, layout)
    assert compiled == numpy
    assert compiled[0] == [0, 3, 3, 10, 10, 10, 12, 12, 17, 17]


@pytest.mark.native("emitloops")
def test_region_walk_flags_what_does_not_nest():
    # own positions of three locations: 0..3, 4..7, 8..9; codes step * (ref + 1)
    own_start = np.array([0, 4, 8, 10])
    enter, leave = np.array([0, 4, 5, 8]), np.array([3, 6, 7, 9])
    parts = [(enter.astype(np.int32), np.array([1, 1, 2, 1]), 1),
             (leave.astype(np.int32), np.array([1, 1, 2, 1]), -1)]
    f_code = np.zeros(0, dtype=np.int32)
    none = np.zeros(0, dtype=np.int64)
    flags = kernels.region_flags(own_start, parts, f_code, none, np.zeros(4, np.int64))
    # location 1 leaves region 1 while region 2 is open
    assert flags.tolist() == [False, True, False]
    # a foreign Leave of region 1 before own position 9 closes location 2's region early
    flags = kernels.region_flags(own_start, parts, np.array([-2], np.int32), np.array([9]),
                                 np.array([0, 0, 0, 1]))
    assert flags.tolist() == [False, True, True]


def test_written_span_agrees_with_numpy(monkeypatch, native_ways):
    rng = np.random.default_rng(8)
    records = np.zeros(200, RECORD_DTYPE)
    records["code"] = rng.integers(0, 3, records.size)
    records["time"] = rng.integers(-10**12, 10**12, records.size)
    usable = rng.random(records.size) < 0.7

    def span(u=usable):
        good, first, last = kernels.written_span(records, u)
        return good.tolist(), first, last

    compiled, numpy = both_ways(monkeypatch, native_ways, span)
    assert compiled == numpy
    compiled, numpy = both_ways(monkeypatch, native_ways,
                                lambda: span(np.zeros(records.size, bool)))
    assert compiled == numpy and compiled[1:] == (0, 0)


@pytest.mark.native("emitloops")
def test_select_refs_agrees_with_lookup_refs():
    from cell_otf2.emit.table import lookup_refs
    records = np.zeros(20, RECORD_DTYPE)
    records["a"] = [0, 1, 2, 3, 7, 8, 2**64 - 1, 2**63, 5, 1] * 2
    idx = np.array([0, 3, 4, 5, 6, 7, 8, 9, 19], dtype=np.int32)
    good = np.ones(records.size, bool)
    good[5] = False
    table = {1: 10, 3: 0, 7: 2**20}
    written = np.zeros(records.size, bool)
    i, refs, bad = kernels.select_refs(records, "a", idx, good, table, written)
    sel = idx[good[idx]]
    want = lookup_refs(table, records["a"][sel].astype(np.int64))
    assert i.tolist() == sel[want >= 0].tolist() and refs.tolist() == want[want >= 0].tolist()
    assert bad.tolist() == sel[want < 0].tolist()
    assert np.flatnonzero(written).tolist() == i.tolist()


def test_take_field_agrees_with_numpy(monkeypatch, native_ways):
    records = np.zeros(30, RECORD_DTYPE)
    records["a"] = np.arange(30, dtype=np.uint64) * np.uint64(2**59)
    idx = np.array([0, 5, 5, 29, 7], dtype=np.int32)
    compiled, numpy = both_ways(monkeypatch, native_ways,
                                lambda: kernels.take_field(records, "a", idx).tolist())
    assert compiled == numpy == records["a"][idx].tolist()


def test_emit_with_the_callers_span_is_the_same(pipe):
    """The driver hands emit the span share_after_sync found: the same table, counts and
    damage as emit finding it (records without a code stay out of the unwritten count)."""
    def run(span):
        damage = DamageLog()
        _, table, stats = emit(pipe.decoded, pipe.matches, pipe.sync, damage, DmaStyle.RMA,
                               span=span)
        return table.tobytes(), stats, damage.entries()

    usable = pipe.sync.usable
    if usable is None:
        usable = np.ones(pipe.decoded.records.size, bool)
    _, first, last = kernels.written_span(pipe.decoded.records, usable)
    assert run((first, last)) == run(None)


def test_records_without_a_code_are_not_counted_unwritten(pipe):
    """With the caller's span, ``good`` is the usable flags alone: a usable record without a
    code (decode zeroes what it drops) is still left out of the unwritten count."""
    from cell_otf2.emit.families import RecordLedger
    dec = pipe.decoded
    good = np.ones(dec.records.size, bool)
    for coded in (True, False):
        damage = DamageLog()
        ledger = RecordLedger(dec, good, damage, coded=coded)
        ledger.written[:] = True
        ledger.written[0] = False
        saved = dec.records["code"][0]
        dec.records["code"][0] = 0
        try:
            ledger.count_unwritten()
        finally:
            dec.records["code"][0] = saved
        assert len(damage.entries()) == (1 if coded else 0)
