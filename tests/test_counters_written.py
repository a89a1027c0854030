"""``counters_written``: the (counter, PPE thread) pairs of the usable COUNTER records, checked
against a plain set over every record, on simulated runs whose PPE threads and SPEs sample
counters (a monitoring thread on its own location), with every record usable or a random
share of them."""

from __future__ import annotations

import numpy as np
import pytest

from cell_otf2.damage import DamageLog
from cell_otf2.decode.decoder import decode
from cell_otf2.emit.definitions import counters_written
from cell_otf2.input import format as fmt
from cell_otf2.input.dumps import Dumps, read_summaries
from cell_otf2.input.manifest import load_manifest
from cell_otf2.model import CounterUse


def _plain(rec: np.ndarray, usable: np.ndarray | None) -> frozenset[CounterUse]:
    out = set()
    for i, (code, loc, a) in enumerate(zip(rec["code"].tolist(), rec["loc"].tolist(),
                                           rec["a"].tolist(), strict=True)):
        if usable is not None and not usable[i]:
            continue
        if code == fmt.PpeCode.COUNTER:
            out.add(CounterUse(a, loc))
        elif code == fmt.SpeCode.COUNTER:
            out.add(CounterUse(a, -1))
    return frozenset(out)


@pytest.mark.parametrize("options", [
    dict(workload="hybrid", seed=21, ranks=2, nodes=1, spes=2, phases=2, chunks=3,
         poll_s=0.001),
    dict(workload="hybrid", seed=22, ranks=4, nodes=2, spes=3, phases=2, chunks=4),
])
def test_counters_written_as_a_plain_set(simulated, options) -> None:
    run = simulated(**options)
    man = load_manifest(run)
    log = DamageLog()
    summaries = read_summaries(man, log, None)
    dec = decode(man, Dumps(man, summaries), log, release=True, summaries=summaries)
    rec = dec.records
    assert (rec["code"] == fmt.PpeCode.COUNTER).any()
    assert (rec["code"] == fmt.SpeCode.COUNTER).any()
    rng = np.random.default_rng(5)
    for usable in (None, rng.random(rec.size) < 0.5, np.zeros(rec.size, dtype=bool)):
        assert counters_written(dec, usable) == _plain(rec, usable)
