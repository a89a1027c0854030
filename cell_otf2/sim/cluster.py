"""The ``cluster`` workload: an iteration-synchronous hybrid MPI/Cell program over many nodes, the
shape of a halo code. Each iteration every SPE context reads its inbound mailbox, DMA-gets,
computes, DMA-puts and writes "done" into its outbound mailbox; then the PPE's main thread runs a
non-blocking ring halo on MPI_COMM_WORLD (receives recorded when MPI_Waitall completes them, in
completion order), every few iterations a blocking one-way ring shift on a communicator whose
ranks run in reverse order, an MPI_Allreduce on the world and an MPI_Bcast on a communicator of
one rank per node. ``--topology chain`` keeps every message between neighbouring nodes and drops
the collectives. Times come from one pass over the iterations with numpy over the ranks; the
records are assembled per rank in bulk at the end (no Python step per record). Process start and
end (contexts created, loaded, run and destroyed) stay with ``driver.ProcessSim``; it does not
place slots (``buffer.py``) and does not model SPU sharing (every context keeps its SPU).
The schedule and latencies are in docs/simulator.md."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..input import format as fmt
from .bodies import LoopSpec
from .driver import MAIN_EA_BASE, ProcessSim
from .records import PPE, REC_DTYPE, SPE
from .workloads import C_FLOPS, R_COMPUTE, R_MPI, R_SPE_MAIN

P, S = fmt.PpeCode, fmt.SpeCode
W_ALL = int(fmt.WaitMode.ALL)
#: tags: halo message travelling to the next rank, to the previous rank; the one-way shift
TAG_UP, TAG_DOWN, TAG_SHIFT = 21, 22, 30
ALLREDUCE_BYTES, BCAST_BYTES = 8, 64
EAGER_LIMIT = 65536  # larger halo messages use the rendezvous protocol
DONE = 0x1000_0000  # outbound "iteration done" value
INTR = 0xC0DE_0000  # the interrupt mailbox's value at exit (| context)
TOPOLOGIES = ("ring", "chain")
#: communicator ids of the manifest
WORLD, REVERSED, LEADERS = 0, 1, 2


@dataclass(frozen=True)
class ClusterOptions:
    iterations: int
    exchange_ticks: float  # mean SPE compute of one iteration (the exchange interval)
    chunks: int  # DMA-get / compute / DMA-put rounds per iteration and context
    topology: str = "ring"
    halo_bytes: int = 8192
    shift_bytes: int = 4096
    imbalance: float = 0.01  # per-rank speed within +-imbalance, plus as much jitter
    shift_every: int = 4
    allreduce_every: int = 8
    bcast_every: int = 16


def communicators(node_of: list[int], topology: str) -> list[dict]:
    """The manifest's communicators: the world, the world in reverse order (the shift's), and
    in a ring with two or more nodes one rank per node (the lowest) for the broadcast."""
    n = len(node_of)
    out = [{"id": WORLD, "name": "MPI_COMM_WORLD", "ranks": list(range(n))}]
    if n >= 2:
        out.append({"id": REVERSED, "name": "REVERSED_COMM", "ranks": list(range(n))[::-1]})
    if topology == "ring" and len(set(node_of)) >= 2:
        leaders = [node_of.index(v) for v in sorted(set(node_of))]
        out.append({"id": LEADERS, "name": "NODE_LEADERS_COMM", "ranks": leaders})
    return out


def latency_us(same_node: np.ndarray, nbytes: int, extra: np.ndarray) -> np.ndarray:
    """One message's latency in microseconds: on a node 2 us + bytes / 4 GB/s, between nodes
    4 us + bytes / 1.5 GB/s (the least times, the same both ways), plus ``extra`` in [0, 1)
    scaled to 1 us on a node and 4 us between nodes."""
    return np.where(same_node, 2.0 + nbytes / 4000.0 + 1.0 * extra,
                    4.0 + nbytes / 1500.0 + 4.0 * extra)


class _Pool:
    """Uniform draws for one iteration, one value per rank each, taken from blocks drawn at
    once (a draw per call would dominate the run's time)."""

    def __init__(self, rng: np.random.Generator, ranks: int, us: float) -> None:
        self.rng, self.ranks, self.us = rng, ranks, us
        self.block = np.zeros((0, ranks))
        self.i = 0

    def raw(self) -> np.ndarray:
        if self.i >= len(self.block):
            self.block = self.rng.random((4096, self.ranks))
            self.i = 0
        self.i += 1
        return self.block[self.i - 1]

    def u(self, lo_us: float, hi_us: float) -> np.ndarray:
        """Per rank, a uniform delay in ticks between ``lo_us`` and ``hi_us`` microseconds."""
        return (lo_us + (hi_us - lo_us) * self.raw()) * self.us


class _Times:
    """Record times by kind: ``[iterations, ranks]`` (PPE main thread) or ``[iterations,
    ranks, contexts]`` (SPE) arrays, NaN where the iteration has no such record."""

    def __init__(self, k: int, r: int, c: int) -> None:
        self.shape_ppe, self.shape_spe = (k, r), (k, r, c)
        self.t: dict[str, np.ndarray] = {}
        self.done: dict[str, np.ndarray] = {}

    def ppe(self, name: str) -> np.ndarray:
        if name not in self.t:
            self.t[name] = np.full(self.shape_ppe, np.nan)
        return self.t[name]

    def spe(self, name: str) -> np.ndarray:
        if name not in self.t:
            self.t[name] = np.full(self.shape_spe, np.nan)
        return self.t[name]

    def arrival(self, name: str) -> np.ndarray:
        """True arrival (``done``) of each send of kind ``name``."""
        if name not in self.done:
            self.done[name] = np.full(self.shape_ppe, np.nan)
        return self.done[name]


@dataclass
class _Body:
    """One rank's SPE work of every iteration, relative to the END of the iteration's inbound
    mailbox read: arrays ``[iterations, contexts, chunks]`` per record, and per
    ``[iterations, contexts]`` the counter's time and the BEGIN of the "done" write."""

    rel: dict[str, np.ndarray]
    dma_done: dict[str, np.ndarray]
    counter: np.ndarray
    done_begin: np.ndarray


def _bodies(rng: np.random.Generator, k: int, c: int, o: ClusterOptions, loop: LoopSpec,
            speed: float, us: float) -> _Body:
    """Every iteration's DMA / compute rounds of one rank's contexts, built at once."""
    m = o.chunks
    shape = (k, c, m)

    def u(lo: float, hi: float) -> np.ndarray:
        return rng.uniform(lo, hi, size=shape) * us

    get = u(0.3, 1.0)
    get_done = get + np.maximum(rng.uniform(*loop.get_lat_us, size=shape) * us, 1.0)
    wb1 = get + u(0.1, 0.4)
    we1 = np.maximum(wb1, get_done) + u(0.05, 0.2)
    enter = we1 + u(0.1, 0.5)
    jitter = 1.0 + o.imbalance * rng.uniform(-1.0, 1.0, size=shape)
    comp = np.maximum(o.exchange_ticks / m * speed * jitter, 5.0 * us)
    leave = enter + comp
    put = leave + u(0.1, 0.5)
    put_done = put + np.maximum(rng.uniform(*loop.put_lat_us, size=shape) * us, 1.0)
    wb2 = put + u(0.1, 0.4)
    we2 = np.maximum(wb2, put_done) + u(0.05, 0.2)
    start = np.cumsum(we2, axis=2) - we2  # each round starts where the previous one ended
    rel = {name: a + start for name, a in (("get", get), ("wb1", wb1), ("we1", we1),
                                           ("enter", enter), ("leave", leave), ("put", put),
                                           ("wb2", wb2), ("we2", we2))}
    dma_done = {"get": get_done + start, "put": put_done + start}
    counter = rel["leave"][:, :, -1] - 0.3 * us
    done_begin = rel["we2"][:, :, -1] + rng.uniform(0.2, 1.0, size=(k, c)) * us
    return _Body(rel, dma_done, counter, done_begin)


class ClusterWorld:
    """The cluster program across every process: ``run()`` adds every iteration's records to
    the processes' sinks and leaves each process ready for ``ProcessSim.finish``;
    ``messages`` holds the matched MPI messages as (send rank, send uid, receive rank, receive
    uid) and ``communicators`` the manifest's, as ``mpi.MpiWorld`` does."""

    def __init__(self, procs: list[ProcessSim], node_of: list[int], rng: np.random.Generator,
                 opts: ClusterOptions, loop: LoopSpec) -> None:
        self.procs = procs
        self.node_of = np.asarray(node_of, dtype=np.int64)
        self.rng = rng
        self.o = opts
        self.loop = loop
        self.us = procs[0].us
        self.n = len(procs)
        self.ctxs = len(procs[0].ctxs)
        self.communicators = communicators(list(node_of), opts.topology)
        self.messages: list[tuple[int, int, int, int]] = []
        r = np.arange(self.n)
        ring = opts.topology == "ring"
        self.up = (r + 1) % self.n  # the next rank (halo "up", shift destination)
        self.down = (r - 1) % self.n
        multi = self.n >= 2
        self.has_up = np.full(self.n, multi) if ring else r < self.n - 1
        self.has_down = np.full(self.n, multi) if ring else r > 0
        self.collectives = ring and multi
        self.leaders = np.array(self.communicators[LEADERS]["ranks"]) \
            if len(self.communicators) > LEADERS else np.zeros(0, np.int64)

    # ---------------------------------------------------------------------------------------
    def _same(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        return self.node_of[src] == self.node_of[dst]

    def run(self) -> None:
        """Every iteration of every rank, then the records into the processes' sinks."""
        o, us, n, nc = self.o, self.us, self.n, self.ctxs
        k_n = o.iterations
        pool = _Pool(self.rng, n, us)
        self.times = _Times(k_n, n, nc)
        speeds = 1.0 + o.imbalance * self.rng.uniform(-1.0, 1.0, size=n)
        self.bodies = [_bodies(np.random.default_rng(self.rng.integers(1 << 62)), k_n, nc, o,
                               self.loop, float(speeds[r]), us) for r in range(n)]
        body_begin = np.stack([b.done_begin for b in self.bodies], axis=1)  # [K, R, C]
        t = np.array([pr.t_main for pr in self.procs])
        rb = np.array([[pr.t_spe[c] for c in range(nc)] for pr in self.procs])  # READ_BEGIN
        out_exit = np.full((n, nc), -np.inf)
        if self.collectives:
            t = self._rootless(t, pool, "barrier_first", fmt.CollOp.BARRIER, 0, k=0)
        for k in range(k_n):
            t, rb, out_exit = self._mailboxes(k, t, rb, out_exit, body_begin[k], pool)
            if n >= 2:
                t = self._halo(k, t, pool)
                i = k + 1
                if i % o.shift_every == 0:
                    t = self._shift(k, t, pool)
                if self.collectives and i % o.allreduce_every == 0:
                    t = self._rootless(t, pool, "allreduce", fmt.CollOp.ALLREDUCE,
                                       ALLREDUCE_BYTES, k=k)
                if self.collectives and len(self.leaders) >= 2 and i % o.bcast_every == 0:
                    t = self._bcast(k, t, pool)
        if self.collectives:
            t = self._rootless(t, pool, "barrier_last", fmt.CollOp.BARRIER, 0, k=k_n - 1)
        t = self._exit(t, pool)
        for r, pr in enumerate(self.procs):
            pr.t_main = float(t[r])
        self._assemble()
        del self.times, self.bodies  # the sinks hold the records now

    # ---------------------------------------------------------------------------------------
    def _mailboxes(self, k: int, t: np.ndarray, rb: np.ndarray, out_exit: np.ndarray,
                   body_begin: np.ndarray, pool: _Pool
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The PPE releases every context (one inbound value each), the contexts work, and the
        PPE collects their "done" values (outbound, depth 1; it blocks until each is there)."""
        tm = self.times
        out_enter = np.empty_like(rb)
        new_rb = np.empty_like(rb)
        for c in range(self.ctxs):
            wb = t
            enter = wb + pool.u(0.05, 0.2)
            we = enter + pool.u(0.05, 0.2)
            tm.ppe(f"in_wb{c}")[k] = wb
            tm.ppe(f"in_we{c}")[k] = we
            t = we + pool.u(0.3, 1.0)
            # the SPE has been blocked in its read since rb
            exit_ = np.maximum(rb[:, c], enter) + pool.u(0.05, 0.2)
            re = exit_ + pool.u(0.05, 0.2)
            tm.spe("in_rb")[k, :, c] = rb[:, c]
            tm.spe("in_re")[k, :, c] = re
            ob = re + body_begin[:, c]
            o_enter = np.maximum(ob + pool.u(0.05, 0.2), out_exit[:, c] + pool.u(0.05, 0.2))
            oe = o_enter + pool.u(0.05, 0.2)
            tm.spe("out_wb")[k, :, c] = ob
            tm.spe("out_we")[k, :, c] = oe
            out_enter[:, c] = o_enter
            new_rb[:, c] = oe + pool.u(0.2, 1.0)
        t = t + pool.u(0.3, 1.0)
        for c in range(self.ctxs):
            pb = t
            exit_ = np.maximum(pb, out_enter[:, c]) + pool.u(0.05, 0.2)
            pe = exit_ + pool.u(0.05, 0.2)
            tm.ppe(f"out_rb{c}")[k] = pb
            tm.ppe(f"out_re{c}")[k] = pe
            out_exit[:, c] = exit_
            t = pe + pool.u(0.3, 1.0)
        return t, new_rb, out_exit

    def _call(self, k: int, name: str, t: np.ndarray, on: np.ndarray, pool: _Pool,
              record: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """An MPI call on the ranks ``on``: ENTER at ``t``, its record a little later (or at
        ``record``), LEAVE after it. Returns (record time, next free time)."""
        tm = self.times
        rec = t + pool.u(0.2, 0.6) if record is None else np.maximum(t + pool.u(0.2, 0.6),
                                                                     record)
        leave = rec + pool.u(0.2, 0.6)
        for part, v in (("enter", t), ("rec", rec), ("leave", leave)):
            tm.ppe(f"{name}_{part}")[k] = np.where(on, v, np.nan)
        return rec, np.where(on, leave + pool.u(0.3, 1.0), t)

    def _halo(self, k: int, t: np.ndarray, pool: _Pool) -> np.ndarray:
        """MPI_Irecv from both neighbours, MPI_Isend to both, MPI_Waitall: each completion is
        recorded when the wait finds it, in completion order."""
        o, tm, us = self.o, self.times, self.us
        up, down, has_up, has_down = self.up, self.down, self.has_up, self.has_down
        post_down, t = self._call(k, "irecv_down", t, has_down, pool)  # from the previous rank
        post_up, t = self._call(k, "irecv_up", t, has_up, pool)
        send_up, t = self._call(k, "isend_up", t, has_up, pool)
        send_down, t = self._call(k, "isend_down", t, has_down, pool)
        lat_up = latency_us(self._same(np.arange(self.n), up), o.halo_bytes,
                            pool.raw()) * us
        lat_down = latency_us(self._same(np.arange(self.n), down), o.halo_bytes,
                              pool.raw()) * us
        if o.halo_bytes > EAGER_LIMIT:  # rendezvous: the data leaves once the receive is posted
            arr_up = np.maximum(send_up, post_down[up]) + lat_up
            arr_down = np.maximum(send_down, post_up[down]) + lat_down
            done_up, done_down = arr_up + pool.u(0.2, 0.5), arr_down + pool.u(0.2, 0.5)
        else:  # eager: a send is complete once copied out
            arr_up, arr_down = send_up + lat_up, send_down + lat_down
            copy = (0.5 + o.halo_bytes / 4000.0) * us
            done_up, done_down = send_up + copy, send_down + copy
        tm.arrival("isend_up_rec")[k] = np.where(has_up, arr_up, np.nan)
        tm.arrival("isend_down_rec")[k] = np.where(has_down, arr_down, np.nan)
        tw = t
        tm.ppe("waitall_enter")[k] = tw
        ready = np.stack([arr_up[down], arr_down[up], done_up, done_down], axis=1)
        present = np.stack([has_down, has_up, has_up, has_down], axis=1)
        # completion: when the wait finds a request done; those done before it began come
        # out in request order (the stable sort keeps the columns' order on ties)
        when = np.where(present, np.maximum(tw[:, None], ready), np.inf)
        order = np.argsort(when, axis=1, kind="stable")
        seq = np.take_along_axis(when, order, axis=1)
        seq[:, 0] += pool.u(0.2, 0.6)
        for j in range(1, 4):
            seq[:, j] = np.maximum(seq[:, j] + pool.u(0.2, 0.6),
                                   seq[:, j - 1] + pool.u(0.1, 0.3))
        done = np.empty_like(seq)
        np.put_along_axis(done, order, seq, axis=1)
        done = np.where(present, done, np.nan)
        for j, name in enumerate(("irecv_from_down", "irecv_from_up", "isend_up_complete",
                                  "isend_down_complete")):
            tm.ppe(name)[k] = done[:, j]
        leave = np.nanmax(done, axis=1) + pool.u(0.2, 0.6)
        tm.ppe("waitall_leave")[k] = leave
        return leave + pool.u(0.3, 1.0)

    def _shift(self, k: int, t: np.ndarray, pool: _Pool) -> np.ndarray:
        """Blocking one-way shift: MPI_Send to the next rank (eager, returns after a local
        copy), then MPI_Recv from the previous one, recorded once the message is complete."""
        o, tm, us = self.o, self.times, self.us
        send = self.has_up
        copy = (0.5 + o.shift_bytes / 4000.0) * us + pool.u(0.0, 1.0)
        e = t
        rec = e + pool.u(0.2, 0.6)
        leave = rec + copy
        tm.ppe("send_enter")[k] = np.where(send, e, np.nan)
        tm.ppe("send_rec")[k] = np.where(send, rec, np.nan)
        tm.ppe("send_leave")[k] = np.where(send, leave, np.nan)
        t = np.where(send, leave + pool.u(0.3, 1.0), t)
        arr = rec + latency_us(self._same(np.arange(self.n), self.up), o.shift_bytes,
                               pool.raw()) * us
        tm.arrival("send_rec")[k] = np.where(send, arr, np.nan)
        _, t = self._call(k, "recv", t, self.has_down, pool,
                          record=arr[self.down] + pool.u(0.1, 0.5))
        return t

    def _rootless(self, t: np.ndarray, pool: _Pool, name: str, op: int, nbytes: int,
                  k: int) -> np.ndarray:
        """A collective on the world in which every END follows every BEGIN."""
        tm, us = self.times, self.us
        begin = t + pool.u(0.2, 0.6)
        steps = int(np.ceil(np.log2(self.n)))
        cross = len(set(self.node_of.tolist())) > 1
        lat = float(latency_us(np.array(not cross), nbytes, pool.raw()[:1])[0]) * us
        done = begin.max() + steps * lat
        end = np.maximum(done + pool.u(0.1, 1.0), begin + pool.u(0.1, 0.5))
        leave = end + pool.u(0.2, 0.6)
        for part, v in (("enter", t), ("begin", begin), ("end", end), ("leave", leave)):
            tm.ppe(f"{name}_{part}")[k] = v
        return leave + pool.u(0.3, 1.0)

    def _bcast(self, k: int, t: np.ndarray, pool: _Pool) -> np.ndarray:
        """MPI_Bcast from world rank 0 on the communicator of one rank per node."""
        tm, us = self.times, self.us
        m = self.leaders
        on = np.zeros(self.n, bool)
        on[m] = True
        begin = t + pool.u(0.2, 0.6)
        lat = latency_us(self._same(np.zeros(self.n, np.int64), np.arange(self.n)),
                         BCAST_BYTES, pool.raw()) * us
        end = np.maximum(begin + pool.u(0.1, 0.5), begin[0] + lat + pool.u(0.1, 0.5))
        end[0] = begin[0] + pool.u(1.0, 3.0)[0]
        leave = end + pool.u(0.2, 0.6)
        for part, v in (("enter", t), ("begin", begin), ("end", end), ("leave", leave)):
            tm.ppe(f"bcast_{part}")[k] = np.where(on, v, np.nan)
        return np.where(on, leave + pool.u(0.3, 1.0), t)

    def _exit(self, t: np.ndarray, pool: _Pool) -> np.ndarray:
        """After its last "done" every context writes its interrupt mailbox, leaves
        ``spu_main`` and exits (its SPU is free a little later); the PPE, after the last
        iteration, reads every interrupt mailbox. Returns the PPE's next free time."""
        last = self.o.iterations - 1
        oe = self.times.t["out_we"][last]  # [R, C]
        per_ctx = lambda lo, hi: np.stack([pool.u(lo, hi)  # noqa: E731
                                           for _ in range(self.ctxs)], axis=1)
        self.intr_wb = oe + per_ctx(0.2, 1.0)
        enter = self.intr_wb + per_ctx(0.05, 0.2)
        self.intr_we = enter + per_ctx(0.05, 0.2)
        self.spe_leave = self.intr_we + per_ctx(0.2, 1.0)
        self.spe_exit = self.spe_leave + per_ctx(0.2, 1.0)
        for r, pr in enumerate(self.procs):
            for c in range(self.ctxs):
                pr.exit_t[c] = float(self.spe_exit[r, c])
                pr.sched.release(c, float(self.spe_exit[r, c]) + 3.0 * self.us)
                pr.t_spe[c] = float(self.spe_exit[r, c])
        tm = self.times
        for c in range(self.ctxs):
            tm.ppe(f"intr_rb{c}")[last] = t
            exit_ = np.maximum(t, enter[:, c]) + pool.u(0.1, 0.4)
            tm.ppe(f"intr_re{c}")[last] = exit_ + pool.u(0.05, 0.2)
            t = tm.t[f"intr_re{c}"][last] + pool.u(0.3, 1.0)
        return t

    # ---------------------------------------------------------------------------------------
    def _ppe_fields(self) -> dict[str, tuple[int, Callable]]:
        """Per PPE kind: (code, fields(k, r) -> (a, b, c)), each an int or a uint64 array
        over the records (iteration ``k``, rank ``r``)."""
        o, n = self.o, self.n
        u64, sh = np.uint64, np.uint64(32)

        def mpi(comm: int, peer: Callable, tag: int, req: int | None, nbytes: int) -> Callable:
            def fields(k: np.ndarray, r: np.ndarray) -> tuple:
                b = (peer(r).astype(u64) << sh) | u64(tag)
                c = np.full(len(k), nbytes, u64)
                if req is not None:
                    c |= self._req(k, req) << sh
                return comm, b, c
            return fields

        def request(req: int) -> Callable:
            return lambda k, r: (0, 0, self._req(k, req) << sh)

        def coll(comm: int, op: int, root: int, sent: Callable, recv: Callable) -> Callable:
            def fields(k: np.ndarray, r: np.ndarray) -> tuple:
                return (comm, (int(op) << 32) | root,
                        (sent(r).astype(u64) << sh) | recv(r).astype(u64))
            return fields

        def fixed(a: int, b: int = 0) -> Callable:
            return lambda k, r: (a, b, 0)

        def rev(w: np.ndarray) -> np.ndarray:  # a world rank's rank in the reversed comm
            return n - 1 - w

        def const(v: int) -> Callable:
            return lambda r: np.full(len(r), v, np.int64)

        up, down, nlead = self.up, self.down, len(self.leaders)
        out: dict[str, tuple[int, Callable]] = {
            "irecv_down_rec": (P.MPI_IRECV_REQUEST, request(1)),
            "irecv_up_rec": (P.MPI_IRECV_REQUEST, request(2)),
            "isend_up_rec": (P.MPI_ISEND, mpi(WORLD, lambda r: up[r], TAG_UP, 3, o.halo_bytes)),
            "isend_down_rec": (P.MPI_ISEND, mpi(WORLD, lambda r: down[r], TAG_DOWN, 4,
                                                o.halo_bytes)),
            "irecv_from_down": (P.MPI_IRECV, mpi(WORLD, lambda r: down[r], TAG_UP, 1,
                                                 o.halo_bytes)),
            "irecv_from_up": (P.MPI_IRECV, mpi(WORLD, lambda r: up[r], TAG_DOWN, 2,
                                               o.halo_bytes)),
            "isend_up_complete": (P.MPI_ISEND_COMPLETE, request(3)),
            "isend_down_complete": (P.MPI_ISEND_COMPLETE, request(4)),
            "send_rec": (P.MPI_SEND, mpi(REVERSED, lambda r: rev(up[r]), TAG_SHIFT, None,
                                         o.shift_bytes)),
            "recv_rec": (P.MPI_RECV, mpi(REVERSED, lambda r: rev(down[r]), TAG_SHIFT, None,
                                         o.shift_bytes)),
            "allreduce_begin": (P.MPI_COLL_BEGIN, fixed(0)),
            "allreduce_end": (P.MPI_COLL_END, coll(WORLD, fmt.CollOp.ALLREDUCE, fmt.ROOTLESS,
                                                   const(ALLREDUCE_BYTES),
                                                   const(ALLREDUCE_BYTES))),
            "bcast_begin": (P.MPI_COLL_BEGIN, fixed(0)),
            "bcast_end": (P.MPI_COLL_END, coll(
                LEADERS, fmt.CollOp.BCAST, 0,
                lambda r: np.where(r == 0, BCAST_BYTES * (nlead - 1), 0),
                lambda r: np.where(r == 0, 0, BCAST_BYTES))),
        }
        for b in ("barrier_first", "barrier_last"):
            out[f"{b}_begin"] = (P.MPI_COLL_BEGIN, fixed(0))
            out[f"{b}_end"] = (P.MPI_COLL_END, coll(WORLD, fmt.CollOp.BARRIER, fmt.ROOTLESS,
                                                    const(0), const(0)))
        calls = {"irecv_down": "irecv", "irecv_up": "irecv", "isend_up": "isend",
                 "isend_down": "isend", "send": "send", "recv": "recv", "waitall": "waitall",
                 "allreduce": "allreduce", "bcast": "bcast", "barrier_first": "barrier",
                 "barrier_last": "barrier"}
        for name, call in calls.items():
            out[f"{name}_enter"] = (P.ENTER, fixed(R_MPI[call]))
            out[f"{name}_leave"] = (P.LEAVE, fixed(R_MPI[call]))
        for c in range(self.ctxs):
            out[f"in_wb{c}"] = (P.IN_MBOX_WRITE_BEGIN, fixed(c))
            out[f"in_we{c}"] = (P.IN_MBOX_WRITE_END,
                                lambda k, r, c=c: (c, self._in_value(k), 0))
            out[f"out_rb{c}"] = (P.OUT_MBOX_READ_BEGIN, fixed(c))
            out[f"out_re{c}"] = (P.OUT_MBOX_READ_END,
                                 lambda k, r, c=c: (c, self._done_value(k), 0))
            out[f"intr_rb{c}"] = (P.OUT_INTR_MBOX_READ_BEGIN, fixed(c))
            out[f"intr_re{c}"] = (P.OUT_INTR_MBOX_READ_END, fixed(c, INTR | c))
        return out

    @staticmethod
    def _req(k: np.ndarray, j: int) -> np.ndarray:
        """Request ids: four per iteration, unique among a process's pending requests."""
        return ((k.astype(np.uint64) * np.uint64(4) + np.uint64(j)) & np.uint64(0xFFFFFFFF))

    @staticmethod
    def _in_value(k: np.ndarray) -> np.ndarray:
        """The inbound mailbox value of iteration ``k``."""
        return k.astype(np.uint64) & np.uint64(0xFFFF_FFFF)

    @staticmethod
    def _done_value(k: np.ndarray) -> np.ndarray:
        """The outbound "done" value of iteration ``k``."""
        return np.uint64(DONE) | (k.astype(np.uint64) & np.uint64(0x0FFF_FFFF))

    def _assemble(self) -> None:
        """Every rank's records into its sink (sorted by time: program order per thread), and
        the MPI messages with the uids they got."""
        fields = self._ppe_fields()
        tm = self.times
        uid_of: dict[str, np.ndarray] = {}
        msg_kinds = ("isend_up_rec", "isend_down_rec", "irecv_from_down", "irecv_from_up",
                     "send_rec", "recv_rec")
        for r, pr in enumerate(self.procs):
            parts, keys = [], []
            for name, t_all in tm.t.items():
                if t_all.ndim != 2:
                    continue
                t = t_all[:, r]
                k = np.flatnonzero(np.isfinite(t))
                if not len(k):
                    continue
                code, f = fields[name]
                rows = np.zeros(len(k), REC_DTYPE)
                rows["t"] = t[k]
                rows["core"], rows["actor"], rows["code"] = PPE, 0, code
                a, b, c = f(k, np.full(len(k), r, np.int64))
                rows["a"], rows["b"], rows["c"] = a, b, c
                rows["done"] = tm.done[name][k, r] if name in tm.done else np.nan
                parts.append(rows)
                keys.append((name, k))
            parts.append(self._spe_rows(r))
            keys.append(("", np.zeros(0, np.int64)))
            rows = np.concatenate(parts)
            order = np.argsort(rows["t"], kind="stable")
            uids = np.empty(len(rows), np.int64)
            uids[order] = pr.sink.add_array(rows[order])
            at = 0
            for (name, k), part in zip(keys, parts, strict=True):
                if name in msg_kinds:
                    u = uid_of.setdefault(name, np.full(tm.shape_ppe, -1, np.int64))
                    u[k, r] = uids[at : at + len(k)]
                at += len(part)
        pairs = (("isend_up_rec", self.up, "irecv_from_down"),
                 ("isend_down_rec", self.down, "irecv_from_up"),
                 ("send_rec", self.up, "recv_rec"))
        for send, dest, recv in pairs:
            if send not in uid_of:
                continue
            su, ru = uid_of[send], uid_of[recv]
            ks, rs = np.nonzero(su >= 0)
            rd = dest[rs]
            ok = ru[ks, rd] >= 0
            self.messages.extend(zip(rs[ok].tolist(), su[ks, rs][ok].tolist(),
                                     rd[ok].tolist(), ru[ks, rd][ok].tolist(), strict=True))

    def _spe_rows(self, r: int) -> np.ndarray:
        """Rank ``r``'s SPE records of every iteration, and each context's last LEAVE / EXIT."""
        tm, b, loop = self.times, self.bodies[r], self.loop
        k_n, nc, m = self.o.iterations, self.ctxs, self.o.chunks
        re = tm.t["in_re"][:, r, :]  # [K, C]
        ctx = np.broadcast_to(np.arange(nc), (k_n, nc))
        kk = np.broadcast_to(np.arange(k_n)[:, None], (k_n, nc))
        out = []

        def rows(t: np.ndarray, c: np.ndarray, code: int, a=0, bb=0, cc=0, d=0,
                 done=np.nan) -> None:
            x = np.zeros(t.size, REC_DTYPE)
            x["t"], x["actor"], x["code"] = t.ravel(), c.ravel(), code
            x["core"] = SPE
            for f, v in (("a", a), ("b", bb), ("c", cc), ("d", d)):
                x[f] = np.ravel(v) if np.ndim(v) else v
            x["done"] = np.ravel(done) if np.ndim(done) else done
            out.append(x)

        rb = tm.t["in_rb"][:, r, :]
        first = np.zeros((k_n, nc), bool)
        first[0] = True  # the first read's BEGIN came with the program's start
        rows(rb[~first], ctx[~first], S.IN_MBOX_READ_BEGIN)
        rows(re, ctx, S.IN_MBOX_READ_END, bb=self._in_value(kk))
        rows(tm.t["out_wb"][:, r, :], ctx, S.OUT_MBOX_WRITE_BEGIN,
             bb=self._done_value(kk))
        rows(tm.t["out_we"][:, r, :], ctx, S.OUT_MBOX_WRITE_END)
        rows(b.counter + re, ctx, S.COUNTER, a=C_FLOPS, bb=loop.flops_per_chunk * m)
        base = re[:, :, None]
        ctx3 = np.broadcast_to(ctx[:, :, None], (k_n, nc, m))
        j = np.broadcast_to(np.arange(m), (k_n, nc, m)).astype(np.uint64)
        kk3 = np.broadcast_to(kk[:, :, None], (k_n, nc, m)).astype(np.uint64)
        nbytes = np.uint64(loop.chunk_bytes)
        slot = (kk3 * np.uint64(m) + j) % np.uint64(64)  # 64 chunk slots in main memory
        ea_in = np.uint64(MAIN_EA_BASE) + (ctx3.astype(np.uint64) << np.uint64(24)) \
            + slot * nbytes
        ea_out = ea_in + np.uint64(1 << 23)
        ls = np.uint64(0x10000)
        tag_get, tag_put = np.uint64(0), np.uint64(1)
        rows(base + b.rel["get"], ctx3, S.DMA, a=loop.get_op, bb=ea_in,
             cc=(ls << np.uint64(32)) | nbytes, d=tag_get, done=base + b.dma_done["get"])
        rows(base + b.rel["wb1"], ctx3, S.TAG_WAIT_BEGIN, a=W_ALL, bb=1 << int(tag_get))
        rows(base + b.rel["we1"], ctx3, S.TAG_WAIT_END, bb=1 << int(tag_get))
        rows(base + b.rel["enter"], ctx3, S.ENTER, a=R_COMPUTE)
        rows(base + b.rel["leave"], ctx3, S.LEAVE, a=R_COMPUTE)
        rows(base + b.rel["put"], ctx3, S.DMA, a=loop.put_op, bb=ea_out,
             cc=(ls << np.uint64(32)) | nbytes, d=tag_put, done=base + b.dma_done["put"])
        rows(base + b.rel["wb2"], ctx3, S.TAG_WAIT_BEGIN, a=W_ALL, bb=1 << int(tag_put))
        rows(base + b.rel["we2"], ctx3, S.TAG_WAIT_END, bb=1 << int(tag_put))
        ids = np.arange(nc)
        rows(self.intr_wb[r], ids, S.OUT_INTR_MBOX_WRITE_BEGIN, bb=INTR | ids.astype(np.uint64))
        rows(self.intr_we[r], ids, S.OUT_INTR_MBOX_WRITE_END)
        rows(self.spe_leave[r], np.arange(nc), S.LEAVE, a=R_SPE_MAIN)
        rows(self.spe_exit[r], np.arange(nc), S.EXIT)
        return np.concatenate(out)
