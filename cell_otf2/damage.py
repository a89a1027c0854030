"""Contained damage (docs/damage.md): the ``Damage`` entries a stage returns (one per kind and file,
aggregated with numpy) and the ``DamageLog`` that collects them and words them as summary lines
and an exit status, so damage is never fatal and never silent. It decides nothing about what is
damage; it only records and words it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum


class DamageKind(StrEnum):
    """Every kind of contained damage. The value is the name shown to users."""

    # reader.py
    truncated_file = "truncated_file"  # length not 64 + 32k: the partial slot is dropped
    gap = "gap"  # the drain lost slots (GAP records)
    block_overrun = "block_overrun"  # a block's count runs past the end of the file
    block_broken = "block_broken"  # a non-SPE slot where a block's record was expected
    bad_block_count = "bad_block_count"  # count outside 1..spe_buffer_records
    spe_outside_block = "spe_outside_block"  # an SPE record not inside any block
    unknown_code = "unknown_code"  # a slot code this version does not define
    slot_count_mismatch = "slot_count_mismatch"  # header slots_reserved != slots accounted for
    # later stages
    undefined_id = "undefined_id"  # region/program/counter/communicator/context never defined
    no_exit = "no_exit"  # a context run that never reached its EXIT
    no_run_end = "no_run_end"  # CTX_RUN_BEGIN without CTX_RUN_END
    unmatched_mailbox = "unmatched_mailbox"  # mailbox or signal value with no partner
    unmatched_mpi = "unmatched_mpi"  # MPI message with no partner
    unmatched_dma = "unmatched_dma"  # DMA command with no later tag wait for its tag
    backwards_timebase = "backwards_timebase"  # PPE timebase runs backwards within a thread
    missing_block = "missing_block"  # a context's block seq skips
    unusable_time = "unusable_time"  # a record whose time cannot be determined
    unresolved_wrap = "unresolved_wrap"  # records after a wrap count the trace leaves open
    #: MPI messages that no clock maps can keep ordered together (not used for node clocks)
    contradicting_messages = "contradicting_messages"
    #: SPE records placed under a node's order constraints that contradict its clock readings
    #: by more than half a decrementer period (a relaxation no lost slot or read delay makes)
    contradicting_order = "contradicting_order"
    # emit/balance.py: repairs that keep every location's Enter/Leave balanced and nested
    unclosed_region = "unclosed_region"  # an Enter whose Leave was lost: closed by a Leave
    leave_without_enter = "leave_without_enter"  # a Leave whose Enter was lost: not written


#: kind -> (unit of count, what one occurrence is, or None when occurrences == count always);
#: "{s}" becomes "s" when the number is not 1
_WORDING: dict[DamageKind, tuple[str, str | None]] = {
    DamageKind.truncated_file: ("partial slot{s} dropped", "truncated file{s}"),
    DamageKind.gap: ("slot{s} lost", "GAP{s}"),
    DamageKind.block_overrun: (
        "SPE record{s} missing", "block{s} running past the end of the file"
    ),
    DamageKind.block_broken: ("SPE record{s} missing", "block{s} cut short by a non-SPE slot"),
    DamageKind.bad_block_count: ("block{s} with a count outside 1..spe_buffer_records", None),
    DamageKind.spe_outside_block: ("SPE record{s} outside any block skipped", None),
    DamageKind.unknown_code: ("slot{s} with an undefined code skipped", None),
    DamageKind.slot_count_mismatch: ("slot{s} unaccounted for", "file{s}"),
    DamageKind.undefined_id: ("record{s} naming an undefined id", None),
    DamageKind.no_exit: ("context run{s} without EXIT", None),
    DamageKind.no_run_end: ("CTX_RUN_BEGIN{s} without CTX_RUN_END", None),
    DamageKind.unmatched_mailbox: ("mailbox or signal value{s} without partner", None),
    DamageKind.unmatched_mpi: ("MPI message{s} without partner", None),
    DamageKind.unmatched_dma: ("DMA command{s} never completed by a tag wait", None),
    DamageKind.backwards_timebase: ("PPE record{s} with a timebase running backwards", None),
    DamageKind.missing_block: ("SPE block{s} missing (seq skips)", None),
    DamageKind.unusable_time: ("record{s} without usable time", None),
    DamageKind.unresolved_wrap: (
        "record{s} after a decrementer step whose wrap count the trace leaves open (placed "
        "by their own order constraints only)", "step{s}"),
    DamageKind.contradicting_messages: (
        "MPI message{s} contradicting the others under every clock map, not used to place "
        "node clocks", None),
    DamageKind.contradicting_order: (
        "SPE record{s} placed under slot order that contradicts the clock readings by more "
        "than half a decrementer period (their times may be off by the relaxation)",
        "dump{s}"),
    DamageKind.unclosed_region: ("region{s} left open by a lost Leave, closed", None),
    DamageKind.leave_without_enter: ("Leave{s} whose Enter was lost, not written", None),
}


def _plural(n: int, noun: str) -> str:
    """``noun`` with its "{s}" marker filled for the number ``n``."""
    return noun.replace("{s}", "" if n == 1 else "s")


@dataclass(frozen=True)
class Damage:
    """One kind of damage in one file, aggregated."""

    kind: DamageKind
    count: int  # records or slots affected
    file: str  # dump (or manifest) name as the user knows it, e.g. "rank00000.cbt"
    first_slot: int | None  # slot index of the first occurrence, None if not slot-bound
    message: str  # human detail of the first occurrence
    occurrences: int = 1  # separate places the count comes from

    def line(self) -> str:
        """One human line, e.g. ``gap: 120 slots lost in 3 GAPs, first at r0.cbt slot 5012``."""
        return _line(self.kind, self.count, self.occurrences, self.file, self.first_slot)


def _line(kind: DamageKind, count: int, occurrences: int, file: str, slot: int | None) -> str:
    unit, group = _WORDING.get(kind, ("record{s} affected", None))
    text = f"{kind}: {count} {_plural(count, unit)}"
    if group is not None:
        text += f" in {occurrences} {_plural(occurrences, group)}"
    if slot is None:
        text += f", first in {file}"
    else:
        text += f", first at {file} slot {slot}"
    return text


class DamageLog:
    """Collects damage of a whole run, merged by (kind, file).

    Merging sums ``count`` and ``occurrences`` and keeps the earliest slot of the file (with its
    message). Files keep the order in which they were first added (the pipeline adds ranks in
    order), so "first" across files means the first file added.
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[DamageKind, str], Damage] = {}

    def add(
        self,
        kind: DamageKind | str,
        file: str,
        slot: int | None,
        count: int,
        message: str,
        occurrences: int = 1,
    ) -> None:
        """Record ``count`` affected records of ``kind`` in ``file``, first at ``slot``."""
        self.add_damage(Damage(DamageKind(kind), int(count), str(file), slot, message,
                               int(occurrences)))

    def add_damage(self, damage: Damage) -> None:
        """Merge one ready-made entry (e.g. from ``Dump.damage``)."""
        key = (damage.kind, damage.file)
        old = self._entries.get(key)
        if old is None:
            self._entries[key] = damage
            return
        earlier = old
        if damage.first_slot is not None and (
            old.first_slot is None or damage.first_slot < old.first_slot
        ):
            earlier = damage
        self._entries[key] = replace(
            earlier,
            count=old.count + damage.count,
            occurrences=old.occurrences + damage.occurrences,
        )

    def extend(self, damages: list[Damage] | tuple[Damage, ...]) -> None:
        """Merge several entries."""
        for d in damages:
            self.add_damage(d)

    def entries(self) -> list[Damage]:
        """Merged entries, one per (kind, file), in the order first added."""
        return list(self._entries.values())

    def total(self) -> int:
        """Sum of ``count`` over every entry: records or slots affected in the run."""
        return sum(d.count for d in self._entries.values())

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def summary_lines(self) -> list[str]:
        """One human line per kind (merged over files), in the order kinds were first added."""
        by_kind: dict[DamageKind, list[Damage]] = {}
        for d in self._entries.values():
            by_kind.setdefault(d.kind, []).append(d)
        lines = []
        for kind, items in by_kind.items():
            first = items[0]
            lines.append(
                _line(
                    kind,
                    sum(d.count for d in items),
                    sum(d.occurrences for d in items),
                    first.file,
                    first.first_slot,
                )
            )
        return lines
