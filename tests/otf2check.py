"""Check an OTF2 archive the way its users would: otf2-print, the otf2 Python reader, ViTE.

A helper for tests (``from otf2check import otf2_print_ok, read_events, vite_render``); tests
under ``tests/`` can import it because pytest puts ``tests/`` on ``sys.path`` (rootdir-relative
test modules without ``__init__.py``).

- ``otf2_print_ok``: ``otf2-print --silent -Werror`` exits 0 and ``otf2-print -G`` (definitions
  and events) shows no ``INVALID`` anywhere.
- ``read_events``: every event read back with the ``otf2`` reader, plus what a test needs to
  assert semantics: counts per (location, event class), per-location timestamps (checked to be
  non-decreasing), point-to-point messages matched per (communicator, sender, receiver, tag) in
  order (MPI's non-overtaking rule), RMA operations matched to their completion by matching id,
  and the definitions (locations, groups, system tree, regions, communicators, clock, location
  properties, creator).
- ``vite_render``: renders the archive to SVG with ViTE and counts the message arrows.
- ``check_archive``: an undamaged run's archive against its raw dumps (``expected_counts``: the
  events per location and kind that the dumps imply, counted independently of the converter's
  mapping code), every message and DMA paired, time non-decreasing, no receive before its send.

Beyond that last check it asserts nothing about synchronization quality; it reads back what
was written.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import _otf2
import numpy as np
import otf2

from cell_otf2.input import format as fmt
from cell_otf2.input.manifest import load_manifest
from cell_otf2.input.reader import read_dump

#: location type values of OTF2 (the reader calls ACCELERATOR_STREAM by its old name, GPU)
LOCATION_TYPE_NAMES = {0: "UNKNOWN", 1: "CPU_THREAD", 2: "ACCELERATOR_STREAM", 3: "METRIC"}

SEND_CLASSES = ("MpiSend", "MpiIsend")
RECV_CLASSES = ("MpiRecv", "MpiIrecv")


def otf2_print_ok(anchor: Path, timeout: float = 120) -> None:
    """otf2-print accepts the archive with -Werror and prints no INVALID reference."""
    strict = subprocess.run(
        ["otf2-print", "--silent", "-Werror", str(anchor)],
        capture_output=True, text=True, timeout=timeout,
    )
    if strict.returncode != 0:
        raise AssertionError(
            f"otf2-print --silent -Werror {anchor} exited {strict.returncode}:\n"
            f"{strict.stdout}\n{strict.stderr}"
        )
    full = subprocess.run(
        ["otf2-print", "-G", str(anchor)], capture_output=True, text=True, timeout=timeout
    )
    if full.returncode != 0:
        raise AssertionError(f"otf2-print -G {anchor} exited {full.returncode}:\n{full.stderr}")
    bad = [line for line in (full.stdout + full.stderr).splitlines() if "INVALID" in line]
    if bad:
        raise AssertionError(f"otf2-print -G {anchor} shows INVALID references:\n"
                             + "\n".join(bad[:40]))


@dataclass(frozen=True)
class ReadEvent:
    loc: str  # location name
    kind: str  # event class name of the otf2 reader ("Enter", "MpiSend", "RmaGet", ...)
    time: int
    fields: dict  # the event's fields, definitions replaced by their names
    attrs: dict  # attribute name -> value


@dataclass(frozen=True)
class Message:
    comm: str
    sender: str  # location names
    receiver: str
    tag: int
    length: int
    send_time: int
    recv_time: int
    send_kind: str
    recv_kind: str


@dataclass
class RmaOp:
    loc: str  # issuing location
    win: str
    kind: str  # "RmaGet" or "RmaPut"
    remote: str  # location name of the remote rank in the window's communicator
    bytes: int
    matching_id: int
    issue_time: int
    attrs: dict
    complete_time: int | None = None


@dataclass
class Definitions:
    creator: str = ""
    #: in ref order: (name, type name, group name, group ref, number of events)
    locations: list[tuple[str, str, str, int, int]] = field(default_factory=list)
    #: in ref order: (name, type name, system tree node name, creating group name or None)
    location_groups: list[tuple[str, str, str, str | None]] = field(default_factory=list)
    #: in ref order: (name, class name, parent name or None, domains)
    system_tree: list[tuple[str, str, str | None, tuple[str, ...]]] = field(default_factory=list)
    #: in ref order: (name, role name, paradigm name)
    regions: list[tuple[str, str, str]] = field(default_factory=list)
    #: name -> member location names in rank order
    comms: dict[str, list[str]] = field(default_factory=dict)
    #: name -> communicator name
    rma_windows: dict[str, str] = field(default_factory=dict)
    metrics: list[str] = field(default_factory=list)
    clock: dict[str, int] = field(default_factory=dict)
    #: location name -> {property name: value}
    location_properties: dict[str, dict[str, object]] = field(default_factory=dict)


@dataclass
class ReadBack:
    counts: Counter = field(default_factory=Counter)  # (location name, event class) -> n
    times: dict[str, list[int]] = field(default_factory=dict)  # location name -> timestamps
    events: list[ReadEvent] = field(default_factory=list)  # in the reader's global order
    messages: list[Message] = field(default_factory=list)
    unmatched_sends: list[ReadEvent] = field(default_factory=list)
    unmatched_recvs: list[ReadEvent] = field(default_factory=list)
    rma: list[RmaOp] = field(default_factory=list)
    unmatched_completions: list[ReadEvent] = field(default_factory=list)
    defs: Definitions = field(default_factory=Definitions)

    def kinds(self, loc: str) -> Counter:
        """Event class -> count on one location."""
        return Counter({k: n for (lname, k), n in self.counts.items() if lname == loc})

    def of_kind(self, kind: str) -> list[ReadEvent]:
        return [e for e in self.events if e.kind == kind]


def _name(value: object) -> object:
    """A definition by its name, anything else as it is."""
    if hasattr(value, "name") and hasattr(value, "_ref"):
        return value.name
    if hasattr(type(value), "_names"):  # an _otf2 enum: its name, "ALLREDUCE"
        return str(value).split(".")[-1]
    if isinstance(value, (list, tuple)):
        return type(value)(_name(v) for v in value)
    return value


def _read_definitions(reader: otf2.reader.Reader) -> Definitions:
    d = reader.definitions
    out = Definitions()
    out.creator = _otf2.Reader_GetCreator(reader.handle) or ""
    domains: dict[str, list[str]] = defaultdict(list)
    for dom in d.system_tree_node_domains:
        domains[dom.system_tree_node.name].append(str(dom.system_tree_node_domain).split(".")[-1])
    for node in d.system_tree_nodes:
        parent = node.parent.name if node.parent is not None else None
        out.system_tree.append((node.name, node.class_name, parent, tuple(domains[node.name])))
    for group in d.location_groups:
        creating = group.creating_location_group
        out.location_groups.append((
            group.name,
            str(group.location_group_type).split(".")[-1],
            group.system_tree_parent.name,
            creating.name if creating is not None else None,
        ))
    for loc in d.locations:
        out.locations.append((
            loc.name, LOCATION_TYPE_NAMES.get(loc.type.value, str(loc.type)),
            loc.group.name, loc.group._ref, loc.number_of_events,
        ))
    for region in d.regions:
        out.regions.append((
            region.name, str(region.region_role).split(".")[-1],
            str(region.paradigm).split(".")[-1],
        ))
    for comm in d.comms:
        out.comms[comm.name] = [m.name for m in comm.group.members]
    for win in d.rma_wins:
        out.rma_windows[win.name] = win.comm.name
    for metric in d.metric_members:
        out.metrics.append(metric.name)
    clock = d.clock_properties
    out.clock = {
        "timer_resolution": clock.timer_resolution,
        "global_offset": clock.global_offset,
        "trace_length": clock.trace_length,
        "realtime_timestamp": clock.realtime_timestamp,
    }
    for prop in d.location_properties:
        out.location_properties.setdefault(prop.location.name, {})[prop.name] = prop.value
    return out


def read_events(anchor: Path) -> ReadBack:
    """Read every event and definition back; assert per-location time order."""
    back = ReadBack()
    comm_members: dict[str, list[str]] = {}
    win_comm: dict[str, str] = {}
    sends: dict[tuple, list[ReadEvent]] = defaultdict(list)
    recvs: dict[tuple, list[ReadEvent]] = defaultdict(list)
    pending_rma: dict[tuple, list[RmaOp]] = defaultdict(list)
    with otf2.reader.open(str(anchor)) as reader:
        back.defs = _read_definitions(reader)
        comm_members = back.defs.comms
        win_comm = back.defs.rma_windows
        for location in reader.definitions.locations:
            back.times[location.name] = []
        for location, event in reader.events:
            kind = type(event).__name__
            loc = location.name
            fields = {
                k: _name(v) for k, v in vars(event).items() if k not in ("time", "attributes")
            }
            attrs = {a.name: v for a, v in (event.attributes or {}).items()}
            ev = ReadEvent(loc, kind, int(event.time), fields, attrs)
            back.events.append(ev)
            back.counts[(loc, kind)] += 1
            times = back.times[loc]
            if times and ev.time < times[-1]:
                raise AssertionError(f"{anchor}: time goes backwards on '{loc}': {ev.time} "
                                     f"after {times[-1]} ({kind})")
            times.append(ev.time)
            if kind in SEND_CLASSES:
                comm = fields["communicator"]
                receiver = comm_members[comm][fields["receiver"]]
                sends[(comm, loc, receiver, fields["msg_tag"])].append(ev)
            elif kind in RECV_CLASSES:
                comm = fields["communicator"]
                sender = comm_members[comm][fields["sender"]]
                recvs[(comm, sender, loc, fields["msg_tag"])].append(ev)
            elif kind in ("RmaGet", "RmaPut"):
                win = fields["win"]
                op = RmaOp(
                    loc=loc, win=win, kind=kind,
                    remote=comm_members[win_comm[win]][fields["remote"]],
                    bytes=fields["bytes"], matching_id=fields["matching_id"],
                    issue_time=ev.time, attrs=attrs,
                )
                back.rma.append(op)
                pending_rma[(loc, win, op.matching_id)].append(op)
            elif kind == "RmaOpCompleteBlocking":
                queue = pending_rma.get((loc, fields["win"], fields["matching_id"]))
                if queue:
                    queue.pop(0).complete_time = ev.time
                else:
                    back.unmatched_completions.append(ev)
    for key in sorted(set(sends) | set(recvs)):
        s_list, r_list = sends.get(key, []), recvs.get(key, [])
        for s_ev, r_ev in zip(s_list, r_list, strict=False):
            back.messages.append(Message(
                comm=key[0], sender=key[1], receiver=key[2], tag=key[3],
                length=s_ev.fields["msg_length"], send_time=s_ev.time, recv_time=r_ev.time,
                send_kind=s_ev.kind, recv_kind=r_ev.kind,
            ))
        back.unmatched_sends.extend(s_list[len(r_list):])
        back.unmatched_recvs.extend(r_list[len(s_list):])
    return back


_ARROW = re.compile(r"<polygon\b")


def vite_render(anchor: Path, svg_path: Path, timeout: float = 120) -> int | None:
    """Render with ViTE headlessly; the number of message arrows drawn, None without ViTE.

    ViTE's SVG export draws every message as a ``<line>`` from sender to receiver plus a
    ``<polygon>`` arrow head at the receiving end; states are ``<rect>``s and counter values
    are plain ``<line>``s without a head. So the arrow heads count the messages.
    Raises AssertionError when ViTE fails or writes no SVG.
    """
    vite = shutil.which("vite")
    if vite is None:
        return None
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    svg_path = Path(svg_path)
    if svg_path.exists():
        svg_path.unlink()
    run = subprocess.run(
        [vite, str(anchor), "-e", str(svg_path)],
        capture_output=True, text=True, timeout=timeout, env=env,
    )
    if run.returncode != 0 or not svg_path.exists():
        raise AssertionError(f"vite {anchor} -e {svg_path} exited {run.returncode}:\n"
                             f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    text = svg_path.read_text(errors="replace")
    if "</svg>" not in text:
        raise AssertionError(f"vite wrote an incomplete SVG: {svg_path}")
    return len(_ARROW.findall(text))


# ------------------------------------------------------------------------------------------
# an archive against the raw dumps it was converted from
# ------------------------------------------------------------------------------------------

P, S = fmt.PpeCode, fmt.SpeCode
SNDSIG = (0xA0, 0xA1, 0xA2)


def expected_counts(run_dir: Path) -> Counter:
    """(location name, OTF2 event class) -> count, from the raw dumps (docs/archive.md).

    Assumes an undamaged run in which every mailbox value, signal and DMA has its partner.
    """
    man = load_manifest(run_dir)
    want: Counter = Counter()
    # a manifest PPE region "spe_context_run" (the tracer's ENTER/LEAVE around the call) is
    # the run's one region: CTX_RUN_BEGIN/END then give none (docs/archive.md, Regions)
    run_region = not any(g.name == "spe_context_run" and g.core == "ppe" for g in man.regions)
    for p in man.processes:
        d = read_dump(man.dump_path(p.rank), man, p.rank)
        r = p.rank
        for code, thread, a, b in zip(d.ppe["code"].tolist(), d.ppe["thread"].tolist(),
                                      d.ppe["a"].tolist(), d.ppe["b"].tolist(), strict=True):
            loc = f"PPE thread {thread} (rank {r})"
            if code in (P.ENTER, P.IN_MBOX_WRITE_BEGIN, P.OUT_MBOX_READ_BEGIN,
                        P.OUT_INTR_MBOX_READ_BEGIN) or (code == P.CTX_RUN_BEGIN and run_region):
                want[loc, "Enter"] += 1
            if code in (P.LEAVE, P.IN_MBOX_WRITE_END, P.OUT_MBOX_READ_END,
                        P.OUT_INTR_MBOX_READ_END) or (code == P.CTX_RUN_END and run_region):
                want[loc, "Leave"] += 1
            if code in (P.CTX_CREATE, P.CTX_LOAD, P.CTX_DESTROY, P.SIGNAL_WRITE):
                want[loc, "Enter"] += 1
                want[loc, "Leave"] += 1
            if code in (P.IN_MBOX_WRITE_BEGIN, P.SIGNAL_WRITE, P.MPI_SEND):
                want[loc, "MpiSend"] += 1
            if code in (P.OUT_MBOX_READ_END, P.OUT_INTR_MBOX_READ_END, P.MPI_RECV):
                want[loc, "MpiRecv"] += 1
            simple = {P.MPI_ISEND: "MpiIsend", P.MPI_ISEND_COMPLETE: "MpiIsendComplete",
                      P.MPI_IRECV_REQUEST: "MpiIrecvRequest", P.MPI_IRECV: "MpiIrecv",
                      P.MPI_COLL_BEGIN: "MpiCollectiveBegin",
                      P.MPI_COLL_END: "MpiCollectiveEnd"}
            if code in simple:
                want[loc, simple[code]] += 1
            if code == P.COUNTER:  # a PPE thread's samples sit on its METRIC location
                want[f"{loc} counters", "Metric"] += 1
            if code == P.CTX_SWITCH:
                spe = f"SPE ctx {a} (rank {r})"
                want[spe, "Enter" if b == fmt.SwitchType.STOP else "Leave"] += 1
        for code, ctx, a in zip(d.spe["code"].tolist(), d.spe["ctx"].tolist(),
                                d.spe["a"].tolist(), strict=True):
            loc = f"SPE ctx {ctx} (rank {r})"
            if code in (S.ENTER, S.START, S.IN_MBOX_READ_BEGIN, S.OUT_MBOX_WRITE_BEGIN,
                        S.OUT_INTR_MBOX_WRITE_BEGIN, S.SIGNAL_READ_BEGIN, S.TAG_WAIT_BEGIN):
                want[loc, "Enter"] += 1
            if code in (S.LEAVE, S.EXIT, S.IN_MBOX_READ_END, S.OUT_MBOX_WRITE_END,
                        S.OUT_INTR_MBOX_WRITE_END, S.SIGNAL_READ_END, S.TAG_WAIT_END):
                want[loc, "Leave"] += 1
            if code == S.DECR_WRITE:
                want[loc, "Enter"] += 1
                want[loc, "Leave"] += 1
            if code in (S.OUT_MBOX_WRITE_BEGIN, S.OUT_INTR_MBOX_WRITE_BEGIN):
                want[loc, "MpiSend"] += 1
            if code in (S.IN_MBOX_READ_END, S.SIGNAL_READ_END):
                want[loc, "MpiRecv"] += 1
            if code == S.COUNTER:
                want[loc, "Metric"] += 1
            if code == S.DMA:
                if a in SNDSIG:
                    want[loc, "MpiSend"] += 1
                else:
                    want[loc, "RmaGet" if fmt.is_get(a) else "RmaPut"] += 1
                    want[loc, "RmaOpCompleteBlocking"] += 1
                    # the DMA window exists on each location that uses it (Score-P's way)
                    want[loc, "RmaWinCreate"] = want[loc, "RmaWinDestroy"] = 1
        main = f"PPE thread 0 (rank {r})"  # the program's begin and end around its events
        if any(n for (loc, _), n in want.items() if loc == main):
            want[main, "ProgramBegin"] = want[main, "ProgramEnd"] = 1
    return +want


def check_archive(anchor: Path, run_dir: Path) -> None:
    """An undamaged run's archive: otf2-print passes, exactly the events ``expected_counts``
    gives per location and kind, every message, DMA and completion paired, each location's
    time non-decreasing, and no receive before its send."""
    otf2_print_ok(anchor)
    rb = read_events(anchor)
    got = +Counter(rb.counts)
    want = expected_counts(run_dir)
    diff = {k: (want.get(k, 0), got.get(k, 0)) for k in set(want) | set(got)
            if want.get(k, 0) != got.get(k, 0)}
    assert not diff, f"(expected, found) per (location, kind): {sorted(diff.items())[:20]}"
    assert not rb.unmatched_sends and not rb.unmatched_recvs
    assert not rb.unmatched_completions
    assert all(op.complete_time is not None and op.complete_time >= op.issue_time
               for op in rb.rma)
    for loc, times in rb.times.items():
        assert np.all(np.diff(times) >= 0), loc
    kinds: dict[str, list[str]] = defaultdict(list)
    for ev in rb.events:
        kinds[ev.loc].append(ev.kind)
    for loc, seq in kinds.items():  # a program begins before and ends after its events
        if "ProgramBegin" in seq or "ProgramEnd" in seq:
            assert seq[0] == "ProgramBegin" and seq[-1] == "ProgramEnd", (loc, seq[:3], seq[-3:])
    for msg in rb.messages:  # after synchronization no receive is before its send
        assert msg.recv_time >= msg.send_time, msg
