"""MPI between simulated processes, once per phase after every process collected its barrier:
blocking and nonblocking rings on MPI_COMM_WORLD, a ring inside each node's communicator and
the collectives, each record inside its call's region, with intra- and inter-node latencies
(the phase's schedule: docs/simulator.md); sends carry the true arrival time in ``done``. It
does not touch SPEs or slots."""

from __future__ import annotations

import numpy as np

from ..input import format as fmt
from .driver import ProcessSim
from .workloads import R_MPI

P = fmt.PpeCode
EAGER_BYTES = 1024
RENDEZVOUS_BYTES = 1 << 20


class MpiWorld:
    """MPI state across processes (request counters, matched messages)."""

    def __init__(self, procs: list[ProcessSim], node_of_rank: list[int],
                 rng: np.random.Generator) -> None:
        self.procs = procs
        self.node_of = node_of_rank
        self.rng = rng
        self.us = procs[0].us
        self.next_req = [1] * len(procs)
        self.messages: list[tuple[int, int, int, int]] = []
        world = list(range(len(procs)))
        self.communicators = [{"id": 0, "name": "MPI_COMM_WORLD", "ranks": world}]
        for node in sorted(set(node_of_rank)):
            members = [r for r in world if node_of_rank[r] == node]
            if len(members) >= 2:
                self.communicators.append({"id": len(self.communicators),
                                           "name": f"NODE_COMM_{node}", "ranks": members})

    def latency(self, src: int, dst: int, nbytes: int) -> float:
        if self.node_of[src] == self.node_of[dst]:
            base = self.rng.uniform(1.0, 2.0) + nbytes / 2000.0
        else:
            base = self.rng.uniform(5.0, 10.0) + nbytes / 1000.0
        return base * self.us

    def u(self, lo: float, hi: float) -> float:
        return float(self.rng.uniform(lo, hi)) * self.us

    def _call(self, r: int, region: int, t: float) -> float:
        self.procs[r].ppe(0, t, P.ENTER, region)
        return t + self.u(0.2, 0.6)

    def _leave(self, r: int, region: int, t: float) -> float:
        t_leave = t + self.u(0.2, 0.6)
        self.procs[r].ppe(0, t_leave, P.LEAVE, region)
        return t_leave + self.u(0.3, 1.0)

    def phase(self, p: int) -> None:
        n = len(self.procs)
        if n < 2:
            return
        t = [pr.t_main for pr in self.procs]
        t = self._rootless(t, fmt.CollOp.BARRIER, "barrier", 0)
        t = self._ring(t, p)
        t = self._exchange(t, p)
        for comm in self.communicators[1:]:
            t = self._node_ring(t, comm)
        t = self._rootless(t, fmt.CollOp.ALLREDUCE, "allreduce", 8)
        if p % 3 == 0:
            t = self._rootless(t, fmt.CollOp.ALLTOALL, "alltoall", 1024)
        if p % 2 == 0:
            t = self._bcast(t)
        else:
            t = self._reduce(t)
        for r, pr in enumerate(self.procs):
            pr.t_main = t[r]

    def _ring(self, t: list[float], p: int) -> list[float]:
        n = len(self.procs)
        tag = 10
        sends: list[list[tuple[float, int]]] = [[] for _ in range(n)]  # per sender: (arrival, uid)
        for r in range(n):
            right = (r + 1) % n
            arrival_prev = -np.inf
            for _ in range(2):
                te = self._call(r, R_MPI["send"], t[r])
                arrival = max(te + self.latency(r, right, EAGER_BYTES), arrival_prev + 1.0)
                uid = self.procs[r].ppe(0, te, P.MPI_SEND, 0, (right << 32) | tag, EAGER_BYTES,
                                        done=arrival)
                arrival_prev = arrival
                sends[r].append((arrival, uid))
                t[r] = self._leave(r, R_MPI["send"], te + self.u(1.0, 3.0))
        for r in range(n):
            left = (r - 1) % n
            for arrival, send_uid in sends[left]:
                te = self._call(r, R_MPI["recv"], t[r])
                tr = max(te, arrival) + self.u(0.1, 0.5)
                uid = self.procs[r].ppe(0, tr, P.MPI_RECV, 0, (left << 32) | tag, EAGER_BYTES)
                self.messages.append((left, send_uid, r, uid))
                t[r] = self._leave(r, R_MPI["recv"], tr)
        return t

    def _exchange(self, t: list[float], p: int) -> list[float]:
        n = len(self.procs)
        tag = 20
        isend: dict[int, tuple[float, int]] = {}
        post: dict[int, tuple[float, int, int]] = {}
        # per rank: its send's call time, request, arrival at the right neighbour, record uid
        sent: dict[int, tuple[float, int, float, int]] = {}
        for r in range(n):
            right, left = (r + 1) % n, (r - 1) % n
            te = self._call(r, R_MPI["isend"], t[r])
            req = self.next_req[r]
            self.next_req[r] += 2
            isend[r] = (te, req)
            t[r] = self._leave(r, R_MPI["isend"], te)
            te2 = self._call(r, R_MPI["irecv"], t[r])
            post[r] = (te2, req + 1, left)
            self.procs[r].ppe(0, te2, P.MPI_IRECV_REQUEST, 0, 0, (req + 1) << 32)
            t[r] = self._leave(r, R_MPI["irecv"], te2)
            _ = right
        for r in range(n):
            right = (r + 1) % n
            te, req = isend[r]
            start = max(te, post[right][0])
            arrival = start + self.latency(r, right, RENDEZVOUS_BYTES)
            uid = self.procs[r].ppe(0, te, P.MPI_ISEND, 0, (right << 32) | tag,
                                    (req << 32) | RENDEZVOUS_BYTES, done=arrival)
            sent[r] = (te, req, arrival, uid)
        for r in range(n):
            left = (r - 1) % n
            te = self._call(r, R_MPI["waitall"], t[r])
            _, req, send_done, _ = sent[r]
            arrival_in, _, send_uid = sent[left][2], None, sent[left][3]
            events = sorted([
                (max(te, send_done) + self.u(0.1, 0.4), 0),
                (max(te, arrival_in) + self.u(0.1, 0.4), 1),
            ])
            last = te
            for t_ev, kind in events:
                t_ev = max(t_ev, last + 1.0)
                if kind == 0:
                    self.procs[r].ppe(0, t_ev, P.MPI_ISEND_COMPLETE, 0, 0, req << 32)
                else:
                    rreq = post[r][1]
                    uid = self.procs[r].ppe(0, t_ev, P.MPI_IRECV, 0, (left << 32) | tag,
                                            (rreq << 32) | RENDEZVOUS_BYTES)
                    self.messages.append((left, send_uid, r, uid))
                last = t_ev
            t[r] = self._leave(r, R_MPI["waitall"], last)
        return t

    def _node_ring(self, t: list[float], comm: dict) -> list[float]:
        """Eager ring inside one node communicator; peers are communicator ranks."""
        members, cid, tag, nbytes = comm["ranks"], comm["id"], 30, 256
        size = len(members)
        sent: dict[int, tuple[float, int]] = {}
        for i, r in enumerate(members):
            right = (i + 1) % size
            te = self._call(r, R_MPI["send"], t[r])
            arrival = te + self.latency(r, members[right], nbytes)
            uid = self.procs[r].ppe(0, te, P.MPI_SEND, cid, (right << 32) | tag, nbytes,
                                    done=arrival)
            sent[i] = (arrival, uid)
            t[r] = self._leave(r, R_MPI["send"], te + self.u(0.5, 1.5))
        for i, r in enumerate(members):
            left = (i - 1) % size
            arrival, send_uid = sent[left]
            te = self._call(r, R_MPI["recv"], t[r])
            tr = max(te, arrival) + self.u(0.1, 0.5)
            uid = self.procs[r].ppe(0, tr, P.MPI_RECV, cid, (left << 32) | tag, nbytes)
            self.messages.append((members[left], send_uid, r, uid))
            t[r] = self._leave(r, R_MPI["recv"], tr)
        return t

    def _rootless(self, t: list[float], op: int, name: str, nbytes: int) -> list[float]:
        """A collective where every END follows every BEGIN (barrier, allreduce, alltoall)."""
        n = len(self.procs)
        begins = []
        for r in range(n):
            te = self._call(r, R_MPI[name], t[r])
            self.procs[r].ppe(0, te, P.MPI_COLL_BEGIN)
            begins.append(te)
        steps = int(np.ceil(np.log2(n)))
        done = max(begins) + steps * self.latency(0, n - 1, nbytes)
        sent = nbytes * (n - 1) if op == fmt.CollOp.ALLTOALL else nbytes
        for r in range(n):
            te = max(done + self.u(0.1, 1.0), begins[r] + 1.0)
            self.procs[r].ppe(0, te, P.MPI_COLL_END, 0, (int(op) << 32) | fmt.ROOTLESS,
                              (sent << 32) | sent)
            t[r] = self._leave(r, R_MPI[name], te)
        return t

    def _reduce(self, t: list[float]) -> list[float]:
        """MPI_Reduce to rank 0: the root ends after every contribution arrived."""
        n = len(self.procs)
        begins = []
        for r in range(n):
            te = self._call(r, R_MPI["reduce"], t[r])
            self.procs[r].ppe(0, te, P.MPI_COLL_BEGIN)
            begins.append(te)
        arrivals = [begins[r] + self.latency(r, 0, 64) for r in range(1, n)]
        for r in range(n):
            if r == 0:
                te = max([begins[0], *arrivals]) + self.u(0.5, 2.0)
                sent, recv = 0, 64 * (n - 1)
            else:
                te = begins[r] + self.u(1.0, 3.0)
                sent, recv = 64, 0
            self.procs[r].ppe(0, te, P.MPI_COLL_END, 0, (int(fmt.CollOp.REDUCE) << 32) | 0,
                              (sent << 32) | recv)
            t[r] = self._leave(r, R_MPI["reduce"], te)
        return t

    def _bcast(self, t: list[float]) -> list[float]:
        n = len(self.procs)
        begins = []
        for r in range(n):
            te = self._call(r, R_MPI["bcast"], t[r])
            self.procs[r].ppe(0, te, P.MPI_COLL_BEGIN)
            begins.append(te)
        for r in range(n):
            if r == 0:
                te = begins[0] + self.u(1.0, 3.0)
                sent, recv = 4096 * (n - 1), 0
            else:
                te = max(begins[r], begins[0] + self.latency(0, r, 4096)) + self.u(0.1, 0.5)
                sent, recv = 0, 4096
            self.procs[r].ppe(0, te, P.MPI_COLL_END, 0, (int(fmt.CollOp.BCAST) << 32) | 0,
                              (sent << 32) | recv)
            t[r] = self._leave(r, R_MPI["bcast"], te)
        return t
