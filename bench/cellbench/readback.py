"""An OTF2 archive read back with the ``otf2`` Python reader into arrays, as a benchmark needs
it: every event's location and time, point-to-point messages matched per (communicator,
sender, receiver, tag) in order (MPI's non-overtaking rule, which the archive's mailbox and
signal messages keep too), and RMA operations matched to their completion by (location,
window, matching id). It streams the events and keeps only those numbers; it checks nothing
(tests/otf2check.py reads every field and asserts the archive's semantics)."""

from __future__ import annotations

from array import array
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import otf2

SEND_CLASSES = frozenset({"MpiSend", "MpiIsend"})
RECV_CLASSES = frozenset({"MpiRecv", "MpiIrecv"})
RMA_CLASSES = frozenset({"RmaGet", "RmaPut"})


@dataclass
class ReadBack:
    """What ``read_archive`` keeps. Locations are indices into ``names`` (definition order);
    times are the archive's integer timestamps."""

    names: list[str]
    loc: np.ndarray  # int32, per event
    time: np.ndarray  # int64, per event
    comms: list[str]  # communicator names, indexed by ``msg_comm``
    msg_comm: np.ndarray  # per matched message
    msg_sender: np.ndarray  # location index of the sending event
    msg_receiver: np.ndarray
    msg_send: np.ndarray  # int64 times
    msg_recv: np.ndarray
    unmatched_sends: int
    unmatched_recvs: int
    rma_loc: np.ndarray  # per RMA operation: issuing location
    rma_issue: np.ndarray  # int64
    rma_complete: np.ndarray  # int64, -1 when no completion was found
    unmatched_completions: int
    clock: dict[str, int]


def read_archive(anchor: str | Path) -> ReadBack:
    """Stream every event of the archive at ``anchor`` (its ``.otf2`` file)."""
    loc_a, time_a = array("i"), array("q")
    sends: dict[tuple, list[int]] = defaultdict(list)
    recvs: dict[tuple, list[int]] = defaultdict(list)
    rma_loc, rma_issue = array("i"), array("q")
    pending: dict[tuple, list[int]] = defaultdict(list)
    done: dict[int, int] = {}
    unmatched_completions = 0
    with otf2.reader.open(str(anchor)) as reader:
        d = reader.definitions
        names = [loc.name for loc in d.locations]
        index = {n: i for i, n in enumerate(names)}
        comms = [c.name for c in d.comms]
        comm_index = {n: i for i, n in enumerate(comms)}
        members = {c.name: [index[m.name] for m in c.group.members] for c in d.comms}
        c = d.clock_properties
        clock = {"timer_resolution": int(c.timer_resolution),
                 "global_offset": int(c.global_offset), "trace_length": int(c.trace_length)}
        loc_of: dict[int, int] = {}
        for location, event in reader.events:
            li = loc_of.get(id(location))
            if li is None:
                li = loc_of[id(location)] = index[location.name]
            t = int(event.time)
            loc_a.append(li)
            time_a.append(t)
            kind = type(event).__name__
            if kind in SEND_CLASSES:
                comm = event.communicator.name
                sends[(comm_index[comm], li, members[comm][event.receiver],
                       int(event.msg_tag))].append(t)
            elif kind in RECV_CLASSES:
                comm = event.communicator.name
                recvs[(comm_index[comm], members[comm][event.sender], li,
                       int(event.msg_tag))].append(t)
            elif kind in RMA_CLASSES:
                pending[(li, event.win.name, int(event.matching_id))].append(len(rma_issue))
                rma_loc.append(li)
                rma_issue.append(t)
            elif kind == "RmaOpCompleteBlocking":
                queue = pending.get((li, event.win.name, int(event.matching_id)))
                if queue:
                    done[queue.pop(0)] = t
                else:
                    unmatched_completions += 1
    cols: list[list[int]] = [[], [], [], [], []]
    n_sends = n_recvs = 0
    for key in sorted(set(sends) | set(recvs)):
        s_list, r_list = sends.get(key, []), recvs.get(key, [])
        n = min(len(s_list), len(r_list))
        cols[0].extend([key[0]] * n)
        cols[1].extend([key[1]] * n)
        cols[2].extend([key[2]] * n)
        cols[3].extend(s_list[:n])
        cols[4].extend(r_list[:n])
        n_sends += len(s_list) - n
        n_recvs += len(r_list) - n
    complete = np.full(len(rma_issue), -1, np.int64)
    if done:
        complete[np.fromiter(done.keys(), np.int64)] = np.fromiter(done.values(), np.int64)
    return ReadBack(
        names=names, loc=np.array(loc_a, np.int32),
        time=np.array(time_a, np.int64), comms=comms,
        msg_comm=np.array(cols[0], np.int64), msg_sender=np.array(cols[1], np.int64),
        msg_receiver=np.array(cols[2], np.int64), msg_send=np.array(cols[3], np.int64),
        msg_recv=np.array(cols[4], np.int64), unmatched_sends=n_sends,
        unmatched_recvs=n_recvs, rma_loc=np.array(rma_loc, np.int32),
        rma_issue=np.array(rma_issue, np.int64), rma_complete=complete,
        unmatched_completions=unmatched_completions, clock=clock)
