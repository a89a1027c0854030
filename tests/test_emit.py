"""emit lays the event table out without sorting it: the layout must be exactly what a stable
sort by (location, time, seq) gives, whole or in pieces of whole locations.

Runs with context switches (their "off SPU" events are placed on the SPE location from PPE
records) and DMA as messages (a GET's send sits on the target's location), the two kinds of
events that do not sit on their own record's location.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from cellbench.analysis import analyze
from paths import SAMPLES  # noqa: E402

from cell_otf2.emit.events import emit
from cell_otf2.emit.table import EventChunks
from cell_otf2.model import DmaStyle, Ev, LocKind


@pytest.fixture(scope="module", params=["context-switch-restored", "two-nodes-hybrid"])
def pipe(request):
    return analyze(SAMPLES / request.param)


@pytest.mark.parametrize("style", [DmaStyle.RMA, DmaStyle.MESSAGES])
def test_table_in_location_time_seq_order_whole_and_in_pieces(pipe, style):
    defs, table, stats = emit(pipe.decoded, pipe.matches, pipe.sync, pipe.damage, style)
    assert table.size == stats.events > 0
    order = np.lexsort((table["seq"], table["time"], table["loc"]))
    assert np.array_equal(order, np.arange(table.size))
    assert Counter({Ev(k).name: v for k, v in Counter(table["type"].tolist()).items()}) \
        == Counter(stats.by_type)
    _, pieces, _ = emit(pipe.decoded, pipe.matches, pipe.sync, pipe.damage, style,
                        chunk_events=300)
    assert isinstance(pieces, EventChunks) and pieces.size == table.size
    parts = list(pieces)
    assert len(parts) > 2
    for a, b in zip(parts, parts[1:], strict=False):  # whole locations, in order
        assert a["loc"][-1] < b["loc"][0]
    assert np.array_equal(np.concatenate(parts), table)


def test_events_away_from_their_records_location_are_placed(pipe):
    """The runs really have events that are not on their record's location."""
    dec = pipe.decoded
    _, table, _ = emit(pipe.decoded, pipe.matches, pipe.sync, pipe.damage, DmaStyle.MESSAGES)
    # (not ProgramBegin / End: placed by rule around their location's events, no record)
    table = table[(table["type"] != Ev.PROGRAM_BEGIN) & (table["type"] != Ev.PROGRAM_END)]
    rec_loc = dec.records["loc"][(table["seq"] // 8).astype(np.int64)]
    away = table["loc"] != rec_loc
    assert away.any()
    kinds = dec.locations["kind"][table["loc"][away]]
    assert set(kinds.tolist()) <= {LocKind.SPE_CONTEXT, LocKind.MAIN_MEMORY}
