"""match.py's grouped lookups against the per-context and per-instance loops they replaced:
collective pairs instance by instance (and, between nodes, only the pairs that imply the
others: the same undominated points for the node fit), MPI channels, SNDSIG targets (random
tables, the loops written out as they were)."""

from __future__ import annotations

import numpy as np
import pytest

from cell_otf2.decode.match import (
    _channels,
    _channels_by_rows,
    _collective_pairs,
    _cross_node_pairs,
    _pair_search,
    _position_in_group,
)
from cell_otf2.input import format as fmt
from cell_otf2.sync.nodefit.points import POINT_DTYPE, undominated


def _collective_pairs_loop(bg, e, op, root):
    members, n = e.shape
    before, after = [], []
    for j in range(n):
        o = int(op[j])
        if o in (fmt.CollOp.BCAST, fmt.CollOp.SCATTER):
            src, dst = [int(root[j])], range(members)
        elif o in (fmt.CollOp.GATHER, fmt.CollOp.REDUCE):
            src, dst = range(members), [int(root[j])]
        elif o == fmt.CollOp.SCAN:
            src = dst = None
        else:
            src, dst = range(members), range(members)
        if src is None:
            bb = [(bg[i, j], e[k, j]) for k in range(members) for i in range(k + 1)]
        else:
            bb = [(bg[i, j], e[k, j]) for i in src for k in dst if i < members and k < members]
        bb = [(x, y) for x, y in bb if x >= 0 and x != y]
        before += [x for x, _ in bb]
        after += [y for _, y in bb]
    return np.array(before, dtype=np.int64), np.array(after, dtype=np.int64)


@pytest.mark.parametrize("seed", range(6))
def test_collective_pairs_as_the_loop_gave_them(seed):
    bg, e, op, root, _ = _random_collectives(seed)
    got = _collective_pairs(bg, e, op, root)
    want = _collective_pairs_loop(bg, e, op, root)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def _random_collectives(seed):
    rng = np.random.default_rng(seed)
    members, n = int(rng.integers(1, 9)), int(rng.integers(0, 30))
    e = rng.integers(0, 1000, (members, n))
    bg = np.where(rng.random((members, n)) < 0.1, -1, rng.integers(0, 1000, (members, n)))
    same = rng.random((members, n)) < 0.05  # a BEGIN that is its END gives no pair
    bg[same] = e[same]
    ops = [int(o) for o in fmt.CollOp]
    op = rng.choice(ops + [max(ops) + 7], n)
    root = rng.integers(0, members + 2, n)
    member_node = rng.integers(0, int(rng.integers(1, 5)), members)
    return bg, e, op, root, member_node


def _unique_records(e, bg):
    """The same tables with one record index per member and instance (END 2 k, BEGIN
    2 k + 1), so that a record names its member; BEGINs missing or equal to their END stay
    so."""
    members, n = e.shape
    e2 = np.arange(members * n).reshape(members, n) * 2
    bg2 = np.where(bg < 0, -1, np.where(bg == e, e2, e2 + 1))
    return e2, bg2, np.repeat(np.arange(members), 2 * n)


@pytest.mark.parametrize("seed", range(40))
def test_collective_pairs_within_a_node_as_the_loop_gave_them(seed):
    bg, e, op, root, member_node = _random_collectives(seed)
    e, bg, member_of = _unique_records(e, bg)
    same = member_node[:, None] == member_node[None, :]
    got = _collective_pairs(bg, e, op, root, same)
    want = _collective_pairs_loop(bg, e, op, root)
    keep = member_node[member_of[want[0]]] == member_node[member_of[want[1]]]
    assert np.array_equal(got[0], want[0][keep]) and np.array_equal(got[1], want[1][keep])


def _points(before, after, member_of_record, member_node, local):
    pts = np.zeros(before.size, POINT_DTYPE)
    pts["a"] = member_node[member_of_record[before]]
    pts["b"] = member_node[member_of_record[after]]
    pts["ta"], pts["tb"] = local[before], local[after]
    return pts


@pytest.mark.parametrize("seed", range(60))
def test_cross_node_pairs_leave_the_node_fit_the_same_undominated_points(seed):
    """Between nodes only the latest BEGIN before the earliest END per instance and node
    pair: a subset of every pair between members of different nodes whose undominated
    points (what the node fit keeps) are the same."""
    bg, e, op, root, member_node = _random_collectives(seed)
    e, bg, member_of = _unique_records(e, bg)
    # node timebase ticks of the records, with ties now and then
    local = np.random.default_rng(seed).integers(0, 50 if seed % 2 else 100_000,
                                                 member_of.size).astype(np.uint64)
    full = _collective_pairs(bg, e, op, root)
    cross = member_node[member_of[full[0]]] != member_node[member_of[full[1]]]
    want = _points(full[0][cross], full[1][cross], member_of, member_node, local)
    got_pairs = _cross_node_pairs(bg, e, op, root, member_node, local)
    got = _points(*got_pairs, member_of, member_node, local)
    full_set = set(zip(full[0][cross].tolist(), full[1][cross].tolist(), strict=True))
    assert set(zip(*[g.tolist() for g in got_pairs], strict=True)) <= full_set
    n_nodes = int(member_node.max()) + 1

    def kept(pts):
        u = pts[undominated(pts, n_nodes)] if pts.size else pts
        return sorted(zip(u["a"].tolist(), u["b"].tolist(), u["ta"].tolist(),
                          u["tb"].tolist(), strict=True))

    assert kept(got) == kept(want)


@pytest.mark.parametrize("seed", range(6))
def test_channels_as_the_dict_gave_them(seed):
    rng = np.random.default_rng(seed)
    s_key = rng.integers(0, 3, (4, int(rng.integers(0, 40))))
    r_key = rng.integers(0, 3, (4, int(rng.integers(0, 40))))
    s_key = s_key[:, np.lexsort(s_key[::-1])]
    r_key = r_key[:, np.lexsort(r_key[::-1])]
    s_lab, r_lab, n = _channels(s_key, r_key)
    chans = {tuple(k): i for i, k in enumerate(np.unique(s_key.T, axis=0).tolist())}
    assert n == len(chans)
    assert s_lab.tolist() == [chans[tuple(k)] for k in s_key.T.tolist()]
    assert r_lab.tolist() == [chans.get(tuple(k), -1) for k in r_key.T.tolist()]
    assert all(np.array_equal(a, b) for a, b in
               zip((s_lab, r_lab), _channels_by_rows(s_key, r_key)[:2], strict=True))
    pos = _position_in_group(s_lab)
    assert all(pos[i] == (s_lab[:i] == s_lab[i]).sum() for i in range(s_lab.size))


def test_pair_search_finds_the_last_row_of_a_pair():
    k1 = np.array([0, 0, 1, 0, 2, 1])
    k2 = np.array([5, 6, 5, 5, -3, 5])
    q1 = np.array([0, 1, 2, 2, 0, 3, 0])
    q2 = np.array([5, 5, -3, 5, 6, 5, 7])
    assert _pair_search(k1, k2, q1, q2).tolist() == [3, 5, 4, -1, 1, -1, -1]
    assert _pair_search(k1[:0], k2[:0], q1, q2).tolist() == [-1] * 7


def test_channels_of_keys_too_varied_for_one_code():
    """Keys whose columns together have more distinct values than 63 bits can number (60 k
    records of random keys): labelled by rows, as the sorted-code path labels them."""
    rng = np.random.default_rng(1)
    s_key = rng.integers(0, 1 << 40, (4, 60_000))
    s_key = s_key[:, np.lexsort(s_key[::-1])]
    r_key = np.concatenate([s_key[:, ::3], rng.integers(0, 1 << 40, (4, 100))], axis=1)
    got = _channels(s_key, r_key)
    want = _channels_by_rows(s_key, r_key)
    assert got[2] == want[2] == 60_000
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
