"""The run's dumps as the pipeline reads them: once for their summaries (``read_summaries``:
a refusal comes before any decoding), then one at a time while decoding (``Dumps``, which
refuses a dump that changed between the two readings). It frames and checks nothing itself
(``reader.py`` does) and keeps no dump in memory longer than decoding needs it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from ..damage import DamageLog
from ..decode.decoder import summarize
from ..errors import FormatError
from .reader import SPE_DTYPE, read_dump

Progress = Callable[[str, float], None]  # (stage, fraction done of that stage)


def read_summaries(man, damage: DamageLog, progress: Progress | None = None,
                   ranks: list[int] | None = None) -> list:
    """Every dump (or those of ``ranks``, ascending) read once, in rank order (a refusal comes
    before any decoding), only its ``decode.summarize`` kept and its reader damage added to
    ``damage``; decoding reads the dumps again one at a time (``Dumps``)."""
    ranks = [p.rank for p in man.processes] if ranks is None else ranks
    summaries = []
    for i, rank in enumerate(ranks):
        dump = read_dump(man.dump_path(rank), man, rank, spe_records=False)
        damage.extend(dump.damage)
        summaries.append(summarize(dump))
        del dump
        if progress:
            progress("read", (i + 1) / len(ranks))
    return summaries


class Dumps:
    """The run's dumps in rank order (or those of ``ranks``, ascending), each read when
    indexed and not kept (``decode`` takes them one at a time: only one dump and the record
    table are in memory at once, at the price of framing every dump twice). ``summaries``:
    one per dump of the sequence. A dump whose second reading differs from its summary (it
    changed while being converted) is refused. Each dump's SPE records come grouped by
    context (``read_dump``'s ``by_context``, from its summary) in one buffer that every
    reading reuses (and lets go of with the last dump): a dump's ``spe`` is valid until the
    next one is indexed, unless ``rows_for`` (set by ``decode``) gives, for the i-th dump,
    the rows of the record table its SPE records will have: they are then read straight into
    them (None: the shared buffer). ``seconds`` / ``cpu_seconds``: time spent reading."""

    def __init__(self, man, summaries: list, ranks: list[int] | None = None) -> None:
        self.man = man
        self.summaries = summaries
        self.ranks = [p.rank for p in man.processes] if ranks is None else list(ranks)
        self.seconds = self.cpu_seconds = 0.0
        self.spe_buffer: np.ndarray | None = None
        self.rows_for: Callable[[int], np.ndarray | None] | None = None

    def __len__(self) -> int:
        return len(self.ranks)

    def __getitem__(self, i: int):
        t0, c0 = time.perf_counter(), time.process_time()
        rank = self.ranks[i]
        buffer = self.rows_for(i) if self.rows_for is not None else None
        if buffer is None:
            if self.spe_buffer is None:
                most = max((int(s.ctx_counts.sum()) for s in self.summaries), default=0)
                self.spe_buffer = np.empty(most, SPE_DTYPE)
            buffer = self.spe_buffer
        if i == len(self.ranks) - 1:  # the last dump: the buffer goes when its reader is done
            self.spe_buffer = None
        dump = read_dump(self.man.dump_path(rank), self.man, rank,
                         by_context=self.summaries[i].ctx_counts, spe_buffer=buffer)
        if not self.summaries[i].matches(dump):
            raise FormatError(dump.path, "the dump changed while it was being converted "
                              "(its records differ between two readings)")
        self.seconds += time.perf_counter() - t0
        self.cpu_seconds += time.process_time() - c0
        return dump
