"""``emit``: the decoded, matched and synchronized run as the archive's definitions and its
event table, sorted by (location, time, seq), whole or in ``EventChunks``, with counts
(``EmitStats``); the mapping is docs/archive.md. It calls the record families in one fixed
order (the order of the events of one record at one time follows from it), then repairs
Enter/Leave. It neither matches nor synchronizes: it reads ``records['time']`` as final.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from ..damage import DamageLog
from ..model import ArchiveDefs, CounterUse, Decoded, DmaStyle, Ev, Matches, SyncResult
from . import families
from .balance import balance_regions
from .definitions import build_definitions
from .families import RecordLedger
from .kernels import written_span
from .table import EventChunks, EventTable


@dataclass
class EmitStats:
    events: int = 0
    messages: int = 0  # mailbox + signal + MPI messages written as send/receive pairs
    dma: int = 0
    dma_completed: int = 0
    heartbeats: int = 0
    records_written: int = 0  # records that produced at least one event
    by_type: dict[str, int] = field(default_factory=dict)

    def add(self, other: EmitStats) -> None:
        """Count ``other``'s events too (another group's or process's)."""
        for f in fields(self):
            if f.name != "by_type":
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        for k, v in other.by_type.items():
            self.by_type[k] = self.by_type.get(k, 0) + v


def emit(dec: Decoded, matches: Matches, result: SyncResult, damage: DamageLog,
         dma_style: DmaStyle = DmaStyle.RMA, mpi_paired: np.ndarray | None = None,
         chunk_events: int | None = None, rma_id_offset: np.ndarray | None = None,
         sync_intervals: dict[int, str] | None = None,
         span: tuple[int, int] | None = None,
         counters_used: frozenset[CounterUse] | None = None
         ) -> tuple[ArchiveDefs, np.ndarray | EventChunks, EmitStats]:
    """Build the definitions and the sorted event table.

    ``mpi_paired`` (bool per record): the MPI point-to-point records whose message has both
    ends usable, when a parallel conversion decided it across processes; None: from
    ``matches.messages``. With ``chunk_events``, the table comes as ``EventChunks``: pieces of
    whole locations of about that many events each, built one at a time as they are iterated
    (for streaming into the writer with bounded memory). ``rma_id_offset`` (one per rank of the
    run): added to the RMA matching ids of each rank's transfers, when the records are a
    parallel conversion's share and the ids must count the whole run's transfers; None: the
    ids count the transfers given, in record order. ``sync_intervals``: the locations'
    ``sync_intervals_property`` when the caller has it already (``build_definitions``).
    ``span``: the least and greatest time of the records to write ((0, 0): none), when the
    caller has it already (``whole_run.share_after_sync``): then no pass over every record
    row finds it, and the records without a code (never selected by a family) are left out
    only where the unwritten records are counted. ``counters_used``: the whole run's
    ``definitions.counters_written``, when the records are a share of the run (the metric
    numbering must be the whole run's); None: from the records given.
    """
    rec = dec.records
    usable = result.usable if result.usable is not None else np.ones(rec.size, bool)
    if span is None:
        good, first, last = written_span(rec, usable)
    else:
        good, (first, last) = usable, span
    defs, lk = build_definitions(dec, result, first, last, sync_intervals,
                                 counters_used=counters_used)
    ev = EventTable(rec, dec.locations.size, dec.location_starts())
    stats = EmitStats()
    ledger = RecordLedger(dec, good, damage, coded=span is None)
    families.regions(ev, ledger, lk["region"])
    families.program_runs(ev, ledger, lk["program"])
    families.call_regions(ev, ledger, lk["cell"])
    families.context_switches(ev, ledger, lk["cell"]["off SPU"])
    families.counters(ev, ledger, lk["metric"])
    stats.messages += families.mailbox_and_signal_messages(ev, ledger, matches.messages,
                                                           lk["mbox_comm"])
    comm_size = np.array([len(c.members) for c in defs.communicators], dtype=np.uint64)
    stats.messages += families.mpi(ev, ledger, matches.messages, mpi_paired, lk["comm"],
                                   comm_size)
    stats.dma, stats.dma_completed = families.dma(ev, ledger, matches.dma, dma_style,
                                                  lk["window"], lk["dma_comm"], rma_id_offset)
    stats.heartbeats = families.heartbeats(ledger)
    balance_regions(ev, rec["slot"], ledger.loc_rank, dec.dump_names, damage)
    families.program_begin_end(ev, ledger)
    ev.layout()
    stats.events = int(ev.size)
    stats.records_written = int(ledger.written.sum())
    stats.by_type = {Ev(k).name: v for k, v in sorted(ev.counts_per_type().items()) if v}
    ledger.count_unwritten()
    if chunk_events is None:
        return defs, ev.table(), stats
    return defs, EventChunks(ev, chunk_events), stats
