"""One shared-buffer dump (FORMAT.md section 3) -> native-endian numpy arrays of its slots.

``read_dump(path, manifest, rank)`` first identifies the file (pyelftools style) and refuses it
with a ``FormatError`` naming the file, byte offset, field, expected and found value when it is
not a CBT 1 dump of that rank: length >= 64, magic, byte_order, version, header_size,
slot_size, spe_buffer_records >= 1, spe_buffers in {1, 2}, rank and timebase_hz equal to the
manifest's. Then it frames the slot stream with numpy (no Python loop per slot or per block)
and returns a ``Dump``: PPE records, SPE block headers, SPE records, GAPs, and the contained
damage (``damage.Damage`` entries, one per kind):

- ``truncated_file``: length is not 64 + 32k; the partial slot is dropped (count 1, first_slot =
  index the partial slot would have had).
- ``gap``: one entry for all GAPs, count = slots lost, occurrences = GAP records.
- ``block_overrun``: a block whose ``count`` runs past the end of the file; count = records
  missing, first_slot = the block header's slot.
- ``block_broken``: a PPE-class (0x01xx) or control-class (0x03xx) slot where a block's record
  was expected; the block ends there and that slot is read at top level. count = records
  missing, first_slot = the interrupting slot.
- ``bad_block_count``: ``count`` outside 1..spe_buffer_records; the block is still framed by its
  declared count (slots belong to it unless a PPE/control slot breaks it).
- ``spe_outside_block``: a defined SPE code at top level; skipped.
- ``unknown_code``: a code this version does not define, at top level or inside a block. Inside a
  block it is skipped but still counts as one of the block's slots (framing is kept).
- ``slot_count_mismatch``: header ``slots_reserved`` (when not 0) differs from the slots the file
  accounts for (non-GAP slots + slots lost in GAPs); count = absolute difference.

Framing rule (why it vectorizes): a slot whose class is PPE or control is always a top-level
slot, because such a slot inside a block's range breaks the block. Every other slot belongs to
the nearest top-level slot before it if that is a block header and the slot lies within its
``count``; otherwise it is outside any block.

``blocks['present']`` counts the block's records that were read into ``spe`` (defined SPE
codes only), so ``spe[first:first + present]`` are exactly its records; ``count - present`` is
what is missing or skipped, and the damage entries say why.

Not checked here (later stages or nobody): reserved header fields, block ``buffer``/``flags``/
``seq``/``ticket`` values, record field values, ids, and anything about time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import format as fmt
from .damage import Damage, DamageKind
from .errors import FormatError
from .manifest import Manifest

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


@dataclass
class Dump:
    """One process's dump, read and framed; arrays are native-endian and in slot order."""

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
    spe: np.ndarray  # SPE_DTYPE
    gaps: np.ndarray  # GAP_DTYPE
    damage: list[Damage] = field(default_factory=list)


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


def read_dump(path: Path, manifest: Manifest, rank: int) -> Dump:
    """Read ``rank``'s dump at ``path``: refuse a file that is not one, contain any damage."""
    path = Path(path)
    name = _display_name(path, manifest)
    try:
        size = os.stat(path).st_size
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

    if n:
        mm = np.memmap(path, dtype=np.uint8, mode="r", offset=fmt.HEADER_SIZE,
                       shape=(n * fmt.SLOT_SIZE,))
    else:
        mm = np.zeros(0, dtype=np.uint8)
    try:
        ppe, blocks, spe, gaps = _frame(mm, layout, n, name, int(header["spe_buffer_records"]),
                                        damage)
    finally:
        del mm

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
    )


def _copy_fields(dst: np.ndarray, src: np.ndarray, names: list[tuple[str, str]]) -> None:
    for out_name, in_name in names:
        dst[out_name] = src[in_name]


def _frame(
    mm: np.ndarray,
    layout: fmt.Layout,
    n: int,
    name: str,
    spe_buffer_records: int,
    damage: list[Damage],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Classify and frame the ``n`` slots in ``mm`` (raw bytes); append damage entries."""
    codes = mm.view(layout.code)["code"].astype(np.uint16)
    category = _CATEGORY[codes]
    top = _TOP_LEVEL[codes]

    # --- top level: PPE records, block headers, GAPs
    ppe_slots = np.flatnonzero(category == _PPE)
    rec = mm.view(layout.ppe)[ppe_slots]
    ppe = np.empty(len(ppe_slots), PPE_DTYPE)
    ppe["slot"] = ppe_slots
    _copy_fields(ppe, rec, [(f, f) for f in ("code", "thread", "a", "timebase", "b", "c")])

    gap_slots = np.flatnonzero(category == _GAP)
    rec = mm.view(layout.gap)[gap_slots]
    gaps = np.empty(len(gap_slots), GAP_DTYPE)
    gaps["slot"] = gap_slots
    _copy_fields(gaps, rec, [("lost", "lost"), ("first_ticket", "first_ticket")])

    block_slots = np.flatnonzero(category == _BLOCK)
    rec = mm.view(layout.block)[block_slots]
    blocks = np.empty(len(block_slots), BLOCK_DTYPE)
    blocks["slot"] = block_slots
    _copy_fields(
        blocks, rec, [(f, f) for f in ("ctx", "decr", "seq", "count", "buffer", "flags", "ticket")]
    )
    count = blocks["count"].astype(np.int64)

    # --- inside blocks: every non-top-level slot against the nearest top-level slot before it
    top_slots = np.flatnonzero(top)
    inner_slots = np.flatnonzero(~top)
    prev_pos = np.searchsorted(top_slots, inner_slots) - 1  # index into top_slots, -1: none
    prev_slot = top_slots[np.maximum(prev_pos, 0)] if len(top_slots) else prev_pos
    prev_slot = np.where(prev_pos >= 0, prev_slot, -1)
    # index of the block whose header is prev_slot (valid only where ``within``)
    prev_block = np.minimum(np.searchsorted(block_slots, prev_slot), len(block_slots) - 1)
    within = np.zeros(len(inner_slots), dtype=bool)
    if len(block_slots):
        within = (
            (prev_slot >= 0)
            & (block_slots[prev_block] == prev_slot)
            & (inner_slots - prev_slot <= count[prev_block])
        )
    inner_cat = category[~top]
    is_record = within & (inner_cat == _SPE)

    spe_slots = inner_slots[is_record]
    spe_block = prev_block[is_record].astype(np.int64)
    rec = mm.view(layout.spe)[spe_slots]
    spe = np.empty(len(spe_slots), SPE_DTYPE)
    spe["slot"] = spe_slots
    spe["block"] = spe_block
    spe["ctx"] = blocks["ctx"][spe_block]
    _copy_fields(spe, rec, [(f, f) for f in ("code", "a", "decr", "b", "c", "d")])

    present = np.bincount(spe_block, minlength=len(blocks)).astype(np.int64)
    blocks["present"] = present
    blocks["first"] = np.cumsum(present) - present

    # --- damage
    if len(gaps):
        lost = int(gaps["lost"].sum(dtype=np.uint64))
        damage.append(
            Damage(
                DamageKind.gap, lost, name, int(gaps["slot"][0]),
                f"GAP at slot {int(gaps['slot'][0])}: {int(gaps['lost'][0])} slots lost from "
                f"ticket {int(gaps['first_ticket'][0])}",
                occurrences=len(gaps),
            )
        )

    if len(blocks):
        # slots available to each block: up to the next top-level slot or the end of the file
        pos = np.searchsorted(top_slots, block_slots)
        nxt = np.append(top_slots, n)[pos + 1]
        room = nxt - block_slots - 1
        short = count > room
        broken = short & (nxt < n)
        overrun = short & (nxt >= n)
        if broken.any():
            i = int(np.flatnonzero(broken)[0])
            damage.append(
                Damage(
                    DamageKind.block_broken, int((count - room)[broken].sum()), name,
                    int(nxt[i]),
                    f"block at slot {int(block_slots[i])} (ctx {int(blocks['ctx'][i])}, seq "
                    f"{int(blocks['seq'][i])}) declares {int(count[i])} records but slot "
                    f"{int(nxt[i])} holds code 0x{int(codes[nxt[i]]):04X}, not an SPE record",
                    occurrences=int(broken.sum()),
                )
            )
        if overrun.any():
            i = int(np.flatnonzero(overrun)[0])
            damage.append(
                Damage(
                    DamageKind.block_overrun, int((count - room)[overrun].sum()), name,
                    int(block_slots[i]),
                    f"block at slot {int(block_slots[i])} (ctx {int(blocks['ctx'][i])}, seq "
                    f"{int(blocks['seq'][i])}) declares {int(count[i])} records, the file ends "
                    f"after {int(room[i])}",
                    occurrences=int(overrun.sum()),
                )
            )
        bad = (count < 1) | (count > spe_buffer_records)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            damage.append(
                Damage(
                    DamageKind.bad_block_count, int(bad.sum()), name, int(block_slots[i]),
                    f"block at slot {int(block_slots[i])} declares count {int(count[i])}, "
                    f"outside 1..{spe_buffer_records} (spe_buffer_records)",
                )
            )

    outside = ~within & (inner_cat == _SPE)
    if outside.any():
        first = int(inner_slots[outside][0])
        damage.append(
            Damage(
                DamageKind.spe_outside_block, int(outside.sum()), name, first,
                f"SPE record code 0x{int(codes[first]):04X} at slot {first} is not inside any "
                "block",
            )
        )

    unknown = category == _UNDEFINED
    if unknown.any():
        where = np.flatnonzero(unknown)
        first = int(where[0])
        in_block = int((within & (inner_cat == _UNDEFINED)).sum())
        damage.append(
            Damage(
                DamageKind.unknown_code, len(where), name, first,
                f"undefined code 0x{int(codes[first]):04X} at slot {first} "
                f"({in_block} of {len(where)} inside blocks, kept in their framing)",
            )
        )
    return ppe, blocks, spe, gaps
