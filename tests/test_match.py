"""match.py's grouped lookups against the per-context and per-instance loops they replaced:
collective pairs instance by instance, MPI channels, SNDSIG targets (random tables, the
loops written out as they were)."""

from __future__ import annotations

import numpy as np
import pytest

from cell_otf2.decode.match import (
    _channels,
    _channels_by_rows,
    _collective_pairs,
    _pair_search,
    _position_in_group,
)
from cell_otf2.input import format as fmt


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
    rng = np.random.default_rng(seed)
    members, n = int(rng.integers(1, 6)), int(rng.integers(0, 30))
    e = rng.integers(0, 1000, (members, n))
    bg = np.where(rng.random((members, n)) < 0.1, -1, rng.integers(0, 1000, (members, n)))
    same = rng.random((members, n)) < 0.05  # a BEGIN that is its END gives no pair
    bg[same] = e[same]
    ops = [int(o) for o in fmt.CollOp]
    op = rng.choice(ops + [max(ops) + 7], n)
    root = rng.integers(0, members + 2, n)
    got = _collective_pairs(bg, e, op, root)
    want = _collective_pairs_loop(bg, e, op, root)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


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
