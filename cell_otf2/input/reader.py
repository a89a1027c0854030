"""One shared-buffer dump (docs/format.md section 4) -> native-endian numpy arrays of its slots:
``read_dump(path, manifest, rank)`` refuses a file that is not a CBT 1 dump of that rank with a
``FormatError``, frames the slot stream in chunks (format.md 4.3; memory bounded by the output
arrays plus one chunk; in C through ``loops.frame_chunk`` where it is built, else with numpy,
the same tables either way) and returns a ``Dump`` of PPE records, SPE block headers, SPE
records, GAPs and the contained damage (docs/damage.md, docs/design.md). It does not check
reserved fields, block ``seq``/``ticket`` values, record fields, ids or anything about time."""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..damage import Damage, DamageKind
from ..errors import FormatError
from ..model import SPE_IN_RECORD_DTYPE
from ..native import record_loops as loops
from ..native.record_loops import gather_fields
from . import format as fmt
from .manifest import Manifest, file_kind

# --------------------------------------------------------------------------------------------
# output dtypes (native byte order)
# --------------------------------------------------------------------------------------------

#: every PPE record at top level, in slot order
PPE_DTYPE = np.dtype(
    [
        ("slot", "i8"),  # slot index in the file, 0-based after the header
        ("code", "u2"),
        ("thread", "u2"),
        ("a", "u4"),
        ("timebase", "u8"),
        ("b", "u8"),
        ("c", "u8"),
    ]
)

#: every SPE block header, in slot order
BLOCK_DTYPE = np.dtype(
    [
        ("slot", "i8"),
        ("ctx", "u2"),
        ("decr", "u4"),
        ("seq", "u4"),
        ("count", "u2"),  # declared
        ("present", "u2"),  # records read into ``spe``
        ("buffer", "u1"),
        ("flags", "u1"),
        ("ticket", "u8"),
        ("first", "i8"),  # index in ``spe`` of the block's first record
    ]
)

#: every SPE record inside a block, in slot order (so grouped by block, in array order)
SPE_DTYPE = np.dtype(
    [
        ("slot", "i8"),
        ("block", "i8"),  # index into ``blocks``
        ("ctx", "u2"),  # the block's context
        ("code", "u2"),
        ("a", "u2"),
        ("decr", "u4"),
        ("b", "u8"),
        ("c", "u8"),
        ("d", "u8"),
    ]
)

#: what a reading for the summary only (``read_dump(..., spe_records=False)``) keeps of each SPE
#: record: its block's context
SPE_CTX_DTYPE = np.dtype([("ctx", "u2")])

#: every GAP control slot
GAP_DTYPE = np.dtype([("slot", "i8"), ("lost", "u8"), ("first_ticket", "u8")])

# slot categories by code, one lookup table for all 65536 codes
_UNDEFINED, _PPE, _SPE, _BLOCK, _GAP = 0, 1, 2, 3, 4
_CATEGORY = np.zeros(1 << 16, dtype=np.uint8)
_CATEGORY[list(fmt.PPE_CODES)] = _PPE
_CATEGORY[list(fmt.SPE_CODES)] = _SPE
_CATEGORY[int(fmt.ControlCode.BLOCK)] = _BLOCK
_CATEGORY[int(fmt.ControlCode.GAP)] = _GAP
#: PPE-class and control-class codes, defined or not: always top level, they break a block
_TOP_LEVEL = np.isin(np.arange(1 << 16) >> 8, [fmt.SlotClass.PPE, fmt.SlotClass.CONTROL])
#: both in one byte per code, for the compiled framer: category, and 16 if top level
_FRAME_TABLE = (_CATEGORY | (_TOP_LEVEL.astype(np.uint8) << 4)).astype(np.uint8)

#: the fields each table takes from its slot as they are
_PPE_FIELDS = ("code", "thread", "a", "timebase", "b", "c")
_GAP_FIELDS = ("lost", "first_ticket")
_BLOCK_FIELDS = ("ctx", "decr", "seq", "count", "buffer", "flags", "ticket")
_SPE_FIELDS = ("code", "a", "decr", "b", "c", "d")

#: slots framed at once: 4 MiB of dump, a few times that in temporaries, small enough for
#: glibc to serve them again from its heap chunk after chunk (at 32 MiB each chunk's
#: temporaries were fresh mappings, faulted in and zeroed anew: twice the page faults)
CHUNK_SLOTS = 1 << 17


@dataclass
class Dump:
    """One process's dump, read and framed; arrays are native-endian and in slot order (but
    ``spe`` when ``spe_by_context``: grouped by context id, ascending, each context's records
    in slot order; ``blocks["first"]`` then indexes that order)."""

    path: Path
    name: str  # how messages name the file (path relative to the run directory)
    rank: int
    byte_order: str  # "B" or "L" as in the header
    spe_buffer_records: int
    spe_buffers: int
    slots_reserved: int
    timebase_hz: int
    n_slots: int  # whole slots in the file
    ppe: np.ndarray  # PPE_DTYPE
    blocks: np.ndarray  # BLOCK_DTYPE
    spe: np.ndarray  # SPE_DTYPE, or rows of a record table (``read_dump``'s ``spe_buffer``)
    gaps: np.ndarray  # GAP_DTYPE
    damage: list[Damage] = field(default_factory=list)
    spe_by_context: bool = False


def _display_name(path: Path, manifest: Manifest) -> str:
    try:
        return str(path.relative_to(manifest.run_dir))
    except ValueError:
        return str(path)


def _read_header(path: Path, size: int, manifest: Manifest, rank: int) -> np.void:
    """Identify the file and check its header; return the header record (file byte order)."""

    def refuse(offset: int, field_name: str, message: str, expected: object, found: object):
        return FormatError(
            path, message, offset=offset, field=field_name, expected=expected, found=found
        )

    if size < fmt.HEADER_SIZE:
        raise refuse(
            0, "header", "file too short to hold a CBT 1 header",
            f">= {fmt.HEADER_SIZE} bytes", f"{size} bytes",
        )
    with open(path, "rb") as f:
        raw = f.read(fmt.HEADER_SIZE)
    if len(raw) < fmt.HEADER_SIZE:  # shrank while we looked
        raise refuse(0, "header", "file too short to hold a CBT 1 header",
                     f">= {fmt.HEADER_SIZE} bytes", f"{len(raw)} bytes")
    if raw[0:4] != fmt.MAGIC:
        raise refuse(0, "magic", "not a CBT dump", repr(fmt.MAGIC), repr(raw[0:4]))
    layout = fmt.LAYOUTS.get(raw[4])
    if layout is None:
        raise refuse(
            4, "byte_order", "unknown byte order", "0x42 'B' or 0x4C 'L'", f"0x{raw[4]:02X}"
        )
    h = np.frombuffer(raw, layout.header)[0]
    checks = [
        (5, "version", int(h["version"]) == fmt.VERSION, fmt.VERSION, "unsupported version"),
        (6, "header_size", int(h["header_size"]) == fmt.HEADER_SIZE, fmt.HEADER_SIZE,
         "unsupported header size"),
        (8, "slot_size", int(h["slot_size"]) == fmt.SLOT_SIZE, fmt.SLOT_SIZE,
         "unsupported slot size"),
        (10, "spe_buffer_records", int(h["spe_buffer_records"]) >= 1, ">= 1",
         "SPE buffers must hold at least one record"),
        (12, "spe_buffers", int(h["spe_buffers"]) in (1, 2), "1 or 2",
         "unsupported number of SPE buffers"),
        (16, "rank", int(h["rank"]) == rank, rank, "dump of another rank than the manifest says"),
        (24, "timebase_hz", int(h["timebase_hz"]) == manifest.timebase_hz, manifest.timebase_hz,
         "timebase frequency differs from the manifest's"),
    ]
    for offset, name, ok, expected, message in checks:
        if not ok:
            raise refuse(offset, name, message, expected, int(h[name]))
    return h


def read_dump(
    path: Path, manifest: Manifest, rank: int, *, chunk_slots: int = CHUNK_SLOTS,
    spe_records: bool = True, by_context: np.ndarray | None = None,
    spe_buffer: np.ndarray | None = None,
) -> Dump:
    """Read ``rank``'s dump at ``path``: refuse a file that is not one, contain any damage.

    ``chunk_slots`` bounds the working memory (slots framed at once); any value >= 1 gives the
    same result, tests use small ones. ``spe_records=False``: ``spe`` keeps only each SPE
    record's context (``SPE_CTX_DTYPE``), all a summary needs; the rest is the same.

    ``by_context``: how many SPE records each context id is expected to have (a summary's
    ``ctx_counts``). When the dump has exactly these, ``spe`` comes grouped by context
    (``Dump.spe_by_context``; the compiled framer writes each record to its context's rows
    at once, so that decoding reads each context's records as one range), else in slot order.
    ``spe_buffer``: an ``SPE_DTYPE`` array whose first rows then hold ``spe`` if it is large
    enough (a caller reading dump after dump reuses its pages; each read overwrites the
    last one's ``spe``); or, for the compiled framer with ``by_context``, the rows of a
    ``RECORD_DTYPE`` table viewed as ``SPE_IN_RECORD_DTYPE`` (``decode`` passes the rows the
    dump's SPE records will have): each record is then framed straight into its row, and
    ``spe`` is that view (it has no ``ctx`` field).
    """
    path = Path(path)
    name = _display_name(path, manifest)
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise FormatError(path, f"not a regular file (a {file_kind(info.st_mode)}); a "
                              "dump must be a file")
        size = info.st_size
        header = _read_header(path, size, manifest, rank)
    except OSError as exc:
        raise FormatError(path, f"cannot read the dump: {exc.strerror or exc}") from None
    layout = fmt.LAYOUTS[int(header["byte_order"])]

    damage: list[Damage] = []
    body = size - fmt.HEADER_SIZE
    n = body // fmt.SLOT_SIZE
    partial = body - n * fmt.SLOT_SIZE
    if partial:
        damage.append(
            Damage(
                DamageKind.truncated_file, 1, name, n,
                f"file ends {partial} bytes into slot {n} (length {size} is not 64 + 32k); "
                "the partial slot is dropped",
            )
        )

    try:
        with _SlotSource(path, n, chunk_slots) as source:
            framer = _Framer(source, layout, n, name, int(header["spe_buffer_records"]),
                             spe_records, by_context if spe_records else None, spe_buffer)
            framer.run(chunk_slots)
            if framer.expect is not None and not framer.grouped:  # not the counts expected
                framer = _Framer(source, layout, n, name, int(header["spe_buffer_records"]))
                framer.run(chunk_slots)
    except OSError as exc:
        raise FormatError(path, f"cannot read the dump: {exc.strerror or exc}") from None
    ppe, blocks, spe, gaps = framer.ppe, framer.blocks, framer.spe, framer.gaps
    damage.extend(framer.damage())

    slots_reserved = int(header["slots_reserved"])
    if slots_reserved:
        accounted = n - len(gaps) + int(gaps["lost"].sum(dtype=np.uint64))
        if accounted != slots_reserved:
            damage.append(
                Damage(
                    DamageKind.slot_count_mismatch, abs(slots_reserved - accounted), name, None,
                    f"header says {slots_reserved} slots were reserved, the file accounts for "
                    f"{accounted} ({n - len(gaps)} present + lost in GAPs)",
                )
            )

    return Dump(
        path=path,
        name=name,
        rank=rank,
        byte_order=chr(int(header["byte_order"])),
        spe_buffer_records=int(header["spe_buffer_records"]),
        spe_buffers=int(header["spe_buffers"]),
        slots_reserved=slots_reserved,
        timebase_hz=int(header["timebase_hz"]),
        n_slots=n,
        ppe=ppe,
        blocks=blocks,
        spe=spe,
        gaps=gaps,
        damage=damage,
        spe_by_context=framer.grouped,
    )


class _Damage:
    """Per-kind accumulator of one dump's damage; chunks arrive in slot order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.acc: dict[DamageKind, list] = {}  # kind -> [count, occurrences, first_slot, msg]

    def add(self, kind: DamageKind, count: int, occurrences: int, first_slot: int | None,
            message: str) -> None:
        if occurrences <= 0:
            return
        entry = self.acc.get(kind)
        if entry is None:
            self.acc[kind] = [int(count), int(occurrences), first_slot, message]
        else:
            entry[0] += int(count)
            entry[1] += int(occurrences)

    def entries(self) -> list[Damage]:
        order = list(DamageKind)
        return [
            Damage(kind, c, self.name, first, msg, occurrences=occ)
            for kind, (c, occ, first, msg) in sorted(
                self.acc.items(), key=lambda kv: order.index(kv[0])
            )
        ]


def _field_offsets(dtype: np.dtype) -> dict[str, int]:
    """Each field's byte offset in the structured ``dtype``."""
    assert dtype.fields is not None, "a structured dtype"
    return {name: int(spec[1]) for name, spec in dtype.fields.items()}


def _room(table: np.ndarray, used: int, need: int, most: int) -> np.ndarray:
    """``table`` with room for at least ``need`` rows (at most ``most``), its first ``used``
    rows kept: itself when it has it, else a copy twice as large."""
    if len(table) >= need:
        return table
    grown = np.empty(min(most, max(need, 2 * len(table))), table.dtype)
    grown[:used] = table[:used]
    return grown


class _SlotSource:
    """The dump's slots, read chunk by chunk into one reused buffer with ``readinto``: no
    memory map, so no page fault per page of the file and the file's pages never count as
    the converter's memory."""

    def __init__(self, path: Path, n: int, chunk_slots: int) -> None:
        self.n = n
        self.buffer = np.empty(min(n, max(1, int(chunk_slots))) * fmt.SLOT_SIZE, dtype=np.uint8)
        self.file = open(path, "rb")  # noqa: SIM115  (closed by __exit__)

    def __enter__(self) -> _SlotSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()

    def read(self, start: int, stop: int) -> np.ndarray:
        """The bytes of slots ``start .. stop - 1`` (valid until the next read)."""
        size = (stop - start) * fmt.SLOT_SIZE
        self.file.seek(fmt.HEADER_SIZE + start * fmt.SLOT_SIZE)
        got = self.file.readinto(self.buffer.data[:size])
        if got != size:
            raise OSError(f"the file shrank while it was read (slot {start + got // 32})")
        return self.buffer[:size]


class _Framer:
    """Frames the slot stream chunk by chunk into preallocated output arrays.

    Each chunk is classified with numpy. State carried between chunks is the last top-level
    slot seen (``carry_*``): non-top-level slots at the start of a chunk belong to it if it is a
    block header, and that block's length is settled only when the next top-level slot (or the
    end of the file) is seen.
    """

    def __init__(self, source: _SlotSource, layout: fmt.Layout, n: int, name: str,
                 spe_buffer_records: int, spe_records: bool = True,
                 expect: np.ndarray | None = None, spe_buffer: np.ndarray | None = None
                 ) -> None:
        self.source = source
        self.spe_records = spe_records
        # SPE records expected per context id (None: slot order wanted), where they go
        self.expect = None
        if expect is not None:
            self.expect = np.zeros(1 << 16, dtype=np.int64)
            self.expect[:len(expect)] = expect
        self.spe_buffer = spe_buffer
        self.grouped = False
        self.layout = layout
        self.n = n
        self.spe_buffer_records = spe_buffer_records
        self.chunk_start = 0  # the slots of the chunk read last, as views of its bytes
        self.log = _Damage(name)
        self.unknown_in_blocks = 0
        # the last top-level slot seen: global slot (-1: none), block index (-1: not a block)
        self.carry_slot = -1
        self.carry_block = -1

    def _read(self, start: int, stop: int) -> None:
        raw = self.source.read(start, stop)
        self.chunk_start = start
        self.codes_view = raw.view(self.layout.code)["code"]
        self.ppe_view = raw.view(self.layout.ppe)
        self.spe_view = raw.view(self.layout.spe)
        self.block_view = raw.view(self.layout.block)
        self.gap_view = raw.view(self.layout.gap)

    def _codes(self, start: int, stop: int) -> np.ndarray:
        """Codes of slots ``start .. stop - 1``, which must be the chunk read last."""
        return self.codes_view[start - self.chunk_start:stop - self.chunk_start].astype(
            np.uint16)

    def _allocate(self, chunk_slots: int) -> None:
        """First pass: exact sizes of ppe/blocks/gaps, an upper bound for spe."""
        per_cat = np.zeros(5, dtype=np.int64)
        for start in range(0, self.n, chunk_slots):
            stop = min(self.n, start + chunk_slots)
            self._read(start, stop)
            cats = _CATEGORY[self._codes(start, stop)]
            per_cat += np.bincount(cats, minlength=5)
        self.ppe = np.zeros(int(per_cat[_PPE]), PPE_DTYPE)
        self.blocks = np.zeros(int(per_cat[_BLOCK]), BLOCK_DTYPE)
        self.spe = np.zeros(int(per_cat[_SPE]), SPE_DTYPE if self.spe_records else SPE_CTX_DTYPE)
        self.gaps = np.zeros(int(per_cat[_GAP]), GAP_DTYPE)
        self.i_ppe = self.i_blk = self.i_spe = self.i_gap = 0

    def run(self, chunk_slots: int) -> None:
        chunk_slots = max(1, int(chunk_slots))
        compiled = loops.compiled_framing()  # one framer for the whole dump
        if compiled:
            self._run_compiled(chunk_slots)
        else:
            self._allocate(chunk_slots)
            for start in range(0, self.n, chunk_slots):
                stop = min(self.n, start + chunk_slots)
                self._read(start, stop)
                self._chunk(start, stop)
        # the last top-level slot's block (if any) runs to the end of the file
        if self.carry_block >= 0:
            self._settle(np.array([self.carry_block]), np.array([self.n]), None)
        if self.expect is not None and not compiled:
            self._group_by_context()
        if self.i_spe < len(self.spe):  # SPE-coded slots outside blocks were skipped
            if self.spe.flags.owndata:
                self.spe.resize(self.i_spe, refcheck=False)
            else:  # rows of a caller's buffer (the reading is then done again, in slot order)
                self.spe = self.spe[:self.i_spe]
        present = self.blocks["present"].astype(np.int64)
        if self.grouped:  # each context's blocks' records are one range, contexts ascending
            order = np.argsort(self.blocks["ctx"], kind="stable")
            present = present[order]
            self.blocks["first"][order] = np.cumsum(present) - present
        else:
            self.blocks["first"] = np.cumsum(present) - present
        bad = (self.blocks["count"] < 1) | (self.blocks["count"] > self.spe_buffer_records)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            slot, count = int(self.blocks["slot"][i]), int(self.blocks["count"][i])
            self.log.add(
                DamageKind.bad_block_count, int(bad.sum()), int(bad.sum()), slot,
                f"block at slot {slot} declares count {count}, outside "
                f"1..{self.spe_buffer_records} (spe_buffer_records)",
            )

    def _spe_table(self, rows: int, in_record: bool = False) -> np.ndarray:
        """The SPE table for ``rows`` records: the caller's buffer if it holds them (one of
        ``SPE_DTYPE``, or with ``in_record`` also rows of the record table viewed as
        ``SPE_IN_RECORD_DTYPE``), else a new one."""
        spe_dtype = SPE_DTYPE if self.spe_records else SPE_CTX_DTYPE
        buf = self.spe_buffer
        if (buf is not None and buf.ndim == 1 and len(buf) >= rows
                and (buf.dtype == spe_dtype or (in_record and self.spe_records
                                                and buf.dtype == SPE_IN_RECORD_DTYPE))):
            return buf[:rows]
        return np.empty(rows, spe_dtype)

    def _group_by_context(self) -> None:
        """The numpy framer's slot-order SPE table grouped by context, as the compiled framer
        writes it, if it has the records expected per context."""
        assert self.expect is not None  # the caller groups only with expected counts
        counts = np.bincount(self.spe["ctx"][:self.i_spe], minlength=1 << 16)
        if counts.size == 1 << 16 and np.array_equal(counts, self.expect):
            order = np.argsort(self.spe["ctx"][:self.i_spe], kind="stable")
            self.spe = np.take(self.spe[:self.i_spe], order, out=self._spe_table(self.i_spe))
            self.grouped = True

    def _run_compiled(self, chunk_slots: int) -> None:
        """The same tables and damage as ``_allocate`` and ``_chunk``, framed in C
        (``loops.frame_chunk``) in one reading of the file. The tables grow with what the
        chunks hold (before each chunk, room for one more chunk's slots, doubling), never to
        the slot count the file's size claims: a sparse or mostly unknown dump of gigabytes
        costs the memory of its records, not of its length. With ``expect``, the SPE table is
        grouped by context as it is written (its size is then known: the expected counts)."""
        n = self.n
        spe_dtype = SPE_DTYPE if self.spe_records else SPE_CTX_DTYPE
        room = min(n, chunk_slots)
        ppe, blocks = np.empty(room, PPE_DTYPE), np.empty(room, BLOCK_DTYPE)
        group = None
        if self.expect is not None:
            end = np.cumsum(self.expect)
            group = (end - self.expect, end)
            spe = self._spe_table(int(end[-1]), in_record=True)
        else:
            spe = np.empty(room, spe_dtype)
        gaps = np.empty(room, GAP_DTYPE)
        lay = self.layout
        pairs = tuple(tuple((f, f) for f in fields) for fields in (
            _PPE_FIELDS, _BLOCK_FIELDS, _GAP_FIELDS, _SPE_FIELDS if self.spe_records else ()))
        ppe_at, block_at, gap_at, spe_at = (
            _field_offsets(dt) for dt in (PPE_DTYPE, BLOCK_DTYPE, GAP_DTYPE, spe.dtype))
        special = np.array(
            [ppe_at["slot"], block_at["slot"], block_at["ctx"], block_at["count"],
             block_at["present"], gap_at["slot"], gap_at["lost"]]
            + ([spe_at["slot"], spe_at["block"]] if self.spe_records else [-1, -1])
            + [spe_at.get("ctx", -1)], dtype=np.int64)
        swap = lay.order != ("<" if sys.byteorder == "little" else ">")
        state = np.array([-1, -1, 0, 0, 0, 0, 0, 0], dtype=np.int64)
        stats = np.zeros(12, dtype=np.int64)
        for start in range(0, n, chunk_slots):
            stop = min(n, start + chunk_slots)
            more = stop - start  # a slot adds at most one row to one table
            ppe, blocks, gaps = (_room(t, int(state[k]), int(state[k]) + more, n)
                                 for t, k in ((ppe, 2), (blocks, 3), (gaps, 5)))
            if group is None:
                spe = _room(spe, int(state[4]), int(state[4]) + more, n)
            outputs = tuple(zip((ppe, blocks, gaps, spe),
                                (lay.ppe, lay.block, lay.gap, lay.spe), pairs, strict=True))
            raw = self.source.read(start, stop)
            i_gap = int(state[5])
            loops.frame_chunk(raw, start, swap, _FRAME_TABLE, outputs, special, state, stats,
                              group)
            s = stats.tolist()
            if state[5] > i_gap:
                slot, lost, ticket = gaps[["slot", "lost", "first_ticket"]][i_gap].tolist()
                self._gaps(s[0] & 0xFFFFFFFFFFFFFFFF, int(state[5]) - i_gap, slot, lost, ticket)
            if s[2]:
                slot, ctx, seq, count = blocks[["slot", "ctx", "seq", "count"]][s[3]].tolist()
                self._broken_blocks(s[1], s[2], s[4], slot, ctx, seq, count, s[5])
            if s[6]:
                self._outside_blocks(s[6], s[7], s[8])
            if s[9]:
                self._unknown_codes(s[9], s[10], s[11])
        self.carry_slot, self.carry_block = int(state[0]), int(state[1])
        self.i_ppe, self.i_blk, self.i_spe, self.i_gap = (int(v) for v in state[2:6])
        self.unknown_in_blocks = int(state[6])
        for arr, used in ((ppe, self.i_ppe), (blocks, self.i_blk), (gaps, self.i_gap)):
            arr.resize(used, refcheck=False)
        self.ppe, self.blocks, self.gaps, self.spe = ppe, blocks, gaps, spe
        if group is not None:  # every record had its row, every row its record
            self.grouped = state[7] == 0 and np.array_equal(group[0], group[1])

    # -- the damage both framers find, in the same words (each call: one chunk's)
    def _gaps(self, lost: int, n: int, slot: int, first_lost: int, ticket: int) -> None:
        """``n`` GAPs losing ``lost`` slots, the first at ``slot`` (``first_lost`` slots from
        ``ticket``)."""
        self.log.add(DamageKind.gap, lost, n, slot,
                     f"GAP at slot {slot}: {first_lost} slots lost from ticket {ticket}")

    def _broken_blocks(self, missing: int, n: int, at: int, slot: int, ctx: int, seq: int,
                       count: int, code: int) -> None:
        """``n`` blocks cut short by a slot that is not an SPE record (``missing`` records),
        the first the block at ``slot``, cut at slot ``at`` holding ``code``."""
        self.log.add(DamageKind.block_broken, missing, n, at,
                     f"block at slot {slot} (ctx {ctx}, seq {seq}) declares {count} records but "
                     f"slot {at} holds code 0x{code:04X}, not an SPE record")

    def _outside_blocks(self, n: int, slot: int, code: int) -> None:
        self.log.add(DamageKind.spe_outside_block, n, n, slot,
                     f"SPE record code 0x{code:04X} at slot {slot} is not inside any block")

    def _unknown_codes(self, n: int, slot: int, code: int) -> None:
        self.log.add(DamageKind.unknown_code, n, n, slot,
                     f"undefined code 0x{code:04X} at slot {slot}")

    def damage(self) -> list[Damage]:
        entries = self.log.entries()
        for k, d in enumerate(entries):
            if d.kind == DamageKind.unknown_code:
                entries[k] = Damage(
                    d.kind, d.count, d.file, d.first_slot,
                    f"{d.message} ({self.unknown_in_blocks} of {d.count} inside blocks, skipped "
                    "with the block framing kept)",
                    d.occurrences,
                )
        return entries

    def _take(self, out: np.ndarray, cursor: str, view: np.ndarray, slots: np.ndarray,
              fields: tuple[str, ...]) -> np.ndarray:
        """Append the records at ``slots`` to ``out``; return the rows written."""
        i = getattr(self, cursor)
        rows = out[i:i + len(slots)]
        setattr(self, cursor, i + len(slots))
        rows["slot"] = slots
        # the fields straight from the chunk's bytes (byte order converted on the way)
        gather_fields(rows, view, slots - self.chunk_start, tuple((f, f) for f in fields))
        return rows

    def _settle(self, block_idx: np.ndarray, next_top: np.ndarray, codes_at: np.ndarray | None
                ) -> None:
        """Blocks ``block_idx`` are followed by the top-level slot ``next_top`` (or EOF = n):
        record the ones whose count does not fit (``codes_at``: code of each next_top slot)."""
        header = self.blocks["slot"][block_idx]
        count = self.blocks["count"][block_idx].astype(np.int64)
        room = next_top - header - 1
        short = count > room
        if not short.any():
            return
        missing = count - room
        eof = next_top >= self.n
        broken = short & ~eof
        overrun = short & eof
        ctx, seq = self.blocks["ctx"][block_idx], self.blocks["seq"][block_idx]
        if broken.any():
            i = int(np.flatnonzero(broken)[0])
            code = int(codes_at[i]) if codes_at is not None else -1
            self._broken_blocks(int(missing[broken].sum()), int(broken.sum()), int(next_top[i]),
                                int(header[i]), int(ctx[i]), int(seq[i]), int(count[i]), code)
        if overrun.any():
            i = int(np.flatnonzero(overrun)[0])
            self.log.add(
                DamageKind.block_overrun, int(missing[overrun].sum()), int(overrun.sum()),
                int(header[i]),
                f"block at slot {int(header[i])} (ctx {int(ctx[i])}, seq {int(seq[i])}) "
                f"declares {int(count[i])} records, the file ends after {int(room[i])}",
            )

    def _chunk(self, start: int, stop: int) -> None:
        codes = self._codes(start, stop)
        category = _CATEGORY[codes]
        top = _TOP_LEVEL[codes]

        # --- top level: PPE records, GAPs, block headers
        ppe_slots = start + np.flatnonzero(category == _PPE)
        self._take(self.ppe, "i_ppe", self.ppe_view, ppe_slots,
                   ("code", "thread", "a", "timebase", "b", "c"))
        gap_slots = start + np.flatnonzero(category == _GAP)
        gaps = self._take(self.gaps, "i_gap", self.gap_view, gap_slots, ("lost", "first_ticket"))
        if len(gaps):
            self._gaps(int(gaps["lost"].sum(dtype=np.uint64)), len(gaps), int(gap_slots[0]),
                       int(gaps["lost"][0]), int(gaps["first_ticket"][0]))
        first_block = self.i_blk
        block_slots = start + np.flatnonzero(category == _BLOCK)
        self._take(self.blocks, "i_blk", self.block_view, block_slots,
                   ("ctx", "decr", "seq", "count", "buffer", "flags", "ticket"))

        # --- the chunk's top-level slots, preceded by the carried one: entry 0 is the carry
        top_local = np.flatnonzero(top)
        top_is_block = category[top_local] == _BLOCK
        ext_slot = np.concatenate(([self.carry_slot], start + top_local))
        ext_block = np.concatenate(
            ([self.carry_block],
             np.where(top_is_block, first_block + np.cumsum(top_is_block) - 1, -1))
        )
        # every block among them except the last top-level slot is settled by its successor
        settle = np.flatnonzero(ext_block[:-1] >= 0)
        if len(settle):
            nxt = ext_slot[settle + 1]
            self._settle(ext_block[settle], nxt, codes[nxt - start])

        # --- non-top-level slots: inside the block of the nearest top-level slot before them?
        inner_local = np.flatnonzero(~top)
        inner = start + inner_local
        # index into ext_*: top-level slots before each one (0 means the carry)
        pos = np.cumsum(top)[inner_local]
        owner_slot = ext_slot[pos]
        owner_block = ext_block[pos]
        owner_count = np.where(
            owner_block >= 0, self.blocks["count"][np.maximum(owner_block, 0)], 0
        ) if len(self.blocks) else np.zeros(len(inner), dtype=np.int64)
        within = (owner_block >= 0) & (inner - owner_slot <= owner_count)
        inner_cat = category[inner_local]
        is_record = within & (inner_cat == _SPE)

        spe_block = owner_block[is_record]
        if self.spe_records:
            rows = self._take(self.spe, "i_spe", self.spe_view, inner[is_record],
                              ("code", "a", "decr", "b", "c", "d"))
            rows["block"] = spe_block
        else:
            rows = self.spe[self.i_spe:self.i_spe + spe_block.size]
            self.i_spe += spe_block.size
        if len(spe_block):
            rows["ctx"] = self.blocks["ctx"][spe_block]
            lo = int(spe_block[0])  # slot order: block indexes never decrease
            add = np.bincount(spe_block - lo)
            present = self.blocks["present"]
            present[lo:lo + len(add)] += add.astype(present.dtype)

        outside = ~within & (inner_cat == _SPE)
        if outside.any():
            first = int(inner[outside][0])
            self._outside_blocks(int(outside.sum()), first, int(codes[first - start]))
        unknown = category == _UNDEFINED
        if unknown.any():
            n_unknown = int(unknown.sum())
            first = start + int(np.flatnonzero(unknown)[0])
            self.unknown_in_blocks += int((within & (inner_cat == _UNDEFINED)).sum())
            self._unknown_codes(n_unknown, first, int(codes[first - start]))

        if len(top_local):
            self.carry_slot = int(ext_slot[-1])
            self.carry_block = int(ext_block[-1])
