"""SPU scheduling, context switches and decrementer live intervals of one simulated process:
contexts keep their SPU until they block at a phase barrier or a waiting context preempts them
after their time slice, and each live interval gets its own decrementer start under the run's
restore mode (docs/format.md 6.6; the rules: docs/simulator.md). It emits only CTX_SWITCH and
SPE START records; it does not place other records."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..input import format as fmt
from .clocks import NodeClock
from .records import PPE, SPE, RecordSink

MOD32 = 1 << 32


@dataclass
class ContextClock:
    """The live intervals of one context's decrementer."""

    node: NodeClock
    starts: list[float] = field(default_factory=list)  # reference time each interval began
    k_values: list[int] = field(default_factory=list)  # K of each interval
    first_values: list[int] = field(default_factory=list)  # unwrapped value at the start

    def begin(self, t_start: float, value_at_start: int) -> None:
        """A new interval counting down from ``value_at_start`` (unwrapped) at ``t_start``."""
        tb = int(self.node.tb_floor(t_start))
        self.starts.append(float(t_start))
        self.k_values.append(int(value_at_start) + tb)
        self.first_values.append(int(value_at_start))

    def value(self, t: float) -> int:
        """Unwrapped value of the current (last) interval at ``t``."""
        return self.k_values[-1] - int(self.node.tb_floor(t))

    def readings(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(interval index, raw 32-bit decr) for reading times ``t`` (any order)."""
        starts = np.asarray(self.starts)
        idx = np.searchsorted(starts, t, side="right") - 1
        if np.any(idx < 0):
            raise AssertionError("decrementer read before the context was loaded")
        k = np.asarray(self.k_values, dtype=np.int64)[idx]
        unwrapped = k - self.node.tb_floor(t)
        return idx.astype(np.int64), np.mod(unwrapped, MOD32).astype(np.uint64)


@dataclass
class Timing:
    """Kernel and hardware delays in ticks."""

    save: tuple[float, float]  # context save, STOP record after it
    restore_latency_max: float  # "0 .. a few microseconds"
    load: tuple[float, float]  # first load of a program image
    gap: float  # smallest spacing we keep after a blocking record before a save
    slice: float = np.inf  # time slice: a working holder may be preempted after this long
    quiet: float = 30.0  # a preemption needs this many ticks without a record before it


class SpuScheduler:
    """Run-to-block scheduling of one process's contexts on its share of physical SPUs."""

    def __init__(
        self,
        spus: list[int],
        mode: str,
        clocks: dict[int, ContextClock],
        ctx_thread: dict[int, int],
        sink: RecordSink,
        rng: np.random.Generator,
        timing: Timing,
    ) -> None:
        self.mode = mode
        self.clocks = clocks
        self.ctx_thread = ctx_thread
        self.sink = sink
        self.rng = rng
        self.timing = timing
        self.holder: dict[int, int | None] = {s: None for s in spus}
        self.free_at: dict[int, float] = {s: -np.inf for s in spus}
        self.on_spu: dict[int, int] = {}
        self.block_time: dict[int, float] = {}
        self.saved: dict[int, tuple[float, int, int]] = {}  # ctx -> (t_save, value, tb_save)
        self.loaded: set[int] = set()
        self.switches = 0
        self.preemptions = 0
        self.run_since: dict[int, tuple[float, int]] = {}  # ctx -> (running since, first uid)
        self.successor: dict[int, tuple[int, float, int]] = {}  # ctx -> (preempted, t, spu)

    def is_on(self, ctx: int) -> bool:
        return ctx in self.on_spu

    def acquire(self, ctx: int, t_ready: float) -> tuple[float, bool]:
        """Put ``ctx`` on an SPU no earlier than ``t_ready``.

        Returns (time it runs, first_load). For a first load the caller writes the SPE START
        record; for a restore this writes the CTX_SWITCH START record.
        """
        if ctx in self.on_spu:
            return t_ready, False
        best_spu, best_key = None, (np.inf, 1)
        for spu, h in self.holder.items():
            if h is None:
                key = (max(t_ready, self.free_at[spu]), 0)  # a free SPU wins a tie
            else:
                key = (max(t_ready, self.block_time[h] + self.timing.gap), 1)
                t_p = self._preemption_point(h, t_ready)
                if t_p is not None and (t_p, 2) < key:
                    key = (t_p, 2)
            if key < best_key:
                best_spu, best_key = spu, key
        if best_spu is None or not np.isfinite(best_key[0]):
            raise AssertionError("no SPU will ever be free: every holder is working")
        t = best_key[0]
        victim = self.holder[best_spu]
        if victim is not None:
            if best_key[1] == 2:  # time slice over: the victim resumes when ``ctx`` blocks
                self.successor[ctx] = (victim, t, best_spu)
                self.preemptions += 1
            t = self._stop(victim, best_spu, t)
        return self._start(ctx, best_spu, t)

    def _preemption_point(self, h: int, t_ready: float) -> float | None:
        """When working holder ``h`` could be switched off for a waiting context: after its
        slice, before it blocks anyway, in a quiet stretch (no record in the ``quiet`` ticks
        before, so every block header it owes was read before the save). None if never."""
        if h in self.successor or h not in self.run_since or not np.isfinite(self.timing.slice):
            return None
        t_block = self.block_time[h]
        since, uid = self.run_since[h]
        t_lo = max(t_ready, since + self.timing.slice)
        t_hi = t_block - self.timing.gap
        if not (t_block > t_ready and t_lo < t_hi):
            return None
        t = self.sink.times(SPE, h, uid)
        q = self.timing.quiet
        cand = np.maximum(t[:-1] + q, t_lo)  # just after record k, before record k + 1
        ok = (cand < t[1:] - 1.0) & (cand < t_hi) & (cand >= t[:-1] + q)
        k = np.flatnonzero(ok)
        return float(cand[k[0]]) if len(k) else None

    def block(self, ctx: int, t_block: float) -> None:
        """``ctx`` blocks (keeps its SPU) from ``t_block``; it may be evicted after that."""
        self.block_time[ctx] = t_block

    def working(self, ctx: int) -> None:
        self.block_time[ctx] = np.inf
        self.run_since.pop(ctx, None)  # not preemptible until its body starts

    def body_starts(self, ctx: int, t: float, first_uid: int) -> None:
        """``ctx`` starts preemptible work at ``t``; its records from ``first_uid`` on."""
        self.run_since[ctx] = (t, first_uid)

    def body_ends(self, ctx: int) -> None:
        self.run_since.pop(ctx, None)

    def release(self, ctx: int, t_free: float) -> None:
        """The context exited: its SPU is free from ``t_free``; no CTX_SWITCH record."""
        # a preempting context always blocks before its last phase, where nobody preempts
        assert ctx not in self.successor, "a preempted context would never resume"
        spu = self.on_spu.pop(ctx)
        self.holder[spu] = None
        self.free_at[spu] = t_free

    # ----------------------------------------------------------------------------------------

    def _stop(self, ctx: int, spu: int, t_save: float) -> float:
        """Save ``ctx`` at ``t_save``; write STOP after it; return when the SPU is free."""
        clock = self.clocks[ctx]
        value = clock.value(t_save)
        tb_save = int(clock.node.tb_floor(t_save))
        t_rec = t_save + self.rng.uniform(*self.timing.save)
        self.sink.add(
            t_rec, PPE, self.ctx_thread[ctx], fmt.PpeCode.CTX_SWITCH, ctx,
            int(fmt.SwitchType.STOP), (spu << 32) | (value % MOD32),
        )
        self.saved[ctx] = (t_save, value, tb_save)
        del self.on_spu[ctx]
        self.holder[spu] = None
        self.switches += 1
        return t_rec + self.rng.uniform(1.0, 4.0)

    def _start(self, ctx: int, spu: int, t: float) -> tuple[float, bool]:
        clock = self.clocks[ctx]
        self.holder[spu] = ctx
        self.on_spu[ctx] = spu
        self.block_time[ctx] = np.inf
        if ctx not in self.loaded:
            self.loaded.add(ctx)
            t_run = t + self.rng.uniform(*self.timing.load)
            clock.begin(t_run, int(self.rng.integers(0, MOD32)))
            return t_run, True
        t_save, value, tb_save = self.saved.pop(ctx)
        tb_restore = int(clock.node.tb_floor(t))  # the kernel's second timebase reading
        start_value = value if self.mode == "restored" else value - (tb_restore - tb_save)
        rec_delay = self.rng.uniform(0.5, 3.0)
        self.sink.add(
            t + rec_delay, PPE, self.ctx_thread[ctx], fmt.PpeCode.CTX_SWITCH, ctx,
            int(fmt.SwitchType.START), (spu << 32) | (start_value % MOD32),
        )
        latency = rec_delay + 1.0 + self.rng.uniform(0.0, self.timing.restore_latency_max)
        t_run = t + latency
        clock.begin(t_run, start_value)
        if ctx in self.run_since:
            self.run_since[ctx] = (t_run, self.run_since[ctx][1])
        return t_run, False

    def hand_over(self, ctx: int, t_block: float) -> tuple[int, float, float, float] | None:
        """``ctx`` blocked at ``t_block``; if it had preempted a context, that one gets the SPU
        back. Returns (resumed context, when it stopped, how much later it resumes, the time it
        would have blocked had it not been stopped), or None."""
        succ = self.successor.pop(ctx, None)
        if succ is None:
            return None
        victim, t_stop, spu = succ
        victim_block = self.block_time[victim]
        t_free = self._stop(ctx, spu, t_block + self.timing.gap)
        t_run, _ = self._start(victim, spu, t_free)
        return victim, t_stop, t_run - t_stop, victim_block


HEARTBEAT_TICKS = 1 << 30  # the library's wake-up period: half the 2^31 limit


def heartbeat_rows(spe: np.ndarray, clocks: dict[int, ContextClock],
                   limit: int = HEARTBEAT_TICKS) -> np.ndarray:
    """HEARTBEAT records so consecutive readings of one interval are < ``limit`` local ticks
    apart, and only where a step would otherwise reach it (docs/format.md 6.8: ``limit`` = 2^31 is
    the library's rule, the default 2^30 leaves a margin).

    ``spe`` holds SPE records (REC_DTYPE). A gap of ``step`` local ticks gets
    ``step // limit`` heartbeats evenly spaced in true time (the context is on its SPU for the
    whole gap: intervals end at every switch).
    """
    from .records import empty

    out = []
    for c, clock in clocks.items():
        r = spe[spe["actor"] == c]
        if len(r) < 2:
            continue
        t = np.sort(r["t"])
        idx, _ = clock.readings(t)
        k = np.asarray(clock.k_values, dtype=np.int64)[idx]
        local = clock.node.tb_floor(t) - k
        step = np.diff(local)
        m = np.where(idx[1:] == idx[:-1], step // limit, 0)
        total = int(m.sum())
        if total == 0:
            continue
        j = np.repeat(np.arange(len(m)), m)
        first = np.repeat(np.cumsum(m) - m, m)
        q = np.arange(total) - first
        hb = empty(total)
        hb["t"] = t[j] + (t[j + 1] - t[j]) * (q + 1) / (m[j] + 1)
        hb["core"] = SPE
        hb["actor"] = c
        hb["code"] = fmt.SpeCode.HEARTBEAT
        out.append(hb)
    return np.concatenate(out) if out else empty(0)
