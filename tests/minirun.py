"""A tiny hand-built CBT 1 run with exactly known content, for pipeline tests.

One rank, one node, the main PPE thread and one SPE context. The PPE creates, loads and runs
the context, writes one inbound mailbox value and reads one outbound value; the SPE gets 4 KiB
by DMA, waits for its tag, exchanges the mailbox values, and exits. The SPE decrementer has
offset ``SPE_OFFSET`` (node timebase = SPE_OFFSET + local); slot order follows true time.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from cell_otf2.input import format as fmt

P, S = fmt.PpeCode, fmt.SpeCode
HZ = 14_318_000
SPE_OFFSET = 1_000_000  # node_tb = SPE_OFFSET + local, local = -decr
LS_EA = 0x10000000
PS_EA = 0x20000000


def decr_at(node_tb: int) -> int:
    return (-(node_tb - SPE_OFFSET)) % (1 << 32)


def build(run_dir: Path, order: str = ">", records_per_block: int = 4, jump: int = 0,
          wait: int = 0) -> dict:
    """Write the run; returns counts of what went in.

    ``jump`` ticks are added to every moment from 490 on (a long computation between the
    SPE's inbound mailbox read and its outbound write, with no heartbeat in it). ``wait``
    ticks: the PPE sleeps (region 2, from 273) and writes the inbound mailbox that much later
    (at 272 + wait), while the SPE waits in its read from 270 on (no heartbeat either); every
    later moment moves with it.
    """
    lay = fmt.Layout(order)
    run_dir.mkdir(parents=True, exist_ok=True)
    # (true node time, kind, fields) in true order
    ppe = [
        (100, P.ENTER, dict(a=1)),
        (110, P.CTX_CREATE, dict(a=0, b=LS_EA, c=PS_EA)),
        (120, P.CTX_LOAD, dict(a=0, b=1)),
        (130, P.CTX_RUN_BEGIN, dict(a=0)),
        (200, P.IN_MBOX_WRITE_BEGIN, dict(a=0)),
        (210, P.IN_MBOX_WRITE_END, dict(a=0, b=42)),
        (300, P.OUT_MBOX_READ_BEGIN, dict(a=0)),
        (520, P.OUT_MBOX_READ_END, dict(a=0, b=7)),
        (700, P.CTX_RUN_END, dict(a=0, b=1, c=0)),
        (710, P.CTX_DESTROY, dict(a=0)),
        (720, P.LEAVE, dict(a=1)),
    ]
    spe = [
        (150, S.START, dict()),
        (160, S.DMA, dict(a=0x40, b=0x30000000, c=(0x100 << 32) | 4096, d=3)),
        (170, S.TAG_WAIT_BEGIN, dict(a=2, b=1 << 3)),
        (260, S.TAG_WAIT_END, dict(b=1 << 3)),
        (270, S.IN_MBOX_READ_BEGIN, dict()),
        (280, S.IN_MBOX_READ_END, dict(b=42)),
        (500, S.OUT_MBOX_WRITE_BEGIN, dict(b=7)),
        (510, S.OUT_MBOX_WRITE_END, dict()),
        (600, S.EXIT, dict(b=0)),
    ]
    if wait:
        ppe = [(272 if c == P.IN_MBOX_WRITE_BEGIN else 276 if c == P.IN_MBOX_WRITE_END else t,
                c, f) for t, c, f in ppe]
        ppe = [(t + wait if t >= 272 else t, c, f) for t, c, f in ppe]
        ppe += [(273, P.ENTER, dict(a=2)), (271 + wait, P.LEAVE, dict(a=2))]
        ppe.sort(key=lambda x: x[0])
        spe = [(t + wait if t >= 272 else t, c, f) for t, c, f in spe]
    ppe = [(t + jump if t >= 490 else t, c, f) for t, c, f in ppe]
    spe = [(t + jump if t >= 490 else t, c, f) for t, c, f in spe]
    # blocks: flushed when full or at exit; header reserved 2 ticks after its last record
    blocks = []
    for i in range(0, len(spe), records_per_block):
        chunk = spe[i : i + records_per_block]
        blocks.append((chunk[-1][0] + 2, chunk))
    items = [(t, 0, ("ppe", code, f)) for t, code, f in ppe]
    items += [(t, 1, ("block", k, chunk)) for k, (t, chunk) in enumerate(blocks)]
    items.sort(key=lambda x: (x[0], x[1]))
    slots = []
    for t, _, item in items:
        if item[0] == "ppe":
            _, code, f = item
            s = np.zeros(1, lay.ppe)
            s["code"], s["thread"], s["timebase"] = code, 0, t + 1
            for k, v in f.items():
                s[k] = v
            slots.append(s.tobytes())
        else:
            _, k, chunk = item
            h = np.zeros(1, lay.block)
            h["code"], h["ctx"], h["decr"], h["seq"] = fmt.ControlCode.BLOCK, 0, decr_at(t + 1), k
            h["count"], h["buffer"], h["ticket"] = len(chunk), k % 2, len(slots)
            h["flags"] = 1 if k == len(blocks) - 1 else 0
            slots.append(h.tobytes())
            for rt, code, f in chunk:
                r = np.zeros(1, lay.spe)
                r["code"], r["decr"] = code, decr_at(rt)
                for key, v in f.items():
                    r[key] = v
                slots.append(r.tobytes())
    hdr = lay.new_header()
    hdr["spe_buffer_records"], hdr["spe_buffers"] = records_per_block, 2
    hdr["rank"], hdr["timebase_hz"], hdr["slots_reserved"] = 0, HZ, len(slots)
    (run_dir / "rank00000.cbt").write_bytes(hdr.tobytes() + b"".join(slots))
    manifest = {
        "format": "cbt", "version": 1, "application": "minirun", "timebase_hz": HZ,
        "decrementer_restore": "compensated",
        "nodes": [{"name": "qs20-a", "cell_chips": 1, "spes_per_chip": 8}],
        "processes": [{"rank": 0, "node": "qs20-a", "path": "rank00000.cbt",
                       "start_timebase": 50, "start_realtime_ns": 1226400000000000000}],
        "regions": [{"id": 1, "name": "main", "core": "ppe", "kind": "function"}]
        + ([{"id": 2, "name": "usleep", "core": "ppe", "kind": "function"}] if wait else []),
        "programs": [{"id": 1, "name": "dma_spu"}],
        "counters": [],
        "communicators": [{"id": 0, "name": "MPI_COMM_WORLD", "ranks": [0]}],
    }
    (run_dir / "run.json").write_text(json.dumps(manifest))
    return {"ppe": len(ppe), "spe": len(spe), "blocks": len(blocks)}
