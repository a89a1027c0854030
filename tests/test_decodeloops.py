"""The compiled per-record loops (cell_otf2/native/_decodeloops.c) and their numpy twins give
the same tables (each test runs both ways through the ``native_ways`` fixture): field gathers
across byte orders, widths and signs, and whole dumps read and decoded both ways."""

from __future__ import annotations

import numpy as np
import pytest

from cell_otf2.native import record_loops as loops

SRC = np.dtype([("x", ">u2"), ("y", "<i4"), ("z", ">u8"), ("w", "u1"), ("s", ">i2")])
DST = np.dtype([("a", "<u8"), ("b", "<i8"), ("c", "<u8"), ("d", "<u2"), ("e", "<i8"),
                ("f", "<u4")])
PAIRS = (("a", "x"), ("b", "y"), ("c", "z"), ("d", "w"), ("e", "s"), ("f", "z"))


def both(monkeypatch, native_ways, dst_rows, src, idx, pairs):
    out = []
    for _way in native_ways(monkeypatch):
        dst = np.zeros(dst_rows, DST)
        loops.gather_fields(dst, src, idx, pairs)
        out.append(dst)
    return out


def test_gather_agrees_with_numpy(monkeypatch, native_ways):
    rng = np.random.default_rng(3)
    src = np.zeros(1000, SRC)
    for name in SRC.names:
        info = np.iinfo(SRC[name])
        src[name] = rng.integers(info.min, info.max, src.size, dtype=np.int64, endpoint=True) \
            if info.bits < 64 else rng.integers(0, 2**63, src.size) * 2 + 1
    idx = rng.integers(0, src.size, 5000)
    compiled, numpy = both(monkeypatch, native_ways, idx.size, src, idx, PAIRS)
    assert compiled.tobytes() == numpy.tobytes()
    compiled, numpy = both(monkeypatch, native_ways, 0, src, idx[:0], PAIRS)
    assert compiled.tobytes() == numpy.tobytes()


def test_gather_with_columns_agrees_with_numpy(monkeypatch, native_ways):
    """Columns written besides the gathered fields (arrays converted to the field's type, one
    value for every row) come out as numpy's field assignment makes them."""
    rng = np.random.default_rng(4)
    src = np.zeros(300, SRC)
    src["z"] = rng.integers(0, 2**62, src.size)
    idx = rng.integers(0, src.size, 700)
    columns = {"b": rng.integers(-(2**40), 2**40, idx.size), "f": 7,
               "d": rng.integers(0, 2**16, idx.size).astype(np.int64), "e": np.array([-3])}
    out = []
    for _way in native_ways(monkeypatch):
        for n in (idx.size, 0):
            dst = np.zeros(n, DST)
            cols = {k: (v[:n] if np.ndim(v) and np.size(v) > 1 else v)
                    for k, v in columns.items()}
            loops.gather_fields(dst, src, idx[:n], (("a", "z"), ("c", "x")), cols)
            out.append(dst.tobytes())
    assert out[:2] == out[2:]


@pytest.mark.native("decodeloops")
def test_gather_refuses_rows_out_of_range():
    src = np.zeros(4, SRC)
    with pytest.raises(IndexError):
        loops.gather_fields(np.zeros(1, DST), src, np.array([4]), PAIRS)


def test_dumps_read_the_same_both_ways(monkeypatch, native_ways, tmp_path):
    from cell_otf2.input.manifest import load_manifest
    from cell_otf2.input.reader import read_dump
    from cell_otf2.sim.run import simulate_run

    simulate_run(tmp_path / "run", "hybrid", 5, phases=2, ranks=2, nodes=1, spes=2, chunks=8)
    man = load_manifest(tmp_path / "run")
    for p in man.processes:
        got = []
        for _way in native_ways(monkeypatch):
            d = read_dump(man.dump_path(p.rank), man, p.rank, chunk_slots=97)
            got.append([d.ppe.tobytes(), d.blocks.tobytes(), d.spe.tobytes(), d.gaps.tobytes(),
                        repr(d.damage)])
        assert got[0] == got[1]


@pytest.mark.parametrize("field", ["k", None])
def test_group_u16_agrees_with_numpy(monkeypatch, native_ways, field):
    rng = np.random.default_rng(5)
    table = np.zeros(20000, [("x", "<u8"), ("k", "<u2"), ("y", "u1")])
    table["k"] = rng.choice([0, 1, 7, 300, 65535], table.size)
    if field is None:
        table = np.ascontiguousarray(table["k"])
    out = []
    for _way in native_ways(monkeypatch):
        for rows in (table, table[:0]):
            order, start = loops.group_u16(rows, field)
            assert order.dtype == np.int32 and start.dtype == np.int64
            out.append((order.tobytes(), start.tobytes()))
    assert out[:2] == out[2:]
    keys = table if field is None else table[field]
    assert out[0][0] == np.argsort(keys, kind="stable").astype(np.int32).tobytes()


def test_time_bounds_agree_with_numpy(monkeypatch, native_ways):
    from cell_otf2.model import RECORD_DTYPE

    rng = np.random.default_rng(9)
    rec = np.zeros(5000, RECORD_DTYPE)
    rec["code"] = rng.integers(0, 3, rec.size)
    # runs of equal domains, as a location's records have, and domains in any order
    rec["domain"] = np.concatenate([np.repeat(rng.integers(-1, 6, 50), 50),
                                    rng.integers(-1, 6, 2500)])
    rec["time"] = rng.integers(-(2**40), 2**40, rec.size)
    usable = rng.random(rec.size) < 0.8
    out = []
    for _way in native_ways(monkeypatch):
        for rows, ok in ((rec, usable), (rec[:0], usable[:0]), (rec, np.zeros(rec.size, bool))):
            first, last, span = loops.time_bounds(rows, ok, 8)
            out.append((first.tolist(), last.tolist(), span))
    assert out[:3] == out[3:]
    written = usable & (rec["code"] != 0)
    assert out[0][2] == (rec["time"][written].min(), rec["time"][written].max())
    assert out[1][2] is None and out[2][2] is None and out[2][1] == [-1] * 8
    d = 3
    sel = written & (rec["domain"] == d)
    assert out[0][0][d] == rec["time"][sel].min() and out[0][1][d] == rec["time"][sel].max()


@pytest.mark.parametrize("order", [">", "<"])
def test_framing_agrees_with_numpy_on_damaged_streams(monkeypatch, native_ways, tmp_path, order):
    """``loops.frame_chunk`` (the reader's compiled framer) and the reader's numpy framer give
    the same tables and damage (counts, first slots, messages) on random slot streams full of
    damage: broken and overrunning blocks, GAPs, undefined codes inside and outside blocks,
    SPE records outside blocks, block counts out of range; any chunk size, both readings, SPE
    records grouped by context (or in slot order when the counts expected are not the
    dump's)."""
    from test_reader import Builder, manifest

    from cell_otf2.decode.decoder import summarize
    from cell_otf2.input import format as fmt
    from cell_otf2.input.reader import read_dump

    layout = fmt.LAYOUTS[ord("B") if order == ">" else ord("L")]
    rng = np.random.default_rng(11 if order == ">" else 12)
    spe_codes = sorted(fmt.SPE_CODES)
    ppe_codes = sorted(fmt.PPE_CODES)
    for case in range(6):
        b = Builder(layout, spe_buffer_records=6, slots_reserved=int(rng.integers(0, 3)) * 50)
        for _ in range(int(rng.integers(0, 400))):
            u = rng.random()
            big = int(rng.integers(0, 2**63)) * 2 + 1
            if u < 0.15:
                b.ppe(int(rng.choice(ppe_codes)), thread=int(rng.integers(0, 3)),
                      a=int(rng.integers(0, 2**32)), timebase=big, b=big ^ 5, c=7)
            elif u < 0.3:
                b.block(ctx=int(rng.integers(0, 4)), count=int(rng.integers(0, 9)),
                        decr=int(rng.integers(0, 2**32)), seq=int(rng.integers(0, 9)),
                        buffer=1, flags=int(rng.integers(0, 256)), ticket=big)
            elif u < 0.8:
                b.spe(int(rng.choice(spe_codes)), a=int(rng.integers(0, 2**16)),
                      decr=int(rng.integers(0, 2**32)), b=big, c=big >> 3, d=5)
            elif u < 0.85:
                b.gap(lost=int(rng.integers(0, 2**64, dtype=np.uint64)), first_ticket=big)
            else:
                b.raw(int(rng.choice([0x0000, 0x01FF, 0x02FE, 0x03FF, 0x0500, 0xFFFF])))
        path = b.write(tmp_path, tail=b"x" * (case % 2) * 5)
        plain = read_dump(path, manifest(tmp_path), 0)
        counts = np.bincount(plain.spe["ctx"], minlength=4)
        wrong = counts.copy()
        wrong[case % 4] += 1 if case % 2 else -1
        if wrong[case % 4] < 0:
            wrong[case % 4] = 2
        for chunk in (1, 7, 64, 1 << 17):
            for spe_records, by_context in ((True, None), (False, None), (True, counts),
                                            (True, wrong)):
                got = []
                for _way in native_ways(monkeypatch):
                    buffer = np.zeros(plain.spe.size + 3, plain.spe.dtype)
                    d = read_dump(path, manifest(tmp_path), 0, chunk_slots=chunk,
                                  spe_records=spe_records, by_context=by_context,
                                  spe_buffer=buffer)
                    got.append([d.ppe.tobytes(), d.blocks.tobytes(), d.spe.tobytes(),
                                d.gaps.tobytes(), repr(d.damage), d.spe_by_context])
                assert got[0] == got[1], (case, chunk, spe_records)
                # a summary counts each context's records from the blocks
                assert np.array_equal(summarize(d).ctx_counts,
                                      np.bincount(d.spe["ctx"].astype(np.int64), minlength=1))
                assert d.spe_by_context == (by_context is counts)
                if by_context is counts:
                    # the slot-order table grouped by context; ``first`` indexes that order
                    order = np.argsort(plain.spe["ctx"], kind="stable")
                    assert d.spe.tobytes() == plain.spe[order].tobytes()
                    for blk in range(d.blocks.size):
                        first, n = int(d.blocks["first"][blk]), int(d.blocks["present"][blk])
                        assert (d.spe["block"][first:first + n] == blk).all()
                else:
                    assert d.spe.tobytes() == (plain.spe.tobytes() if spe_records
                                               else d.spe.tobytes())


def test_readings_agree_with_numpy(monkeypatch, native_ways):
    """An SPE context's readings in program order come out the same compiled (a merge) and
    through numpy (a stable sort), also for records of several contexts interleaved, blocks
    with unknown slots inside and a DECR_WRITE value past 2^63; keys that do not ascend (no
    reading gives them) take the sort in both."""
    from cell_otf2.input.reader import BLOCK_DTYPE, SPE_DTYPE

    rng = np.random.default_rng(8)
    blocks = np.zeros(60, BLOCK_DTYPE)
    spe = np.zeros(0, SPE_DTYPE)
    slot = 0
    for i in range(blocks.size):
        slot += int(rng.integers(1, 4))
        n = int(rng.integers(0, 6))
        blocks[i] = (slot, i % 3, int(rng.integers(0, 2**32)), i, n, n, 0, 0, 0, spe.size)
        rows = np.zeros(n, SPE_DTYPE)
        rows["slot"] = slot + 1 + np.sort(rng.choice(n + 2, n, replace=False))
        rows["block"], rows["ctx"] = i, i % 3
        rows["code"] = rng.choice([0x0201, 0x0260, 0x0211], n)
        rows["decr"] = rng.integers(0, 2**32, n)
        rows["b"] = rng.integers(0, 2**63, n, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        spe = np.concatenate([spe, rows])
        slot += n + 2
    cases = []
    for ctx in range(3):
        cases.append((np.flatnonzero(spe["ctx"] == ctx), np.flatnonzero(blocks["ctx"] == ctx)))
    cases.append((cases[0][0][::-1].copy(), cases[0][1]))  # keys not ascending
    cases.append((cases[1][0][:0], cases[1][1][:0]))
    for rec_idx, blk_idx in cases:
        got = []
        for _way in native_ways(monkeypatch):
            out = loops.readings(spe, rec_idx, blocks, blk_idx, 0x0260)
            got.append([(a.dtype.str, a.tobytes()) for a in out])
        assert got[0] == got[1]


@pytest.mark.parametrize("shape", ["smooth", "wrapping", "any"])
def test_unwrap_and_run_locals_agree_with_numpy(monkeypatch, native_ways, shape):
    """``unwrap``'s sums and count of steps of 2^31 or more, and ``run_locals``' times, both
    ways, over random readings: a decrementer counting down in small steps, one wrapping
    often, and readings anywhere in 0 .. 2^32 - 1 (steps of every size); runs of equal
    intervals of random lengths, including readings of one."""
    rng = np.random.default_rng(11)
    for n in (0, 1, 2, 17, 5000):
        if shape == "smooth":
            raw = (3_000_000_000 - np.cumsum(rng.integers(0, 500, n))) % (1 << 32)
        elif shape == "wrapping":
            raw = (np.cumsum(-rng.integers(0, 1 << 30, n))) % (1 << 32)
        else:
            raw = rng.integers(0, 1 << 32, n)
        raw = raw.astype(np.int64)
        interval = np.sort(rng.integers(0, max(1, n // 3), n)).astype(np.int32)
        results = []
        for _way in native_ways(monkeypatch):
            cum, big = loops.unwrap(raw)
            results.append((cum, big, loops.run_locals(raw, cum, interval)))
        (cum_c, big_c, local_c), (cum_p, big_p, local_p) = results
        assert np.array_equal(cum_c, cum_p) and np.array_equal(local_c, local_p)
        steps = np.diff(cum_p, prepend=cum_p[:1])
        assert big_c == big_p == int((steps >= 1 << 31).sum())


def _wrap_candidates_both_ways(monkeypatch, native_ways, calls):
    """Wrap ``decode._wrap_candidates`` so that every call runs compiled and in numpy and
    the two must agree; ``calls`` counts the calls that had readings."""
    from cell_otf2.decode import decoder as decode_mod

    original = decode_mod._wrap_candidates

    def checked(*args, **kwargs):
        got = []
        for _way in native_ways(monkeypatch):
            got.append(original(*args, **kwargs))
        assert got[0].dtype == got[1].dtype == np.bool_
        assert np.array_equal(got[0], got[1])
        calls.append(int(got[0].size))
        return got[0]

    monkeypatch.setattr(decode_mod, "_wrap_candidates", checked)


@pytest.mark.parametrize("options", [
    dict(workload="fft", spes=3, phases=2, heartbeats=False),
    dict(workload="hybrid", ranks=2, nodes=1, spes=6, spus=2, slice_ms=0.05, phases=2,
         decr_writes=True),
    dict(workload="fft", spes=2, phases=3, heartbeat_ticks=1 << 20,
         damage=["gap", "block-overrun"]),
    dict(workload="fft", spes=2, phases=2, spe_buffer_records=3, spe_buffers=1,
         decrementer_restore="restored", spus=1, slice_ms=0.02),
])
def test_wrap_candidates_agree_with_numpy(monkeypatch, native_ways, tmp_path, options):
    """The compiled wrap rule (``loops.wrap_room``) and decode's numpy agree on every
    context of simulated runs with and without heartbeats, context switches, DECR_WRITEs,
    lost records and small blocks."""
    from cell_otf2.damage import DamageLog
    from cell_otf2.decode.decoder import decode
    from cell_otf2.input.manifest import load_manifest
    from cell_otf2.input.reader import read_dump
    from cell_otf2.sim.run import simulate_run

    simulate_run(tmp_path / "run", seed=4, **options)
    man = load_manifest(tmp_path / "run")
    calls: list[int] = []
    _wrap_candidates_both_ways(monkeypatch, native_ways, calls)
    decode(man, [read_dump(man.dump_path(p.rank), man, p.rank) for p in man.processes],
           DamageLog())
    assert calls and max(calls) > 0


@pytest.mark.parametrize("options", [
    dict(workload="hybrid", ranks=2, nodes=2, spes=3, phases=2, byte_order="L"),
    dict(workload="hybrid", ranks=2, nodes=1, spes=6, spus=2, slice_ms=0.05, phases=2,
         decr_writes=True, damage=["gap", "unknown-code"]),
    dict(workload="fft", spes=2, phases=2, spe_buffer_records=3, spe_buffers=1,
         decrementer_restore="restored", spus=1, slice_ms=0.02, damage=["block-overrun"]),
])
def test_decoding_agrees_with_numpy(monkeypatch, native_ways, tmp_path, options):
    """A whole decode (reading, readings, intervals, wrap rule, the rows and anchors placed)
    both ways, over simulated runs of several shapes: the same tables."""
    from cell_otf2.damage import DamageLog
    from cell_otf2.decode.decoder import decode
    from cell_otf2.input.manifest import load_manifest
    from cell_otf2.input.reader import read_dump
    from cell_otf2.sim.run import simulate_run

    simulate_run(tmp_path / "run", seed=6, **options)
    man = load_manifest(tmp_path / "run")
    got = []
    for _way in native_ways(monkeypatch):
        dumps = [read_dump(man.dump_path(p.rank), man, p.rank) for p in man.processes]
        dec = decode(man, dumps, DamageLog())
        got.append([getattr(dec, c).tobytes() for c in
                    ("records", "anchors", "domains", "links", "loss_epoch")])
    assert got[0] == got[1]


@pytest.mark.parametrize("trusted", [True, False])
def test_wrap_candidates_agree_with_numpy_on_random_windows(monkeypatch, native_ways, trusted):
    """Both ways over random readings (any step size, so some windows have room for a
    wrap), random intervals, blocks with skipped sequence numbers and missing records, and
    PPE readings that bound some windows and not others. Whether the dump holds heartbeats
    is asked only when some step is a candidate without them, and changes nothing else."""
    from cell_otf2.decode.decoder import _candidates, _wrap_candidates
    from cell_otf2.input.reader import BLOCK_DTYPE

    rng = np.random.default_rng(5)
    some = {True: 0, False: 0}
    for _ in range(60):
        nb = int(rng.integers(1, 40))
        blocks = np.zeros(nb + 3, BLOCK_DTYPE)
        blocks["slot"] = np.sort(rng.choice(10_000, nb + 3, replace=False))
        blocks["seq"] = np.cumsum(rng.integers(1, 3, nb + 3))
        blocks["count"] = rng.integers(1, 6, nb + 3)
        blocks["present"] = np.minimum(blocks["count"], rng.integers(0, 7, nb + 3))
        blk_idx = np.sort(rng.choice(nb + 3, nb, replace=False)).astype(np.int64)
        n = int(rng.integers(2, 200))
        reading_block = np.sort(rng.choice(blk_idx, n)).astype(np.int64)
        scale = int(rng.choice([1 << 8, 1 << 31, 1 << 32]))
        raw = (rng.integers(0, scale, n) % (1 << 32)).astype(np.int64)
        interval = np.sort(rng.integers(0, 3, n)).astype(np.int32)
        p_slot = np.sort(rng.choice(10_000, int(rng.integers(0, 30)), replace=False))
        # PPE readings about 2^32 ticks apart: windows with and without room for a wrap
        p_tb = np.cumsum(rng.integers(0, 3 << 31, p_slot.size)).astype(np.uint64)
        run_begin = rng.choice(10_000, int(rng.integers(0, 3)))
        args = (p_slot, p_tb, blocks, blk_idx, reading_block, raw, interval, run_begin)
        got = []
        for _way in native_ways(monkeypatch):
            got.append(_candidates(*args, trusted))
        assert np.array_equal(got[0], got[1])
        some[bool(got[0].any())] += 1
        asked: list[int] = []
        lazy = _wrap_candidates(*args, lambda asked=asked: asked.append(1) or trusted)
        assert np.array_equal(lazy, got[0])
        assert bool(asked) == bool(_candidates(*args, False).any())
    assert some[True] and some[False]  # the rule said yes and no


@pytest.mark.parametrize("seed", range(8))
def test_split_live_agrees_with_the_python_walk(monkeypatch, native_ways, seed):
    """intervals.split_intervals' walk over switches and DECR_WRITEs, compiled and in Python,
    on random readings (wrapping decrementers, writes, switches with and without readings
    certainly before their STOP, switches after the last reading): the same intervals and
    starts."""
    from cell_otf2.decode.intervals import split_intervals

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    raw = (rng.integers(0, 1 << 32) - np.cumsum(rng.integers(0, 1 << 28, n))) % (1 << 32)
    write_new = np.where(rng.random(n) < 0.03, rng.integers(0, 1 << 32, n), -1)
    n_sw = int(rng.integers(0, 30))
    stop = rng.integers(0, 1 << 32, n_sw)
    start = rng.integers(0, 1 << 32, n_sw)
    before = np.sort(rng.integers(0, n + 2, n_sw)) if seed % 2 else None
    got = []
    for _way in native_ways(monkeypatch):
        res = split_intervals(raw, write_new, stop, start, certain_before=before)
        got.append((res.interval.tolist(), res.local.tolist(), res.n_intervals, res.starts))
    assert got[0] == got[1]
