"""Deterministic synthetic CBT 1 runs with ground truth, the simulator's public entry:
``simulate_run(out_dir, workload, seed, **options)`` writes ``run.json``, one dump per rank
(through ``input/format.py``'s dtypes) and ``truth.npz``/``truth.json`` (``sim/truth.py``); same
options and seed give the same bytes. It wires the parts of ``sim/`` together (the choices where
the contracts leave room: docs/simulator.md); it does not check the run (tests do)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from ..input import format as fmt
from . import damage as dmg
from .buffer import KIND_BLOCK, KIND_PPE, KIND_SPE, build_slots
from .clocks import make_node_clock
from .cluster import EAGER_LIMIT, TOPOLOGIES, ClusterOptions, ClusterWorld
from .driver import ProcessOptions, ProcessSim
from .manifest import build_manifest, node_hardware, node_name
from .mpi import MpiWorld
from .spu import heartbeat_rows
from .truth import DMA_DTYPE, INTERVAL_DTYPE, MESSAGE_DTYPE, NodeTruth, Truth, save_truth
from .workloads import WORKLOADS, Workload, phase_estimate_us

DEFAULT_TIMEBASE_HZ = 14_318_000
REALTIME_BASE_NS = 1_226_400_000_000_000_000


@dataclass
class SimOptions:
    workload: str = "fft"
    seed: int = 0
    spes: int | None = None  # SPE contexts per rank
    ranks: int | None = None
    nodes: int | None = None
    phases: int | None = None
    duration_s: float | None = None
    chunks: int | None = None  # loop iterations per phase per context
    timebase_hz: int = DEFAULT_TIMEBASE_HZ
    spus: int | None = None  # physical SPUs per node (default cell_chips * spes_per_chip)
    slice_ms: float = 100.0  # SPU time slice (spufs: 100 ms); <= 0 disables preemption
    decrementer_restore: str = "compensated"
    decr_writes: bool = False
    heartbeats: bool = True
    #: a step of this many local ticks or more gets heartbeats (docs/format.md 6.8's limit is 2^31)
    heartbeat_ticks: int = 1 << 30
    #: seconds between the samples of a monitoring PPE thread (0: no such thread)
    poll_s: float = 0.0
    #: mean seconds of one compute step of the SPE loop (None: the workload's)
    compute_s: float | None = None
    spe_buffer_records: int = 16
    spe_buffers: int = 2
    byte_order: str = "B"
    max_ppm: float = 50.0
    # node rates change at this many evenly spaced knots over the run (1: a line), the last
    # rate held beyond the run's estimated end; None: 4, the margins at rates of their own
    drift_segments: int | None = None
    wander_us: float = 0.0  # oscillator wander: a sine of this amplitude on each node's offset
    wander_period_s: float = 240.0  # ... and about this period (+-20 % per node)
    damage: list[str] = field(default_factory=list)
    # the cluster workload (sim/cluster.py): seconds between halo exchanges (the SPE compute
    # of one iteration; None: 2), ring or chain topology, message sizes of the halo and of the
    # one-way shift, and how unevenly ranks compute (per-rank speed and per-iteration jitter)
    exchange_s: float | None = None
    topology: str = "ring"
    halo_bytes: int = 8192
    shift_bytes: int = 4096
    imbalance: float = 0.01


@dataclass
class SimSummary:
    out_dir: Path
    records: int
    slots: int
    contexts: int
    nodes: int
    ranks: int
    bytes_written: int
    context_switches: int
    preemptions: int
    phases: int
    per_rank_slots: list[int]


def _workload(o: SimOptions) -> Workload:
    """The workload, with ``compute_s`` (if given) as its SPE compute step (per chunk)."""
    w = WORKLOADS[o.workload]
    if o.compute_s is None:
        return w
    loop = replace(w.loop, compute_us=(o.compute_s * 1e6, w.loop.compute_us[1]))
    return replace(w, loop=loop)


def _resolve(o: SimOptions) -> SimOptions:
    if o.workload not in WORKLOADS:
        raise ValueError(f"unknown workload {o.workload!r}; choose one of {sorted(WORKLOADS)}")
    w = _workload(o)
    if not w.cluster:
        _cluster_only(o)
    o.spes = o.spes or w.default_spes
    if o.nodes is None:
        o.nodes = (4 if w.cluster else 2) if w.mpi else 1
    if o.ranks is None:
        o.ranks = 2 * o.nodes if w.mpi else o.nodes
    o.chunks = o.chunks or w.chunks
    if w.cluster:
        _resolve_cluster(o)
    if o.phases is None:
        if o.duration_s is not None and w.cluster:
            assert o.exchange_s is not None  # _resolve_cluster gave it its default
            o.phases = max(1, int(round(o.duration_s / o.exchange_s)))
        elif o.duration_s is not None:
            est = phase_estimate_us(w, o.chunks) * 1e-6
            o.phases = max(1, int(round(o.duration_s / est)))
        else:
            o.phases = w.default_phases
    chips, per_chip = node_hardware(o.timebase_hz)
    if o.spus is None:
        o.spus = chips * per_chip
    checks = [
        (o.decrementer_restore in ("restored", "compensated"),
         "decrementer_restore must be 'restored' or 'compensated'"),
        (o.byte_order in ("B", "L"), "byte order must be 'B' or 'L'"),
        (o.spe_buffers in (1, 2), "spe_buffers must be 1 or 2"),
        (1 <= o.spe_buffer_records <= 65535, "spe_buffer_records must be 1..65535"),
        (o.ranks >= o.nodes >= 1, "need at least one rank per node"),
        (o.spes >= 1 and o.phases >= 1 and o.chunks >= 1, "spes, phases, chunks must be >= 1"),
        (o.spus >= o.ranks // o.nodes + (o.ranks % o.nodes > 0), "need one SPU per rank"),
        (o.spus <= chips * per_chip,
         f"a node has {chips * per_chip} SPUs ({chips} Cell chip{'s' * (chips > 1)} of "
         f"{per_chip} SPEs)"),
        (0 <= o.max_ppm <= 100, "max_ppm must be within 0..100"),
        (o.drift_segments is None or o.drift_segments >= 1, "drift_segments must be >= 1"),
        (o.wander_us >= 0 and o.wander_period_s > 0,
         "wander_us must be >= 0 and wander_period_s > 0"),
        (o.timebase_hz > 0, "timebase_hz must be positive"),
        (1 <= o.heartbeat_ticks <= 1 << 31, "heartbeat_ticks must be within 1..2^31"),
        (o.poll_s >= 0, "poll_s must be >= 0"),
        (o.compute_s is None or o.compute_s > 0, "compute_s must be positive"),
    ]
    for ok, msg in checks:
        if not ok:
            raise ValueError(msg)
    for kind in o.damage:
        if kind not in dmg.KINDS:
            raise ValueError(f"unknown damage {kind!r}; choose from {', '.join(dmg.KINDS)}")
    return o


def _resolve_cluster(o: SimOptions) -> None:
    """The cluster workload's defaults and checks (before the common ones)."""
    if o.compute_s is not None:
        raise ValueError("the cluster workload takes --exchange-s (seconds between halo "
                         "exchanges) instead of --compute-s")
    if o.exchange_s is None:
        o.exchange_s = 2.0
    if o.drift_segments is None:
        o.drift_segments = 1  # linear drift (plus any wander)
    # _resolve filled these in before calling here
    assert o.ranks is not None and o.nodes is not None and o.spes is not None
    per_node = -(-o.ranks // o.nodes)
    spus = o.spus or node_hardware(o.timebase_hz)[0] * node_hardware(o.timebase_hz)[1]
    checks = [
        (1e-4 <= o.exchange_s <= 3600, "exchange_s must be within 0.0001..3600 seconds"),
        (o.topology in TOPOLOGIES, f"topology must be one of {', '.join(TOPOLOGIES)}"),
        (1 <= o.halo_bytes <= 0xFFFFFFFF and 1 <= o.shift_bytes <= EAGER_LIMIT,
         f"halo_bytes must be within 1..2^32-1 and shift_bytes within 1..{EAGER_LIMIT} "
         "(the blocking shift is eager)"),
        (0 <= o.imbalance < 0.5, "imbalance must be within 0..0.5"),
        (not o.decr_writes, "the cluster workload does not rewrite decrementers"),
        (spus // per_node >= o.spes,
         f"the cluster workload gives every context an SPU of its own: {per_node} ranks of "
         f"{o.spes} contexts need {per_node * o.spes} SPUs on a node, it has {spus}"),
    ]
    for ok, msg in checks:
        if not ok:
            raise ValueError(msg)


#: the options only the cluster workload takes
CLUSTER_OPTIONS = ("exchange_s", "topology", "halo_bytes", "shift_bytes", "imbalance")


def _cluster_only(o: SimOptions) -> None:
    """Options of the cluster workload given to another one."""
    defaults = SimOptions()
    if any(getattr(o, k) != getattr(defaults, k) for k in CLUSTER_OPTIONS):
        raise ValueError("--exchange-s, --topology, --halo-bytes, --shift-bytes and "
                         "--imbalance apply to the cluster workload only")


def simulate_run(out_dir: str | Path, workload: str = "fft", seed: int = 0, *,
                 progress: Callable[[str, float], None] | None = None,
                 announce: Callable[[int, int], None] | None = None,
                 **options: object) -> SimSummary:
    """Write one synthetic run with its truth into ``out_dir`` (created if missing).
    ``progress(stage, fraction)`` is told how far simulating and writing are; ``announce(
    records, bytes)`` the size of the dumps about to be written, before any is."""
    opts = _resolve(SimOptions(workload=workload, seed=seed, **options))  # type: ignore[arg-type]
    return _run(Path(out_dir), opts, progress or (lambda _s, _f: None), announce)


def _run(out_dir: Path, o: SimOptions, progress: Callable[[str, float], None],
         announce: Callable[[int, int], None] | None) -> SimSummary:
    w = _workload(o)
    # _resolve filled every count in
    assert (o.spes is not None and o.ranks is not None and o.nodes is not None
            and o.phases is not None and o.chunks is not None and o.spus is not None)
    hz = int(o.timebase_hz)
    us = hz / 1e6
    rng = np.random.default_rng([o.seed, 0])
    layout = fmt.BIG if o.byte_order == "B" else fmt.LITTLE
    node_of = [r * o.nodes // o.ranks for r in range(o.ranks)]
    t0 = float(rng.integers(50_000_000_000, 500_000_000_000))
    if w.cluster:
        assert o.exchange_s is not None  # _resolve_cluster gave it its default
        # each exchange waits for the slower neighbour: up to speed and jitter both high
        est = o.phases * (o.exchange_s * hz * (1.0 + 2.0 * o.imbalance) + 200.0 * us) + 1e3 * us
    else:
        est = (o.phases * phase_estimate_us(w, o.chunks) * us * max(1.0, o.spes / o.spus)
               + 1e3 * us)
    clocks = []
    for i in range(o.nodes):
        start_tb = t0 if i == 0 else int(rng.integers(50_000_000_000, 500_000_000_000))
        clocks.append(make_node_clock(rng, node_name(i, hz), is_reference=(i == 0), t_begin=t0,
                                      t_end=t0 + est, start_timebase=int(start_tb),
                                      max_ppm=o.max_ppm, segments=o.drift_segments or 4,
                                      hold=o.drift_segments is not None,
                                      wander_us=o.wander_us,
                                      wander_period_s=o.wander_period_s, hz=hz))
    slice_ticks = o.slice_ms * 1e3 * us if o.slice_ms > 0 else np.inf
    popts = ProcessOptions(w, o.spes, o.chunks, o.phases, o.decrementer_restore, o.decr_writes,
                           us, slice_ticks)
    procs: list[ProcessSim] = []
    t_start = []
    for r in range(o.ranks):
        mates = [q for q in range(o.ranks) if node_of[q] == node_of[r]]
        share = max(1, o.spus // len(mates))
        j = mates.index(r)
        spus = list(range(j * share, (j + 1) * share))
        pr = ProcessSim(r, clocks[node_of[r]], spus, popts, np.random.default_rng([o.seed, 1, r]))
        ts = t0 + 1000.0 + r * float(rng.uniform(50, 200)) * us
        pr.start(ts)
        t_start.append(ts)
        procs.append(pr)
    world: MpiWorld | ClusterWorld | None = None
    if w.cluster:
        assert o.exchange_s is not None  # _resolve_cluster gave it its default
        world = ClusterWorld(procs, node_of, np.random.default_rng([o.seed, 2]), ClusterOptions(
            o.phases, o.exchange_s * hz, o.chunks, o.topology, o.halo_bytes, o.shift_bytes,
            o.imbalance), w.loop)
        world.run()
    else:
        world = MpiWorld(procs, node_of, np.random.default_rng([o.seed, 2])) if w.mpi else None
        for p in range(o.phases):
            progress("simulate", p / o.phases)
            for pr in procs:
                pr.phase(p)
            if world is not None:
                world.phase(p)
    progress("simulate", 1.0)
    for pr in procs:
        pr.finish()
        if o.poll_s > 0:
            pr.poll(o.poll_s * hz)

    out_dir.mkdir(parents=True, exist_ok=True)
    drng = np.random.default_rng([o.seed, 3])
    recs_by_rank = {}
    for pr in procs:
        recs = pr.sink.finish()
        if o.heartbeats:
            hb = heartbeat_rows(recs[recs["core"] == 1], pr.clocks, o.heartbeat_ticks)
            if len(hb):
                hb["uid"] = recs["uid"].max() + 1 + np.arange(len(hb))
                recs = np.concatenate([recs, hb])
        recs_by_rank[pr.rank] = recs
    damage_log: list[dict] = []
    for kind in dmg.RECORD_KINDS:
        if kind in o.damage:
            try:
                dmg.apply_record_damage(kind, recs_by_rank, procs, drng, damage_log)
            except ValueError as exc:  # no record of the kind the damage needs
                raise ValueError(f"--damage {kind} cannot apply to this {o.workload} run: "
                                 f"{exc}") from None

    if announce is not None:  # every record a slot, one header per block: the dumps' size
        n_rec = sum(len(v) for v in recs_by_rank.values())
        n_blk = sum(int((v["core"] == 1).sum()) for v in recs_by_rank.values()) \
            // max(1, o.spe_buffer_records)
        announce(n_rec, fmt.HEADER_SIZE * o.ranks + fmt.SLOT_SIZE * (n_rec + n_blk))
    processes, slot_time, slot_res, slot_int, damaged = [], {}, {}, {}, {}
    intervals: list[np.ndarray] = []
    dma_rows: list[np.ndarray] = []
    uid_slot: dict[int, np.ndarray] = {}
    total_bytes, total_records, per_rank_slots = 0, 0, []
    for pr in procs:
        r = pr.rank
        progress("write", r / o.ranks)
        recs = recs_by_rank[r]
        slots = build_slots(recs, pr.node, pr.clocks, layout, o.spe_buffer_records,
                            o.spe_buffers, np.random.default_rng([o.seed, 4, r]))
        _collect_intervals(r, node_of[r], pr, slots.meta, intervals)
        for kind in dmg.SLOT_KINDS:
            if kind in o.damage:
                try:
                    slots = dmg.apply_slot_damage(kind, r, slots, drng, damage_log,
                                                  o.ranks - 1)
                except ValueError as exc:  # no slot of the kind the damage needs
                    raise ValueError(f"--damage {kind} cannot apply to this {o.workload} "
                                     f"run: {exc}") from None
        data = slots.to_bytes(r, hz)
        cut = dmg.truncation(o.damage, r, len(data), slots, drng, damage_log, o.ranks - 1)
        data = data[:cut]
        n_full = (len(data) - fmt.HEADER_SIZE) // fmt.SLOT_SIZE
        meta = slots.meta[:n_full]
        path = f"rank{r:05d}.cbt"
        (out_dir / path).write_bytes(data)
        total_bytes += len(data)
        total_records += int(np.count_nonzero((meta["kind"] == KIND_PPE)
                                              | (meta["kind"] == KIND_SPE)))
        per_rank_slots.append(n_full)
        slot_time[r] = meta["t_read"].copy()
        slot_res[r] = meta["t_res"].copy()
        slot_int[r] = meta["interval"].copy()
        damaged[r] = np.flatnonzero(meta["dmg"]).astype(np.int64)
        m = np.full(int(recs["uid"].max()) + 1 if len(recs) else 0, -1, np.int64)
        has = meta["uid"] >= 0
        m[meta["uid"][has]] = np.flatnonzero(has)
        uid_slot[r] = m
        is_dma = (recs["core"] == 1) & (recs["code"] == fmt.SpeCode.DMA)
        rec = recs[is_dma]
        s = m[rec["uid"]]
        keep = s >= 0
        rows = np.zeros(int(keep.sum()), DMA_DTYPE)
        rows["rank"] = r
        rows["slot"] = s[keep]
        rows["issue"] = rec["t"][keep]
        rows["done"] = rec["done"][keep]
        dma_rows.append(rows)
        tb_start = int(pr.node.tb_floor(t_start[r]))
        processes.append({
            "rank": r, "node": node_name(node_of[r], hz), "path": path, "pid": 4000 + 17 * r,
            "start_timebase": tb_start,
            "start_realtime_ns": int(REALTIME_BASE_NS + (t_start[r] - t0) / hz * 1e9
                                     + node_of[r] * 1_300_000),
        })
    messages = _messages(world, recs_by_rank, uid_slot)
    manifest = build_manifest(f"{o.workload}_sim", hz, o.decrementer_restore, o.nodes,
                              processes, f"{o.workload}_spu",
                              world.communicators if world is not None else None)
    (out_dir / "run.json").write_text(json.dumps(manifest, indent=1) + "\n")

    t_all = np.concatenate([v[np.isfinite(v)] for v in slot_time.values()])
    t_mid = float((t_all.min() + t_all.max()) / 2) if len(t_all) else t0
    nodes = {}
    for c in clocks:
        off, rate = c.midpoint_map(t_mid)
        nodes[c.name] = NodeTruth(c.name, off, rate, c.ref_knots, c.node_knots)
    summary = SimSummary(out_dir, total_records, sum(per_rank_slots), o.spes * o.ranks, o.nodes,
                         o.ranks, total_bytes, sum(pr.sched.switches for pr in procs),
                         sum(pr.sched.preemptions for pr in procs), o.phases, per_rank_slots)
    opts_dict = asdict(o)
    if not w.cluster:  # other workloads' truth.json stays as it was before the cluster one
        for key in CLUSTER_OPTIONS:
            del opts_dict[key]
    truth = Truth(
        options=opts_dict, timebase_hz=hz, slot_time=slot_time, slot_reserve=slot_res,
        slot_interval=slot_int, damaged_slots=damaged,
        intervals=np.concatenate(intervals) if intervals else np.zeros(0, INTERVAL_DTYPE),
        dma=np.concatenate(dma_rows) if dma_rows else np.zeros(0, DMA_DTYPE),
        messages=messages, nodes=nodes, node_names=[c.name for c in clocks],
        damage=damage_log,
        summary={k: v for k, v in asdict(summary).items() if k != "out_dir"},
    )
    save_truth(out_dir, truth)
    return summary


def _collect_intervals(rank: int, node: int, pr: ProcessSim, meta: np.ndarray,
                       out: list[np.ndarray]) -> None:
    """Per live interval: offset_ticks = K - 2^32 * m0 (m0 from its first reading)."""
    is_reading = (meta["kind"] == KIND_SPE) | (meta["kind"] == KIND_BLOCK)
    for c, clock in pr.clocks.items():
        sel = is_reading & (meta["ctx"] == c)
        t = meta["t_read"][sel]
        iv = meta["interval"][sel]
        rows = np.zeros(len(clock.k_values), INTERVAL_DTYPE)
        for i, k in enumerate(clock.k_values):
            ti = t[iv == i]
            if len(ti):
                first_value = k - int(clock.node.tb_floor(float(ti.min())))
            else:
                first_value = clock.first_values[i]
            m0 = first_value // (1 << 32)
            rows[i] = (rank, c, i, node, float(k - (m0 << 32)), len(ti))
        out.append(rows)


def _messages(world: MpiWorld | ClusterWorld | None, recs_by_rank: dict[int, np.ndarray],
              uid_slot: dict[int, np.ndarray]) -> np.ndarray:
    """The truth's message rows, in the order the world matched them; a message whose send
    or receive record is gone (damage) or has no slot is left out."""
    if world is None or not world.messages:
        return np.zeros(0, MESSAGE_DTYPE)
    m = np.array(world.messages, dtype=np.int64).reshape(-1, 4)
    keep = np.ones(len(m), bool)
    t_send = np.full(len(m), np.nan)
    t_arrive = np.full(len(m), np.nan)
    slots = np.full((len(m), 2), -1, np.int64)
    for side, (rank_col, uid_col) in enumerate(((0, 1), (2, 3))):
        for r in np.unique(m[:, rank_col]).tolist():
            sel = np.flatnonzero(m[:, rank_col] == r)
            uid = m[sel, uid_col]
            if side == 0:  # the send record must still exist (damage may remove records)
                recs = recs_by_rank[r]
                i = np.searchsorted(recs["uid"], uid)
                found = i < len(recs)
                found[found] = recs["uid"][i[found]] == uid[found]
                keep[sel[~found]] = False
                t_send[sel[found]] = recs["t"][i[found]]
                t_arrive[sel[found]] = recs["done"][i[found]]
            table = uid_slot[r]
            inside = uid < len(table)
            slots[sel[inside], side] = table[uid[inside]]
    keep &= (slots[:, 0] >= 0) & (slots[:, 1] >= 0)
    rows = np.zeros(int(keep.sum()), MESSAGE_DTYPE)
    rows["send_rank"], rows["send_slot"] = m[keep, 0], slots[keep, 0]
    rows["recv_rank"], rows["recv_slot"] = m[keep, 2], slots[keep, 1]
    rows["t_send"], rows["t_arrive"] = t_send[keep], t_arrive[keep]
    return rows


__all__ = ["SimOptions", "SimSummary", "simulate_run"]
