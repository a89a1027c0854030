"""Sharing out the event files of a parallel conversion while they are written (``driver.py`` on a
``team_mpi.MpiTeam``): a process that has written its own pieces asks the others for more, and
an asked process hands over whole locations it has not begun, so each location is written
whole by exactly one process and the archive does not depend on which (docs/performance.md).
It does not split a location, move work of earlier steps or guess loads in advance
(``team_mpi.partition`` does that from the dump sizes)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from ..emit.table import EventChunks
from ..model import EVENT_DTYPE

#: message tags on the sharing's own communicator
REQUEST, REPLY, DATA = 1, 2, 3
#: the most events handed over at a time: 256 k events (19 MB) built and sent in one table
GIVE_MAX = 1 << 18
#: fewer events left than this (twice it, since half is given) are not worth a message
GIVE_MIN = 1 << 14


class WriteShare:
    """The groups (``writer.events.EventGroups``) one process writes: its own locations piece
    by piece, then the locations others hand over. ``own`` yields this process's groups as
    (locations, events in pieces), each built when asked for, the next asked for once the
    writer has written every piece of the one before. ``comm`` is used for nothing else
    while writing (the caller's duplicate); every process of it must iterate ``groups()`` to
    the end."""

    def __init__(self, comm: Any, own: Iterable[tuple[np.ndarray, EventChunks]],
                 give_max: int | None = None, give_min: int | None = None) -> None:
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.own = own
        self.chunks: EventChunks | None = None  # the group being written
        self.mine = np.zeros(0, dtype=bool)  # its locations
        self.give_max = GIVE_MAX if give_max is None else give_max
        self.give_min = GIVE_MIN if give_min is None else give_min
        self.next = 0  # the group's locations before it are written or being written
        self.stop = 0  # the group's locations from here on were handed over
        self.given_events = self.given_locations = 0
        self.taken_events = self.taken_locations = 0

    def groups(self) -> Iterator[tuple[np.ndarray, list[np.ndarray]]]:
        """Own pieces, then handed-over tables, each as (locations, [events]). Closed early
        (the writer failed: it closes the iterator before agreeing on the failure), it gives
        nothing more away and still answers the others until every process is done, so none
        waits for it."""
        try:
            for locations, chunks in self.own:
                self.chunks, self.next, self.stop = chunks, 0, chunks.n_locations
                self.mine = np.zeros(chunks.n_locations, dtype=bool)
                self.mine[np.asarray(locations, dtype=np.int64)] = True
                buffer = chunks.piece_buffer()
                while True:
                    self._serve()
                    if self.next >= self.stop:
                        break
                    lo, hi = self.next, chunks.piece_end(self.next, self.stop)
                    piece = chunks.build(lo, hi, buffer)
                    self.next = hi
                    yield self._mine_in(lo, hi), [piece]
                    del piece  # written: its memory goes before the next is built
                self.chunks = None
                del buffer, chunks  # the group's memory goes before the next is built
            yield from self._take()
        finally:
            self.chunks = None  # closed early: nothing more to give
            self._drain()

    def _mine_in(self, lo: int, hi: int) -> np.ndarray:
        return np.flatnonzero(self.mine[lo:hi]) + lo

    # the asked side --------------------------------------------------------------------------

    def _serve(self) -> None:
        from mpi4py import MPI

        status = MPI.Status()
        while self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=REQUEST, status=status):
            asker = status.Get_source()
            self.comm.recv(source=asker, tag=REQUEST)
            self._give(asker)

    def _give(self, asker: int) -> None:
        if self.chunks is None:
            self.comm.send(None, dest=asker, tag=REPLY)
            return
        starts = self.chunks.loc_start
        end = int(starts[self.stop])
        amount = min((end - int(starts[self.next])) // 2, self.give_max)
        lo = self.stop
        if amount >= self.give_min:  # the last locations holding at most ``amount`` events
            lo = max(self.next, int(np.searchsorted(starts[:self.stop + 1], end - amount,
                                                    side="left")))
        if lo >= self.stop or int(starts[lo]) == end:
            self.comm.send(None, dest=asker, tag=REPLY)
            return
        table = self.chunks.build(lo, self.stop)
        locs = self._mine_in(lo, self.stop)
        self.stop = lo
        self.comm.send((locs, int(table.size)), dest=asker, tag=REPLY)
        self.comm.Send(table.view(np.uint8), dest=asker, tag=DATA)
        self.given_events += int(table.size)
        self.given_locations += int(locs.size)

    # the asking side -------------------------------------------------------------------------

    def _take(self) -> Iterator[tuple[np.ndarray, list[np.ndarray]]]:
        for k in range(1, self.size):
            peer = (self.rank + k) % self.size
            while True:
                self.comm.send(None, dest=peer, tag=REQUEST)
                reply = self._reply(peer)
                if reply is None:
                    break
                locs, n = reply
                table = np.empty(n, EVENT_DTYPE)
                self.comm.Recv(table.view(np.uint8), source=peer, tag=DATA)
                self.taken_events += n
                self.taken_locations += int(locs.size)
                yield locs, [table]
                del table  # written: its memory goes before the next is received

    def _reply(self, peer: int) -> Any:
        """``peer``'s answer, answering others' requests (nothing to give) meanwhile."""
        poll_quietly(lambda: self.comm.Iprobe(source=peer, tag=REPLY), self._serve)
        return self.comm.recv(source=peer, tag=REPLY)

    def _drain(self) -> None:
        """Until every process is done: answer requests (with nothing)."""
        poll_quietly(self.comm.Ibarrier().Test, self._serve)


def poll_quietly(done: Callable[[], bool], meanwhile: Callable[[], None] | None = None) -> None:
    """Until ``done()``: call ``meanwhile`` (if any), then sleep, 0.2 ms at first, doubling up
    to 5 ms (MPI's own blocking calls would spin a core instead)."""
    pause = 0.0002
    while not done():
        if meanwhile is not None:
            meanwhile()
        time.sleep(pause)
        pause = min(2 * pause, 0.005)
