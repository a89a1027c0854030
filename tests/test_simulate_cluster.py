"""The simulator's ``cluster`` workload (cell_otf2/sim/cluster.py) against its ground truth.

The dumps are decoded with the independent decoder of tests/test_simulate.py (format dtypes
only) and, once, by the converter's own stages; MPI messages are matched here per
(communicator, sender, receiver, tag) in order and must be exactly the truth's, every receive
recorded after its true arrival, the least latency of a kind the same both ways, the halo's
receives recorded at MPI_Waitall in completion order, the one-way shift on the reversed
communicator and the collectives where docs/simulator.md puts them. The generic checks
(layout, slot order, clocks, intervals, mailboxes, DMA, lifecycle) run on two cluster runs in
tests/test_simulate.py. Runs are small; the one long run checks the simulator stays cheap.
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from test_simulate import TWO32, Dump, load

from cell_otf2.input import format as fmt
from cell_otf2.sim.run import simulate_run
from cell_otf2.sim.truth import load_truth

P, S = fmt.PpeCode, fmt.SpeCode
US = 14.318  # ticks per microsecond

RING = dict(nodes=3, ranks=6, spes=2, phases=32, exchange_s=0.004, wander_us=8.0,
            wander_period_s=0.1, imbalance=0.05)
CHAIN = dict(nodes=4, ranks=4, spes=1, phases=12, exchange_s=0.003, topology="chain")


@pytest.fixture(scope="module")
def ring(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("ring")
    simulate_run(d, "cluster", 31, **RING)
    return d


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("chain")
    simulate_run(d, "cluster", 32, **CHAIN)
    return d


def _messages(manifest: dict, dumps: dict[int, Dump]) -> dict[tuple, list[tuple]]:
    """(comm, sender, receiver, tag) -> [(send rank, send slot, recv rank, recv slot)]."""
    comms = {c["id"]: c["ranks"] for c in manifest["communicators"]}
    sends: dict[tuple, list] = defaultdict(list)
    recvs: dict[tuple, list] = defaultdict(list)
    for rank, d in dumps.items():
        for s in np.flatnonzero(d.is_ppe & np.isin(d.code, [P.MPI_SEND, P.MPI_ISEND,
                                                            P.MPI_RECV, P.MPI_IRECV])):
            comm = int(d.ppe["a"][s])
            peer, tag = divmod(int(d.ppe["b"][s]), TWO32)
            other = comms[comm][peer]
            if d.code[s] in (P.MPI_SEND, P.MPI_ISEND):
                sends[(comm, rank, other, tag)].append((rank, s))
            else:
                recvs[(comm, other, rank, tag)].append((rank, s))
    assert sends.keys() == recvs.keys()
    out = {}
    for key, ss in sends.items():
        rr = recvs[key]
        assert len(ss) == len(rr), key
        out[key] = [(a, s, b, r) for (a, s), (b, r) in zip(ss, rr, strict=True)]
    return out


def _node(manifest: dict) -> dict[int, str]:
    return {p["rank"]: p["node"] for p in manifest["processes"]}


@pytest.mark.parametrize("which", ["ring", "chain"])
def test_messages_match_the_truth_and_arrive_before_their_receive(ring, chain, which):
    run = ring if which == "ring" else chain
    manifest, dumps = load(run)
    truth = load_truth(run)
    msgs = _messages(manifest, dumps)
    got = {(a, s): (b, r) for pairs in msgs.values() for a, s, b, r in pairs}
    want = {(int(m["send_rank"]), int(m["send_slot"])): (int(m["recv_rank"]),
                                                        int(m["recv_slot"]))
            for m in truth.messages}
    assert got == want and len(got) > 0
    node = _node(manifest)
    for m in truth.messages:
        sr, rr = int(m["send_rank"]), int(m["recv_rank"])
        t_send = truth.slot_time[sr][m["send_slot"]]
        t_recv = truth.slot_time[rr][m["recv_slot"]]
        assert t_send == m["t_send"] < m["t_arrive"] < t_recv
        nbytes = int(dumps[sr].ppe["c"][m["send_slot"]]) & 0xFFFFFFFF
        lat_us = (m["t_arrive"] - m["t_send"]) / US
        cross = node[sr] != node[rr]
        lo = (4.0 + nbytes / 1500.0) if cross else (2.0 + nbytes / 4000.0)
        hi = lo + (4.0 if cross else 1.0)
        # the least latency depends on the kind (size, across nodes or not), not the direction
        assert lo - 1e-6 <= lat_us <= hi + 1e-6, (sr, rr, nbytes, lat_us)
    # non-overtaking: per channel, arrivals in order
    for pairs in msgs.values():
        arrive = [truth.messages["t_arrive"][(truth.messages["send_rank"] == a)
                                             & (truth.messages["send_slot"] == s)][0]
                  for a, s, _, _ in pairs]
        assert np.all(np.diff(arrive) > 0)


def test_ring_schedule(ring):
    manifest, dumps = load(ring)
    truth = load_truth(ring)
    n, k_n = RING["ranks"], RING["phases"]
    comms = {c["name"]: c for c in manifest["communicators"]}
    assert comms["MPI_COMM_WORLD"]["ranks"] == list(range(n))
    assert comms["REVERSED_COMM"]["id"] == 1 and comms["REVERSED_COMM"]["ranks"] == \
        list(range(n))[::-1]
    node = _node(manifest)
    leaders = [min(r for r in range(n) if node[r] == name) for name in
               sorted(set(node.values()))]
    assert comms["NODE_LEADERS_COMM"]["ranks"] == leaders
    msgs = _messages(manifest, dumps)
    by_comm = defaultdict(int)
    for (comm, a, b, _), pairs in msgs.items():
        by_comm[comm] += len(pairs)
        if comm == 1:
            assert b == (a + 1) % n, "the shift runs one way: to the next world rank"
        else:
            assert b in ((a + 1) % n, (a - 1) % n)
    assert by_comm[0] == 2 * n * k_n  # halo: both neighbours, every iteration
    assert by_comm[1] == n * (k_n // 4)  # shift: every 4th iteration
    # the halo's sizes differ from the shift's
    sizes = {comm: {int(dumps[a].ppe["c"][s]) & 0xFFFFFFFF for a, s, _, _ in pairs}
             for (comm, *_), pairs in msgs.items()}
    assert sizes[0] == {8192} and sizes[1] == {4096}
    # collectives: barrier first and last, allreduce every 8th, bcast every 16th on leaders
    for r, d in dumps.items():
        ends = d.ppe_sel(P.MPI_COLL_END)
        ops = [divmod(int(d.ppe["b"][s]), TWO32)[0] for s in ends]
        comm = [int(d.ppe["a"][s]) for s in ends]
        want = 2 + k_n // 8 + (k_n // 16 if r in leaders else 0)
        assert len(ops) == want and ops[0] == ops[-1] == fmt.CollOp.BARRIER
        assert ops.count(fmt.CollOp.ALLREDUCE) == k_n // 8
        assert all(c == 2 for c, o in zip(comm, ops, strict=True) if o == fmt.CollOp.BCAST)
    begins = {r: d.ppe_sel(P.MPI_COLL_BEGIN) for r, d in dumps.items()}
    ends = {r: d.ppe_sel(P.MPI_COLL_END) for r, d in dumps.items()}
    t = truth.slot_time
    for k in range(2 + k_n // 8):  # world collectives: the j-th of every non-leader
        pick = [r for r in range(n) if r not in leaders]
        tb = [t[r][begins[r][k]] for r in pick]
        te = [t[r][ends[r][k]] for r in pick]
        assert max(tb) < min(te)


def test_waitall_records_receives_in_completion_order(ring):
    manifest, dumps = load(ring)
    truth = load_truth(ring)
    arrive = {(int(m["recv_rank"]), int(m["recv_slot"])): float(m["t_arrive"])
              for m in truth.messages}
    waitall = next(r["id"] for r in manifest["regions"] if r["name"] == "MPI_Waitall")
    late = prompt = 0
    for rank, d in dumps.items():
        t = truth.slot_time[rank]
        main = np.flatnonzero(d.is_ppe & (d.ppe["thread"] == 0))
        inside = False
        for s in main:
            code = d.code[s]
            if code == P.ENTER and int(d.ppe["a"][s]) == waitall:
                inside, enter, seen = True, t[s], []
            elif code == P.LEAVE and int(d.ppe["a"][s]) == waitall:
                inside = False
                assert len(seen) == 2  # one receive from each neighbour
                # completion order: what arrived during the wait comes after what was there
                done = np.maximum(seen, enter)
                assert np.all(np.diff(done) >= 0)
            elif code == P.MPI_IRECV:
                assert inside
                a = arrive[(rank, s)]
                seen.append(a)
                if a < enter - 100 * US:
                    late += 1  # arrived long before the wait began: recorded late
                elif t[s] - a < 2 * US:
                    prompt += 1
    assert late > 0 and prompt > 0


def test_chain_talks_only_to_neighbouring_nodes(chain):
    manifest, dumps = load(chain)
    node_index = {n["name"]: i for i, n in enumerate(manifest["nodes"])}
    node = {r: node_index[name] for r, name in _node(manifest).items()}
    msgs = _messages(manifest, dumps)
    pairs = {(node[a], node[b]) for (_, a, b, _) in msgs}
    assert pairs == {(i, i + 1) for i in range(3)} | {(i + 1, i) for i in range(3)}
    assert {comm for comm, *_ in msgs} == {0, 1}
    assert all(len(d.ppe_sel(P.MPI_COLL_BEGIN)) == 0 for d in dumps.values())
    assert [c["id"] for c in manifest["communicators"]] == [0, 1]


def test_the_converter_decodes_and_matches_everything(ring):
    from cellbench.analysis import analyze

    from cell_otf2.model import MsgKind

    pipe = analyze(ring)
    assert not pipe.damage, pipe.damage.summary_lines()
    truth = load_truth(ring)
    msgs = pipe.matches.messages
    assert int((msgs["kind"] == MsgKind.MPI).sum()) == len(truth.messages)
    assert len(pipe.matches.dma) == len(truth.dma)


def test_same_seed_same_bytes(tmp_path: Path):
    opts = dict(nodes=2, ranks=4, spes=2, phases=5, exchange_s=0.002, wander_us=3.0)
    for k in range(2):
        simulate_run(tmp_path / f"r{k}", "cluster", 9, **opts)
    simulate_run(tmp_path / "other", "cluster", 10, **opts)
    for f in ("run.json", "truth.json", *(f"rank{r:05d}.cbt" for r in range(4))):
        assert (tmp_path / "r0" / f).read_bytes() == (tmp_path / "r1" / f).read_bytes(), f
    assert (tmp_path / "r0" / "rank00001.cbt").read_bytes() != \
        (tmp_path / "other" / "rank00001.cbt").read_bytes()


def test_a_ten_minute_run_is_cheap(tmp_path: Path):
    t0 = time.perf_counter()
    s = simulate_run(tmp_path / "long", "cluster", 3, nodes=4, ranks=8, duration_s=600.0,
                     exchange_s=2.0, wander_us=10.0, wander_period_s=180.0)
    took = time.perf_counter() - t0
    assert s.phases == 300 and took < 20.0
    truth = load_truth(tmp_path / "long")
    span = (np.nanmax(truth.slot_time[0]) - np.nanmin(truth.slot_time[0])) / truth.timebase_hz
    assert 590 < span < 620


@pytest.mark.parametrize("opts,match", [
    (dict(compute_s=0.1), "--exchange-s"),
    (dict(topology="star"), "topology"),
    (dict(shift_bytes=1 << 20), "shift_bytes"),
    (dict(spes=9), "SPU of its own"),
    (dict(decr_writes=True), "decrementers"),
])
def test_cluster_options_are_checked(tmp_path: Path, opts: dict, match: str):
    with pytest.raises(ValueError, match=match):
        simulate_run(tmp_path / "x", "cluster", 1, phases=2, **opts)


def test_cluster_options_belong_to_cluster(tmp_path: Path):
    with pytest.raises(ValueError, match="cluster workload only"):
        simulate_run(tmp_path / "x", "hybrid", 1, phases=2, topology="chain")
