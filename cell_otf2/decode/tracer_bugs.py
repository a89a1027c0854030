"""Tracer bugs recognised from a dump's own arrays: ``recognize(dump)`` looks at the reader's
PPE record, block header and SPE record tables (``input.reader.Dump``) for the patterns a
tracer that breaks the format leaves (a block header's decrementer read at the wrong moment, a
PPE timebase that runs backwards within a thread, block headers that declare more records than
follow them) and words each as a ``TracerBug``: the first file, slot, rank and context or
thread, how many places, and what the tracer's author should change (docs/damage.md). All of it
is numpy over whole tables, no Python step per record. It does not contain or count damage
(the reader and the decoder do: ``damage.py``), and it never changes a record or a time: it only
explains what those stages contained, or absorbed without a damage line (a late header the
order constraints took for a wrap)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..damage import DamageKind
from ..input import format as fmt
from ..input.manifest import Manifest, load_manifest
from ..input.reader import Dump, read_dump

MOD = 1 << 32
HALF = 1 << 31
#: a backwards step within this many ticks of 2^32 is a torn 64-bit read (the ticks that
#: pass between the two halves' reads and the readings around it: 1.2 s at 14.318 MHz)
TORN_SLACK = 1 << 24


@dataclass(frozen=True)
class TracerBug:
    """One recognised tracer bug in one dump: where it first shows and what to change."""

    kind: str  # e.g. "late_block_header"
    file: str  # dump name as the user knows it
    slot: int  # slot index (after the file header) of the first place it shows
    rank: int
    where: str  # "ctx 3" or "thread 0": the context or PPE thread of that first place
    count: int  # places it shows (block headers, readings, blocks)
    explanation: str  # what the tracer did and what its author should change

    def line(self) -> str:
        """One human line, e.g. ``late_block_header: 40 block headers, first at r.cbt slot 7
        (rank 0, ctx 2): ...``."""
        return (f"{self.kind}: {self.count} {_UNITS[self.kind]}{'' if self.count == 1 else 's'}"
                f", first at {self.file} slot {self.slot} (rank {self.rank}, {self.where}): "
                f"{self.explanation}")

    def to_dict(self) -> dict[str, object]:
        """The fields, for ``check --json``."""
        return asdict(self)


#: what one counted place of each kind is
_UNITS = {
    "late_block_header": "block header",
    "early_block_header": "block header",
    "backwards_timebase": "backwards step",
    "torn_timebase": "backwards step",
    "timebase_went_back": "backwards step",
    "block_count_too_large": "block",
}


def recognize(dump: Dump) -> list[TracerBug]:
    """Every tracer bug ``dump`` shows, in a fixed order (SPE headers, PPE timebase, block
    counts). ``dump`` must be read with its SPE records (``read_dump`` default)."""
    return [*_block_header_reads(dump), *_backwards_timebase(dump), *_block_counts(dump)]


def recognize_run(run_dir: str | Path, manifest: Manifest | None = None) -> list[TracerBug]:
    """``recognize`` over every dump of a run, one dump in memory at a time, in rank order.
    Raises what reading raises (``FormatError``) for a dump that is refused."""
    man = manifest if manifest is not None else load_manifest(Path(run_dir))
    found: list[TracerBug] = []
    for p in man.processes:
        found += recognize(read_dump(man.dump_path(p.rank), man, p.rank))
    return found


def _first(dump: Dump, kind: str, slots: np.ndarray, where: np.ndarray, label: str,
           explanation: str) -> list[TracerBug]:
    """One ``TracerBug`` for the places at ``slots`` (``where``: their context or thread)."""
    if not slots.size:
        return []
    i = int(np.argmin(slots))
    return [TracerBug(kind, dump.name, int(slots[i]), dump.rank, f"{label} {int(where[i])}",
                      int(slots.size), explanation)]


def _block_header_reads(dump: Dump) -> list[TracerBug]:
    """Block headers whose decrementer is out of line with the records around them.

    A context's decrementer counts down: its readings in program order (a block's records,
    then its header, then the next block's records) never rise except across a DECR_WRITE
    or a wrap. A header above its own last record was read before that record was made; one
    below the next block's first record was read after it. Only pairs of consecutive blocks
    (``seq`` k and k+1, both with records) whose records themselves fall from one block to
    the next count: a DECR_WRITE or a restore between the blocks, where the records rise too,
    is never taken for a header read at the wrong moment. A real wrap is a rise of 2^31 or
    more, never counted.
    """
    blocks, spe = dump.blocks, dump.spe
    if blocks.size < 2 or "decr" not in (spe.dtype.names or ()):
        return []
    order = np.lexsort((blocks["slot"], blocks["ctx"]))
    b = blocks[order]
    nxt = np.flatnonzero((b["ctx"][1:] == b["ctx"][:-1])
                         & (b["seq"][1:].astype(np.int64) == b["seq"][:-1].astype(np.int64) + 1)
                         & (b["present"][1:] > 0) & (b["present"][:-1] > 0))
    if not nxt.size:
        return []
    this, then = b[nxt], b[nxt + 1]
    last_rec = this["first"] + this["present"].astype(np.int64) - 1
    head = this["decr"].astype(np.int64)
    last = spe["decr"][last_rec].astype(np.int64)
    first_next = spe["decr"][then["first"]].astype(np.int64)
    # a DECR_WRITE as the block's last record restarts the count between the two blocks
    plain = spe["code"][last_rec] != fmt.SpeCode.DECR_WRITE
    records_fall = (last - first_next) % MOD < HALF
    rise_after = (first_next - head) % MOD  # from the header to the next block's first record
    rise_before = (head - last) % MOD  # from the block's last record to its header
    late = plain & records_fall & (rise_after > 0) & (rise_after < HALF)
    early = plain & records_fall & ~late & (rise_before > 0) & (rise_before < HALF)
    return [
        *_first(dump, "late_block_header", this["slot"][late], this["ctx"][late], "ctx",
                "the block header's decrementer is lower than the next block's first record, "
                "so it was read after that record was made (the decrementer seems to rise "
                "between blocks, which conversion can only take for a wrap); read the "
                "decrementer right after reserving the block's slots, before recording on"),
        *_first(dump, "early_block_header", this["slot"][early], this["ctx"][early], "ctx",
                "the block header's decrementer is higher than its own last record, so it was "
                "read before that record was made; read the decrementer after the block's last "
                "record, right after reserving the block's slots"),
    ]


def _backwards_timebase(dump: Dump) -> list[TracerBug]:
    """Backwards steps of the PPE timebase within a thread, told apart by the readings around
    them.

    A step back by 2^32 ticks (give or take ``TORN_SLACK``) is a 64-bit timebase read in two
    halves that the lower half's carry tore. A step where the lower reading is followed by
    one back in line, or the higher one follows one it is in line with (or is the thread's
    first), is one reading out of line (too low or too high). Any other step is a clock that
    went back for good: readings on both sides of it are in line with their own side only.
    """
    ppe = dump.ppe
    if ppe.size < 2:
        return []
    order = np.lexsort((ppe["slot"], ppe["thread"]))
    thread = ppe["thread"][order].astype(np.int64)
    tb = ppe["timebase"][order]
    n = tb.size
    back = np.flatnonzero((thread[1:] == thread[:-1]) & (tb[1:] < tb[:-1])) + 1  # lower one
    if not back.size:
        return []
    drop = tb[back - 1] - tb[back]  # unsigned, > 0
    torn = np.abs(drop.astype(np.float64) - float(MOD)) <= TORN_SLACK
    after, before = np.minimum(back + 1, n - 1), np.maximum(back - 2, 0)
    has_after = (back + 1 < n) & (thread[after] == thread[back])
    has_before = (back >= 2) & (thread[before] == thread[back])
    one_low = ~has_after | (tb[after] >= tb[back - 1])
    one_high = ~has_before | (tb[back] >= tb[before])
    single = ~torn & (one_low | one_high)
    went_back = ~torn & ~single
    slots, threads = ppe["slot"][order][back], thread[back]
    return [
        *_first(dump, "torn_timebase", slots[torn], threads[torn], "thread",
                "the PPE timebase steps back by 2^32 ticks: its two 32-bit halves were read "
                "apart and the lower half carried in between; read the 64-bit timebase in one "
                "instruction (mftb on a 64-bit PPE), or read upper, lower, upper and retry "
                "until both upper readings agree"),
        *_first(dump, "timebase_went_back", slots[went_back], threads[went_back], "thread",
                "the thread's PPE timebase went back and stayed back: its readings come from "
                "two clocks (a clock reset, or a timestamp that is not the node's timebase); "
                "read the node's timebase (mftb) for every record, right after its slot is "
                "reserved"),
        *_first(dump, "backwards_timebase", slots[single], threads[single], "thread",
                "a PPE timebase reading is out of line with its thread's readings around it "
                "(one too low or too high, its neighbours in line): it was corrupted or not "
                "taken right after its slot was reserved (taken earlier, kept from an earlier "
                "record, or another thread's under the same thread index); read mftb right "
                "after the reservation succeeds, and give every PPE thread its own index"),
    ]


def _block_counts(dump: Dump) -> list[TracerBug]:
    """Block headers that declare more records than follow them, where no loss cut them short:
    the file holds every slot its header's ``slots_reserved`` counts (or the header does not
    say), and the next top-level slot is a defined PPE record or block header, or the end of
    a file cut inside no slot whose header says it is complete."""
    blocks = dump.blocks
    if not blocks.size:
        return []
    tops = np.sort(np.concatenate([dump.ppe["slot"], blocks["slot"], dump.gaps["slot"]]))
    at = np.searchsorted(tops, blocks["slot"], side="right")
    next_top = np.where(at < tops.size, tops[np.minimum(at, tops.size - 1)], dump.n_slots)
    count = blocks["count"].astype(np.int64)
    room = next_top - blocks["slot"] - 1
    short = count > room
    if not short.any():
        return []
    gap_slots = np.sort(dump.gaps["slot"])
    by_gap = np.isin(next_top, gap_slots)
    defined = np.isin(next_top, dump.ppe["slot"]) | np.isin(next_top, blocks["slot"])
    at_end = next_top >= dump.n_slots
    accounted = dump.n_slots - dump.gaps.size + int(dump.gaps["lost"].sum(dtype=np.uint64))
    # slots the header counts but the file lacks could be the records: then nothing is
    # shown against the count (and a file cut inside a slot lost what followed)
    cut = any(d.kind == DamageKind.truncated_file for d in dump.damage)
    complete = dump.slots_reserved in (0, accounted)
    whole = not cut and dump.slots_reserved == accounted
    bad = short & ~by_gap & complete & (defined | (at_end & whole))
    if not bad.any():
        return []
    excess = (count - room)[bad]
    lo, hi = int(excess.min()), int(excess.max())
    by = f"by {lo}" if lo == hi else f"by {lo} to {hi}"
    return _first(dump, "block_count_too_large", blocks["slot"][bad], blocks["ctx"][bad], "ctx",
                  f"block headers declare more records than follow them ({by}), and the next "
                  "slot is a whole record or the file's end with every reserved slot present: "
                  "the header's count is not the number of records written after it; write "
                  "count = records in the flushed buffer and reserve exactly 1 + count slots")
