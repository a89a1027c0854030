"""Write one OTF2 archive from ``ArchiveDefs`` and an ``EVENT_DTYPE`` table
(``write_archive``, docs/archive.md), the only entry of the writer the conversion uses: it
checks the input, opens the archive, has the events written location by location, then the
global definitions with the counts, serially or as one process of a parallel conversion,
turns the OTF2 library's failures into one ``OutputError`` and returns ``WriteStats``. The
writing itself is in ``events`` and ``definitions``, the checks in ``checks``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import _otf2
import numpy as np

from ..errors import OutputError
from ..model import ArchiveDefs, Ev
from .capi import library_errors
from .checks import WriterInputError, check_defs, check_events
from .definitions import longest_string, write_definitions
from .events import EventGroups, EventStream
from .open_archive import OpenArchive, definition_chunk_bytes

if TYPE_CHECKING:
    from .mpi_callbacks import MpiCollectives


@dataclass
class WriteStats:
    """What ``write_archive`` wrote."""

    #: int64, indexed by location ref (parallel writing: of every process)
    events_per_location: np.ndarray
    events_per_type: dict[Ev, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def n_events(self) -> int:
        return int(self.events_per_location.sum())

    @property
    def events_per_second(self) -> float:
        return self.n_events / self.seconds if self.seconds > 0 else 0.0


def write_archive(
    defs: ArchiveDefs,
    events: np.ndarray | Iterable[np.ndarray] | EventGroups,
    archive_dir: Path,
    archive_name: str,
    progress: Callable[[int], None] | None = None,
    *,
    collectives: MpiCollectives | None = None,
    locations: np.ndarray | None = None,
    counts: np.ndarray | None = None,
) -> WriteStats:
    """Write ``archive_dir/archive_name.otf2``, ``.def`` and the event folder.

    ``events`` is an ``EVENT_DTYPE`` array sorted by (loc, time, seq), or an iterable of such
    arrays covering consecutive location ranges in location order (``emit.EventChunks``, so
    the whole table never has to exist at once). ``progress`` is called with the number of
    events written so far, every ``PROGRESS_EVENTS`` events and at the end. Raises
    ``WriterInputError`` for a table that breaks its contract (a single array: before writing
    anything; pieces: before writing that piece, into the archive being written, which the
    caller then discards) and ``OutputError`` when the archive cannot be written.

    Parallel writing (``collectives``, an ``otf2_mpi.MpiCollectives``): every process of its
    communicator calls this with the same ``archive_dir`` and its own events; ``locations``
    (ascending) are the location refs whose event files this process writes, each location by
    exactly one process, and ``events`` (an array or pieces) hold only those locations;
    ``counts`` are the events per location of the whole archive (None: summed over the
    processes after writing). Only the master (rank 0)
    writes the global definitions (``defs``, with ``counts``); a failure while writing events
    is agreed on, so every process closes the archive and raises. Without ``collectives``:
    every location, counts from ``events``.

    ``events`` may also be ``EventGroups``: each group's locations are written from its
    pieces, in the groups' order; without ``collectives`` the locations no group names get
    empty event files and counts come from the events; with them, ``locations`` must be None
    and each process writes exactly the locations its groups name.
    """
    t_start = time.perf_counter()
    whole = isinstance(events, np.ndarray)
    if isinstance(events, np.ndarray):
        check_events(defs, events)
    check_defs(defs)
    n_loc = len(defs.locations)
    locs = None if locations is None else np.asarray(locations, dtype=np.int64)
    if locs is not None and locs.size and not (0 <= locs.min() and locs.max() < n_loc):
        raise WriterInputError(f"locations to write must lie in 0..{n_loc - 1}")
    master = collectives is None or collectives.is_master
    stream: EventStream | None = None
    errors = library_errors()
    errors.clear()
    anchor = f"{Path(archive_dir) / archive_name}.otf2"
    try:
        longest = longest_string(defs)
        if collectives is not None:  # every process opens the archive with the same chunks
            longest = max(collectives.comm.allgather(longest))
        archive = OpenArchive(Path(archive_dir), archive_name, collectives,
                              definition_chunk_bytes(longest))
        try:
            _otf2.Archive_SetCreator(archive.handle, defs.creator)
            if defs.system_nodes:
                _otf2.Archive_SetMachineName(archive.handle, defs.system_nodes[0].name)
            failure: Exception | None = None
            groups: Any = ()
            try:
                grouped = isinstance(events, EventGroups)
                if grouped and collectives is not None and locs is not None:
                    raise WriterInputError("in parallel writing, event groups name the "
                                           "locations themselves (locations=None)")
                stream = EventStream(archive, defs, progress, locs,
                                      named_only=grouped and collectives is not None)
                if isinstance(events, EventGroups):
                    groups = events.groups
                else:
                    groups = [(locs, [events] if whole else events)]
                for group_locs, pieces in groups:
                    stream.begin(group_locs)
                    single = isinstance(pieces, np.ndarray)
                    if single:
                        check_events(defs, pieces)
                    for piece in ([pieces] if single else pieces):
                        stream.write(piece, checked=whole or single)
                    stream.end()
                    piece = pieces = None  # the group's events go before the next is built
                stream.finish()
            except (OutputError, WriterInputError, _otf2.Error) as exc:
                if collectives is None:
                    raise
                failure = exc
                close = getattr(groups, "close", None)
                if close is not None:  # a generator of groups may owe other processes answers
                    close()
            if collectives is not None:
                collectives.agree(failure)  # raises on every process if one failed
            assert stream is not None  # made, or its failure raised (here or by agree)
            if collectives is not None:
                if counts is None:  # what every process wrote
                    counts = collectives.comm.allreduce(stream.counts)
            archive.close_event_files()
            counts = stream.counts if counts is None else np.asarray(counts, dtype=np.int64)
            if master:
                write_definitions(archive, defs, counts)
        finally:
            if stream is not None:
                stream.close()
            archive.close()
    except _otf2.Error as exc:
        if errors.codes:
            raise errors.failure(anchor) from exc
        raise OutputError(f"{anchor}: the OTF2 library failed: "
                          f"{exc.name}: {exc.description}") from exc
    except OutputError as exc:
        if errors.no_space and not exc.no_space:
            raise errors.failure(anchor) from exc
        raise
    if errors.failed:  # reported but not returned (e.g. closing the anchor file)
        raise errors.failure(anchor)
    assert stream is not None  # made, or the writing raised
    per_type = stream.per_type
    return WriteStats(
        events_per_location=counts,
        events_per_type={e: int(per_type[e]) for e in Ev if per_type[e]},
        seconds=time.perf_counter() - t_start,
    )
