"""Happened-before edges between clock domains as difference constraints for ``solver.py``, in
``solver.solve``'s convention (``x[dst] - x[src] <= weight``, docs/design.md): slot order, a
block's records before its header, the semantic pairs of ``match.py`` within a node and the
links between consecutive intervals of a context, each sound by docs/format.md section 6 alone
(the list: docs/accuracy.md). It builds no constraint between nodes (their clocks drift:
``nodefit/``) and solves nothing."""

from __future__ import annotations

import numpy as np

from ..input.manifest import DecrementerRestore
from ..model import Constraints, Decoded, LinkKind, Matches, OrderOptions
from ..native import whole_rows
from ..native.sync_loops import block_pairs, pairs

#: the largest read delay accepted (a decrementer step of 2^31 ticks is a possible wrap)
MAX_READ_DELAY_TICKS = float(2**31)


def check_read_delay(value: float) -> float:
    """``value`` as a read delay in ticks, or ValueError unless finite and 0..2^31."""
    value = float(value)
    if not 0.0 <= value <= MAX_READ_DELAY_TICKS:  # also false for NaN
        raise ValueError(f"read delay must be a finite number of ticks in 0..2^31, got {value}")
    return value


def build_constraints(dec: Decoded, matches: Matches, opts: OrderOptions | None = None
                      ) -> Constraints:
    """Every within-node happened-before constraint of the trace."""
    opts = opts or OrderOptions()
    hz = dec.manifest.timebase_hz
    rec, anc = dec.records, dec.anchors
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    hard: list[bool] = []  # per part: the messages' (``Constraints.hard``)
    counts: dict[str, int] = {}

    def add(name: str, triple) -> None:
        if opts.sources is not None and name not in opts.sources:
            return
        parts.append(triple)
        hard.append(name == "semantic")
        counts[name] = counts.get(name, 0) + int(triple[0].size)

    # slot order, per process
    ok = anc["domain"] >= 0
    a = whole_rows.take(anc, ok)
    same_rank = a["rank"][1:] == a["rank"][:-1]
    src, dst, w = pairs(a["domain"][:-1][same_rank], a["local"][:-1][same_rank],
                        a["domain"][1:][same_rank], a["local"][1:][same_rank])
    add("slot_order", (src, dst, w + opts.read_delay_ticks))
    assumed: dict[str, float | str] = {
        "slot_order": "read delay" if opts.read_delay_ticks > 0 else "exact",
        "read_delay_ticks": float(opts.read_delay_ticks)}
    # block records before their header (only records whose header reads another clock give
    # a constraint); the next block's records after the previous header's reservation (the
    # SPE records into the other buffer only once it has reserved the full one): first record
    # of each block
    inside, after = block_pairs(rec, anc)
    add("block", inside)
    if rec.size > 1:
        add("block", (after[0], after[1], after[2] + opts.read_delay_ticks))
    # semantic pairs
    p = matches.pairs
    add("semantic", pairs(rec["domain"][p["before"]], rec["local"][p["before"]],
                          rec["domain"][p["after"]], rec["local"][p["after"]]))
    # interval links
    links = dec.links
    if links.size:
        sw = links[links["kind"] == LinkKind.SWITCH]
        stop, start = rec[sw["stop_rec"]], rec[sw["start_rec"]]
        # the saved value was the decrementer at the save, before the STOP record; the
        # restored value is what it counts down from once the restore began, after START
        add("switch", pairs(sw["prev"], sw["local_prev"], stop["domain"], stop["local"]))
        add("switch", pairs(start["domain"], start["local"], sw["next"], sw["local_next"]))
        eps = float(opts.kernel_read_slack_ticks)
        base = sw["local_prev"].astype(np.float64) - sw["local_next"]
        if dec.manifest.decrementer_restore == DecrementerRestore.compensated:
            lat = opts.restore_latency_s * hz
            delta = (sw["value"] - sw["start_value"]) % (1 << 32)  # the kernel's off ticks
            # ... mod 2^32: they are at least START - STOP - eps, so a context off its SPU
            # longer than that says the decrementer lost whole passes: no link then
            one = ~((stop["domain"] >= 0) & (start["domain"] >= 0)
                    & (start["local"].astype(np.float64) - stop["local"] - eps > delta))
            sw, start, delta = sw[one], start[one], delta[one]
            d = base[one] + delta
            # the kernel read the timebase at the save (decrementer = STOP value) and again
            # at the restore, which began after the START record: the save was at most
            # ``delta`` (+ eps for its readings) before START, a lower bound of ``prev``
            src, dst, w = pairs(start["domain"], start["local"], sw["prev"],
                                sw["local_prev"] + delta)
            add("switch", (src, dst, w + eps))
            # d - eps <= x[next] - x[prev] <= d + lat + eps
            add("continuity", (sw["prev"].astype(np.int64), sw["next"].astype(np.int64),
                               d + lat + eps))
            add("continuity", (sw["next"].astype(np.int64), sw["prev"].astype(np.int64),
                               -(d - eps)))
            assumed["restore_latency_ticks"] = lat
            assumed["kernel_read_slack_ticks"] = eps
        else:
            # the clock stood still at least from the STOP record to the START record
            off = start["local"].astype(np.float64) - stop["local"]
            okr = (stop["domain"] >= 0) & (start["domain"] >= 0)
            add("continuity", (sw["next"][okr].astype(np.int64), sw["prev"][okr].astype(np.int64),
                               -(base[okr] + off[okr] - eps)))
            assumed["kernel_read_slack_ticks"] = eps
        # across a step with an unknown wrap count only program order is certain
        wp = links[links["kind"] == LinkKind.WRAP]
        add("program", pairs(wp["prev"], wp["last_local_prev"], wp["next"],
                             wp["first_local_next"]))
        wr = links[links["kind"] == LinkKind.WRITE]
        if wr.size:
            lat = opts.write_latency_s * hz
            d = wr["local_prev"].astype(np.float64) - wr["local_next"]
            add("continuity", (wr["prev"].astype(np.int64), wr["next"].astype(np.int64), d + lat))
            add("continuity", (wr["next"].astype(np.int64), wr["prev"].astype(np.int64), -d))
            assumed["write_latency_ticks"] = lat
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return Constraints(empty, empty.copy(), np.zeros(0), counts, assumed)
    src = np.concatenate([t[0] for t in parts]).astype(np.int64)
    dst = np.concatenate([t[1] for t in parts]).astype(np.int64)
    w = np.concatenate([t[2] for t in parts]).astype(np.float64)
    is_hard = np.repeat(np.array(hard, dtype=bool), [t[0].size for t in parts])
    return Constraints(src, dst, w, counts, assumed, hard=is_hard)
