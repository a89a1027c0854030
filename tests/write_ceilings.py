"""How fast the OTF2 library takes events through the writer's own C calls with nothing else to
do: ``write_ceiling`` (Enter/Leave pairs) and ``write_mix_ceiling`` (a given mix of event
kinds) time the calls ``cell_otf2.writer.events`` makes, into a scratch archive that is removed
again. A measuring aid, not part of the converter; the figures are in docs/performance.md.
"""

from __future__ import annotations

import ctypes
import operator
import shutil
import tempfile
import time
from itertools import repeat
from pathlib import Path

import _otf2
import numpy as np

from cell_otf2.model import EVENT_DTYPE, Ev
from cell_otf2.writer.capi import address, c_api, library_errors
from cell_otf2.writer.events import add_other_event_writers
from cell_otf2.writer.open_archive import OpenArchive


def write_ceiling(n_events: int, tmpdir: Path) -> float:
    """Events per second for Enter/Leave pairs pushed through the same C entry points.

    Writes ``n_events`` (rounded up to even) to one location of a scratch archive in a fresh
    directory under ``tmpdir`` with nothing else to do per event: the calls are made exactly
    as the writer's ctypes path (``cell_otf2.writer.events``) makes them (``map`` over
    prepared lists), only the calls are timed. The scratch archive is removed again.
    """
    n_pairs = max(1, (n_events + 1) // 2)
    rows = np.zeros(2 * n_pairs, EVENT_DTYPE)
    rows["type"][0::2], rows["type"][1::2] = Ev.ENTER, Ev.LEAVE
    rows["time"] = np.arange(rows.size) // 2
    return _timed_calls(rows, tmpdir)


def write_mix_ceiling(per_type: dict[str, int], tmpdir: Path) -> float:
    """Events per second for a given mix of event kinds (``Ev`` name -> count), as
    ``write_ceiling`` but with every kind's C calls (RMA events with their five attributes).

    The kinds are interleaved evenly in one location; parameters are zeros (ref 0: the
    scratch archive has no definitions, which only a reader would notice). Only the calls are
    timed, so this is what writing that mix costs with nothing else to do.
    """
    counts = {Ev[name]: int(n) for name, n in per_type.items() if int(n) > 0}
    total = sum(counts.values())
    if not total:
        return float("inf")
    types = np.concatenate([np.full(n, int(kind), dtype=np.uint8) for kind, n in counts.items()])
    # even interleaving: event k of a kind with n events sits at (k + 0.5) / n of the run
    frac = np.concatenate([(np.arange(n) + 0.5) / n for n in counts.values()])
    rows = np.zeros(total, EVENT_DTYPE)
    rows["type"] = types[np.argsort(frac, kind="stable")]
    rows["time"] = np.arange(total)
    return _timed_calls(rows, tmpdir)


#: CPU seconds of the last ceiling measurement (for benchmarks on a shared machine)
LAST_CEILING_CPU_SECONDS = [0.0]


def _timed_calls(rows: np.ndarray, tmpdir: Path) -> float:
    scratch = Path(tempfile.mkdtemp(prefix="write-ceiling-", dir=tmpdir))
    try:
        archive = OpenArchive(scratch, "ceiling")
        api = c_api()
        attr_list = _otf2.AttributeList_New()
        try:
            writer, w = archive.location_writer(0)
            try:
                fns = api.region_fns[rows["type"]]
                if rows.size and int(rows["type"].max()) > Ev.LEAVE:
                    add_other_event_writers(api, ctypes.c_void_p(address(attr_list)), rows,
                                            fns)
                fns_list, times, refs = fns.tolist(), rows["time"].tolist(), rows["ref"].tolist()
                t0, c0 = time.perf_counter(), time.process_time()
                bad = any(map(operator.call, fns_list, repeat(ctypes.c_void_p(w)),
                              repeat(None), map(ctypes.c_uint64, times), refs))
                seconds = time.perf_counter() - t0
                LAST_CEILING_CPU_SECONDS[0] = time.process_time() - c0
            finally:
                archive.close_location_writer(writer)
            if bad:
                raise library_errors().failure("the event files")
        finally:
            _otf2.AttributeList_Delete(attr_list)
            archive.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return rows.size / seconds if seconds > 0 else float("inf")
