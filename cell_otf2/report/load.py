"""An OTF2 archive read back with the ``otf2`` reader (what a viewer shows) into bounded numpy
arrays, through raw callbacks rather than a Python object per event: above ``max_events`` only
evenly spread windows of consecutive events are kept, but every event is read, so counts,
pairing and region stacks stay exact, and ``Exact`` keeps per-region times and every RMA and
message exact (docs/design.md). It does not check the archive (``otf2-print`` does)."""

from __future__ import annotations

import os
import types
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..errors import FormatError
from ..native import helper
from ..signals import Deferred
from ..writer.otf2_internals import definition_ref, function_address


class K(IntEnum):
    """Event kinds of ``EVENT_ROW``."""

    ENTER = 1
    LEAVE = 2
    SEND = 3  # MpiSend, MpiIsend
    RECV = 4  # MpiRecv, MpiIrecv
    GET = 5  # RmaGet
    PUT = 6  # RmaPut
    RMA_DONE = 7  # RmaOpCompleteBlocking
    COLL_BEGIN = 8
    COLL_END = 9
    METRIC = 10
    OTHER = 11  # any other event class (MpiIsendComplete, MpiIrecvRequest, ...)


KIND_NAMES = {K.ENTER: "Enter", K.LEAVE: "Leave", K.SEND: "MpiSend/MpiIsend",
              K.RECV: "MpiRecv/MpiIrecv", K.GET: "RmaGet", K.PUT: "RmaPut",
              K.RMA_DONE: "RmaOpCompleteBlocking", K.COLL_BEGIN: "MpiCollectiveBegin",
              K.COLL_END: "MpiCollectiveEnd", K.METRIC: "Metric", K.OTHER: "other"}

#: one kept event
EVENT_ROW = np.dtype([
    ("loc", "<i4"),  # location ref
    ("time", "<i8"),  # archive ticks
    ("kind", "u1"),  # K
    ("ref", "<i4"),  # region (Enter/Leave), communicator (send/recv), RMA window, metric
    ("partner", "<i4"),  # location ref of the peer: receiver, sender, RMA remote; -1
    ("bytes", "<u8"),  # message length, RMA bytes
    ("chan", "<i8"),  # pairing key: message channel or RMA operation key; -1
    ("seq", "<i8"),  # n-th send (receive, issue, completion) of its channel or key
    ("state", "<i4"),  # innermost open region of the location after the event; -1 none
    ("window", "<i2"),  # sample window
])


class LocClass(IntEnum):
    PPE = 0
    SPE = 1
    MEMORY = 2
    OTHER = 3


class CommClass(IntEnum):
    MPI = 0
    MAILBOX = 1  # "Cell mailboxes": mailboxes and signals
    DMA = 2  # "DMA": DMA transfers written as messages (--dma-style messages)


#: one event of the exact log: every RMA event, every message on an MPI or "DMA" communicator
LOG_ROW = np.dtype([("kind", "u1"), ("loc", "<i4"), ("time", "<i8"), ("partner", "<i4"),
                    ("ref", "<i4"), ("bytes", "<i8"), ("chan", "<i8"), ("seq", "<i8")])


class Columns:
    """A table held as one array per column (the fields of a dataclass): ``table["name"]``
    reads a column as a record array's field would, ``size`` is the rows (those of the first
    column). The figures read a few columns of millions of rows, which a record array would
    make them stride through whole."""

    #: set on the dataclasses derived from this one (declared for the type checker)
    __dataclass_fields__: ClassVar[dict[str, Any]]

    def __getitem__(self, name: str) -> np.ndarray:
        return getattr(self, name)

    @property
    def size(self) -> int:
        return int(getattr(self, next(iter(self.__dataclass_fields__))).size)


@dataclass
class Log(Columns):
    """The exact log as one array per LOG_ROW field (``log["time"]``), in the reader's order."""

    kind: np.ndarray
    loc: np.ndarray
    time: np.ndarray
    partner: np.ndarray
    ref: np.ndarray
    bytes: np.ndarray
    chan: np.ndarray
    seq: np.ndarray


@dataclass
class Exact:
    """Every event's contribution, whatever was sampled (ticks, counts)."""

    visits: np.ndarray  # (n_locs, n_regions) completed visits (Enter matched by its Leave)
    inclusive: np.ndarray  # (n_locs, n_regions) ticks inside completed visits
    longest: np.ndarray  # (n_locs, n_regions) ticks of the longest completed visit
    exclusive: np.ndarray  # (n_locs, n_regions) ticks as the innermost open region
    first: np.ndarray  # (n_locs,) time of the first Enter or Leave, -1 none
    last: np.ndarray  # (n_locs,) time of the last Enter or Leave, -1 none
    outermost: np.ndarray  # (n_locs, n_regions) Enters with no region open (a program)
    unclosed: np.ndarray  # (n_locs,) regions still open at the location's last event
    stray_leaves: np.ndarray  # (n_locs,) Leaves of a region that was not open
    log: Log  # LOG_ROW's columns, in the reader's order


PROP_PSEUDO = "cell2otf2::pseudo_location"
#: OTF2_LOCATION_TYPE_METRIC: a location holding another location's metric samples
OTF2_LOCATION_TYPE_METRIC = 3
PROP_SYNC_BOUND = "cell2otf2::sync_bound_ticks"
PROP_SYNC_INTERVALS = "cell2otf2::sync_intervals"


@dataclass
class Loaded:
    path: Path
    creator: str
    timer_resolution: int
    global_offset: int
    trace_length: int
    loc_names: list[str]
    loc_class: np.ndarray  # LocClass per location ref
    loc_group: list[str]  # location group name per location ref
    loc_events: np.ndarray  # number_of_events per location (definitions)
    region_names: list[str]
    region_roles: list[str]
    region_paradigms: list[str]
    comm_names: list[str]
    comm_class: np.ndarray  # CommClass per communicator ref
    props: dict[int, dict[str, str]]  # location ref -> property name -> value
    events: np.ndarray  # EVENT_ROW, kept events in the reader's order
    total_events: int  # events read (all of them)
    counts: dict[str, int]  # event class -> count over the whole archive
    sends_by_class: dict[str, int]  # communicator class -> sends over the whole archive
    sampled: bool
    window_bounds: np.ndarray  # (n_windows, 2) first and last kept time of each window
    state_before: np.ndarray  # (n_windows, n_locs) innermost region at each window's start
    window_events: np.ndarray  # kept events per window
    exact: Exact | None = None
    loc_node: list[str] = field(default_factory=list)  # system tree node per location ref
    node_names: list[str] = field(default_factory=list)  # system tree nodes, in order
    chips: int = 0  # system tree nodes of class "spe complex" (one per Cell chip)
    chip_nodes: list[str] = field(default_factory=list)  # the node of each "spe complex"
    extra: dict = field(default_factory=dict)

    def seconds(self, ticks: np.ndarray | float) -> np.ndarray | float:
        """Archive ticks -> seconds since the archive's global offset."""
        return (np.asarray(ticks, dtype=np.float64) - self.global_offset) / self.timer_resolution

    @property
    def n_locs(self) -> int:
        return len(self.loc_names)


def sample_plan(total: int, max_events: int, n_windows: int = 10
                ) -> tuple[np.ndarray, np.ndarray]:
    """Start index and size of each window of consecutive events; sizes sum to
    ``min(total, max_events)``. The skipped events are split evenly into the gaps before,
    between and after the windows (half a gap at either end)."""
    if max_events < 1:
        raise ValueError("max_events must be at least 1")
    if total <= max_events:
        return np.array([0], np.int64), np.array([total], np.int64)
    k = int(min(n_windows, max_events))
    sizes = np.full(k, max_events // k, np.int64)
    sizes[: max_events % k] += 1
    skip = total - max_events
    before = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    gaps = (2 * np.arange(k, dtype=np.int64) + 1) * skip // (2 * k)
    return before + gaps, sizes


def _member_refs(group: Any) -> list[int]:
    """The members of an otf2 group definition as refs (its members are definitions, or
    plain ints for a group of ranks)."""
    return [int(m) if isinstance(m, int | np.integer) else definition_ref(m)
            for m in group.members]


def load_archive(anchor: Path, max_events: int = 200_000, n_windows: int = 10,
                 progress: Callable[[int, int], None] | None = None,
                 compiled: bool | None = None) -> Loaded:
    """Read the archive's definitions and (a bounded sample of) its events; ``progress(read,
    total)`` is called between batches of events. ``compiled``: read events through the C
    callbacks (``_evtread``) or the Python ones; None: C where ``native.helper`` gives it
    (built, and ``CELL2OTF2_NO_NATIVE`` not set)."""
    import _otf2
    import otf2

    anchor = Path(anchor)
    _check_anchor(anchor)
    # the bindings read the definitions through Python callbacks: a signal raised inside one
    # would be lost in the library (or printed by ctypes), so it is noted and raised after
    with Deferred() as signals:
        try:
            with _library_messages_held():
                reader = otf2.reader.Reader(str(anchor))
        except Exception:  # the library raises several kinds; all mean "unreadable"
            if signals.noted is not None:
                signals.check()  # the library failed because of the interruption
            raise FormatError(anchor, "the OTF2 library cannot read this archive: its anchor "
                              "file, definitions or event files are damaged or incomplete "
                              "(otf2-print shows where)") from None
        try:
            signals.check()
            return _load(reader, anchor, max_events, n_windows, _otf2, progress, compiled)
        finally:
            reader.close()


def _check_anchor(anchor: Path) -> None:
    """Refuse, in our words, what is not an archive's anchor file before the library sees it
    (it would print its own error lines): a folder, the ``.def`` file, anything else."""
    from ..run.output import SUFFIX, not_archive_entry

    if anchor.is_dir():
        raise FormatError(anchor, "is a folder; name the archive's anchor file, e.g. "
                          f"{anchor.with_name(anchor.name + SUFFIX)}")
    if not anchor.exists():
        raise FormatError(anchor, "no OTF2 anchor file there")
    if anchor.suffix != SUFFIX:
        hint = (f": the anchor is {anchor.with_suffix(SUFFIX)}"
                if anchor.with_suffix(SUFFIX).is_file() else "")
        raise FormatError(anchor, f"is not an OTF2 anchor file (its name ends in "
                          f"{SUFFIX}{hint})")
    why = not_archive_entry(anchor, "anchor")
    if why is not None:
        raise FormatError(anchor, why)


class _library_messages_held:
    """Standard error (the file descriptor) set aside while the OTF2 library opens an archive:
    its own error lines ("[OTF2] src/...: error: ...") never reach the user; the command
    says what failed in its own words."""

    def __enter__(self) -> None:
        import sys
        import tempfile

        sys.stderr.flush()
        self._saved = os.dup(2)
        self._sink = tempfile.TemporaryFile()
        os.dup2(self._sink.fileno(), 2)

    def __exit__(self, *exc: object) -> None:
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._sink.close()


def _node_of(tree_node) -> str:
    """The name of the system tree node of class "node" above (or at) ``tree_node``."""
    n = tree_node
    while n is not None and n.class_name != "node":
        n = n.parent
    return (n or tree_node).name if tree_node is not None else ""


def _load(reader, anchor: Path, max_events: int, n_windows: int, _otf2, progress,
          compiled: bool | None = None) -> Loaded:
    d = reader.definitions
    all_locs = list(d.locations)
    if [definition_ref(loc) for loc in all_locs] != list(range(len(all_locs))):
        raise FormatError(anchor, "location refs are not 0..n-1; this report reads only "
                          "archives written by cell2otf2")
    # a METRIC location holds the counter samples of its metric instances' recorder: its
    # events are read as the recorder's, and the report's locations are the others (first)
    loc_of_event = np.arange(len(all_locs), dtype=np.int32)
    for instance in d.metric_instances:
        holder = [ref for ref, loc in enumerate(all_locs)
                  if loc.type.value == OTF2_LOCATION_TYPE_METRIC
                  and loc.name == f"{instance.recorder.name} counters"]
        loc_of_event[holder] = definition_ref(instance.recorder)
    n_locs = next((ref for ref, loc in enumerate(all_locs)
                   if loc.type.value == OTF2_LOCATION_TYPE_METRIC), len(all_locs))
    if (loc_of_event[n_locs:] >= n_locs).any():
        raise FormatError(anchor, "a METRIC location is no sampling location's, or is defined "
                          "before other locations; this report reads only archives written "
                          "by cell2otf2")
    locs = all_locs[:n_locs]
    loc_refs = list(range(n_locs))
    props: dict[int, dict[str, str]] = {}
    for prop in d.location_properties:
        props.setdefault(definition_ref(prop.location), {})[prop.name] = str(prop.value)
    loc_class = np.full(n_locs, LocClass.OTHER, np.int8)
    for ref, loc in zip(loc_refs, locs, strict=True):
        if props.get(ref, {}).get(PROP_PSEUDO) is not None:
            loc_class[ref] = LocClass.MEMORY
        elif loc.type.value == 1:
            loc_class[ref] = LocClass.PPE
        elif loc.type.value == 2:
            loc_class[ref] = LocClass.SPE
    regions = list(d.regions)
    comms = list(d.comms)
    comm_class = np.array([CommClass.MAILBOX if c.name == "Cell mailboxes" else
                           CommClass.DMA if c.name == "DMA" else CommClass.MPI for c in comms],
                          np.int8)
    comm_members = {definition_ref(c): _member_refs(c.group) for c in comms}
    win_members = {definition_ref(w): comm_members.get(definition_ref(w.comm), [])
                   for w in d.rma_wins}
    clock = d.clock_properties
    loc_events = np.bincount(loc_of_event, minlength=n_locs,
                             weights=[loc.number_of_events for loc in all_locs]
                             ).astype(np.int64)
    total = int(loc_events.sum())
    starts, sizes = sample_plan(total, max_events, n_windows)
    ends = starts + sizes
    n_win = starts.size
    n_reg = max(len(regions), 1)
    logged_comm = {definition_ref(c) for c in comms if c.name != "Cell mailboxes"}
    use_c = _use_compiled() if compiled is None else compiled
    ev = _Events(n_locs, n_reg, starts, ends, int(sizes.sum()), comm_members, win_members,
                 logged_comm, use_c, n_events=total)
    try:
        def batch(kind, loc, *columns) -> None:  # samples: their recorder's events
            ev.batch(kind, loc_of_event[loc], *columns)

        _read_events(reader, all_locs, _otf2, batch, use_c,
                     None if progress is None else lambda: progress(ev.i, total))
    except Exception as exc:
        raise FormatError(anchor, f"the otf2 reader failed after {ev.i} events: {exc}"
                          ) from None
    if ev.i != total:
        raise FormatError(anchor, "events read differ from the definitions' per-location "
                          f"counts (expected {total}, found {ev.i})")
    kept = ev.kept[: ev.j]
    state_before = ev.state_before
    counts = ev.counts
    win = kept["window"].astype(np.int64)
    window_events = np.bincount(win, minlength=n_win)
    wb = np.zeros((n_win, 2), np.int64)
    if not (total > max_events):
        wb[0] = (clock.global_offset, clock.global_offset + clock.trace_length)
    else:
        first = np.searchsorted(win, np.arange(n_win))
        wb[:, 0] = kept["time"][first]
        wb[:, 1] = kept["time"][np.searchsorted(win, np.arange(n_win), side="right") - 1]
    by_class: dict[str, int] = {c.name: 0 for c in CommClass}
    sends = np.zeros(len(comms), np.int64)
    chan_comm = ev.channels.first_column()
    ok = (chan_comm >= 0) & (chan_comm < len(comms))
    np.add.at(sends, chan_comm[ok], ev.channels.n[0][: chan_comm.size][ok])
    for cls in CommClass:
        by_class[cls.name] = int(sends[comm_class == cls].sum())
    shape = (n_locs, n_reg)
    exact = Exact(
        visits=ev.visits.reshape(shape),
        inclusive=ev.inclusive.astype(np.float64).reshape(shape),
        longest=ev.longest.astype(np.float64).reshape(shape),
        exclusive=ev.exclusive.astype(np.float64).reshape(shape),
        first=ev.first_t, last=ev.last_t,
        outermost=ev.outermost.reshape(shape),
        unclosed=ev.unclosed(),
        stray_leaves=ev.stray,
        log=ev.log_table())
    if progress is not None:
        progress(total, total)
    return Loaded(
        path=anchor,
        creator=str(_otf2.Reader_GetCreator(reader.handle) or ""),
        timer_resolution=int(clock.timer_resolution),
        global_offset=int(clock.global_offset),
        trace_length=int(clock.trace_length),
        loc_names=[loc.name for loc in locs],
        loc_class=loc_class,
        loc_group=[loc.group.name for loc in locs],
        loc_events=loc_events,
        region_names=[r.name for r in regions],
        region_roles=[str(r.region_role).split(".")[-1] for r in regions],
        region_paradigms=[str(r.paradigm).split(".")[-1] for r in regions],
        comm_names=[c.name for c in comms],
        comm_class=comm_class,
        props=props,
        events=kept,
        total_events=total,
        counts={KIND_NAMES[k]: int(counts[k]) for k in K},
        sends_by_class=by_class,
        sampled=total > max_events,
        window_bounds=wb,
        state_before=state_before,
        window_events=window_events,
        exact=exact,
        loc_node=[_node_of(loc.group.system_tree_parent) for loc in locs],
        node_names=[n.name for n in d.system_tree_nodes if n.class_name == "node"],
        chips=sum(1 for n in d.system_tree_nodes if n.class_name == "spe complex"),
        chip_nodes=[_node_of(n) for n in d.system_tree_nodes if n.class_name == "spe complex"],
    )


def _copy(fn):
    """A distinct function object with the same code and closure."""
    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__,
                              fn.__closure__)


def _open_global_reader(reader, locs, _otf2):
    """The library's global event reader over every location, opened as ``otf2.reader``
    opens it (which would then build one Python object per event)."""
    h = reader.handle
    for loc in locs:
        _otf2.Reader_SelectLocation(h, definition_ref(loc))
    try:
        _otf2.Reader_OpenDefFiles(h)
        defs_open = True
    except _otf2.Error:
        defs_open = False
    try:
        _otf2.Reader_OpenEvtFiles(h)
    except _otf2.Error:
        pass
    for loc in locs:
        if defs_open:
            dr = _otf2.Reader_GetDefReader(h, definition_ref(loc))
            if dr:
                _otf2.Reader_ReadAllLocalDefinitions(h, dr)
                _otf2.Reader_CloseDefReader(h, dr)
        _otf2.Reader_GetEvtReader(h, definition_ref(loc))
    if defs_open:
        _otf2.Reader_CloseDefFiles(h)
    return _otf2.Reader_GetGlobalEvtReader(h)


# --------------------------------------------------------------------------------------------
# events: read into columns by callbacks (C or Python), then worked on batch by batch as arrays
# --------------------------------------------------------------------------------------------

#: the columns one event fills, C and Python alike: its K; location; time (the reader's
#: uint64 as int64); region / communicator / RMA window; receiver or sender rank, RMA remote,
#: -1 for an RMA completion, else 0; message length or RMA bytes; message tag or RMA matching
#: id. Zero where the kind has no such number.
RAW_COLUMNS = (("kind", "u1"), ("loc", "<i4"), ("time", "<i8"), ("ref", "<i8"),
               ("peer", "<i8"), ("nbytes", "<u8"), ("match", "<u8"))
#: events per ReadEvents call
BATCH = 65536
#: open regions per location the compiled stacks hold at first (doubled when one is full)
STACK_ROOM = 16
_ALL_ONES = (1 << 64) - 1  # -1 as the Python callbacks' uint64


def _use_compiled() -> bool:
    return helper("evtread") is not None


def _kind_of(event_class: str) -> int:
    """The K of an OTF2 event class name (as in ``GlobalEvtReaderCallbacks_Set<name>Callback``)."""
    return {"Enter": K.ENTER, "Leave": K.LEAVE, "MpiSend": K.SEND, "MpiIsend": K.SEND,
            "MpiRecv": K.RECV, "MpiIrecv": K.RECV, "RmaGet": K.GET, "RmaPut": K.PUT,
            "RmaOpCompleteBlocking": K.RMA_DONE, "MpiCollectiveBegin": K.COLL_BEGIN,
            "MpiCollectiveEnd": K.COLL_END, "Metric": K.METRIC}.get(event_class, K.OTHER)


def _event_classes(_otf2) -> list[str]:
    """Every event class the bindings have a global reader callback setter for."""
    prefix, suffix = "GlobalEvtReaderCallbacks_Set", "Callback"
    return [name[len(prefix):-len(suffix)] for name in dir(_otf2)
            if name.startswith(prefix) and name.endswith(suffix)
            and name != prefix + "UnknownCallback"]


class _PyCallbacks:
    """The Python callbacks: each appends its event's RAW_COLUMNS to one flat uint64 array."""

    def __init__(self) -> None:
        self.flat = array("Q")
        put = self.flat.extend
        neg = _ALL_ONES
        done = int(K.RMA_DONE)

        def region(kind):
            k = int(kind)

            def on_event(loc, t, _u, _a, region):
                put((k, loc, t, region, 0, 0, 0))
            return on_event

        def message(kind):
            k = int(kind)

            def on_event(loc, t, _u, _a, peer, comm, tag, length, *_req):
                put((k, loc, t, comm, peer, length, tag))
            return on_event

        def rma(kind):
            k = int(kind)

            def on_event(loc, t, _u, _a, win, remote, nbytes, matching):
                put((k, loc, t, win, remote, nbytes, matching))
            return on_event

        def on_done(loc, t, _u, _a, win, matching):
            put((done, loc, t, win, neg, 0, matching))

        def simple(kind):
            k = int(kind)

            def on_event(loc, t, *_rest):
                put((k, loc, t, 0, 0, 0, 0))
            return on_event

        self.by_kind: dict[int, Callable[..., None]] = {
            K.ENTER: region(K.ENTER), K.LEAVE: region(K.LEAVE), K.SEND: message(K.SEND),
            K.RECV: message(K.RECV), K.GET: rma(K.GET), K.PUT: rma(K.PUT), K.RMA_DONE: on_done}

        self.simple = simple

    def callback(self, kind: int):
        fn = self.by_kind.get(kind) or self.simple(kind)
        # _otf2 keeps each C thunk alive by attaching it to the Python function it wraps, so
        # one function given to two setters loses its first thunk: every setter gets a copy
        return _copy(fn)

    def take(self) -> tuple[np.ndarray, ...]:
        """The columns of the events since the last ``take`` (as the C callbacks fill them)."""
        rows = np.frombuffer(self.flat, np.uint64).reshape(-1, len(RAW_COLUMNS))
        out = []
        for k, (_name, code) in enumerate(RAW_COLUMNS):
            dt = np.dtype(code)
            col = rows[:, k]
            out.append(col.astype(dt) if dt.itemsize < 8 else col.copy().view(dt))  # copies
        del rows, col
        del self.flat[:]
        return tuple(out)


def _read_events(reader, locs, _otf2, sink: Callable, compiled: bool,
                 between: Callable[[], None] | None = None) -> None:
    """Read every event of the archive (global time order) through the C callbacks
    (``compiled``) or the Python ones, calling ``sink(*columns)`` (RAW_COLUMNS) once per batch
    and ``between()`` between batches; Ctrl-C and termination signals are deferred to the
    batch boundaries."""
    import ctypes

    evtread = helper("evtread") if compiled else None
    alive = []
    cbs = _otf2.GlobalEvtReaderCallbacks_New()
    py = None
    try:
        if evtread is not None:
            setters = []
            for name in _event_classes(_otf2):
                kind = _kind_of(name)
                code = kind + 100 if name in ("MpiIsend", "MpiIrecv") else kind
                setters.append((function_address(
                    f"OTF2_GlobalEvtReaderCallbacks_Set{name}Callback"), int(code)))
            cols = tuple(np.empty(BATCH, np.dtype(code)) for _name, code in RAW_COLUMNS)
            evtread.buffers(*cols)
            evtread.install(ctypes.cast(cbs, ctypes.c_void_p).value, setters)
        else:
            py = _PyCallbacks()
            for name in _event_classes(_otf2):
                alive.append(py.callback(_kind_of(name)))
                getattr(_otf2, f"GlobalEvtReaderCallbacks_Set{name}Callback")(cbs, alive[-1])
        handle = _open_global_reader(reader, locs, _otf2)
        _otf2.GlobalEvtReader_SetCallbacks(handle, cbs, None)
    except BaseException:
        if evtread is not None:
            evtread.release()
        raise
    finally:
        _otf2.GlobalEvtReaderCallbacks_Delete(cbs)
    try:
        with Deferred() as signals:  # never raised inside a callback, checked between batches
            while True:
                got = _otf2.GlobalEvtReader_ReadEvents(handle, BATCH)
                if evtread is not None:
                    n = evtread.take()
                    sink(*(c[:n] for c in cols))
                else:
                    assert py is not None  # the Python callbacks fill it
                    sink(*py.take())
                if got != BATCH:
                    break
                signals.check()
                if between is not None:
                    between()
    finally:
        if evtread is not None:
            evtread.release()
        _otf2.Reader_CloseGlobalEvtReader(reader.handle, handle)
        _otf2.Reader_CloseEvtFiles(reader.handle)


class _Members:
    """Communicator (or window) ref and rank -> location ref, -1 where undefined."""

    def __init__(self, members: dict[int, list[int]]) -> None:
        refs = [r for r in members if r >= 0]
        rows = max(refs) + 1 if refs else 0
        width = max((len(members[r]) for r in refs), default=0) + 1
        self.table = np.full((rows, width), -1, np.int64)
        self.size = np.zeros(rows, np.int64)
        for r in refs:
            self.table[r, : len(members[r])] = members[r]
            self.size[r] = len(members[r])

    def __call__(self, ref: np.ndarray, rank: np.ndarray) -> np.ndarray:
        rows = self.size.size
        known = (ref >= 0) & (ref < rows)
        r = np.where(known, ref, 0)
        ok = known & (rank >= 0) & (rank < (self.size[r] if rows else 0))
        if not rows:
            return np.full(ref.size, -1, np.int64)
        return np.where(ok, self.table[r, np.where(ok, rank, 0)], -1)


class _Chan:
    """Pairing by order: a channel id per key (in the order keys first occur) and, per channel,
    how many events of its first side (sends, issues) and of its second side (receives,
    completions) were seen. A key is a few non-negative integers; while each is below its
    ``bounds`` entry the key is kept as one integer (mixed radix), else as a tuple. With
    ``compiled`` the packed keys are looked up in ``_evtread``'s hash table (``table``, the keys
    by channel id in ``by_id``) rather than in the dict ``ids``, with the same results."""

    def __init__(self, bounds: tuple[int, ...], compiled: bool = False) -> None:
        self.ids: dict = {}
        self.n = [np.zeros(64, np.int64), np.zeros(64, np.int64)]
        self.bounds = bounds
        self.packed = int(np.prod([float(b) for b in bounds])) < 1 << 63
        #: compiled: channel id + 1 per slot, 0 where empty; None: the dict ``ids``
        self.table: np.ndarray | None = None
        self.by_id = np.zeros(64, np.int64)
        self.count = 0  # channels in the table
        self.evtread = helper("evtread") if compiled and self.packed else None
        if self.evtread is not None:
            self.table = np.zeros(2048, np.int32)

    def _to_dict(self) -> None:
        """Leave the compiled table for the dict (a key beyond ``bounds``)."""
        if self.table is not None:
            self.ids = dict(zip(self.by_id[: self.count].tolist(), range(self.count),
                                strict=True))
            self.table = None

    def _assign_compiled(self, packed: np.ndarray, second: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray] | None:
        evtread = self.evtread
        assert evtread is not None, "the table is there only with the compiled helper"
        m = packed.size
        need = self.count + m
        # grown fourfold: each growth copies the arrays (and refills the table) once more
        if need > self.by_id.size:
            self.by_id = np.concatenate([self.by_id, np.zeros(max(need, 3 * self.by_id.size),
                                                              np.int64)])
        if need > self.n[0].size:
            grow = max(need, 4 * self.n[0].size)
            self.n = [np.concatenate([a, np.zeros(grow - a.size, np.int64)]) for a in self.n]
        if need >= 1 << 31 or self.table is None:  # beyond the table's int32 ids
            self._to_dict()
            return None
        if 2 * need > self.table.size:  # at most half full
            size = max(4 * self.table.size, 1 << (2 * need - 1).bit_length())
            self.table = np.zeros(size, np.int32)
            evtread.chan_rehash(self.table, self.by_id[: self.count])
        c = np.empty(m, np.int64)
        seq = np.empty(m, np.int64)
        self.count = evtread.chan_assign(
            self.table, np.ascontiguousarray(packed, np.int64),
            np.ascontiguousarray(second, np.bool_), self.n[0], self.n[1], self.by_id, c, seq,
            self.count)
        return c, seq

    def _unpack(self, key: int) -> tuple[int, ...]:
        out = []
        for b in reversed(self.bounds):
            key, r = divmod(key, b)
            out.append(r)
        return tuple(reversed(out))

    def first_column(self) -> np.ndarray:
        """The first key column of each channel, by channel id."""
        if self.table is not None:
            tail = int(np.prod([float(b) for b in self.bounds[1:]]))
            return self.by_id[: self.count] // tail
        keys = list(self.ids)
        if self.packed:
            tail = int(np.prod([float(b) for b in self.bounds[1:]]))
            return np.array(keys, np.int64) // tail if keys else np.zeros(0, np.int64)
        return np.array([k[0] for k in keys], np.int64)

    def assign(self, keys: tuple[np.ndarray, ...], second: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
        """(channel id, sequence number on its side) of each event, in order; ``keys``: the
        columns of each event's key (non-negative integers)."""
        m = second.size
        if self.packed and not all(int(k.min()) >= 0 and int(k.max()) < b
                                   for k, b in zip(keys, self.bounds, strict=True)):
            self._to_dict()
            self.packed = False
            self.ids = {self._unpack(k): c for k, c in self.ids.items()}
        ids = self.ids
        if self.packed:
            packed = keys[0].astype(np.int64)
            for k, b in zip(keys[1:], self.bounds[1:], strict=True):
                packed = packed * b + k.astype(np.int64)
            got = self._assign_compiled(packed, second) if self.table is not None else None
            if got is not None:
                return got
            ids = self.ids
            key_list = packed.tolist()
        else:
            key_list = list(zip(*(k.tolist() for k in keys), strict=True))
        new = [k for k in dict.fromkeys(key_list) if k not in ids]  # in order of occurrence
        if new:
            ids.update(zip(new, range(len(ids), len(ids) + len(new)), strict=True))
        c = np.fromiter(map(ids.__getitem__, key_list), np.int64, count=m)
        if len(ids) > self.n[0].size:
            grow = max(len(ids), 2 * self.n[0].size)
            self.n = [np.concatenate([a, np.zeros(grow - a.size, np.int64)]) for a in self.n]
        side = second.astype(np.int64)
        g = c * 2 + side
        o = np.argsort(g, kind="stable")
        gs = g[o]
        start = np.flatnonzero(np.concatenate([[True], gs[1:] != gs[:-1]]))
        occ = np.empty(m, np.int64)
        occ[o] = np.arange(m) - np.repeat(start, np.diff(np.append(start, m)))
        seq = np.where(second, self.n[1][c], self.n[0][c]) + occ
        for s in (0, 1):
            self.n[s][: len(ids)] += np.bincount(c[side == s], minlength=len(ids))
        return c, seq


class _Events:
    """Everything ``_load`` takes from the events, fed batch by batch (``batch``) with the
    RAW_COLUMNS of consecutive events in the reader's order: counts, the sample windows' kept
    rows and their starting states, the exact per-region sums, the message and RMA pairing
    and the log. Enter/Leave are worked on as arrays when the batch nests properly (every
    Leave closes its location's innermost open region); a batch that does not is walked one
    event at a time, with the same results."""

    def __init__(self, n_locs: int, n_reg: int, starts: np.ndarray, ends: np.ndarray,
                 n_kept: int, comm_members: dict, win_members: dict, logged_comm: set,
                 compiled: bool = False, n_events: int = 0) -> None:
        self.n_locs, self.n_reg = n_locs, n_reg
        self.starts, self.ends = starts.tolist(), ends.tolist()
        self.kept = np.zeros(n_kept, EVENT_ROW)
        self.i = self.j = 0
        self.state_before = np.full((len(self.starts), n_locs), -1, np.int32)
        self.counts = np.zeros(len(K) + 1, np.int64)
        self.stacks: list[list[int]] = [[] for _ in range(n_locs)]
        self.entered: list[list[int]] = [[] for _ in range(n_locs)]  # Enter time per open
        # compiled: the stacks as arrays (``_evtread.regions``) instead of the lists
        self.evtread = helper("evtread") if compiled else None
        self.compiled = self.evtread is not None
        self.depth = np.zeros(n_locs, np.int64)
        self.cap = STACK_ROOM
        self.stack_reg = np.zeros(n_locs * self.cap, np.int64)
        self.stack_t = np.zeros(n_locs * self.cap, np.int64)
        self.state_buf = np.zeros(0, np.int64)
        size = n_locs * n_reg
        self.visits = np.zeros(size, np.int64)
        self.inclusive = np.zeros(size, np.int64)
        self.longest = np.zeros(size, np.int64)
        self.exclusive = np.zeros(size, np.int64)
        self.outermost = np.zeros(size, np.int64)
        self.first_t = np.full(n_locs, -1, np.int64)
        self.last_t = np.full(n_locs, -1, np.int64)
        self.stray = np.zeros(n_locs, np.int64)
        # the log's columns, room for every event (pages never written are never mapped in):
        # filled in place, no pieces to join at the end
        self.logs = {name: np.empty(n_events, LOG_ROW[name]) for name in LOG_ROW.names or ()}
        self.n_log = 0
        # MPI: (comm, sender + 1, receiver + 1, tag); sends, receives
        self.channels = _Chan((max(comm_members, default=0) + 1, n_locs + 1, n_locs + 1,
                               1 << 32), compiled)
        # RMA: (location, window, matching id); issues, completions
        self.rma_channels = _Chan((n_locs, max(win_members, default=0) + 1, 1 << 40),
                                  compiled)
        self.comm_members = _Members(comm_members)
        self.win_members = _Members(win_members)
        top = max([r for r in logged_comm if r >= 0], default=-1)
        self.logged = np.zeros(top + 2, bool)  # last entry: any ref beyond
        self.logged[[r for r in logged_comm if r >= 0]] = True

    def log_table(self) -> Log:
        return Log(**{name: col[: self.n_log] for name, col in self.logs.items()})

    def batch(self, kind, loc, t, ref, peer, nbytes, match) -> None:
        n = int(kind.size)
        if not n:
            return
        i0 = self.i
        self.i = i0 + n
        self.counts += np.bincount(kind, minlength=self.counts.size)[: self.counts.size]
        # sample windows of this batch, and the windows that start in it
        w = None
        snaps = []
        for k, (s, e) in enumerate(zip(self.starts, self.ends, strict=True)):
            lo, hi = max(s, i0), min(e, i0 + n)
            if lo < hi:
                if w is None:
                    w = np.full(n, -1, np.int16)
                w[lo - i0: hi - i0] = k
                if s >= i0:
                    snaps.append((k, s - i0))
        if self.compiled:
            state_at = self._regions_compiled(kind, loc, t, ref, snaps)
        else:
            state_at = self._regions_batch(kind, loc, t, ref, snaps)
        self._pair_and_keep(kind, loc, t, ref, peer, nbytes, match, w, state_at)

    def _regions_compiled(self, kind, loc, t, ref, snaps) -> Callable:
        """The batch's Enter and Leave events walked in C (``_evtread.regions``): the states
        before the windows that start in it noted, the innermost open region after each event
        returned (as ``state_at``)."""
        evtread = self.evtread
        assert evtread is not None, "walked in C only with the compiled helper"
        n = kind.size
        if self.state_buf.size < n:
            self.state_buf = np.empty(max(n, BATCH), np.int64)
        state = self.state_buf
        pos = 0
        for k, p in [*snaps, (None, n)]:
            while pos < p:
                pos = evtread.regions(
                    kind, loc, t, ref, pos, p, self.n_reg, self.cap, self.depth,
                    self.stack_reg, self.stack_t, self.visits, self.inclusive, self.longest,
                    self.exclusive, self.outermost, self.first_t, self.last_t, self.stray,
                    state)
                if pos < p:  # an Enter beyond the stacks' room
                    self._grow_stacks()
            if k is not None:
                self.state_before[k] = self.tops()

        def state_at(_locs: np.ndarray, pos: np.ndarray) -> np.ndarray:
            return state[pos]
        return state_at

    def _grow_stacks(self) -> None:
        cap = self.cap * 2
        for name in ("stack_reg", "stack_t"):
            grown = np.zeros((self.n_locs, cap), np.int64)
            grown[:, : self.cap] = getattr(self, name).reshape(self.n_locs, self.cap)
            setattr(self, name, grown.ravel())
        self.cap = cap

    def tops(self) -> np.ndarray:
        """The innermost open region of every location (compiled stacks), -1 none."""
        d = self.depth
        at = np.arange(self.n_locs, dtype=np.int64) * self.cap + np.maximum(d - 1, 0)
        return np.where(d > 0, self.stack_reg[at], -1)

    def unclosed(self) -> np.ndarray:
        if self.compiled:
            return self.depth.copy()
        return np.array([len(x) for x in self.stacks], np.int64)

    def _regions_batch(self, kind, loc, t, ref, snaps) -> Callable:
        """The batch's Enter and Leave events worked on as arrays per location (or walked one
        at a time when they do not nest): the states before the windows that start in it
        noted, ``state_at(locs, pos)`` returned."""
        n = kind.size
        loc = loc.astype(np.int64)
        # Enter and Leave: per location, in order
        top0 = np.array([s[-1] if s else -1 for s in self.stacks], np.int64)
        el = np.flatnonzero((kind == K.ENTER) | (kind == K.LEAVE))
        el = el[np.argsort(loc[el], kind="stable")]
        el_loc = loc[el]
        state = np.zeros(0, np.int64)  # read only where the batch has Enters or Leaves
        if el.size:
            args = (el_loc, kind[el] == K.ENTER, t[el], ref[el])
            found = self._regions(*args)
            state = found if found is not None else self._regions_walk(*args)
        stride = n + 1
        el_key = el_loc * stride + el

        def state_at(locs: np.ndarray, pos: np.ndarray) -> np.ndarray:
            """Innermost open region of ``locs`` after the event at batch position ``pos``."""
            if not el.size:
                return top0[locs]
            at = np.searchsorted(el_key, locs * stride + pos, side="right") - 1
            hit = (at >= 0) & (el_loc[np.maximum(at, 0)] == locs)
            return np.where(hit, state[np.maximum(at, 0)], top0[locs])

        every = np.arange(self.n_locs, dtype=np.int64)
        for k, p in snaps:
            self.state_before[k] = state_at(every, np.full(self.n_locs, p - 1, np.int64))
        return state_at

    def _pair_and_keep(self, kind, loc, t, ref, peer, nbytes, match, w, state_at) -> None:
        """The batch's messages and RMA events paired and logged, its kept rows written."""
        n = kind.size
        loc = loc.astype(np.int64)
        # messages and RMA: partners, pairing, log
        other = np.full(n, -1, np.int64)
        chan = np.full(n, -1, np.int64)
        seq = np.full(n, -1, np.int64)
        logged = np.zeros(n, bool)
        msg = np.flatnonzero((kind == K.SEND) | (kind == K.RECV))
        if msg.size:
            comm, lm = ref[msg], loc[msg]
            oth = self.comm_members(comm, peer[msg])
            send = kind[msg] == K.SEND
            c, q = self.channels.assign(
                (comm, np.where(send, lm, oth) + 1, np.where(send, oth, lm) + 1, match[msg]),
                ~send)
            other[msg], chan[msg], seq[msg] = oth, c, q
            logged[msg] = self.logged[np.clip(comm, -1, self.logged.size - 1)] & (comm >= 0)
        rma = np.flatnonzero((kind >= K.GET) & (kind <= K.RMA_DONE))
        if rma.size:
            win = ref[rma]
            c, q = self.rma_channels.assign((loc[rma], win, match[rma]),
                                            kind[rma] == K.RMA_DONE)
            other[rma] = self.win_members(win, peer[rma])
            chan[rma], seq[rma] = c, q
            logged[rma] = True
        lg = np.flatnonzero(logged)
        if lg.size:
            a, b = self.n_log, self.n_log + lg.size
            if b > self.logs["kind"].size:  # more events than the definitions said
                self.logs = {name: np.concatenate([col[:a], np.empty(max(b, 2 * a), col.dtype)])
                             for name, col in self.logs.items()}
            for name, col in (("kind", kind), ("loc", loc), ("time", t), ("partner", other),
                              ("ref", ref), ("bytes", nbytes), ("chan", chan), ("seq", seq)):
                self.logs[name][a:b] = col[lg]
            self.n_log = b
        # kept rows
        if w is None:
            return
        kp = np.flatnonzero(w >= 0)
        j = self.j
        rows = self.kept[j: j + kp.size]
        self.j = j + kp.size
        kk = kind[kp]
        rows["loc"] = loc[kp]
        rows["time"] = t[kp]
        rows["kind"] = kk
        rows["ref"] = np.where(kk >= K.COLL_BEGIN, -1, ref[kp])
        rows["partner"] = other[kp]
        rows["bytes"] = nbytes[kp]
        rows["chan"] = chan[kp]
        rows["seq"] = seq[kp]
        rows["state"] = state_at(loc[kp], kp)
        rows["window"] = w[kp]

    def _regions(self, loc, enter, t, region) -> np.ndarray | None:
        """Enter/Leave events of one batch, grouped by location (in order within each) as
        arrays: the innermost open region after each, the exact sums updated. None (nothing
        changed) unless every Leave closes its location's innermost open region."""
        m = loc.size
        n_locs, n_reg = self.n_locs, self.n_reg
        if loc.min() < 0 or loc.max() >= n_locs or region.max() >= n_reg:
            return None
        d = np.where(enter, 1, -1)
        cs = np.cumsum(d)
        gs = np.flatnonzero(np.concatenate([[True], loc[1:] != loc[:-1]]))
        glen = np.diff(np.append(gs, m))
        gl = loc[gs]
        depth0 = np.array([len(self.stacks[x]) for x in gl.tolist()], np.int64)
        before = np.concatenate([[0], cs[gs[1:] - 1]])
        after = cs + np.repeat(depth0 - before, glen)  # depth after each event
        leave = ~enter
        if (after[leave] < 0).any():
            return None
        level = np.where(enter, after, after + 1)  # the level an Enter opens, a Leave closes
        # the open Enters: carried over from earlier batches (position 0) and this batch's
        c_loc: list[int] = []
        c_lev: list[int] = []
        c_reg: list[int] = []
        c_t: list[int] = []
        for x, dep in zip(gl.tolist(), depth0.tolist(), strict=True):
            if dep:
                c_loc += [x] * dep
                c_lev += range(1, dep + 1)
                c_reg += self.stacks[x]
                c_t += self.entered[x]
        top_level = int(max(level.max(), depth0.max())) + 2
        span = m + 2

        def key(x, lev, pos):
            return (x * top_level + lev) * span + pos

        e = np.flatnonzero(enter)
        e_key = np.concatenate([key(np.array(c_loc, np.int64), np.array(c_lev, np.int64), 0),
                                key(loc[e], level[e], e + 1)])
        e_reg = np.concatenate([np.array(c_reg, np.int64), region[e]])
        e_t = np.concatenate([np.array(c_t, np.int64), t[e]])
        o = np.argsort(e_key)
        e_key, e_reg, e_t = e_key[o], e_reg[o], e_t[o]

        def opened(x, lev, pos):
            """Index of the last Enter at (location, level) before ``pos``; -1 none."""
            q = key(x, lev, pos)
            at = np.searchsorted(e_key, q, side="left") - 1
            ok = (at >= 0) & (e_key[np.maximum(at, 0)] // span == q // span)
            return np.where(ok, at, -1)

        lv = np.flatnonzero(leave)
        closes = opened(loc[lv], level[lv], lv + 1)
        if (closes < 0).any() or (e_reg[closes] != region[lv]).any():
            return None
        parent = opened(loc[lv], after[lv], lv + 1)
        if ((after[lv] > 0) & (parent < 0)).any():
            return None
        state = np.where(enter, region, -1)
        state[lv] = np.where(after[lv] > 0, e_reg[np.maximum(parent, 0)], -1)
        # the exact sums
        cell = loc * n_reg
        at = cell[lv] + region[lv]
        dur = t[lv] - e_t[closes]
        np.add.at(self.visits, at, 1)
        np.add.at(self.inclusive, at, dur)
        np.maximum.at(self.longest, at, dur)
        first = np.zeros(m, bool)
        first[gs] = True
        prev_state = np.empty(m, np.int64)
        prev_state[1:] = state[:-1]
        prev_state[gs] = self.top_of(gl)
        prev_t = np.empty(m, np.int64)
        prev_t[1:] = t[:-1]
        prev_t[gs] = self.last_t[gl]
        busy = prev_state >= 0
        np.add.at(self.exclusive, cell[busy] + prev_state[busy], (t - prev_t)[busy])
        fresh = self.first_t[gl] < 0
        self.first_t[gl[fresh]] = t[gs[fresh]]
        self.last_t[gl] = t[gs + glen - 1]
        out = enter & (after == 1)
        np.add.at(self.outermost, cell[out] + region[out], 1)
        # the stacks left open
        final = after[gs + glen - 1]
        fx = np.repeat(gl, final)
        flev = np.arange(final.sum()) - np.repeat(np.cumsum(final) - final, final) + 1
        fo = opened(fx, flev, np.full(fx.size, m + 1))
        regs, times = e_reg[fo].tolist(), e_t[fo].tolist()
        at = 0
        for x, dep in zip(gl.tolist(), final.tolist(), strict=True):
            self.stacks[x] = regs[at: at + dep]
            self.entered[x] = times[at: at + dep]
            at += dep
        return state

    def top_of(self, locs: np.ndarray) -> np.ndarray:
        return np.array([self.stacks[x][-1] if self.stacks[x] else -1 for x in locs.tolist()],
                        np.int64)

    def _regions_walk(self, loc, enter, t, region) -> np.ndarray:
        """``_regions`` one event at a time, for any batch (Leaves of regions not open, of
        regions open further out)."""
        n_reg = self.n_reg
        stacks, entered = self.stacks, self.entered
        visits, inclusive, longest = self.visits, self.inclusive, self.longest
        exclusive, outermost = self.exclusive, self.outermost
        first_t, last_t, stray = self.first_t, self.last_t, self.stray
        state = np.empty(loc.size, np.int64)
        for q, (x, is_enter, tq, r) in enumerate(zip(loc.tolist(), enter.tolist(), t.tolist(),
                                                    region.tolist(), strict=True)):
            s = stacks[x]
            if s:
                exclusive[x * n_reg + s[-1]] += tq - int(last_t[x])
            elif first_t[x] < 0:
                first_t[x] = tq
            last_t[x] = tq
            if is_enter:
                if not s:
                    outermost[x * n_reg + r] += 1
                s.append(r)
                entered[x].append(tq)
            else:
                if s and s[-1] == r:
                    s.pop()
                    t0 = entered[x].pop()
                elif r in s:  # close what was left open inside it
                    k = len(s) - 1 - s[::-1].index(r)
                    t0 = entered[x][k]
                    del s[k:], entered[x][k:]
                else:
                    t0 = -1
                    stray[x] += 1
                if t0 >= 0:
                    i = x * n_reg + r
                    visits[i] += 1
                    inclusive[i] += tq - t0
                    if tq - t0 > longest[i]:
                        longest[i] = tq - t0
            state[q] = s[-1] if s else -1
        return state
