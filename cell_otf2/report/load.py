"""An OTF2 archive read back with the ``otf2`` reader (what a viewer shows) into bounded numpy
arrays, through raw callbacks rather than a Python object per event: above ``max_events`` only
evenly spread windows of consecutive events are kept, but every event is read, so counts,
pairing and region stacks stay exact, and ``Exact`` keeps per-region times and every RMA and
message exact (docs/design.md). It does not check the archive (``otf2-print`` does)."""

from __future__ import annotations

import types
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path

import numpy as np

from ..errors import FormatError
from ..signals import Deferred


class _Channels:
    """Pairing by order: a channel id per key and, per channel, how many events of its first
    side (sends, issues) and of its second side (receives, completions) were seen."""

    def __init__(self) -> None:
        self.ids: dict[tuple, int] = {}
        self.counts: tuple[list[int], list[int]] = ([], [])

    def next(self, key: tuple, second: bool) -> tuple[int, int]:
        """(channel id, this event's sequence number on its side of the channel)."""
        c = self.ids.get(key)
        if c is None:
            c = self.ids[key] = len(self.counts[0])
            self.counts[0].append(0)
            self.counts[1].append(0)
        tally = self.counts[second]
        seq = tally[c]
        tally[c] = seq + 1
        return c, seq


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
_LOG_CODES = ("b", "i", "q", "i", "i", "q", "q", "q")


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
    log: np.ndarray  # LOG_ROW, in the reader's order


PROP_PSEUDO = "cell2otf2::pseudo_location"
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


def _member_refs(group) -> list[int]:
    return [m._ref if hasattr(m, "_ref") else int(m) for m in group.members]


def load_archive(anchor: Path, max_events: int = 200_000, n_windows: int = 10,
                 progress: Callable[[int, int], None] | None = None) -> Loaded:
    """Read the archive's definitions and (a bounded sample of) its events; ``progress(read,
    total)`` is called between batches of events."""
    import _otf2
    import otf2

    anchor = Path(anchor)
    if not anchor.is_file():
        raise FormatError(anchor, "no OTF2 anchor file there")
    try:
        reader = otf2.reader.Reader(str(anchor))
    except Exception as exc:  # the library raises several kinds; all mean "unreadable"
        raise FormatError(anchor, f"the otf2 reader cannot open it: {exc}") from None
    try:
        return _load(reader, anchor, max_events, n_windows, _otf2, progress)
    finally:
        reader.close()


def _node_of(tree_node) -> str:
    """The name of the system tree node of class "node" above (or at) ``tree_node``."""
    n = tree_node
    while n is not None and n.class_name != "node":
        n = n.parent
    return (n or tree_node).name if tree_node is not None else ""


def _load(reader, anchor: Path, max_events: int, n_windows: int, _otf2, progress) -> Loaded:
    d = reader.definitions
    locs = list(d.locations)
    n_locs = len(locs)
    if any(loc._ref != i for i, loc in enumerate(locs)):
        raise FormatError(anchor, "location refs are not 0..n-1; this report reads only "
                          "archives written by cell2otf2")
    props: dict[int, dict[str, str]] = {}
    for prop in d.location_properties:
        props.setdefault(prop.location._ref, {})[prop.name] = str(prop.value)
    loc_class = np.full(n_locs, LocClass.OTHER, np.int8)
    for loc in locs:
        if props.get(loc._ref, {}).get(PROP_PSEUDO) is not None:
            loc_class[loc._ref] = LocClass.MEMORY
        elif loc.type.value == 1:
            loc_class[loc._ref] = LocClass.PPE
        elif loc.type.value == 2:
            loc_class[loc._ref] = LocClass.SPE
    regions = list(d.regions)
    comms = list(d.comms)
    comm_class = np.array([CommClass.MAILBOX if c.name == "Cell mailboxes" else
                           CommClass.DMA if c.name == "DMA" else CommClass.MPI for c in comms],
                          np.int8)
    comm_members = {c._ref: _member_refs(c.group) for c in comms}
    win_members = {w._ref: comm_members.get(w.comm._ref, []) for w in d.rma_wins}
    clock = d.clock_properties
    loc_events = np.array([loc.number_of_events for loc in locs], np.int64)
    total = int(loc_events.sum())
    starts, sizes = sample_plan(total, max_events, n_windows)
    ends = starts + sizes
    n_win = starts.size
    kept = np.zeros(int(sizes.sum()), EVENT_ROW)
    state_before = np.full((n_win, n_locs), -1, np.int32)
    counts = np.zeros(len(K) + 1, np.int64)
    stacks: list[list[int]] = [[] for _ in range(n_locs)]
    entered: list[list[int]] = [[] for _ in range(n_locs)]  # Enter time per open region
    n_reg = max(len(regions), 1)
    visits = [0] * (n_locs * n_reg)
    inclusive = [0] * (n_locs * n_reg)
    longest = [0] * (n_locs * n_reg)
    exclusive = [0] * (n_locs * n_reg)
    last_t = [-1] * n_locs
    stray = [0] * n_locs
    outermost = [0] * (n_locs * n_reg)
    first_t = [-1] * n_locs
    log = tuple(array(code) for code in _LOG_CODES)
    lk, ll, lt, lp, lr, lb, lc, ls = (a.append for a in log)
    logged_comm = {c._ref for c in comms if c.name != "Cell mailboxes"}
    channels = _Channels()  # MPI: (comm, sender, receiver, tag); sends first, receives second
    rma_channels = _Channels()  # RMA: (location, window, matching id); issues, completions
    # the reader's position: event index i, current window w = [ws, we)
    st = {"i": 0, "j": 0, "w": 0}
    bounds = [int(starts[0]), int(ends[0])]
    big = 1 << 62

    def pos() -> int:
        """The window of the next event, -1 when it is skipped."""
        i = st["i"]
        st["i"] = i + 1
        if i < bounds[0]:
            return -1
        w = st["w"]
        if i == bounds[0]:
            state_before[w] = [s[-1] if s else -1 for s in stacks]
        if i == bounds[1] - 1:
            st["w"] = w + 1
            if w + 1 < n_win:
                bounds[0], bounds[1] = int(starts[w + 1]), int(ends[w + 1])
            else:
                bounds[0] = bounds[1] = big
        return w

    def keep(w, loc, t, kind, ref, partner, nbytes, chan, seq) -> None:
        j = st["j"]
        s = stacks[loc]
        kept[j] = (loc, t, kind, ref, partner, nbytes, chan, seq, s[-1] if s else -1, w)
        st["j"] = j + 1

    def advance(loc, t):
        """Exclusive time of the innermost open region up to ``t``."""
        s = stacks[loc]
        if s:
            exclusive[loc * n_reg + s[-1]] += t - last_t[loc]
        elif first_t[loc] < 0:
            first_t[loc] = t
        last_t[loc] = t

    def logged(kind, loc, t, partner, ref, nbytes, chan, seq):
        lk(kind), ll(loc), lt(t), lp(partner), lr(ref), lb(nbytes), lc(chan), ls(seq)

    def on_enter(loc, t, _u, _a, region):
        counts[K.ENTER] += 1
        w = pos()
        advance(loc, t)
        s = stacks[loc]
        if not s:
            outermost[loc * n_reg + region] += 1
        s.append(region)
        entered[loc].append(t)
        if w >= 0:
            keep(w, loc, t, K.ENTER, region, -1, 0, -1, -1)

    def on_leave(loc, t, _u, _a, region):
        counts[K.LEAVE] += 1
        w = pos()
        advance(loc, t)
        s = stacks[loc]
        if s and s[-1] == region:
            s.pop()
            t0 = entered[loc].pop()
        elif region in s:  # close what was left open inside it
            k = len(s) - 1 - s[::-1].index(region)
            t0 = entered[loc][k]
            del s[k:], entered[loc][k:]
        else:
            t0 = -1
            stray[loc] += 1
        if t0 >= 0:
            i = loc * n_reg + region
            visits[i] += 1
            inclusive[i] += t - t0
            if t - t0 > longest[i]:
                longest[i] = t - t0
        if w >= 0:
            keep(w, loc, t, K.LEAVE, region, -1, 0, -1, -1)

    def message(kind, loc, t, peer, comm, tag, length):
        counts[kind] += 1
        w = pos()
        members = comm_members.get(comm, ())
        other = members[peer] if peer < len(members) else -1
        key = (comm, loc, other, tag) if kind == K.SEND else (comm, other, loc, tag)
        c, seq = channels.next(key, second=kind != K.SEND)
        if comm in logged_comm:
            logged(kind, loc, t, other, comm, length, c, seq)
        if w >= 0:
            keep(w, loc, t, kind, comm, other, length, c, seq)

    def on_send(loc, t, _u, _a, receiver, comm, tag, length, *_req):
        message(K.SEND, loc, t, receiver, comm, tag, length)

    def on_recv(loc, t, _u, _a, sender, comm, tag, length, *_req):
        message(K.RECV, loc, t, sender, comm, tag, length)

    def rma(kind, loc, t, win, remote, nbytes, matching):
        counts[kind] += 1
        w = pos()
        c, seq = rma_channels.next((loc, win, matching), second=kind == K.RMA_DONE)
        members = win_members.get(win, ())
        other = members[remote] if 0 <= remote < len(members) else -1
        logged(kind, loc, t, other, win, nbytes, c, seq)
        if w >= 0:
            keep(w, loc, t, kind, win, other, nbytes, c, seq)

    def on_get(loc, t, _u, _a, win, remote, nbytes, matching):
        rma(K.GET, loc, t, win, remote, nbytes, matching)

    def on_put(loc, t, _u, _a, win, remote, nbytes, matching):
        rma(K.PUT, loc, t, win, remote, nbytes, matching)

    def on_done(loc, t, _u, _a, win, matching):
        rma(K.RMA_DONE, loc, t, win, -1, 0, matching)

    def simple(kind):
        def on_event(loc, t, *_rest):
            counts[kind] += 1
            w = pos()
            if w >= 0:
                keep(w, loc, t, kind, -1, -1, 0, -1, -1)
        return on_event

    ours = {"Enter": on_enter, "Leave": on_leave, "MpiSend": on_send, "MpiIsend": on_send,
            "MpiRecv": on_recv, "MpiIrecv": on_recv, "RmaGet": on_get, "RmaPut": on_put,
            "RmaOpCompleteBlocking": on_done, "MpiCollectiveBegin": simple(K.COLL_BEGIN),
            "MpiCollectiveEnd": simple(K.COLL_END), "Metric": simple(K.METRIC)}
    other = simple(K.OTHER)
    # _otf2 keeps each C thunk alive by attaching it to the Python function it wraps, so one
    # function given to two setters loses its first thunk: every setter gets its own copy.
    alive = []
    cbs = _otf2.GlobalEvtReaderCallbacks_New()
    try:
        prefix = "GlobalEvtReaderCallbacks_Set"
        for name in dir(_otf2):
            if (name.startswith(prefix) and name.endswith("Callback")
                    and name != prefix + "UnknownCallback"):
                alive.append(_copy(ours.get(name[len(prefix):-len("Callback")], other)))
                getattr(_otf2, name)(cbs, alive[-1])
        handle = _open_global_reader(reader, locs, _otf2)
        _otf2.GlobalEvtReader_SetCallbacks(handle, cbs, None)
    finally:
        _otf2.GlobalEvtReaderCallbacks_Delete(cbs)
    try:
        batch = 65536
        with Deferred() as signals:  # never raised inside a callback, checked between batches
            while _otf2.GlobalEvtReader_ReadEvents(handle, batch) == batch:
                signals.check()
                if progress is not None:
                    progress(st["i"], total)
    except Exception as exc:
        raise FormatError(anchor, f"the otf2 reader failed after {st['i']} events: {exc}"
                          ) from None
    finally:
        _otf2.Reader_CloseGlobalEvtReader(reader.handle, handle)
        _otf2.Reader_CloseEvtFiles(reader.handle)
    if st["i"] != total:
        raise FormatError(anchor, "events read differ from the definitions' per-location "
                          f"counts (expected {total}, found {st['i']})")
    kept = kept[: st["j"]]
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
    for (comm, *_rest), c in channels.ids.items():
        if 0 <= comm < len(comms):
            sends[comm] += channels.counts[0][c]
    for cls in CommClass:
        by_class[cls.name] = int(sends[comm_class == cls].sum())
    shape = (n_locs, n_reg)
    exact = Exact(
        visits=np.array(visits, np.int64).reshape(shape),
        inclusive=np.array(inclusive, np.float64).reshape(shape),
        longest=np.array(longest, np.float64).reshape(shape),
        exclusive=np.array(exclusive, np.float64).reshape(shape),
        first=np.array(first_t, np.int64), last=np.array(last_t, np.int64),
        outermost=np.array(outermost, np.int64).reshape(shape),
        unclosed=np.array([len(x) for x in stacks], np.int64),
        stray_leaves=np.array(stray, np.int64),
        log=_log_table(log))
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
    )


def _log_table(columns: tuple[array, ...]) -> np.ndarray:
    out = np.zeros(len(columns[0]), LOG_ROW)
    for name, col in zip(LOG_ROW.names, columns, strict=True):
        out[name] = np.frombuffer(col, dtype=col.typecode) if len(col) else 0
    return out


def _copy(fn):
    """A distinct function object with the same code and closure."""
    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__,
                              fn.__closure__)


def _open_global_reader(reader, locs, _otf2):
    """The library's global event reader over every location, opened as ``otf2.reader``
    opens it (which would then build one Python object per event)."""
    h = reader.handle
    for loc in locs:
        _otf2.Reader_SelectLocation(h, loc._ref)
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
            dr = _otf2.Reader_GetDefReader(h, loc._ref)
            if dr:
                _otf2.Reader_ReadAllLocalDefinitions(h, dr)
                _otf2.Reader_CloseDefReader(h, dr)
        _otf2.Reader_GetEvtReader(h, loc._ref)
    if defs_open:
        _otf2.Reader_CloseDefFiles(h)
    return _otf2.Reader_GetGlobalEvtReader(h)
