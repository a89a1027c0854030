"""The compiled loops of ordering and synchronization (native/_syncloops.c) and their numpy
twins give the same constraints and times (both ways through the ``native_ways`` fixture):
random record tables (hypothesis) with every edge the numpy code handles (no domain, negative
anchors, NaN, negative and too large times, ties at half a tick), the count of pairs written
in reverse order against a plain count (no record, unusable ones), and whole simulated runs
converted both ways, damaged and with context switches, byte for byte."""

from __future__ import annotations

import numpy as np
import pytest
from archive_compare import same_archive
from hypothesis import given, settings
from hypothesis import strategies as st

from cell_otf2.model import ANCHOR_DTYPE, DMA_DTYPE, MSG_DTYPE, RECORD_DTYPE, NodeMap
from cell_otf2.native import sync_loops as syncloops
from cell_otf2.sync.nodefit.fit import PiecewiseMap

BUILT = pytest.mark.native("syncloops")


def both(monkeypatch, native_ways, fn):
    """``fn()`` through the compiled loops, then through numpy; the switch as it was after."""
    return [fn() for _way in native_ways(monkeypatch)]


def tables(seed: int, n: int, n_anc: int, domains: int):
    rng = np.random.default_rng(seed)
    rec = np.zeros(n, RECORD_DTYPE)
    rec["loc"] = np.sort(rng.integers(0, max(1, n // 5), n))
    rec["code"] = rng.choice(np.array([0x101, 0x105, 0x201, 0x203, 0x2FF], np.uint16), n)
    rec["domain"] = rng.integers(-1, domains, n)
    rec["local"] = rng.choice(np.array([0, 1, -5, 2**62, -(2**62), 12345678901]), n) \
        + rng.integers(-1000, 1000, n)
    rec["anchor"] = rng.integers(-n_anc, n_anc, n)
    # runs of equal anchors, as blocks have
    rec["anchor"][1:][rng.random(max(0, n - 1)) < 0.6] = 0
    rec["anchor"] = np.where(rec["anchor"] == 0, np.roll(rec["anchor"], 1), rec["anchor"])
    anc = np.zeros(n_anc, ANCHOR_DTYPE)
    anc["domain"] = rng.integers(-1, domains, n_anc)
    anc["local"] = rng.integers(-(2**40), 2**40, n_anc)
    return rec, anc


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 400), n_anc=st.integers(1, 50),
       domains=st.integers(1, 6))
def test_block_pairs_agree_with_numpy(monkeypatch_module, native_ways, seed, n, n_anc, domains):
    rec, anc = tables(seed, n, n_anc, domains)
    compiled, numpy = both(monkeypatch_module, native_ways, lambda: syncloops.block_pairs(rec, anc))
    for c_triple, n_triple in zip(compiled, numpy, strict=True):
        for c, p in zip(c_triple, n_triple, strict=True):
            assert c.dtype == p.dtype and c.tobytes() == p.tobytes()


@BUILT
def test_block_pairs_find_what_they_should():
    rec = np.zeros(4, RECORD_DTYPE)
    rec["loc"] = [0, 0, 0, 1]
    rec["code"] = [0x201, 0x201, 0x201, 0x201]
    rec["domain"] = [1, 1, 2, 2]
    rec["local"] = [10, 20, 30, 40]
    rec["anchor"] = [0, 0, 1, 2]
    anc = np.zeros(3, ANCHOR_DTYPE)
    anc["domain"] = [2, 2, 2]
    anc["local"] = [100, 200, 300]
    (s1, d1, w1), (s2, d2, w2) = syncloops.block_pairs(rec, anc)
    assert s1.tolist() == [2, 2] and d1.tolist() == [1, 1] and w1.tolist() == [90.0, 80.0]
    # record 2 starts a block after header 0 (another clock: domain 2 vs 2 -> same: none)
    assert s2.size == 0
    anc["domain"][0] = 3
    (s1, d1, w1), (s2, d2, w2) = syncloops.block_pairs(rec, anc)
    assert s2.tolist() == [2] and d2.tolist() == [3] and w2.tolist() == [30.0 - 100.0]


def test_block_pairs_refuse_an_anchor_out_of_range():
    rec, anc = tables(1, 10, 3, 3)
    rec["anchor"][4] = 3
    with pytest.raises(IndexError):
        syncloops.block_pairs(rec, anc)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 300))
def test_settle_agrees_with_numpy(monkeypatch_module, native_ways, seed, n):
    rng = np.random.default_rng(seed)
    kinds = rng.integers(0, 7, n)
    ref = rng.uniform(0, 1e15, n)
    ref[kinds == 0] = np.nan
    ref[kinds == 1] = -rng.uniform(0, 10, int((kinds == 1).sum()))
    ref[kinds == 2] = 2.0**63 * rng.choice([1.0, 2.0, 0.9999999999999999],
                                          int((kinds == 2).sum()))
    ref[kinds == 3] = np.floor(ref[kinds == 3]) + 0.5  # ties go to even
    ref[kinds == 4] = -0.0
    has = rng.random(n) < (0.0 if seed % 5 == 0 else 0.8)

    def run():
        part = np.zeros(n, RECORD_DTYPE)
        usable = np.zeros(n, bool)
        counts = syncloops.settle(ref, has, part, usable)
        return part.tobytes(), usable.tobytes(), counts

    compiled, numpy = both(monkeypatch_module, native_ways, run)
    assert compiled == numpy


def test_settle_gives_times_that_never_decrease():
    ref = np.array([np.nan, 5.4, 3.0, 7.5, 8.5, -1.0, 9.0])
    has = np.array([False, True, True, True, True, True, True])
    part = np.zeros(ref.size, RECORD_DTYPE)
    usable = np.zeros(ref.size, bool)
    counts = syncloops.settle(ref, has, part, usable)
    assert part["time"].tolist()[:5] == [3, 5, 5, 8, 8]
    assert usable.tolist() == [True, True, True, True, True, False, True]
    assert counts == (1, 1, 0, -1, 1, 5)


def node_maps(rng: np.random.Generator, n_nodes: int) -> list:
    maps: list = []
    for i in range(n_nodes):
        if i == 0:
            maps.append(NodeMap(0.0, 1.0, 0.0, "reference"))
        elif rng.random() < 0.4:
            maps.append(NodeMap(float(rng.uniform(-1e9, 1e9)), float(rng.uniform(0.999, 1.001)),
                                None, "start-times"))
        else:
            k = int(rng.integers(2, 9))
            kn = np.sort(rng.uniform(-1e12, 1e13, k))
            kr = np.cumsum(np.diff(kn, prepend=0.0) * rng.uniform(0.999, 1.001, k)) \
                + rng.uniform(-1e6, 1e6)
            maps.append(PiecewiseMap(0.0, 1.0, None, "fit", knots_node=kn, knots_ref=kr))
    return maps


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 300), n_nodes=st.integers(1, 4))
def test_place_agrees_with_numpy(monkeypatch_module, native_ways, seed, n, n_nodes):
    """Records of any domain (none, or on any node with a straight or piecewise map, locals
    beyond every knot), offsets NaN for unbounded domains: the same times and counts."""
    rng = np.random.default_rng(seed)
    n_dom = int(rng.integers(1, 8))
    dom_offset = np.concatenate([[np.nan], rng.uniform(-1e10, 1e10, n_dom)])
    dom_offset[1:][rng.random(n_dom) < 0.2] = np.nan
    dom_node = np.concatenate([[-1], rng.integers(0, n_nodes, n_dom)]).astype(np.int64)
    maps = node_maps(rng, n_nodes)
    part = np.zeros(n, RECORD_DTYPE)
    part["domain"] = rng.integers(-1, n_dom, n)
    part["local"] = rng.choice(np.array([0, 10**12, 5 * 10**12, 2 * 10**13, -(10**13)]), n) \
        + rng.integers(0, 10**9, n)

    def run():
        rows = part.copy()
        usable = np.zeros(n, bool)
        counts = syncloops.place(rows, dom_offset, dom_node, syncloops.NodeMaps(maps), usable)
        return rows.tobytes(), usable.tobytes(), counts

    compiled, numpy = both(monkeypatch_module, native_ways, run)
    assert compiled == numpy


@BUILT
def test_place_uses_the_compiled_loop_for_both_kinds_of_map():
    maps = node_maps(np.random.default_rng(1), 6)
    assert syncloops.NodeMaps(maps).native_kinds
    assert sorted(set(syncloops.NodeMaps(maps).kind.tolist())) == [0, 1]

    class Other(NodeMap):
        def to_reference(self, x):
            return np.asarray(x, dtype=np.float64)

    assert not syncloops.NodeMaps([*maps, Other(0.0, 1.0, None, "x")]).native_kinds


def pair_table(rng, n: int, m: int, dtype: np.dtype, first: str, then: str) -> np.ndarray:
    pairs = np.zeros(m, dtype)
    pairs[first] = rng.integers(-1, max(n, 1), m) if n else -1
    pairs[then] = rng.integers(-1, max(n, 1), m) if n else -1
    return pairs


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 300), m=st.integers(0, 300))
def test_reversed_count_agrees_with_a_plain_count(monkeypatch_module, native_ways, seed, n, m):
    rng = np.random.default_rng(seed)
    rec = np.zeros(n, RECORD_DTYPE)
    rec["time"] = rng.choice(np.array([0, 5, 7, -3, 2**62]), n) + rng.integers(0, 3, n)
    usable = rng.random(n) < 0.8
    for dtype, first, then in ((MSG_DTYPE, "send", "recv"), (DMA_DTYPE, "issue", "complete")):
        pairs = pair_table(rng, n, m, dtype, first, then)
        plain = sum(1 for a, b in zip(pairs[first].tolist(), pairs[then].tolist(), strict=True)
                    if a >= 0 and b >= 0 and usable[a] and usable[b]
                    and rec["time"][b] < rec["time"][a])
        got = both(monkeypatch_module, native_ways,
                   lambda p=pairs, f=first, t=then: syncloops.reversed_count(rec, usable, p, f, t))
        assert got == [plain, plain]


def test_reversed_count_refuses_a_record_out_of_range(monkeypatch, native_ways):
    rec = np.zeros(4, RECORD_DTYPE)
    pairs = np.zeros(2, MSG_DTYPE)
    pairs["recv"] = [1, 4]
    for _way in native_ways(monkeypatch):
        with pytest.raises(IndexError):
            syncloops.reversed_count(rec, np.ones(4, dtype=bool), pairs, "send", "recv")


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@BUILT
@pytest.mark.parametrize("scenario", ["damaged-hybrid", "switches-hybrid", "four-nodes"])
def test_runs_convert_the_same_both_ways(monkeypatch, native_ways, simulated, tmp_path,
                                        scenario):
    from cell_otf2.run.conversion import convert

    run = simulated(scenario)
    out = {}
    for way in native_ways(monkeypatch):
        out[way] = tmp_path / way / "a.otf2"
        out[way].parent.mkdir()
        convert(run, out[way])
    same_archive(out["native"], out["numpy"])
