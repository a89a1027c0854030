"""Event writers closed in the archive's closing thread (writer/open_archive.py): with the
compiled helper, OTF2 gets pthread locking callbacks and a location's close (its events
flushed to its file) runs in a thread while the next location is written; without it, or
with the ctypes path asked for, every close runs where the events were written. Byte
identity of the two ways is test_compiled_writer's (its C path closes in the thread, its
ctypes path does not); here: where closes run, that a close failing in the thread fails the
archive with one message, and that the archive is never closed while a location's close
still runs, whether the writing ended normally, by a failure or by an interruption.
"""

from __future__ import annotations

import threading
import time

import _otf2
import numpy as np
import pytest
from writer_samples import sample_defs, sample_events

from cell_otf2 import native
from cell_otf2.errors import OutputError
from cell_otf2.writer import open_archive as open_archive_module
from cell_otf2.writer.archive import write_archive

needs_compiled = pytest.mark.native("evtwrite")


def events_of_many_locations() -> np.ndarray:
    """The sample table, every kind of event, repeated so each location holds many."""
    one = sample_events()
    events = np.concatenate([one] * 200)
    events = events[np.argsort(events["loc"], kind="stable")]
    events["time"] += np.arange(events.size, dtype=np.int64) * 1000
    return events


class Calls:
    """The library's close calls as the writer makes them: which thread, when each ended,
    and when the archive was closed; optionally slow, or failing for one writer."""

    def __init__(self, monkeypatch, delay_s: float = 0.0, fail_at: int | None = None):
        self.closes: list[tuple[str, float]] = []  # (thread name, time it ended)
        self.archive_closed: float | None = None
        self.lock = threading.Lock()
        real_close = _otf2.Archive_CloseEvtWriter
        real_archive_close = _otf2.Archive_Close

        def close(handle, writer):
            time.sleep(delay_s)
            real_close(handle, writer)
            with self.lock:
                self.closes.append((threading.current_thread().name, time.perf_counter()))
                if fail_at is not None and len(self.closes) == fail_at:
                    raise _otf2.Error(_otf2.ERROR_INVALID)

        def archive_close(handle):
            self.archive_closed = time.perf_counter()
            real_archive_close(handle)

        monkeypatch.setattr(open_archive_module._otf2, "Archive_CloseEvtWriter", close)
        monkeypatch.setattr(open_archive_module._otf2, "Archive_Close", archive_close)

    def all_before_the_archive_closed(self) -> bool:
        return (self.archive_closed is not None
                and all(t < self.archive_closed for _, t in self.closes))


@needs_compiled
def test_locations_are_closed_in_the_closing_thread(tmp_path, monkeypatch):
    calls = Calls(monkeypatch)
    defs = sample_defs()
    stats = write_archive(defs, events_of_many_locations(), tmp_path, "a")
    assert len(calls.closes) == len(defs.locations)  # every location's writer, empty or not
    assert {name for name, _ in calls.closes} != {threading.current_thread().name}
    assert all(name.startswith("otf2-close") for name, _ in calls.closes)
    assert calls.all_before_the_archive_closed()
    assert stats.events_per_location.sum() == events_of_many_locations().size


def test_with_the_ctypes_path_closes_run_where_the_events_were_written(tmp_path, monkeypatch):
    monkeypatch.setenv(native.OFF_VARIABLE, "1")
    calls = Calls(monkeypatch)
    write_archive(sample_defs(), events_of_many_locations(), tmp_path, "a")
    assert calls.closes
    assert {name for name, _ in calls.closes} == {threading.current_thread().name}


@needs_compiled
@pytest.mark.parametrize("fail_at", [1, 3])
def test_a_close_failing_in_the_thread_fails_the_archive_once_every_close_ended(
        tmp_path, monkeypatch, fail_at):
    calls = Calls(monkeypatch, delay_s=0.02, fail_at=fail_at)
    with pytest.raises(OutputError, match="the OTF2 library failed"):
        write_archive(sample_defs(), events_of_many_locations(), tmp_path, "a")
    assert calls.all_before_the_archive_closed()


@needs_compiled
def test_an_interruption_while_closes_run_closes_the_archive_after_them(tmp_path, monkeypatch):
    """Ctrl-C lands (here: from the progress callback) while slow closes are still queued:
    it propagates, but the archive is closed only after every location's close ended."""
    calls = Calls(monkeypatch, delay_s=0.05)

    def progress(done: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_archive(sample_defs(), events_of_many_locations(), tmp_path, "a", progress)
    assert calls.closes
    assert calls.all_before_the_archive_closed()
