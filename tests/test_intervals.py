"""intervals.split_intervals against hand-made decrementer histories with known truth;
decode's CTX_SWITCH pairing against the record-by-record loop it replaced."""

import numpy as np
import pytest

from cell_otf2.decode.intervals import MOD, split_intervals


def _decr(start, node_tb, offset_shift=0):
    """Raw decrementer for a clock that counts down from `start` at node time 0."""
    return (start - (np.asarray(node_tb) - offset_shift)) % MOD


def test_single_interval_with_wrap():
    tb = np.array([0, 10, 1_000_000, 2_000_000_000, 4_000_000_000, 4_300_000_000])
    raw = _decr(100, tb)
    res = split_intervals(raw, np.full(tb.size, -1), np.array([]), np.array([]))
    assert res.n_intervals == 1
    assert np.all(res.interval == 0)
    # node_tb = offset + local with one constant offset
    assert np.unique(tb - res.local).size == 1
    assert res.local[0] == -raw[0]
    assert res.big_steps.size == 0


def test_restored_switch_and_empty_interval():
    # readings at tb 0..100, STOP at decr value of tb 150, off 1000 ticks (clock stands still)
    start = 5_000
    before = np.array([0, 50, 100])
    stop_val = start - 150
    after_run = np.array([10, 60])  # run ticks after the restore
    raw = np.concatenate([_decr(start, before), (stop_val - after_run) % MOD])
    # second switch right after: its stop value below the last reading -> later, then an
    # empty interval pair at the end
    stops = np.array([stop_val, stop_val - 100, stop_val - 100])
    starts_ = np.array([stop_val, stop_val - 100, stop_val - 100])
    res = split_intervals(raw, np.full(raw.size, -1), stops, starts_)
    assert list(res.interval) == [0, 0, 0, 1, 1]
    assert res.n_intervals == 4
    assert [s[0] for s in res.starts] == ["first", "switch", "switch", "switch"]
    assert list(res.local[3:]) == [-raw[3], -raw[3] + 50]


def test_compensated_switch_by_value():
    start = 7
    raw0 = _decr(start, [0, 100, 200])  # wraps below 0
    stop_val = (start - 250) % MOD
    restored = (stop_val - 10_000) % MOD  # off for 10_000 ticks, compensated
    raw1 = (restored - np.array([5, 90])) % MOD
    raw = np.concatenate([raw0, raw1])
    res = split_intervals(raw, np.full(5, -1), np.array([stop_val]), np.array([restored]))
    assert list(res.interval) == [0, 0, 0, 1, 1]
    # reading equal to the STOP value belongs before it
    raw_eq = np.concatenate([raw0, [stop_val], raw1])
    res = split_intervals(raw_eq, np.full(6, -1), np.array([stop_val]), np.array([restored]))
    assert list(res.interval) == [0, 0, 0, 0, 1, 1]


def test_decr_write_starts_new_interval_and_switch_after_it():
    raw = np.array([1000, 900, 800, 5_000_000, 4_999_000, 4_998_000])
    new = np.full(6, -1)
    new[2] = 5_000_100  # DECR_WRITE read 800, wrote 5_000_100
    # a switch whose STOP value lies in the new counting, between readings 4 and 5
    res = split_intervals(raw, new, np.array([4_998_500]), np.array([4_998_500]))
    assert list(res.interval) == [0, 0, 0, 1, 1, 2]
    assert [s[0] for s in res.starts] == ["first", "write", "switch"]
    assert res.local[3] == -5_000_000 and res.local[4] == -4_999_000
    # a DECR_WRITE as the very last reading still starts an (empty) interval
    new2 = np.full(3, -1)
    new2[2] = 77
    res = split_intervals(raw[:3], new2, np.array([]), np.array([]))
    assert res.n_intervals == 2


def test_missing_heartbeat_reported():
    raw = _decr(0, np.array([0, 100, 100 + (1 << 31) + 5]))
    res = split_intervals(raw, np.full(3, -1), np.array([]), np.array([]))
    assert list(res.big_steps) == [2]


def test_missing_heartbeat_split():
    raw = _decr(0, np.array([0, 100, 100 + (1 << 31) + 5, 100 + (1 << 31) + 50]))
    res = split_intervals(raw, np.full(4, -1), np.array([]), np.array([]), split_big_steps=True)
    assert list(res.interval) == [0, 0, 1, 1]
    assert res.starts == [("first", -1), ("wrap", 2)]
    assert res.local[3] - res.local[2] == 45


def _switch_pairs_loop(sw):
    """decode._switch_pairs as it was: one step per record."""
    from cell_otf2.input import format as fmt

    stops, starts, recs, pending, bad = [], [], [], None, 0
    for i, (kind, value) in enumerate(zip(sw["b"].tolist(),
                                          (sw["c"] & np.uint64(0xFFFFFFFF)).tolist(),
                                          strict=True)):
        if kind == fmt.SwitchType.STOP and pending is None:
            pending = (value, i)
        elif kind == fmt.SwitchType.START and pending is not None:
            stops.append(pending[0])
            starts.append(value)
            recs.append((int(sw["slot"][pending[1]]), int(sw["slot"][i])))
            pending = None
        else:
            bad += 1
    return stops, starts, recs, bad + (pending is not None)


@pytest.mark.parametrize("seed", range(10))
def test_switch_pairs_as_the_record_loop_paired_them(seed):
    from cell_otf2.damage import DamageLog
    from cell_otf2.decode.decoder import _switch_pairs
    from cell_otf2.input import format as fmt

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 40))
    sw = np.zeros(n, [("slot", "<i8"), ("b", "<u8"), ("c", "<u8")])
    sw["slot"] = np.sort(rng.choice(1000, n, replace=False))
    kinds = [int(fmt.SwitchType.STOP), int(fmt.SwitchType.START), 7]
    sw["b"] = rng.choice(kinds, n, p=[0.45, 0.45, 0.1])
    sw["c"] = rng.integers(0, 1 << 40, n)
    damage = DamageLog()
    stop, start, recs = _switch_pairs(sw, 3, "r.cbt", damage)
    want = _switch_pairs_loop(sw)
    assert stop[:, 0].tolist() == want[0] and start[:, 0].tolist() == want[1]
    assert [tuple(r) for r in recs.tolist()] == want[2]
    assert sum(e.count for e in damage.entries()) == want[3]
