"""The conversion reads every dump twice (``dumps.py``: a summary first, then one dump at a time
to decode it, so only one dump is in memory at once). The result must be what decoding all
dumps held in memory gives, and a dump that changes between the two readings is refused, not
mis-placed.
"""

from __future__ import annotations

from pathlib import Path

import minirun  # noqa: E402
import numpy as np
import pytest
from cellbench.analysis import analyze  # noqa: E402
from paths import SAMPLES  # noqa: E402

from cell_otf2.damage import DamageLog  # noqa: E402
from cell_otf2.decode.decoder import decode  # noqa: E402
from cell_otf2.errors import FormatError  # noqa: E402
from cell_otf2.input import dumps as dumps_mod  # noqa: E402
from cell_otf2.input.manifest import load_manifest  # noqa: E402
from cell_otf2.input.reader import read_dump  # noqa: E402
from cell_otf2.native import record_loops as loops  # noqa: E402
from cell_otf2.run.conversion import convert  # noqa: E402


@pytest.mark.parametrize("name", ["two-nodes-hybrid", "damaged-gap-truncate"])
def test_decoding_read_twice_equals_decoding_in_memory(name, monkeypatch):
    run = SAMPLES / name
    reads: list[str] = []

    def counting_read(path, *args, **kwargs):
        reads.append(Path(path).name)
        return read_dump(path, *args, **kwargs)

    monkeypatch.setattr(dumps_mod, "read_dump", counting_read)
    pipe = analyze(run)
    man = load_manifest(run)
    assert sorted(reads) == sorted(2 * [man.dump_path(p.rank).name for p in man.processes])
    damage = DamageLog()
    dumps = [read_dump(man.dump_path(p.rank), man, p.rank) for p in man.processes]
    for d in dumps:
        damage.extend(d.damage)
    held = decode(man, dumps, damage)
    records = pipe.decoded.records.copy()
    records["time"] = 0  # analyze went on to synchronize
    assert np.array_equal(records, held.records)
    for column in ("anchors", "domains", "links", "locations", "contexts"):
        assert np.array_equal(getattr(pipe.decoded, column), getattr(held, column)), column
    # the reader's damage once, not twice
    assert pipe.damage.summary_lines()[:len(damage.summary_lines())] == damage.summary_lines()


def test_a_dump_that_changes_between_readings_is_refused(tmp_path, monkeypatch):
    run = tmp_path / "run"
    minirun.build(run)
    calls = {"n": 0}

    def changing_read(path, *args, **kwargs):
        dump = read_dump(path, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 2:  # the second reading of the one dump lost its first PPE record
            dump.ppe = dump.ppe[1:]
        return dump

    monkeypatch.setattr(dumps_mod, "read_dump", changing_read)
    out = tmp_path / "out" / "a.otf2"
    with pytest.raises(FormatError, match="changed while it was being converted"):
        convert(run, out)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("options", [
    dict(workload="hybrid", ranks=2, nodes=2, spes=3, phases=2),
    dict(workload="fft", ranks=1, spes=12, spus=4, slice_ms=0.05, phases=2,
         byte_order="L", spe_buffer_records=5, spe_buffers=1),
    dict(workload="hybrid", ranks=3, nodes=1, spes=2, phases=2, decr_writes=True,
         damage=["gap", "block-overrun", "unknown-code"]),
    dict(workload="fft", ranks=2, nodes=2, spes=4, phases=1,
         damage=["truncate", "undefined-id", "backwards-timebase"]),
])
def test_spe_records_read_into_their_rows_decode_as_held_dumps(tmp_path, options):
    """Decoding through ``Dumps`` has the reader write each dump's SPE records straight into
    their rows of the record table (``decode._spe_rows``); over simulated runs of several
    shapes (context switches, both byte orders, small blocks, damage) the table, anchors,
    domains and links are those of decoding dumps held in memory, and the records did go
    into the table (a dump read elsewhere would still decode the same)."""
    from cell_otf2.input.dumps import Dumps, read_summaries
    from cell_otf2.model import SPE_IN_RECORD_DTYPE
    from cell_otf2.sim.run import simulate_run

    run = tmp_path / "run"
    simulate_run(run, seed=3, **options)
    man = load_manifest(run)
    summaries = read_summaries(man, DamageLog())
    seen: list[bool] = []

    class Seeing(Dumps):  # notes whether each dump's SPE records went into the table
        def __getitem__(self, i):
            dump = super().__getitem__(i)
            seen.append(dump.spe.dtype == SPE_IN_RECORD_DTYPE or not dump.spe.size)
            return dump

    streamed = decode(man, Seeing(man, summaries), DamageLog(), summaries=summaries)
    held = decode(man, [read_dump(man.dump_path(p.rank), man, p.rank)
                        for p in man.processes], DamageLog())
    # the compiled framer reads into the rows; numpy's (no C helper running) reads elsewhere
    assert seen and (all(seen) if loops.compiled_framing() else not any(seen))
    for column in ("records", "anchors", "domains", "links", "locations", "contexts",
                   "loss_epoch"):
        assert np.array_equal(getattr(streamed, column), getattr(held, column)), column
