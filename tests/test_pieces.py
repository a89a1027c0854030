"""The writer's pieces of whole locations (``emit.table.EventChunks``): where they are cut, and
the cut ``write_share`` asks for when part of a process's locations went to another process.
(Handing locations over between converter processes is tested under mpiexec in
``test_parallel.py``.)"""

from __future__ import annotations

import numpy as np

from cell_otf2.emit.table import EventChunks


def test_pieces_cut_where_the_running_count_reaches_the_piece_size():
    """``EventChunks.piece_end`` cuts as the writer's pieces always were cut (after the
    location where the count reaches ``chunk_events``), and never past ``stop``."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        counts = rng.integers(0, 30, rng.integers(1, 40))
        starts = np.concatenate([[0], np.cumsum(counts)])
        chunk = int(rng.integers(1, 60))
        fake = type("Ev", (), {"loc_start": starts, "n_locations": counts.size,
                               "size": int(starts[-1])})()
        pieces = EventChunks(fake, chunk)
        cuts = [0]
        for loc in range(1, counts.size):
            if starts[loc] - starts[cuts[-1]] >= chunk:
                cuts.append(loc)
        cuts.append(counts.size)
        assert pieces.ranges == list(zip(cuts[:-1], cuts[1:], strict=True))
        stop = int(rng.integers(1, counts.size + 1))
        lo = int(rng.integers(0, stop))
        assert lo < pieces.piece_end(lo, stop) <= stop
