"""One simulated MPI process: its PPE threads, SPE contexts, mailboxes, signals and phases in the
libspe2 style (a PPE thread per context in ``spe_context_run``; phases separated by a mailbox
barrier with the PPE; the program's shape: docs/simulator.md), all in true reference ticks. It
does not place slots or encode bytes (``buffer.py``) and does not do MPI (``mpi.py``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..input import format as fmt
from .bodies import dma_loop
from .clocks import NodeClock
from .records import PPE, SPE, RecordSink, empty
from .spu import ContextClock, SpuScheduler, Timing
from .workloads import C_PHASE, PROGRAM_ID, R_MAIN, R_SPE_MAIN, R_SPE_RUN, Workload

P, S = fmt.PpeCode, fmt.SpeCode
IN_DEPTH = 4
ACK = 0x2000_0000  # outbound "phase started" value
DONE = 0x1000_0000  # outbound "phase done" value
LS_EA_BASE = 0x0000_4000_0000_0000
EA_STRIDE = 0x10_0000  # 1 MiB per context: LS (256 KiB) then problem state (128 KiB)
PS_OFFSET = 0x8_0000
MAIN_EA_BASE = 0x0000_0000_1000_0000


@dataclass
class ProcessOptions:
    workload: Workload
    spes: int
    chunks: int
    phases: int
    decrementer_restore: str
    decr_writes: bool
    ticks_per_us: float
    slice_ticks: float = np.inf


class ProcessSim:
    """State of one process while its phases are generated in true-time order."""

    def __init__(self, rank: int, node: NodeClock, spus: list[int], opts: ProcessOptions,
                 rng: np.random.Generator) -> None:
        self.rank = rank
        self.node = node
        self.opts = opts
        self.rng = rng
        self.us = opts.ticks_per_us
        self.sink = RecordSink()
        self._pool: list[float] = []  # uniforms drawn in batches (scalar draws are slow)
        self._pool_i = 0
        n = opts.spes
        self.ctxs = list(range(n))
        self.ctx_thread = {c: c + 1 for c in self.ctxs}
        self.clocks = {c: ContextClock(node) for c in self.ctxs}
        self.sched = SpuScheduler(
            spus, opts.decrementer_restore, self.clocks, self.ctx_thread, self.sink, rng,
            Timing(save=(1.0 * self.us, 4.0 * self.us), restore_latency_max=3.0 * self.us,
                   load=(20.0 * self.us, 60.0 * self.us), gap=2.0 * self.us,
                   slice=opts.slice_ticks),
        )
        self.ls_ea = {c: LS_EA_BASE + c * EA_STRIDE for c in self.ctxs}
        self.ps_ea = {c: self.ls_ea[c] + PS_OFFSET for c in self.ctxs}
        self.t_main = 0.0
        self.t_spe: dict[int, float] = {}  # last SPE record time (while blocked: READ_BEGIN)
        self.out_enter: dict[int, float] = {}  # outbound value entry time of this phase
        self.out_exit: dict[int, float] = {c: -np.inf for c in self.ctxs}
        self.intr_enter: dict[int, float] = {}
        # per target: [arrival, value, sender] of SNDSIG writes to signal register 1
        self.sig1: dict[int, list[list]] = {c: [] for c in self.ctxs}
        self.exit_t: dict[int, float] = {}
        # acks only when every context has its own SPU: a write blocked until the PPE
        # collects, while other contexts wait for an SPU, would deadlock without time slices
        self.acks = len(spus) >= n
        self.ack_enter: dict[int, float] = {}
        self.done_begin: dict[int, float] = {}
        self.run_begin: dict[int, float] = {}

    # ---------------------------------------------------------------------------------------
    def u(self, lo_us: float, hi_us: float) -> float:
        """A uniform delay in ticks between ``lo_us`` and ``hi_us`` microseconds."""
        if self._pool_i >= len(self._pool):
            self._pool = self.rng.random(4096).tolist()
            self._pool_i = 0
        x = self._pool[self._pool_i]
        self._pool_i += 1
        return (lo_us + (hi_us - lo_us) * x) * self.us

    def ppe(self, thread: int, t: float, code: int, a: int = 0, b: int = 0, c: int = 0,
            done: float = np.nan) -> int:
        return self.sink.add(t, PPE, thread, code, a, b, c, 0, done)

    def spe(self, ctx: int, t: float, code: int, a: int = 0, b: int = 0, c: int = 0,
            d: int = 0) -> None:
        self.sink.add(t, SPE, ctx, code, a, b, c, d)
        self.t_spe[ctx] = t

    # ---------------------------------------------------------------------------------------
    def start(self, t0: float) -> None:
        """main(): create and load every context, start the runner threads."""
        t = t0
        self.t_begin = t0
        self.ppe(0, t, P.ENTER, R_MAIN)
        for c in self.ctxs:
            t += self.u(20, 60)
            self.ppe(0, t, P.CTX_CREATE, c, self.ls_ea[c], self.ps_ea[c])
        for c in self.ctxs:
            t += self.u(10, 30)
            self.ppe(0, t, P.CTX_LOAD, c, PROGRAM_ID)
        for c in self.ctxs:
            t += self.u(5, 15)
            th = self.ctx_thread[c]
            self.ppe(th, t, P.ENTER, R_SPE_RUN)
            t_rb = t + self.u(0.2, 1.0)
            self.ppe(th, t_rb, P.CTX_RUN_BEGIN, c)
            self.run_begin[c] = t_rb
            if any(h is None for h in self.sched.holder.values()):
                t_run, _ = self.sched.acquire(c, t_rb + self.u(0.5, 2))
                self._program_start(c, t_run)
        self.t_main = t + self.u(5, 20)

    def _program_start(self, c: int, t_run: float) -> None:
        t = t_run + self.u(0.2, 1)
        self.spe(c, t, S.START)
        self.spe(c, t + self.u(0.2, 1), S.ENTER, R_SPE_MAIN)
        t_rb = self.t_spe[c] + self.u(0.2, 1)
        self.spe(c, t_rb, S.IN_MBOX_READ_BEGIN)
        self.sched.block(c, t_rb)

    def _ensure_running(self, c: int, t_ready: float) -> float:
        """The time ``c`` can act again after ``t_ready`` (loading/restoring it if needed)."""
        if self.sched.is_on(c):
            self.sched.working(c)
            return t_ready
        t_run, first = self.sched.acquire(c, t_ready)
        if first:
            self._program_start(c, t_run)
            self.sched.working(c)
            return self.t_spe[c]
        self.sched.working(c)
        return t_run

    # ---------------------------------------------------------------------------------------
    def phase(self, p: int) -> None:
        """Release every context, run its body, and collect the barrier."""
        last = p == self.opts.phases - 1
        w = self.opts.workload
        nv = w.release_values
        for c in self.ctxs:
            exits: list[float] = []
            t = self.t_main
            re = 0.0
            for k in range(nv):
                value = (p << 8) | k
                wb = t
                self.ppe(0, wb, P.IN_MBOX_WRITE_BEGIN, c)
                enter = wb + self.u(0.05, 0.2)
                if k >= IN_DEPTH:
                    enter = max(enter, exits[k - IN_DEPTH] + self.u(0.05, 0.2))
                we = enter + self.u(0.05, 0.2)
                self.ppe(0, we, P.IN_MBOX_WRITE_END, c, value)
                t = we + self.u(0.3, 1.0)
                if k == 0:
                    t_act = self._ensure_running(c, enter)
                    rb = self.t_spe[c]
                    exit_ = max(enter, rb, t_act) + self.u(0.05, 0.2)
                else:
                    rb = re + self.u(2.0, 6.0)
                    self.spe(c, rb, S.IN_MBOX_READ_BEGIN)
                    exit_ = max(rb, enter) + self.u(0.05, 0.2)
                re = exit_ + self.u(0.05, 0.2)
                self.spe(c, re, S.IN_MBOX_READ_END, 0, value)
                exits.append(exit_)
            t_spe = re
            if w.ppe_signals:
                value = 0x5000_0000 | p
                self.ppe(0, t, P.SIGNAL_WRITE, c, 2, value)
                arrival = t + self.u(0.1, 0.5)
                t = arrival + self.u(0.3, 1.0)
                sb = t_spe + self.u(0.5, 2.0)
                self.spe(c, sb, S.SIGNAL_READ_BEGIN, 2)
                t_spe = max(sb, arrival) + self.u(0.05, 0.3)
                self.spe(c, t_spe, S.SIGNAL_READ_END, 2, value)
            if w.spe_to_spe and p > 0:
                arrival, value, _ = self.sig1[c].pop(0)
                sb = t_spe + self.u(0.5, 2.0)
                self.spe(c, sb, S.SIGNAL_READ_BEGIN, 1)
                t_spe = max(sb, arrival) + self.u(0.05, 0.3)
                self.spe(c, t_spe, S.SIGNAL_READ_END, 1, value)
            self.t_main = t
            if self.acks:
                # "started" ack: the outbound mailbox stays full until the PPE collects, so
                # the SPE's "done" write at the end of the body blocks (depth 1)
                t_ack = t_spe + self.u(0.5, 2.0)
                self.ack_enter[c] = self._out_write(c, t_ack, ACK | p, self.out_exit[c])
                t_spe = self.t_spe[c]
            t_spe = self._body(c, p, t_spe + self.u(0.5, 2.0), last)
            self._arrive(c, t_spe, last)
        self._collect(p, last)

    def _body(self, c: int, p: int, t0: float, last: bool) -> float:
        w = self.opts.workload
        self.sched.body_starts(c, t0, self.sink.next_uid)
        if self.opts.decr_writes and p % 2 == 1:
            new_value = int(self.rng.integers(1 << 20, 1 << 32))
            self.spe(c, t0, S.DECR_WRITE, 0, new_value)
            self.clocks[c].begin(t0 + 0.5, new_value)
            t0 += self.u(1.0, 3.0) + 10.0
        tag_base = 2 * ((c + p) % 16)
        ea_in = MAIN_EA_BASE + (c << 24)
        ea_out = ea_in + (1 << 23)
        rows, t_end = dma_loop(self.rng, t0, self.opts.chunks, w.loop, c, ea_in, ea_out,
                               tag_base, self.us)
        self.sink.add_array(rows)
        self.t_spe[c] = t_end
        if w.spe_to_spe and not last:
            t_end = self._to_neighbour(c, p, t_end)
        return t_end

    def _to_neighbour(self, c: int, p: int, t: float) -> float:
        """LS-to-LS PUT and SNDSIG (register 1) to the right neighbour, then wait for both."""
        nb = (c + 1) % len(self.ctxs)
        tag = 31
        t1 = t + self.u(0.2, 1.0)
        d1 = t1 + self.u(0.5, 2.0)
        self.sink.add(t1, SPE, c, S.DMA, fmt.MfcOpcode.PUT, self.ls_ea[nb] + 0x20000 + 0x1000 * c,
                      (0x30000 << 32) | 4096, tag, done=d1)
        t2 = t1 + self.u(0.2, 1.0)
        d2 = max(t2 + self.u(0.3, 1.5), d1 + 0.5)
        self.sink.add(t2, SPE, c, S.DMA, fmt.MfcOpcode.SNDSIGF,
                      self.ps_ea[nb] + fmt.SIGNAL1_PS_OFFSET, (0x3F000 << 32) | 4, tag, done=d2)
        t3 = t2 + self.u(0.1, 0.5)
        self.spe(c, t3, S.TAG_WAIT_BEGIN, int(fmt.WaitMode.ALL), 1 << tag)
        t4 = max(t3, d2) + self.u(0.05, 0.3)
        self.spe(c, t4, S.TAG_WAIT_END, 0, 1 << tag)
        self.sig1[nb].append([d2, 0x7000_0000 | (c << 16) | p, c])
        return t4

    def _out_write(self, c: int, t_begin: float, value: int, not_before: float) -> float:
        """SPE writes its outbound mailbox (depth 1): BEGIN at ``t_begin``; the value enters
        once the previous one left (``not_before``); returns the entry time."""
        self.spe(c, t_begin, S.OUT_MBOX_WRITE_BEGIN, 0, value)
        enter = max(t_begin + self.u(0.05, 0.2), not_before + self.u(0.05, 0.2))
        self.spe(c, enter + self.u(0.05, 0.2), S.OUT_MBOX_WRITE_END)
        return enter

    def _ppe_out_read(self, c: int, t: float, enter: float, value: int) -> tuple[float, float]:
        """PPE reads ``c``'s outbound mailbox from ``t``; returns (exit time, END time)."""
        self.ppe(0, t, P.OUT_MBOX_READ_BEGIN, c)
        exit_ = max(t, enter) + self.u(0.05, 0.2)
        t_end = exit_ + self.u(0.05, 0.2)
        self.ppe(0, t_end, P.OUT_MBOX_READ_END, c, value)
        return exit_, t_end

    def _arrive(self, c: int, t: float, last: bool) -> None:
        """The SPE starts writing "done"; it may block until the PPE took the ack (collect)."""
        t_ob = t + self.u(0.2, 1.0)
        if c in self.ack_enter:
            self.done_begin[c] = t_ob  # finished in _collect, after the PPE read the ack
            self.spe(c, t_ob, S.OUT_MBOX_WRITE_BEGIN, 0, DONE | c)
            return
        self.out_enter[c] = self._out_write(c, t_ob, DONE | c, self.out_exit[c])
        self._after_done(c, last)

    def _after_done(self, c: int, last: bool) -> None:
        """After "done" is in the outbound mailbox: block for the next release, or exit."""
        if not last:
            t_rb = self.t_spe[c] + self.u(0.2, 1.0)
            self.spe(c, t_rb, S.IN_MBOX_READ_BEGIN)
            self.sched.block(c, t_rb)
            self._hand_over(c, t_rb)
            return
        t_ib = self.t_spe[c] + self.u(0.2, 1.0)
        self.spe(c, t_ib, S.OUT_INTR_MBOX_WRITE_BEGIN, 0, 0xC0DE_0000 | c)
        enter = t_ib + self.u(0.05, 0.2)
        self.spe(c, enter + self.u(0.05, 0.2), S.OUT_INTR_MBOX_WRITE_END)
        self.intr_enter[c] = enter
        self.spe(c, self.t_spe[c] + self.u(0.2, 1.0), S.LEAVE, R_SPE_MAIN)
        t_exit = self.t_spe[c] + self.u(0.2, 1.0)
        self.spe(c, t_exit, S.EXIT, 0, 0)
        self.exit_t[c] = t_exit
        self.sched.release(c, t_exit + self.u(2.0, 5.0))

    def _hand_over(self, c: int, t_block: float) -> None:
        """If ``c`` had preempted a context, that context resumes now: everything it did after
        it was stopped happens later by the time it was off its SPU."""
        res = self.sched.hand_over(c, t_block)
        if res is None:
            return
        h, t_stop, dt, h_block = res
        since_uid = self.sched.run_since[h][1]
        self.sink.shift(SPE, h, since_uid, t_stop, dt)
        self.t_spe[h] += dt
        if self.out_enter.get(h, -np.inf) > t_stop:
            self.out_enter[h] += dt
        for pending in self.sig1.values():
            for entry in pending:
                if entry[2] == h and entry[0] > t_stop:
                    entry[0] += dt
        self.sched.block(h, h_block + dt)

    def _collect(self, p: int, last: bool) -> None:
        t = self.t_main + self.u(0.3, 1.0)
        for c in self.ctxs:
            if c in self.ack_enter:
                ack_exit, t = self._ppe_out_read(c, t, self.ack_enter.pop(c), ACK | p)
                t += self.u(0.3, 1.0)
                # the SPE's blocked "done" write completes once the ack left
                t_ob = self.done_begin.pop(c)
                enter = max(t_ob + self.u(0.05, 0.2), ack_exit + self.u(0.05, 0.2))
                self.spe(c, enter + self.u(0.05, 0.2), S.OUT_MBOX_WRITE_END)
                self.out_enter[c] = enter
                self._after_done(c, last)
            self.out_exit[c], t = self._ppe_out_read(c, t, self.out_enter[c], DONE | c)
            t += self.u(0.3, 1.0)
        if last:
            for c in self.ctxs:
                self.ppe(0, t, P.OUT_INTR_MBOX_READ_BEGIN, c)
                t = max(t, self.intr_enter[c]) + self.u(0.1, 0.4)
                self.ppe(0, t, P.OUT_INTR_MBOX_READ_END, c, 0xC0DE_0000 | c)
                t += self.u(0.3, 1.0)
        self.ppe(0, t, P.COUNTER, C_PHASE, p)
        self.t_main = t + self.u(0.3, 1.0)

    def poll(self, every: float) -> None:
        """A monitoring PPE thread (the thread after the runners) samples the phase counter
        every ``every`` ticks (+- 1 %) from main's start to its end: a PPE that polls, whose
        records bound the SPEs' blocks in slot order however long they compute."""
        n = int((self.t_main - self.t_begin) // every)
        if n < 1:
            return
        rows = empty(n)
        rows["t"] = self.t_begin + every * (np.arange(1, n + 1)
                                            + self.rng.uniform(-0.01, 0.01, n))
        rows["core"], rows["actor"], rows["code"] = PPE, len(self.ctxs) + 1, P.COUNTER
        rows["a"], rows["b"] = C_PHASE, np.arange(n)
        self.sink.add_array(rows)

    def finish(self) -> None:
        """Runner threads return, main joins and destroys every context, leaves main."""
        t = self.t_main
        for c in self.ctxs:
            th = self.ctx_thread[c]
            t_end = self.exit_t[c] + self.u(8.0, 20.0)
            self.ppe(th, t_end, P.CTX_RUN_END, c, int(fmt.StopReason.EXIT), 0)
            self.ppe(th, t_end + self.u(0.2, 1.0), P.LEAVE, R_SPE_RUN)
            t = max(t, t_end + self.u(2.0, 5.0)) + self.u(0.3, 1.0)
            self.ppe(0, t, P.CTX_DESTROY, c)
        self.t_main = t + self.u(1.0, 3.0)
        self.ppe(0, self.t_main, P.LEAVE, R_MAIN)
