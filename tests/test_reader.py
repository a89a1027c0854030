"""reader.py: every slot kind parsed in both byte orders, every refusal, every contained damage.

Dumps are hand-built in ``tmp_path`` through the ``cell_otf2.input.format`` dtypes by ``Builder``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cell_otf2.damage import DamageKind, DamageLog
from cell_otf2.errors import FormatError
from cell_otf2.input import format as fmt
from cell_otf2.input.manifest import Communicator, DecrementerRestore, Manifest, Node, Process
from cell_otf2.input.reader import BLOCK_DTYPE, GAP_DTYPE, PPE_DTYPE, SPE_DTYPE, read_dump

TB_HZ = 14318000
NAME = "rank00000.cbt"
LAYOUTS = [pytest.param(fmt.BIG, id="big"), pytest.param(fmt.LITTLE, id="little")]


class Builder:
    """Tiny CBT 1 dump writer: one method per slot kind, then ``write``."""

    def __init__(self, layout: fmt.Layout, *, rank: int = 0, timebase_hz: int = TB_HZ,
                 spe_buffer_records: int = 4, spe_buffers: int = 2,
                 slots_reserved: int = 0) -> None:
        self.layout = layout
        self.header = layout.new_header()
        self.header["spe_buffer_records"] = spe_buffer_records
        self.header["spe_buffers"] = spe_buffers
        self.header["rank"] = rank
        self.header["timebase_hz"] = timebase_hz
        self.header["slots_reserved"] = slots_reserved
        self.slots: list[bytes] = []

    def _slot(self, dtype: np.dtype, **fields: int) -> int:
        arr = np.zeros(1, dtype)
        for k, v in fields.items():
            arr[k] = v
        self.slots.append(arr.tobytes())
        return len(self.slots) - 1

    def ppe(self, code: int = fmt.PpeCode.ENTER, **f: int) -> int:
        return self._slot(self.layout.ppe, code=code, **f)

    def block(self, ctx: int, count: int, **f: int) -> int:
        return self._slot(self.layout.block, code=fmt.ControlCode.BLOCK, ctx=ctx, count=count,
                          **f)

    def spe(self, code: int = fmt.SpeCode.HEARTBEAT, **f: int) -> int:
        return self._slot(self.layout.spe, code=code, **f)

    def gap(self, lost: int, first_ticket: int) -> int:
        return self._slot(self.layout.gap, code=fmt.ControlCode.GAP, lost=lost,
                          first_ticket=first_ticket)

    def raw(self, code: int) -> int:
        return self._slot(self.layout.code, code=code)

    def bytes(self) -> bytes:
        return self.header.tobytes() + b"".join(self.slots)

    def write(self, directory: Path, tail: bytes = b"") -> Path:
        path = directory / NAME
        path.write_bytes(self.bytes() + tail)
        return path


def manifest(run_dir: Path, n_ranks: int = 1) -> Manifest:
    return Manifest(
        run_dir=run_dir,
        timebase_hz=TB_HZ,
        decrementer_restore=DecrementerRestore.compensated,
        nodes=(Node("qs20-a", 2, 8),),
        processes=tuple(
            Process(r, "qs20-a", f"rank{r:05d}.cbt", 0, 0) for r in range(n_ranks)
        ),
        regions=(),
        programs=(),
        counters=(),
        communicators=(Communicator(0, "MPI_COMM_WORLD", tuple(range(n_ranks))),),
    )


def read(tmp_path: Path, b: Builder, tail: bytes = b"", rank: int = 0):
    return read_dump(b.write(tmp_path, tail), manifest(tmp_path, max(rank + 1, 1)), rank)


def kinds(dump) -> dict:
    return {d.kind: d for d in dump.damage}


def rows(arr: np.ndarray, *names: str) -> list[tuple]:
    return [tuple(int(r[n]) for n in names) for r in arr]


# --------------------------------------------------------------------------------------------
# parsing
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_slot_kind_and_field(tmp_path, layout):
    b = Builder(layout, spe_buffer_records=4, spe_buffers=2, slots_reserved=13)
    b.ppe(fmt.PpeCode.ENTER, thread=2, a=0x11223344, timebase=0x0102030405060708,
          b=0xFEDCBA9876543210, c=0x0F0E0D0C0B0A0908)                            # 0
    b.block(ctx=3, count=2, decr=0x89ABCDEF, seq=7, buffer=1, flags=0, ticket=0xA1B2C3D4E5)  # 1
    b.spe(fmt.SpeCode.DMA, a=0x44, decr=0xFFFFFFF0, b=0x1234567890, c=(0x200 << 32) | 0x4000,
          d=0x0305)                                                              # 2
    b.spe(fmt.SpeCode.TAG_WAIT_END, a=0, decr=0xFFFFFF00, b=0x8, c=0, d=0)      # 3
    b.ppe(fmt.PpeCode.CTX_SWITCH, thread=1, a=3, timebase=0x0102030405060800, b=1,
          c=(5 << 32) | 0x12345678)                                              # 4
    b.gap(lost=5, first_ticket=0x100000001)                                      # 5
    b.block(ctx=4, count=1, decr=7, seq=0, buffer=0, flags=fmt.BLOCK_FLAG_LAST, ticket=11)  # 6
    b.spe(fmt.SpeCode.EXIT, a=0, decr=3, b=42, c=0, d=0)                         # 7
    b.ppe(fmt.PpeCode.LEAVE, thread=0, a=1, timebase=0xFFFFFFFFFFFFFFFF, b=0, c=0)  # 8
    d = read(tmp_path, b)

    assert d.path == tmp_path / NAME and d.name == NAME
    assert d.rank == 0 and d.byte_order == chr(layout.byte_order_code)
    assert (d.spe_buffer_records, d.spe_buffers, d.slots_reserved, d.timebase_hz) == (
        4, 2, 13, TB_HZ)
    assert d.n_slots == 9
    for arr, dtype in ((d.ppe, PPE_DTYPE), (d.blocks, BLOCK_DTYPE), (d.spe, SPE_DTYPE),
                       (d.gaps, GAP_DTYPE)):
        assert arr.dtype == dtype
        assert all(arr.dtype[n].byteorder in "=|" for n in arr.dtype.names)

    assert rows(d.ppe, "slot", "code", "thread", "a", "timebase", "b", "c") == [
        (0, 0x0101, 2, 0x11223344, 0x0102030405060708, 0xFEDCBA9876543210, 0x0F0E0D0C0B0A0908),
        (4, 0x0115, 1, 3, 0x0102030405060800, 1, (5 << 32) | 0x12345678),
        (8, 0x0102, 0, 1, 0xFFFFFFFFFFFFFFFF, 0, 0),
    ]
    assert rows(d.blocks, "slot", "ctx", "decr", "seq", "count", "present", "buffer", "flags",
                "ticket", "first") == [
        (1, 3, 0x89ABCDEF, 7, 2, 2, 1, 0, 0xA1B2C3D4E5, 0),
        (6, 4, 7, 0, 1, 1, 0, 1, 11, 2),
    ]
    assert rows(d.spe, "slot", "block", "ctx", "code", "a", "decr", "b", "c", "d") == [
        (2, 0, 3, 0x0210, 0x44, 0xFFFFFFF0, 0x1234567890, (0x200 << 32) | 0x4000, 0x0305),
        (3, 0, 3, 0x0212, 0, 0xFFFFFF00, 8, 0, 0),
        (7, 1, 4, 0x0204, 0, 3, 42, 0, 0),
    ]
    assert rows(d.gaps, "slot", "lost", "first_ticket") == [(5, 5, 0x100000001)]
    # the only damage is the GAP itself
    assert [x.kind for x in d.damage] == [DamageKind.gap]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_empty_dump(tmp_path, layout):
    d = read(tmp_path, Builder(layout))
    assert d.n_slots == 0 and d.damage == []
    assert len(d.ppe) == len(d.blocks) == len(d.spe) == len(d.gaps) == 0


def test_block_records_addressable_by_first_and_present(tmp_path):
    b = Builder(fmt.BIG, spe_buffer_records=3)
    for blk in range(4):
        b.block(ctx=blk % 2, count=3, seq=blk // 2)
        for i in range(3):
            b.spe(fmt.SpeCode.COUNTER, a=blk, b=i)
        b.ppe(thread=blk)
    d = read(tmp_path, b)
    assert d.damage == []
    for k, blk in enumerate(d.blocks):
        recs = d.spe[blk["first"]:blk["first"] + blk["present"]]
        assert list(recs["a"]) == [k] * 3 and list(recs["b"]) == [0, 1, 2]
        assert list(recs["block"]) == [k] * 3
        assert list(recs["ctx"]) == [k % 2] * 3


def test_rank_other_than_zero(tmp_path):
    b = Builder(fmt.LITTLE, rank=3)
    b.ppe(thread=0, timebase=10)
    path = b.write(tmp_path)
    d = read_dump(path, manifest(tmp_path, 4), 3)
    assert d.rank == 3 and len(d.ppe) == 1


# --------------------------------------------------------------------------------------------
# refusals
# --------------------------------------------------------------------------------------------


def _patch(raw: bytes, offset: int, value: bytes) -> bytes:
    return raw[:offset] + value + raw[offset + len(value):]


def _u16(layout, v):
    return np.array([v], dtype=layout.order + "u2").tobytes()


def _u32(layout, v):
    return np.array([v], dtype=layout.order + "u4").tobytes()


def _u64(layout, v):
    return np.array([v], dtype=layout.order + "u8").tobytes()


# (id, patch(layout, raw) -> raw, offset, field, expected text, found text)
REFUSALS = [
    ("magic", lambda L, r: _patch(r, 0, b"CBT2"), 0, "magic", "b'CBT1'", "b'CBT2'"),
    ("byte_order", lambda L, r: _patch(r, 4, b"X"), 4, "byte_order",
     "0x42 'B' or 0x4C 'L'", "0x58"),
    ("version", lambda L, r: _patch(r, 5, b"\x02"), 5, "version", "1", "2"),
    ("header_size", lambda L, r: _patch(r, 6, _u16(L, 128)), 6, "header_size", "64", "128"),
    ("slot_size", lambda L, r: _patch(r, 8, _u16(L, 16)), 8, "slot_size", "32", "16"),
    ("spe_buffer_records", lambda L, r: _patch(r, 10, _u16(L, 0)), 10, "spe_buffer_records",
     ">= 1", "0"),
    ("spe_buffers", lambda L, r: _patch(r, 12, b"\x03"), 12, "spe_buffers", "1 or 2", "3"),
    ("rank", lambda L, r: _patch(r, 16, _u32(L, 7)), 16, "rank", "0", "7"),
    ("timebase_hz", lambda L, r: _patch(r, 24, _u64(L, 14318001)), 24, "timebase_hz",
     "14318000", "14318001"),
    ("too_short", lambda L, r: r[:40], 0, "header", ">= 64 bytes", "40 bytes"),
    ("empty", lambda L, r: b"", 0, "header", ">= 64 bytes", "0 bytes"),
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", REFUSALS, ids=[c[0] for c in REFUSALS])
def test_refusal(tmp_path, layout, case):
    _, patch, offset, field, expected, found = case
    b = Builder(layout)
    b.ppe()
    path = tmp_path / NAME
    path.write_bytes(patch(layout, b.bytes()))
    with pytest.raises(FormatError) as e:
        read_dump(path, manifest(tmp_path), 0)
    err = e.value
    msg = str(err)
    assert str(path) in msg
    assert f"byte offset {offset}" in msg
    assert f"field '{field}'" in msg
    assert f"expected {expected}" in msg and f"found {found}" in msg
    assert err.offset == offset and err.field == field


def test_missing_file_is_format_error(tmp_path):
    with pytest.raises(FormatError, match="cannot read"):
        read_dump(tmp_path / NAME, manifest(tmp_path), 0)


# --------------------------------------------------------------------------------------------
# contained damage
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_truncated_file_drops_partial_slot(tmp_path, layout):
    b = Builder(layout)
    b.ppe(timebase=1)
    b.block(ctx=0, count=1)
    b.spe(decr=9)
    b.ppe(timebase=2)
    d = read(tmp_path, b, tail=b"\x01\x01" + b"\x00" * 17)
    assert d.n_slots == 4
    k = kinds(d)
    assert set(k) == {DamageKind.truncated_file}
    t = k[DamageKind.truncated_file]
    assert (t.count, t.first_slot, t.file) == (1, 4, NAME)
    assert "19 bytes" in t.message
    assert list(d.ppe["timebase"]) == [1, 2] and list(d.spe["decr"]) == [9]


def test_truncated_inside_block_is_also_overrun(tmp_path):
    b = Builder(fmt.BIG)
    b.ppe()
    b.block(ctx=1, count=4)
    b.spe(decr=5)
    d = read(tmp_path, b, tail=b"\x02\x50" + b"\x00" * 10)
    k = kinds(d)
    assert set(k) == {DamageKind.truncated_file, DamageKind.block_overrun}
    assert (k[DamageKind.truncated_file].first_slot, k[DamageKind.truncated_file].count) == (3, 1)
    o = k[DamageKind.block_overrun]
    assert (o.count, o.first_slot, o.occurrences) == (3, 1, 1)
    assert list(d.blocks["present"]) == [1] and list(d.spe["decr"]) == [5]


def test_gaps(tmp_path):
    b = Builder(fmt.LITTLE, slots_reserved=5 + 120)
    b.ppe(timebase=1)
    b.gap(lost=100, first_ticket=1)
    b.ppe(timebase=2)
    b.ppe(timebase=3)
    b.gap(lost=20, first_ticket=103)
    b.block(ctx=2, count=1, seq=3)
    b.spe()
    d = read(tmp_path, b)
    g = kinds(d)[DamageKind.gap]
    assert (g.count, g.occurrences, g.first_slot, g.file) == (120, 2, 1, NAME)
    assert rows(d.gaps, "slot", "lost", "first_ticket") == [(1, 100, 1), (4, 20, 103)]
    assert list(d.ppe["slot"]) == [0, 2, 3] and len(d.spe) == 1
    assert DamageKind.slot_count_mismatch not in kinds(d)  # 5 present + 120 lost = 125
    log = DamageLog()
    log.extend(d.damage)
    assert log.summary_lines() == [f"gap: 120 slots lost in 2 GAPs, first at {NAME} slot 1"]


def test_slot_count_mismatch(tmp_path):
    b = Builder(fmt.BIG, slots_reserved=10)
    b.ppe()
    b.gap(lost=3, first_ticket=1)
    b.ppe()
    d = read(tmp_path, b)
    m = kinds(d)[DamageKind.slot_count_mismatch]
    assert m.count == 5 and m.first_slot is None  # 10 reserved, 2 present + 3 lost
    assert len(d.ppe) == 2


@pytest.mark.parametrize("layout", LAYOUTS)
def test_block_overrun(tmp_path, layout):
    b = Builder(layout)
    b.ppe(timebase=5)
    b.block(ctx=1, count=3, seq=0)
    b.spe(fmt.SpeCode.START, decr=100)
    d = read(tmp_path, b)
    k = kinds(d)
    assert set(k) == {DamageKind.block_overrun}
    o = k[DamageKind.block_overrun]
    assert (o.count, o.first_slot, o.occurrences) == (2, 1, 1)
    assert rows(d.blocks, "count", "present", "first") == [(3, 1, 0)]
    assert rows(d.spe, "slot", "code", "decr") == [(2, 0x0203, 100)]
    assert list(d.ppe["timebase"]) == [5]


@pytest.mark.parametrize("breaker", ["ppe", "block", "gap", "undefined_ppe_class"])
def test_block_broken(tmp_path, breaker):
    b = Builder(fmt.BIG)
    b.block(ctx=1, count=3, seq=0)       # 0
    b.spe(decr=50)                       # 1
    if breaker == "ppe":                 # 2
        b.ppe(timebase=77)
    elif breaker == "block":
        b.block(ctx=2, count=1, seq=0)
    elif breaker == "gap":
        b.gap(lost=1, first_ticket=3)
    else:
        b.raw(0x01FF)
    b.spe(decr=40)                       # 3
    b.ppe(timebase=78)                   # 4
    d = read(tmp_path, b)
    k = kinds(d)
    br = k[DamageKind.block_broken]
    assert (br.count, br.first_slot, br.occurrences) == (2, 2, 1)
    assert "0x" in br.message and "slot 2" in br.message
    assert d.blocks["present"][0] == 1
    if breaker == "block":
        # slot 3 belongs to the second block: nothing outside, second block complete
        assert rows(d.blocks, "slot", "present", "first") == [(0, 1, 0), (2, 1, 1)]
        assert rows(d.spe, "slot", "block", "ctx", "decr") == [(1, 0, 1, 50), (3, 1, 2, 40)]
        assert DamageKind.spe_outside_block not in k
    else:
        assert rows(d.spe, "slot", "decr") == [(1, 50)]
        out = k[DamageKind.spe_outside_block]
        assert (out.count, out.first_slot) == (1, 3)
    if breaker == "ppe":
        assert list(d.ppe["slot"]) == [2, 4]
    if breaker == "undefined_ppe_class":
        u = k[DamageKind.unknown_code]
        assert (u.count, u.first_slot) == (1, 2)


def test_spe_outside_block(tmp_path):
    b = Builder(fmt.LITTLE)
    b.spe(decr=1)                 # 0: before anything
    b.ppe()                       # 1
    b.spe(decr=2)                 # 2: after a PPE record
    b.block(ctx=0, count=1)       # 3
    b.spe(decr=3)                 # 4: in block
    b.spe(decr=4)                 # 5: past the block's count
    d = read(tmp_path, b)
    k = kinds(d)
    assert set(k) == {DamageKind.spe_outside_block}
    o = k[DamageKind.spe_outside_block]
    assert (o.count, o.first_slot) == (3, 0)
    assert rows(d.spe, "slot", "decr", "block") == [(4, 3, 0)]
    assert len(d.ppe) == 1


@pytest.mark.parametrize("layout", LAYOUTS)
def test_unknown_codes(tmp_path, layout):
    b = Builder(layout, spe_buffer_records=4)
    b.ppe(timebase=1)                     # 0
    b.raw(0x0000)                         # 1 top level, no class
    b.raw(0x0199)                         # 2 undefined PPE-class code
    b.raw(0x0500)                         # 3 undefined class
    b.block(ctx=6, count=4)               # 4
    b.spe(decr=10)                        # 5
    b.raw(0x02FF)                         # 6 undefined SPE code inside the block
    b.raw(0x7777)                         # 7 undefined class inside the block
    b.spe(decr=7)                         # 8 still the block's 4th slot
    b.ppe(timebase=2)                     # 9
    b.raw(0x0303)                         # 10 undefined control code
    d = read(tmp_path, b)
    k = kinds(d)
    assert set(k) == {DamageKind.unknown_code}
    u = k[DamageKind.unknown_code]
    assert (u.count, u.first_slot) == (6, 1)
    assert "2 of 6 inside blocks" in u.message
    # the framing survived: both SPE records in the block, nothing broken or outside
    assert rows(d.blocks, "count", "present", "first") == [(4, 2, 0)]
    assert rows(d.spe, "slot", "decr") == [(5, 10), (8, 7)]
    assert list(d.ppe["timebase"]) == [1, 2]


def test_bad_block_count(tmp_path):
    b = Builder(fmt.BIG, spe_buffer_records=2)
    b.block(ctx=0, count=0)              # 0: empty block
    b.ppe()                              # 1
    b.block(ctx=0, count=3, seq=1)       # 2: more than spe_buffer_records
    for i in range(3):
        b.spe(decr=i)                    # 3, 4, 5
    d = read(tmp_path, b)
    k = kinds(d)
    assert set(k) == {DamageKind.bad_block_count}
    bad = k[DamageKind.bad_block_count]
    assert (bad.count, bad.first_slot) == (2, 0)
    assert rows(d.blocks, "count", "present", "first") == [(0, 0, 0), (3, 3, 0)]
    assert list(d.spe["decr"]) == [0, 1, 2]


def test_several_blocks_broken_and_overrun_counted_together(tmp_path):
    b = Builder(fmt.BIG, spe_buffer_records=8)
    b.block(ctx=0, count=4)   # 0: 1 present, broken at 2 (3 missing)
    b.spe()                   # 1
    b.ppe()                   # 2
    b.block(ctx=1, count=2)   # 3: 0 present, broken at 4 (2 missing)
    b.block(ctx=2, count=5)   # 4: 2 present, overrun (3 missing)
    b.spe()
    b.spe()
    d = read(tmp_path, b)
    k = kinds(d)
    br, ov = k[DamageKind.block_broken], k[DamageKind.block_overrun]
    assert (br.count, br.occurrences, br.first_slot) == (5, 2, 2)
    assert (ov.count, ov.occurrences, ov.first_slot) == (3, 1, 4)
    assert list(d.blocks["present"]) == [1, 0, 2]
    assert list(d.blocks["first"]) == [0, 1, 1]


# --------------------------------------------------------------------------------------------
# chunked framing agrees with a slot-by-slot reference
# --------------------------------------------------------------------------------------------

UNDEFINED = [0x0000, 0x0199, 0x02FF, 0x0303, 0x7777]
OPS = st.one_of(
    st.just(("ppe", 0)),
    st.just(("spe", 0)),
    st.tuples(st.just("block"), st.integers(0, 6)),
    st.tuples(st.just("gap"), st.integers(0, 3)),
    st.tuples(st.just("raw"), st.sampled_from(UNDEFINED)),
)


def reference_frame(ops: list[tuple[str, int]], spe_buffer_records: int) -> dict:
    """The framing rule of docs/format.md 4.3 applied one slot at a time."""
    out = {k: [] for k in ("ppe", "blocks", "spe", "gaps")}
    present: list[int] = []
    dmg = {k: 0 for k in DamageKind}
    block, remaining = -1, 0
    for i, (op, arg) in enumerate(ops):
        code = {"ppe": 0x0101, "spe": 0x0250, "block": 0x0301, "gap": 0x0302}.get(op, arg)
        if code >> 8 in (1, 3):
            if block >= 0 and remaining:
                dmg[DamageKind.block_broken] += remaining
            block, remaining = -1, 0
            if op == "ppe":
                out["ppe"].append(i)
            elif op == "gap":
                out["gaps"].append(i)
                dmg[DamageKind.gap] += arg
            elif op == "block":
                out["blocks"].append(i)
                present.append(0)
                block, remaining = len(present) - 1, arg
                if not 1 <= arg <= spe_buffer_records:
                    dmg[DamageKind.bad_block_count] += 1
            else:
                dmg[DamageKind.unknown_code] += 1
        elif block >= 0 and remaining:
            remaining -= 1
            if op == "spe":
                out["spe"].append((i, block))
                present[block] += 1
            else:
                dmg[DamageKind.unknown_code] += 1
        elif op == "spe":
            dmg[DamageKind.spe_outside_block] += 1
        else:
            dmg[DamageKind.unknown_code] += 1
    if block >= 0 and remaining:
        dmg[DamageKind.block_overrun] += remaining
    out["present"] = present
    out["damage"] = {k: v for k, v in dmg.items() if v}
    return out


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, max_size=40), chunk=st.sampled_from([1, 2, 3, 5, 8, 1 << 20]),
       layout=st.sampled_from([fmt.BIG, fmt.LITTLE]))
def test_chunked_framing_matches_reference(tmp_path, ops, chunk, layout):
    b = Builder(layout, spe_buffer_records=4)
    for op, arg in ops:
        if op == "ppe":
            b.ppe(timebase=len(b.slots))
        elif op == "spe":
            b.spe(decr=len(b.slots))
        elif op == "block":
            b.block(ctx=len(b.slots), count=arg)
        elif op == "gap":
            b.gap(lost=arg, first_ticket=0)
        else:
            b.raw(arg)
    path = b.write(tmp_path)
    d = read_dump(path, manifest(tmp_path), 0, chunk_slots=chunk)
    ref = reference_frame(ops, 4)
    assert list(d.ppe["slot"]) == ref["ppe"]
    assert list(d.ppe["timebase"]) == ref["ppe"]
    assert list(d.blocks["slot"]) == ref["blocks"]
    assert list(d.blocks["ctx"]) == ref["blocks"]
    assert list(d.gaps["slot"]) == ref["gaps"]
    assert [(int(r["slot"]), int(r["block"])) for r in d.spe] == ref["spe"]
    assert list(d.spe["decr"]) == [s for s, _ in ref["spe"]]
    assert list(d.blocks["present"]) == ref["present"]
    first = np.cumsum([0] + ref["present"])[:-1]
    assert list(d.blocks["first"]) == list(first)
    assert {x.kind: x.count for x in d.damage if x.count} == ref["damage"]


# --------------------------------------------------------------------------------------------
# scale
# --------------------------------------------------------------------------------------------


def test_million_slots_vectorized(tmp_path):
    """~1e6 slots in a repeating pattern: PPE, block of 3 SPE records, GAP every 1000th."""
    layout = fmt.LITTLE
    reps = 200_000
    pattern = Builder(layout)
    pattern.ppe(fmt.PpeCode.COUNTER)
    pattern.block(ctx=1, count=3)
    for _ in range(3):
        pattern.spe(fmt.SpeCode.HEARTBEAT)
    unit = np.frombuffer(b"".join(pattern.slots), dtype=np.uint8)
    body = np.tile(unit, reps).view(layout.ppe)
    # vary fields per repetition through the same dtypes
    idx = np.arange(reps, dtype=np.uint64)
    body["timebase"][0::5] = 1000 + idx
    blocks_view = body.view(layout.block)
    blocks_view["seq"][1::5] = idx.astype(np.uint32)
    spe_view = body.view(layout.spe)
    spe_view["decr"][2::5] = (0xFFFFFFFF - 3 * idx).astype(np.uint32)
    # every 1000th PPE record becomes a GAP of 7 slots
    gap_view = body.view(layout.gap)
    gap_at = np.arange(0, 5 * reps, 5000)
    gap_view["code"][gap_at] = fmt.ControlCode.GAP
    gap_view["lost"][gap_at] = 7
    header = pattern.header.copy()
    path = tmp_path / NAME
    path.write_bytes(header.tobytes() + body.tobytes())

    d = read_dump(path, manifest(tmp_path), 0, chunk_slots=(1 << 17) + 3)  # 8 chunks
    assert d.n_slots == 5 * reps
    assert len(d.gaps) == len(gap_at) == 200
    assert len(d.ppe) == reps - 200
    assert len(d.blocks) == reps and len(d.spe) == 3 * reps
    assert np.array_equal(d.blocks["seq"], np.arange(reps))
    assert np.all(d.blocks["present"] == 3)
    assert np.array_equal(d.blocks["first"], 3 * np.arange(reps))
    assert np.array_equal(d.spe["block"], np.repeat(np.arange(reps), 3))
    assert np.array_equal(d.spe["decr"][0::3], 0xFFFFFFFF - 3 * np.arange(reps))
    keep = np.ones(reps, bool)
    keep[gap_at // 5] = False
    assert np.array_equal(d.ppe["timebase"], 1000 + np.arange(reps)[keep])
    assert [x.kind for x in d.damage] == [DamageKind.gap]
    assert d.damage[0].count == 7 * 200


# --------------------------------------------------------------------------------------------
# damage log
# --------------------------------------------------------------------------------------------


def test_damage_log_merges_by_kind_and_file():
    log = DamageLog()
    log.add(DamageKind.gap, "rank00000.cbt", 6000, 20, "later")
    log.add("gap", "rank00000.cbt", 5012, 90, "earlier")
    log.add(DamageKind.gap, "rank00001.cbt", 3, 10, "other file")
    log.add(DamageKind.unknown_code, "rank00001.cbt", 9, 1, "x")
    entries = log.entries()
    assert [(e.kind, e.file, e.count, e.first_slot, e.occurrences, e.message) for e in entries] == [
        (DamageKind.gap, "rank00000.cbt", 110, 5012, 2, "earlier"),
        (DamageKind.gap, "rank00001.cbt", 10, 3, 1, "other file"),
        (DamageKind.unknown_code, "rank00001.cbt", 1, 9, 1, "x"),
    ]
    assert log.total() == 121
    assert log.summary_lines() == [
        "gap: 120 slots lost in 3 GAPs, first at rank00000.cbt slot 5012",
        "unknown_code: 1 slot with an undefined code skipped, first at rank00001.cbt slot 9",
    ]
    with pytest.raises(ValueError):
        log.add("no_such_kind", "f", 0, 1, "m")
