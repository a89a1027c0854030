"""One OTF2 archive open for writing (``OpenArchive``): refuses an existing archive, opens it
with the writer's chunk sizes and flush callback, serially or collectively over the processes
of a parallel conversion, opens and closes each location's event writer and closes the archive
exactly once. It writes no definition and no event itself.
"""

from __future__ import annotations

from pathlib import Path

import _otf2

from ..errors import OutputError
from .capi import address


def _pre_flush(*_args: object) -> object:
    return _otf2.FLUSH


class OpenArchive:
    """An OTF2 archive open for writing, closed exactly once."""

    def __init__(self, archive_dir: Path, archive_name: str, collectives=None) -> None:
        """``collectives``: an ``otf2_mpi.MpiCollectives`` for parallel writing (every process
        of its communicator opens the same archive; the master checks the entries, and all
        agree on the opening before OTF2's first collective step, setting the callbacks),
        None for one writing process."""
        archive_dir = Path(archive_dir)
        self.collectives = collectives
        self.handle = None
        where = f"{archive_dir / archive_name}.otf2: cannot create the archive"
        failure: OutputError | None = None
        try:
            for entry in (archive_dir / f"{archive_name}.otf2", archive_dir / archive_name):
                if entry.exists() and (collectives is None or collectives.is_master):
                    raise OutputError(f"{entry}: already exists (the OTF2 library will not "
                                      f"overwrite an archive)")
            archive_dir.mkdir(parents=True, exist_ok=True)
            # chunk sizes: 1 MiB per event buffer; 256 KiB (OTF2's smallest) per definition
            # buffer, which grows by chunks as needed: a 4 MiB chunk per location's (empty)
            # local definition writer cost 2-3 ms each to set up and tear down
            self.handle = _otf2.Archive_Open(
                str(archive_dir), archive_name, _otf2.FILEMODE_WRITE, 1024 * 1024,
                256 * 1024, _otf2.SUBSTRATE_POSIX, _otf2.COMPRESSION_NONE,
            )
            # the callbacks must stay referenced as long as the archive is open
            self._flush_callbacks = _otf2.FlushCallbacks(pre_flush=_pre_flush, post_flush=None)
            _otf2.Archive_SetFlushCallbacks(self.handle, self._flush_callbacks, None)
        except OutputError as exc:
            failure = exc
        except (_otf2.Error, OSError) as exc:
            failure = OutputError(f"{where}: {exc}")
            failure.__cause__ = exc
        if collectives is not None:
            # an archive opened here but failed elsewhere is left open: OTF2 aborts the process
            # when closing one without collective callbacks, and closing it serially would
            # write an anchor file into a directory being removed
            collectives.agree(failure)
        elif failure is not None:
            raise failure
        try:
            if collectives is None:
                _otf2.Archive_SetSerialCollectiveCallbacks(self.handle)
            else:
                collectives.install(self.handle)
            _otf2.Archive_OpenEvtFiles(self.handle)
            _otf2.Archive_OpenDefFiles(self.handle)
        except (_otf2.Error, OSError) as exc:
            raise OutputError(f"{where}: {exc}") from exc
        self._evt_files_open = True
        self._def_files_open = True

    def close_event_files(self) -> None:
        if self._evt_files_open:
            self._evt_files_open = False
            _otf2.Archive_CloseEvtFiles(self.handle)
        if self._def_files_open:
            self._def_files_open = False
            _otf2.Archive_CloseDefFiles(self.handle)

    def close(self) -> None:
        if self.handle is None:
            return
        try:
            self.close_event_files()
        finally:
            handle, self.handle = self.handle, None
            _otf2.Archive_Close(handle)

    def location_writer(self, loc: int) -> tuple[object, int]:
        """Open the event writer of one location; returns (handle, address for the C calls)."""
        # an empty local definition file per location, as the otf2 bindings write it: readers
        # then find every location's definitions where they look for them
        def_writer = _otf2.Archive_GetDefWriter(self.handle, loc)
        _otf2.Archive_CloseDefWriter(self.handle, def_writer)
        writer = _otf2.Archive_GetEvtWriter(self.handle, loc)
        if not writer:
            raise OutputError(f"OTF2 could not open the event writer of location {loc}")
        return writer, address(writer)

    def close_location_writer(self, writer: object) -> None:
        _otf2.Archive_CloseEvtWriter(self.handle, writer)

