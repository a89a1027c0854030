"""``cell2otf2 inspect RUN_DIR``: ``inspect(run_dir) -> RunInfo`` reads the manifest and every dump
and decodes them, then counts with numpy; ``RunInfo.lines()`` prints tables and ``to_dict()``
the ``--json`` object (its keys and where each number comes from: docs/format.md section 11).
A run reading refuses raises ``CellOtf2Error`` (exit 3); anything readable is inspected (exit
0, damaged or not: ``check`` judges). It does not match messages, build constraints,
synchronize or write."""

from __future__ import annotations

import os
import textwrap
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..damage import DamageLog
from ..decode.decoder import decode
from ..input import format as fmt
from ..input.manifest import load_manifest
from ..input.reader import Dump, read_dump
from ..model import Decoded, DomainKind, LocKind

P, S = fmt.PpeCode, fmt.SpeCode
MOD = 1 << 32


@dataclass
class ContextInfo:
    """One SPE context of one process."""

    ctx: int
    program: str | None  # name from the manifest, None without CTX_LOAD or id undefined
    program_id: int | None
    created: bool  # a CTX_CREATE defined it
    records: int = 0
    blocks: int = 0
    partial_blocks: int = 0
    missing_blocks: int = 0
    intervals: int = 0
    switches: int = 0
    decr_writes: int = 0
    heartbeats: int = 0
    wraps: int = 0
    unresolved_wraps: int = 0
    readings: int = 0  # decrementer readings: records and block headers
    first_decr: int | None = None
    last_decr: int | None = None
    span_ticks: int = 0


@dataclass
class ProcessInfo:
    """One MPI process and its dump."""

    rank: int
    node: str
    dump: str
    dump_bytes: int
    byte_order: str
    spe_buffer_records: int
    spe_buffers: int
    slots: int
    slots_reserved: int
    ppe_threads: list[int]
    records: dict[str, int]
    records_per_kind: dict[str, dict[str, int]]
    blocks: dict[str, int]
    gaps: int
    lost_slots: int
    timebase_first: int | None
    timebase_last: int | None
    span_s: float | None
    contexts: list[ContextInfo] = field(default_factory=list)


@dataclass
class NodeInfo:
    name: str
    cell_chips: int
    spes_per_chip: int
    ranks: list[int]
    timebase_first: int | None
    timebase_last: int | None
    span_s: float | None


@dataclass
class RunInfo:
    """What a run holds (see the module docstring for every field)."""

    run_dir: str
    application: str | None
    timebase_hz: int
    decrementer_restore: str
    nodes: list[NodeInfo]
    processes: list[ProcessInfo]
    totals: dict[str, Any]
    damage: list[str]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict with the keys documented in the module docstring."""
        return asdict(self)

    def lines(self) -> list[str]:
        """Human tables, 80-100 columns wide."""
        return _render(self)


def inspect(run_dir: str | Path) -> RunInfo:
    """Read and decode ``run_dir`` and describe it; raises ``CellOtf2Error`` if refused."""
    man = load_manifest(Path(run_dir))
    damage = DamageLog()
    dumps: list[Dump] = []
    for p in man.processes:
        dumps.append(read_dump(man.dump_path(p.rank), man, p.rank))
        damage.extend(dumps[-1].damage)
    dec = decode(man, dumps, damage)
    hz = man.timebase_hz
    index = _Index(dec)
    procs = [_process(man, dec, index, d, hz) for d in dumps]
    nodes = []
    for i, n in enumerate(man.nodes):
        mine = [p for p in procs if man.node_of_rank(p.rank) == i]
        firsts = [p.timebase_first for p in mine if p.timebase_first is not None]
        lasts = [p.timebase_last for p in mine if p.timebase_last is not None]
        first = min(firsts) if firsts else None
        last = max(lasts) if lasts else None
        nodes.append(NodeInfo(n.name, n.cell_chips, n.spes_per_chip, [p.rank for p in mine],
                              first, last, _span(first, last, hz)))
    return RunInfo(
        run_dir=str(run_dir),
        application=man.application,
        timebase_hz=hz,
        decrementer_restore=str(man.decrementer_restore),
        nodes=nodes,
        processes=procs,
        totals=_totals(procs, len(man.nodes)),
        damage=damage.summary_lines(),
    )


# --------------------------------------------------------------------------------------------
# counting
# --------------------------------------------------------------------------------------------


def _span(first: int | None, last: int | None, hz: int) -> float | None:
    return None if first is None or last is None else (last - first) / hz


def _per_kind(codes: np.ndarray, enum: type[fmt.IntEnum]) -> dict[str, int]:
    values, counts = np.unique(codes, return_counts=True)
    found = dict(zip(values.tolist(), counts.tolist(), strict=True))
    return {c.name: int(found.get(int(c), 0)) for c in enum}


class _Index:
    """Where each location's records and each rank's anchors sit in the decoded arrays
    (both sorted by it), found once so that per-process work touches only its own rows."""

    def __init__(self, dec: Decoded) -> None:
        self.dec = dec
        locs = np.arange(dec.locations.size + 1, dtype=dec.records["loc"].dtype)
        self.rec_at = np.searchsorted(np.ascontiguousarray(dec.records["loc"]), locs)
        ranks = np.arange(dec.manifest.n_ranks + 1, dtype=dec.anchors["rank"].dtype)
        self.anc_at = np.searchsorted(np.ascontiguousarray(dec.anchors["rank"]), ranks)

    def records(self, locs: np.ndarray) -> np.ndarray:
        """Records of ``locs`` (ascending), in (location, slot) order."""
        parts = [self.dec.records[self.rec_at[x]:self.rec_at[x + 1]] for x in locs.tolist()]
        return np.concatenate(parts) if parts else self.dec.records[:0]

    def anchors(self, rank: int) -> np.ndarray:
        """Anchors of ``rank``, in slot order."""
        return self.dec.anchors[self.anc_at[rank]:self.anc_at[rank + 1]]


def _process(man, dec: Decoded, index: _Index, dump: Dump, hz: int) -> ProcessInfo:
    r = dump.rank
    ppe, blocks, spe = dump.ppe, dump.blocks, dump.spe
    # node timebase: PPE records of this rank that kept their clock (not running backwards)
    loc = dec.locations
    threads = np.flatnonzero((loc["rank"] == r) & (loc["kind"] == LocKind.PPE_THREAD))
    rec = index.records(threads)
    tb = rec["local"][rec["domain"] >= 0].astype(np.uint64)  # raw u64 readings, kept as i8
    first = int(tb.min()) if tb.size else None
    last = int(tb.max()) if tb.size else None
    n_blocks = int(blocks.size)
    size = os.stat(dump.path).st_size
    contexts = _contexts(man, dec, index, dump)
    return ProcessInfo(
        rank=r,
        node=man.processes[r].node,
        dump=dump.name,
        dump_bytes=int(size),
        byte_order=dump.byte_order,
        spe_buffer_records=dump.spe_buffer_records,
        spe_buffers=dump.spe_buffers,
        slots=int(dump.n_slots),
        slots_reserved=int(dump.slots_reserved),
        ppe_threads=sorted({0, *np.unique(ppe["thread"]).tolist()}),
        records={"ppe": int(ppe.size), "spe": int(spe.size)},
        records_per_kind={"ppe": _per_kind(ppe["code"], P), "spe": _per_kind(spe["code"], S)},
        blocks={
            "count": n_blocks,
            "partial": int((blocks["count"] < dump.spe_buffer_records).sum()),
            "records_missing": int((blocks["count"].astype(np.int64)
                                    - blocks["present"]).clip(0).sum()),
            "missing": sum(c.missing_blocks for c in contexts),
        },
        gaps=int(dump.gaps.size),
        lost_slots=int(dump.gaps["lost"].sum(dtype=np.uint64)) if dump.gaps.size else 0,
        timebase_first=first,
        timebase_last=last,
        span_s=_span(first, last, hz),
        contexts=contexts,
    )


def _contexts(man, dec: Decoded, index: _Index, dump: Dump) -> list[ContextInfo]:
    r = dump.rank
    ppe, blocks, spe = dump.ppe, dump.blocks, dump.spe
    ctxs = dec.contexts[dec.contexts["rank"] == r]
    if not ctxs.size:
        return []
    ctx_ids = ctxs["ctx"].astype(np.int64)  # sorted (decode builds them in order)
    n = ctx_ids.size

    def per_ctx(values: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """Sum (or count) per context of items given by their context id."""
        idx = np.searchsorted(ctx_ids, values.astype(np.int64))
        return np.bincount(idx, weights=weights, minlength=n)[:n].astype(np.int64)

    sw = ppe[(ppe["code"] == P.CTX_SWITCH) & (ppe["b"] == fmt.SwitchType.STOP)
             & np.isin(ppe["a"].astype(np.int64), ctx_ids)]
    switches = per_ctx(sw["a"])
    records = per_ctx(spe["ctx"])
    writes = per_ctx(spe["ctx"][spe["code"] == S.DECR_WRITE])
    beats = per_ctx(spe["ctx"][spe["code"] == S.HEARTBEAT])
    n_blocks = per_ctx(blocks["ctx"])
    partial = per_ctx(blocks["ctx"][blocks["count"] < dump.spe_buffer_records])
    # blocks absent from each context's seq: the skips between its consecutive blocks (slot
    # order is seq order) and before its first one
    by_ctx = np.lexsort((blocks["slot"], blocks["ctx"]))
    b_ctx = blocks["ctx"][by_ctx].astype(np.int64)
    seq = blocks["seq"][by_ctx].astype(np.int64)
    prev = np.concatenate([[-1], seq[:-1]])
    prev[np.concatenate([[True], b_ctx[1:] != b_ctx[:-1]])] = -1  # a context's first block
    missing = per_ctx(b_ctx, weights=np.clip(seq - prev - 1, 0, None))

    # decrementer readings with their interval and local time, in program order per interval
    dom, local, raw = _readings(dec, dump, index)
    d = dec.domains
    order = np.lexsort((np.arange(dom.size), dom))  # readings already in program order
    dom, local, raw = dom[order], local[order], raw[order]
    start = np.flatnonzero(np.concatenate([[True], dom[1:] != dom[:-1]])) if dom.size else dom
    # no reading at all (a dump cut inside its first blocks): no group, not one ending at -1
    end = np.append(start[1:], dom.size) - 1 if dom.size else start
    g_dom = dom[start]
    g_ctx = d["ctx"][g_dom].astype(np.int64)
    g_i = np.searchsorted(ctx_ids, g_ctx)
    g_span = local[end] - local[start]
    g_wraps = (raw[end] + local[end]) // MOD
    readings = np.bincount(g_i, weights=end - start + 1, minlength=n).astype(np.int64)
    span = np.bincount(g_i, weights=g_span, minlength=n).astype(np.int64)
    wraps = np.bincount(g_i, weights=g_wraps, minlength=n).astype(np.int64)
    # first and last reading of each context: its first and last group in domain order
    first_decr: list[int | None] = [None] * n
    last_decr: list[int | None] = [None] * n
    if g_i.size:
        lo = np.searchsorted(g_i, np.arange(n), "left")
        hi = np.searchsorted(g_i, np.arange(n), "right") - 1
        for i in np.flatnonzero(hi >= lo).tolist():
            first_decr[i] = int(raw[start[lo[i]]])
            last_decr[i] = int(raw[end[hi[i]]])
    # intervals: domains of the context's SPE location; segments > 0 are unresolved wraps
    is_iv = d["kind"] == DomainKind.SPE_INTERVAL
    iv = d[is_iv & (d["rank"] == r)]
    iv_i = np.searchsorted(ctx_ids, iv["ctx"].astype(np.int64))
    intervals = np.bincount(iv_i[iv["segment"] == 0], minlength=n)
    unresolved = np.bincount(iv_i[iv["segment"] > 0], minlength=n)

    out = []
    for i, c in enumerate(ctxs):
        pid = int(c["program"])
        prog = man.program_by_id.get(pid) if pid >= 0 else None
        out.append(ContextInfo(
            ctx=int(c["ctx"]),
            program=prog.name if prog is not None else None,
            program_id=pid if pid >= 0 else None,
            created=bool(c["created"]),
            records=int(records[i]),
            blocks=int(n_blocks[i]),
            partial_blocks=int(partial[i]),
            missing_blocks=int(missing[i]),
            intervals=int(intervals[i]),
            switches=int(switches[i]),
            decr_writes=int(writes[i]),
            heartbeats=int(beats[i]),
            wraps=int(wraps[i]),
            unresolved_wraps=int(unresolved[i]),
            readings=int(readings[i]),
            first_decr=first_decr[i],
            last_decr=last_decr[i],
            span_ticks=int(span[i]),
        ))
    return out


def _readings(dec: Decoded, dump: Dump,
              index: _Index | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every decrementer reading of one process: (domain, local, raw), in program order.

    SPE records come from ``dec.records`` (sorted by location, then slot) beside the dump's
    records sorted the same way; block headers from ``dec.anchors`` by slot. Program order
    inside a context: a block's records, then its header (as ``decode`` orders them).
    """
    r = dump.rank
    spe, blocks = dump.spe, dump.blocks
    index = index or _Index(dec)
    loc_of_ctx = {c: loc for (rr, c), loc in dec.ctx_loc.items() if rr == r}
    if not spe.size and not blocks.size:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    ctx_list = np.array(sorted(loc_of_ctx), dtype=np.int64)
    loc_list = np.array([loc_of_ctx[c] for c in ctx_list.tolist()], dtype=np.int64)
    spe_loc = loc_list[np.searchsorted(ctx_list, spe["ctx"].astype(np.int64))]
    by_loc = np.lexsort((spe["slot"], spe_loc))
    rec_sub = index.records(np.sort(loc_list))  # by (loc, slot): the order of ``by_loc``
    r_dom = rec_sub["domain"].astype(np.int64)
    r_loc = rec_sub["local"]
    r_raw = spe["decr"][by_loc].astype(np.int64)
    r_key = 2 * spe["slot"][by_loc]
    r_ctx_loc = spe_loc[by_loc]
    anc = index.anchors(r)  # sorted by slot
    at = np.searchsorted(anc["slot"], blocks["slot"])
    h_dom = anc["domain"][at].astype(np.int64)
    h_loc = anc["local"][at]
    h_raw = blocks["decr"].astype(np.int64)
    h_key = 2 * (blocks["slot"] + blocks["present"]) + 1
    h_ctx_loc = loc_list[np.searchsorted(ctx_list, blocks["ctx"].astype(np.int64))]
    dom = np.concatenate([r_dom, h_dom])
    local = np.concatenate([r_loc, h_loc])
    raw = np.concatenate([r_raw, h_raw])
    po = np.lexsort((np.concatenate([r_key, h_key]), np.concatenate([r_ctx_loc, h_ctx_loc])))
    return dom[po], local[po], raw[po]


def _totals(procs: list[ProcessInfo], n_nodes: int) -> dict[str, Any]:
    ctxs = [c for p in procs for c in p.contexts]
    kinds = {side: {name: sum(p.records_per_kind[side][name] for p in procs)
                    for name in (procs[0].records_per_kind[side] if procs else {})}
             for side in ("ppe", "spe")}
    ppe = sum(p.records["ppe"] for p in procs)
    spe = sum(p.records["spe"] for p in procs)
    return {
        "processes": len(procs),
        "nodes": n_nodes,
        "ppe_threads": sum(len(p.ppe_threads) for p in procs),
        "contexts": len(ctxs),
        "records": ppe + spe,
        "records_ppe": ppe,
        "records_spe": spe,
        "records_per_kind": kinds,
        "slots": sum(p.slots for p in procs),
        "blocks": sum(p.blocks["count"] for p in procs),
        "partial_blocks": sum(p.blocks["partial"] for p in procs),
        "missing_blocks": sum(p.blocks["missing"] for p in procs),
        "gaps": sum(p.gaps for p in procs),
        "lost_slots": sum(p.lost_slots for p in procs),
        **{key: sum(getattr(c, key) for c in ctxs) for key in (
            "intervals", "switches", "decr_writes", "heartbeats", "wraps", "unresolved_wraps")},
    }


# --------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------


def _table(title: str, head: list[str], rows: list[list[object]], left: int = 1) -> list[str]:
    """A titled table; the first ``left`` columns left-aligned, the others right-aligned."""
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(head)]

    def fmt_row(row: list[str]) -> str:
        return "  " + "  ".join(v.ljust(w) if i < left else v.rjust(w)
                                for i, (v, w) in enumerate(zip(row, widths, strict=True)))

    return ["", *title.split("\n"), fmt_row(head).rstrip(), *(fmt_row(r).rstrip() for r in cells)]


def _ranks(ranks: list[int]) -> str:
    if not ranks:
        return "-"
    if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(map(str, ranks))


def _n(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else (many or one + 's')}"


def _secs(s: float | None) -> str | None:
    return None if s is None else f"{s:.6f}"


def _render(info: RunInfo) -> list[str]:
    t = info.totals
    out = [
        f"cell2otf2 inspect: {info.run_dir}",
        f"  application {info.application or '-'}; timebase {info.timebase_hz} Hz; "
        f"decrementer restore {info.decrementer_restore}",
        f"  {_n(t['processes'], 'process', 'processes')} on {_n(t['nodes'], 'node')}, "
        f"{_n(t['ppe_threads'], 'PPE thread')}, {_n(t['contexts'], 'SPE context')}",
        f"  {_n(t['records'], 'record')} (PPE {t['records_ppe']}, SPE {t['records_spe']}) in "
        f"{_n(t['slots'], 'slot')}; {_n(t['blocks'], 'SPE block')}; "
        f"{_n(t['lost_slots'], 'slot')} lost in {_n(t['gaps'], 'GAP')}",
        f"  {_n(t['intervals'], 'live interval')}, "
        f"{_n(t['switches'], 'context switch', 'context switches')}, "
        f"{_n(t['decr_writes'], 'decrementer write')}, {_n(t['wraps'], 'decrementer wrap')}",
    ]
    out += _table(
        "Nodes (timebase: raw readings of the node's PPE records)",
        ["node", "chips x SPEs", "ranks", "first timebase", "last timebase", "span s"],
        [[n.name, f"{n.cell_chips} x {n.spes_per_chip}", _ranks(n.ranks), n.timebase_first,
          n.timebase_last, _secs(n.span_s)] for n in info.nodes], left=3)
    order_name = {"B": "big", "L": "little"}
    out += _table(
        "Processes",
        ["rank", "node", "dump", "bytes", "order", "PPE threads", "contexts", "PPE records",
         "SPE records"],
        [[p.rank, p.node, p.dump, p.dump_bytes, order_name.get(p.byte_order, p.byte_order),
          len(p.ppe_threads), len(p.contexts), p.records["ppe"], p.records["spe"]]
         for p in info.processes], left=3)
    out += _table(
        "Buffers (rec/blk: records per SPE buffer; partial: blocks holding fewer;\n"
        "  rec miss: records blocks declare but the file lacks; blk miss: seq skips;\n"
        "  lost: slots lost in GAPs)",
        ["rank", "slots", "reserved", "rec/blk", "bufs", "blocks", "partial", "rec miss",
         "blk miss", "GAPs", "lost"],
        [[p.rank, p.slots, p.slots_reserved or "-", p.spe_buffer_records, p.spe_buffers,
          p.blocks["count"], p.blocks["partial"], p.blocks["records_missing"],
          p.blocks["missing"], p.gaps, p.lost_slots] for p in info.processes])
    out += _table(
        "Node timebase per process",
        ["rank", "first timebase", "last timebase", "span s"],
        [[p.rank, p.timebase_first, p.timebase_last, _secs(p.span_s)]
         for p in info.processes])
    procs = info.processes
    per_rank = len(procs) <= 6
    for side, label in (("ppe", "PPE"), ("spe", "SPE")):
        kinds = t["records_per_kind"][side]
        rows = [[name, total, *([p.records_per_kind[side][name] for p in procs]
                                if per_rank else [])]
                for name, total in kinds.items() if total]
        head = [f"{label} record", "total", *([f"rank {p.rank}" for p in procs]
                                               if per_rank else [])]
        out += _table(f"{label} records per kind", head, rows)
    ctx_rows = [[p.rank, c.ctx, (c.program or "-")[:16], c.records, c.blocks,
                 c.partial_blocks, c.missing_blocks, c.intervals, c.switches, c.decr_writes,
                 c.wraps] for p in procs for c in p.contexts]
    if ctx_rows:
        out += _table(
            "SPE contexts",
            ["rank", "ctx", "program", "records", "blocks", "partial", "missing",
             "intervals", "switches", "writes", "wraps"], ctx_rows, left=3)
        hz = info.timebase_hz
        out += _table(
            "SPE decrementers (raw first and last reading; span: ticks inside live intervals)",
            ["rank", "ctx", "readings", "first decr", "last decr", "span ticks", "span s",
             "heartbeats", "unresolved"],
            [[p.rank, c.ctx, c.readings, c.first_decr, c.last_decr, c.span_ticks,
              f"{c.span_ticks / hz:.6f}", c.heartbeats, c.unresolved_wraps]
             for p in procs for c in p.contexts])
    out.append("")
    if info.damage:
        out.append(f"Damage found reading and decoding ({len(info.damage)} kinds; "
                   "cell2otf2 check lists all):")
        for line in info.damage:  # wrapped for the terminal; unwrapped in to_dict()
            out.extend(textwrap.wrap(line, 98, initial_indent="  ", subsequent_indent="    ",
                                     break_on_hyphens=False))
    else:
        out.append("Damage found reading and decoding: none (cell2otf2 check looks further)")
    return out
