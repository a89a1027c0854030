"""The writer's input checks, public because ``cell2otf2 check`` refuses what conversion would
refuse without writing: ``check_events`` (table shape, locations, time order, types, refs, ranks,
C parameter ranges) and ``check_defs`` (references between definitions, unique location names),
both raising ``WriterInputError`` (the full list: docs/design.md). It does not check the events'
semantics or the clock properties, and it never sorts or changes the table."""

from __future__ import annotations

import numpy as np

from ..model import EVENT_DTYPE, ArchiveDefs, Ev
from .capi import c_api, use_compiled

#: OTF2_UNDEFINED_UINT32: the root of a collective that has none
UNDEFINED_UINT32 = 0xFFFFFFFF

#: which definition list each event type's ``ref`` points into
_REF_KIND = {
    Ev.ENTER: "regions",
    Ev.LEAVE: "regions",
    Ev.ENTER_OFF_SPU: "regions",
    Ev.MPI_SEND: "communicators",
    Ev.MPI_RECV: "communicators",
    Ev.MPI_ISEND: "communicators",
    Ev.MPI_IRECV: "communicators",
    Ev.MPI_COLL_END: "communicators",
    Ev.RMA_GET: "rma_windows",
    Ev.RMA_PUT: "rma_windows",
    Ev.RMA_OP_COMPLETE_BLOCKING: "rma_windows",
    Ev.RMA_WIN_CREATE: "rma_windows",
    Ev.RMA_WIN_DESTROY: "rma_windows",
    Ev.METRIC: "metrics",
}


class WriterInputError(ValueError):
    """The definitions or the event table break the writer's contract (an earlier stage's bug)."""


def check_events(defs: ArchiveDefs, events: np.ndarray) -> None:
    """Raise ``WriterInputError`` for the first row of ``events`` that breaks the rules."""
    if not isinstance(events, np.ndarray) or events.dtype != EVENT_DTYPE:
        raise WriterInputError(f"events must be an EVENT_DTYPE array, got {type(events).__name__}"
                              f" of dtype {getattr(events, 'dtype', None)}")
    if events.size == 0:
        return
    if _compiled_check(defs, events):
        return
    loc = events["loc"]
    n_loc = len(defs.locations)
    if int(loc.max()) >= n_loc:
        i = int(np.argmax(loc >= n_loc))
        raise WriterInputError(f"event {i}: location ref {int(loc[i])} does not exist "
                              f"({n_loc} locations defined)")
    down = np.flatnonzero(loc[1:] < loc[:-1])
    if down.size:
        i = int(down[0]) + 1
        raise WriterInputError(f"event {i}: events are not sorted by location "
                              f"(location {int(loc[i])} after {int(loc[i - 1])})")
    t = events["time"]
    if int(t.min()) < 0:
        i = int(np.argmax(t < 0))
        raise WriterInputError(f"event {i}: negative timestamp {int(t[i])} on location "
                              f"'{defs.locations[int(loc[i])].name}'")
    back = np.flatnonzero((t[1:] < t[:-1]) & (loc[1:] == loc[:-1]))
    if back.size:
        i = int(back[0]) + 1
        raise WriterInputError(
            f"event {i}: time goes backwards on location {int(loc[i])} "
            f"'{defs.locations[int(loc[i])].name}': {int(t[i])} after {int(t[i - 1])} "
            f"({back.size} such events; the table must be sorted by (loc, time, seq))"
        )
    types = events["type"]
    rows = RowsByType(types)
    unknown = [k for k in rows.present if k not in _EV_VALUES]
    if unknown:
        i = int(np.argmin(np.isin(types, np.array(sorted(_EV_VALUES), dtype=types.dtype))))
        raise WriterInputError(f"event {i}: unknown event type {int(types[i])}")
    for kind, list_name in _REF_KIND.items():
        sel = rows.of(kind)
        if not sel.size:
            continue
        n_defs = len(getattr(defs, list_name))
        refs = events["ref"][sel]
        if int(refs.max()) >= n_defs:
            i = int(sel[int(np.argmax(refs >= n_defs))])
            raise WriterInputError(f"event {i} ({kind.name}): ref {int(events['ref'][i])} "
                                  f"is not one of the {n_defs} {list_name}")
    program = rows.of(Ev.PROGRAM_BEGIN, Ev.PROGRAM_END)
    if program.size and int(events["ref"][program].max()) != 0:
        i = int(program[int(np.argmax(events["ref"][program] != 0))])
        raise WriterInputError(f"event {i} ({Ev(int(types[i])).name}): ref "
                              f"{int(events['ref'][i])}, not 0 (the archive's one program)")
    _check_ranks(defs, events, rows)
    _check_widths(events, rows)


_EV_VALUES = frozenset(int(e) for e in Ev)


def _compiled_check(defs: ArchiveDefs, events: np.ndarray) -> bool:
    """True if ``_evtwrite.check`` passes the table in one pass over its rows (the same rules
    as the numpy checks below, which then only run to name what a failing table breaks)."""
    api = c_api()
    if not use_compiled(api):
        return False
    loop = api.compiled_loop
    assert loop is not None  # use_compiled bound it
    comm_size = np.array([len(c.members) for c in defs.communicators], dtype=np.int64)
    win_size = np.array([comm_size[w.comm] if 0 <= w.comm < comm_size.size else 0
                         for w in defs.rma_windows], dtype=np.int64)
    return loop.check(np.ascontiguousarray(events), len(defs.locations), len(defs.regions),
                      comm_size.size, win_size.size, len(defs.metrics), comm_size.tobytes(),
                      win_size.tobytes()) < 0


class RowsByType:
    """Row indexes of a table grouped by event type (one stable radix sort of the 8-bit
    types): ``of(kind, ...)`` are the rows of those kinds, ascending."""

    def __init__(self, types: np.ndarray) -> None:
        self.order = np.argsort(types, kind="stable")
        self.bounds = np.zeros(257, dtype=np.int64)
        np.cumsum(np.bincount(types, minlength=256), out=self.bounds[1:])
        self.present = [k for k in range(256) if self.bounds[k + 1] > self.bounds[k]]

    def of(self, *kinds: int) -> np.ndarray:
        parts = [self.order[self.bounds[k]:self.bounds[k + 1]] for k in kinds]
        return parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))


#: (kinds, column, limit): parameters the C functions take as uint32_t / uint8_t
_NARROW = (
    ((Ev.MPI_SEND, Ev.MPI_RECV, Ev.MPI_ISEND, Ev.MPI_IRECV), "p1", 1 << 32),
    ((Ev.MPI_SEND, Ev.MPI_RECV, Ev.MPI_ISEND, Ev.MPI_IRECV, Ev.MPI_COLL_END), "p2", 1 << 32),
    ((Ev.RMA_GET, Ev.RMA_PUT), "p1", 1 << 32),
    ((Ev.MPI_COLL_END,), "p1", 1 << 8),
)


def _check_widths(events: np.ndarray, rows: RowsByType) -> None:
    """Values passed as uint32_t or uint8_t must fit (ctypes would cut them silently)."""
    types = events["type"]
    for kinds, column, limit in _NARROW:
        sel = rows.of(*kinds)
        if not sel.size:
            continue
        big = events[column][sel] >= np.uint64(limit)
        if big.any():
            i = int(sel[int(np.argmax(big))])
            raise WriterInputError(
                f"event {i} ({Ev(int(types[i])).name}): {column} = {int(events[column][i])} does "
                f"not fit its {'uint8_t' if limit == 256 else 'uint32_t'} parameter")


def _check_ranks(defs: ArchiveDefs, events: np.ndarray, rows: RowsByType) -> None:
    """Peer ranks (p1) and collective roots (p2) must be ranks of the event's communicator."""
    comm_size = np.array([len(c.members) for c in defs.communicators] or [0], dtype=np.int64)
    win_size = np.array([comm_size[w.comm] for w in defs.rma_windows] or [0], dtype=np.int64)
    types, refs = events["type"], events["ref"]
    checks = [
        ((Ev.MPI_SEND, Ev.MPI_RECV, Ev.MPI_ISEND, Ev.MPI_IRECV), "p1", comm_size, "peer rank"),
        ((Ev.RMA_GET, Ev.RMA_PUT), "p1", win_size, "remote rank"),
        ((Ev.MPI_COLL_END,), "p2", comm_size, "root rank"),
    ]
    for kinds, column, size, what in checks:
        sel = rows.of(*kinds)
        if not sel.size:
            continue
        rank = events[column][sel]
        bad = rank >= size[refs[sel].astype(np.int64)].astype(np.uint64)
        if column == "p2":
            bad &= rank != UNDEFINED_UINT32
        if bad.any():
            i = int(sel[int(np.argmax(bad))])
            raise WriterInputError(
                f"event {i} ({Ev(int(types[i])).name}): {what} {int(events[column][i])} is not "
                f"a rank of its communicator (size {int(size[refs[i]])})"
            )


def check_defs(defs: ArchiveDefs) -> None:
    """Raise ``WriterInputError`` for the first definition that names what does not exist."""
    if not defs.program_name:
        raise WriterInputError("the program name is empty (ProgramBegin names it by a string "
                               "ref of its own)")
    for i, node in enumerate(defs.system_nodes):
        if node.name == "0":
            raise WriterInputError(f"system node {i} is named '0': ViTE aborts on such a node "
                                   f"(docs/archive.md, System tree)")
        if node.parent is not None and not 0 <= node.parent < i:
            raise WriterInputError(f"system node {i} '{node.name}': parent {node.parent} must be "
                                  f"defined before it")
    for i, group in enumerate(defs.location_groups):
        if not 0 <= group.system_node < len(defs.system_nodes):
            raise WriterInputError(f"location group {i} '{group.name}': no system node "
                                  f"{group.system_node}")
        if group.creating_group is not None and not (
            0 <= group.creating_group < len(defs.location_groups)
        ):
            raise WriterInputError(f"location group {i} '{group.name}': no creating group "
                                  f"{group.creating_group}")
    for i, loc in enumerate(defs.locations):
        if not 0 <= loc.group < len(defs.location_groups):
            raise WriterInputError(f"location {i} '{loc.name}': no location group {loc.group}")
    names = [loc.name for loc in defs.locations]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise WriterInputError(f"location name '{dup}' is used twice (names must be unique)")
    for i, comm in enumerate(defs.communicators):
        if any(not 0 <= m < len(defs.locations) for m in comm.members):
            raise WriterInputError(f"communicator {i} '{comm.name}': a member is not a location")
        if len(set(comm.members)) != len(comm.members):
            raise WriterInputError(f"communicator {i} '{comm.name}': a location is a member twice")
    for i, win in enumerate(defs.rma_windows):
        if not 0 <= win.comm < len(defs.communicators):
            raise WriterInputError(f"RMA window {i} '{win.name}': no communicator {win.comm}")
    for prop in defs.location_properties:
        if not 0 <= prop.loc < len(defs.locations):
            raise WriterInputError(f"location property '{prop.name}': no location {prop.loc}")

