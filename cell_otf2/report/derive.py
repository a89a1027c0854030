"""What the figures draw, computed from ``load.Loaded`` with numpy: innermost-region segments per
location (``segments``), message and RMA lines (``message_lines``, ``rma_lines``), the category
of each region (``region_category``) and the parsed ``cell2otf2::sync_intervals`` property. It
assumes region and communicator names as cell2otf2 writes them (anything else draws as plain
regions and lines) and imports no matplotlib."""

from __future__ import annotations

from enum import IntEnum

import numpy as np

from .load import PROP_SYNC_INTERVALS, CommClass, K, Loaded, LocClass

SEGMENT = np.dtype([("loc", "<i4"), ("t0", "<i8"), ("t1", "<i8"), ("region", "<i4"),
                    ("window", "<i2")])
LINE = np.dtype([("src", "<i4"), ("t0", "<i8"), ("dst", "<i4"), ("t1", "<i8"),
                 ("cls", "u1")])


class Cat(IntEnum):
    """Where an SPE spends its time."""

    COMPUTE = 0  # inside its program or a user region
    TAG_WAIT = 1  # mfc_read_tag_status
    MBOX_WAIT = 2  # reading or writing a mailbox, reading a signal
    OFF_SPU = 3  # context switched out
    NOT_RUNNING = 4  # no region open (before START, after EXIT)


#: the categories of an SPE's running time, in drawing order
SHOWN_CATS = (Cat.COMPUTE, Cat.TAG_WAIT, Cat.MBOX_WAIT, Cat.OFF_SPU)

CAT_LABELS = {Cat.COMPUTE: "computing", Cat.TAG_WAIT: "tag-group wait",
              Cat.MBOX_WAIT: "mailbox / signal wait", Cat.OFF_SPU: "off SPU (switched out)",
              Cat.NOT_RUNNING: "not running"}

TAG_WAIT_NAMES = {"mfc_read_tag_status"}
MBOX_WAIT_NAMES = {"spu_read_in_mbox", "spu_write_out_mbox", "spu_write_out_intr_mbox",
                   "spu_read_signal"}
OFF_SPU_NAMES = {"off SPU"}


class LineClass(IntEnum):
    DMA = 0
    MAILBOX = 1
    MPI = 2


def base_name(name: str) -> str:
    """A Cell region's name without the suffix emit adds when a manifest region has it."""
    return name.removesuffix(" (cell2otf2)")


def region_category(loaded: Loaded) -> np.ndarray:
    """Cat per region ref (COMPUTE for every region that is not a wait or a switch)."""
    out = np.full(len(loaded.region_names), Cat.COMPUTE, np.int8)
    for i, name in enumerate(loaded.region_names):
        b = base_name(name)
        if b in TAG_WAIT_NAMES:
            out[i] = Cat.TAG_WAIT
        elif b in MBOX_WAIT_NAMES:
            out[i] = Cat.MBOX_WAIT
        elif b in OFF_SPU_NAMES:
            out[i] = Cat.OFF_SPU
    return out


def segments(loaded: Loaded) -> np.ndarray:
    """SEGMENT rows: [t0, t1) of a location in one innermost region, within the windows.

    After each kept event the location is in its ``state`` until its next kept event of the
    same window (or the window's end); before its first kept event of a window it is in that
    window's ``state_before``; a location without events in a window stays in it throughout.
    Rows with no open region or no duration are left out.
    """
    e = loaded.events
    n_locs = loaded.n_locs
    w0 = loaded.window_bounds[:, 0]
    w1 = loaded.window_bounds[:, 1]
    parts = []
    if e.size:
        order = np.lexsort((np.arange(e.size), e["loc"], e["window"]))
        es = e[order]
        w = es["window"].astype(np.int64)
        loc = es["loc"].astype(np.int64)
        grp = w * n_locs + loc
        last_of_grp = np.ones(e.size, bool)
        last_of_grp[:-1] = grp[1:] != grp[:-1]
        nxt = np.empty(e.size, np.int64)
        nxt[:-1] = es["time"][1:]
        nxt[last_of_grp] = w1[w[last_of_grp]]
        after = np.zeros(e.size, SEGMENT)
        after["loc"], after["t0"], after["t1"] = loc, es["time"], nxt
        after["region"], after["window"] = es["state"], w
        first = np.ones(e.size, bool)
        first[1:] = grp[1:] != grp[:-1]
        before = np.zeros(int(first.sum()), SEGMENT)
        wf, lf = w[first], loc[first]
        before["loc"], before["t0"], before["t1"] = lf, w0[wf], es["time"][first]
        before["region"], before["window"] = loaded.state_before[wf, lf], wf
        parts += [before, after]
        present = np.zeros((len(w0), n_locs), bool)
        present[w, loc] = True
    else:
        present = np.zeros((len(w0), n_locs), bool)
    ew, el = np.nonzero(~present)
    empty = np.zeros(ew.size, SEGMENT)
    empty["loc"], empty["t0"], empty["t1"] = el, w0[ew], w1[ew]
    empty["region"], empty["window"] = loaded.state_before[ew, el], ew
    parts.append(empty)
    seg = np.concatenate(parts)
    seg = seg[(seg["region"] >= 0) & (seg["t1"] > seg["t0"])]
    return seg[np.lexsort((seg["t0"], seg["loc"]))]


def _pair(e: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices into ``e`` of the rows of ``a`` and ``b`` with the same (chan, seq)."""
    if a.size == 0 or b.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    m = int(max(e["seq"][a].max(), e["seq"][b].max())) + 1
    ka = e["chan"][a] * m + e["seq"][a]
    kb = e["chan"][b] * m + e["seq"][b]
    _, ia, ib = np.intersect1d(ka, kb, assume_unique=True, return_indices=True)
    return a[ia], b[ib]


def message_lines(loaded: Loaded) -> np.ndarray:
    """LINE rows for kept sends whose receive was kept too, by communicator class."""
    e = loaded.events
    s, r = _pair(e, np.flatnonzero(e["kind"] == K.SEND), np.flatnonzero(e["kind"] == K.RECV))
    out = np.zeros(s.size, LINE)
    out["src"], out["t0"] = e["loc"][s], e["time"][s]
    out["dst"], out["t1"] = e["loc"][r], e["time"][r]
    cls = loaded.comm_class[e["ref"][s]] if s.size else np.zeros(0, np.int8)
    out["cls"] = np.select([cls == CommClass.DMA, cls == CommClass.MAILBOX],
                           [LineClass.DMA, LineClass.MAILBOX], LineClass.MPI)
    return out


def rma_lines(loaded: Loaded) -> np.ndarray:
    """LINE rows for kept RMA issues whose completion was kept: data flows from the remote
    location at the issue to the issuer at the completion (get), or the other way (put)."""
    e = loaded.events
    issue = np.flatnonzero((e["kind"] == K.GET) | (e["kind"] == K.PUT))
    i, c = _pair(e, issue, np.flatnonzero(e["kind"] == K.RMA_DONE))
    get = e["kind"][i] == K.GET
    out = np.zeros(i.size, LINE)
    out["src"] = np.where(get, e["partner"][i], e["loc"][i])
    out["dst"] = np.where(get, e["loc"][i], e["partner"][i])
    out["t0"], out["t1"] = e["time"][i], e["time"][c]
    out["cls"] = LineClass.DMA
    return out[(out["src"] >= 0) & (out["dst"] >= 0)]


def spe_locations(loaded: Loaded) -> np.ndarray:
    return np.flatnonzero(loaded.loc_class == LocClass.SPE)


def category_time(loaded: Loaded, seg: np.ndarray) -> np.ndarray:
    """(n_locs, len(Cat)) ticks per location and category inside the windows; NOT_RUNNING is
    the window time in which the location had no region open."""
    cat = region_category(loaded)
    dur = (seg["t1"] - seg["t0"]).astype(np.float64)
    out = np.zeros((loaded.n_locs, len(Cat)))
    np.add.at(out, (seg["loc"], cat[seg["region"]]), dur)
    window_total = float((loaded.window_bounds[:, 1] - loaded.window_bounds[:, 0]).sum())
    out[:, Cat.NOT_RUNNING] = np.maximum(0.0, window_total - out.sum(axis=1))
    return out


def sync_intervals(loaded: Loaded) -> dict[int, np.ndarray]:
    """SPE location -> (n, 3) float array of (first, last time in ticks, NaN when the interval
    has no written record; width in ticks, inf when unbounded), from the
    ``cell2otf2::sync_intervals`` property (``FIRST:LAST:WIDTH;...``, see ``emit``)."""
    out = {}
    for loc, props in sorted(loaded.props.items()):
        text = props.get(PROP_SYNC_INTERVALS)
        if text is None:
            continue
        rows = []
        for entry in text.split(";") if text else []:
            parts = entry.split(":")
            if len(parts) != 3:
                continue
            try:
                t0, t1 = (float("nan") if p == "-" else float(p) for p in parts[:2])
                w = float("inf") if parts[2] == "unbounded" else float(parts[2])
            except ValueError:
                continue
            rows.append((t0, t1, w))
        out[loc] = np.array(rows, np.float64).reshape(-1, 3)
    return out
