"""One OTF2 archive open for writing (``OpenArchive``): refuses an existing archive, opens it
with the writer's chunk sizes and flush callback, serially or collectively over the processes
of a parallel conversion, opens each location's event writer and closes it in a thread of its
own (where the compiled helper gives OTF2 its locking callbacks: the close writes the
location's events to its file while the next location is written), and closes the archive
exactly once, after every location's close has ended. It writes no definition and no event
itself.
"""

from __future__ import annotations

import contextlib
import ctypes
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import _otf2

from ..errors import OutputError
from .capi import address, compiled_callbacks
from .otf2_internals import c_function

if TYPE_CHECKING:
    from .mpi_callbacks import MpiCollectives


def _pre_flush(*_args: object) -> object:
    return _otf2.FLUSH


#: OTF2's smallest and largest chunk sizes (``OTF2_CHUNK_SIZE_MIN`` and ``_MAX``)
MIN_DEF_CHUNK_BYTES = 256 * 1024
MAX_DEF_CHUNK_BYTES = 16 * 1024 * 1024
#: room in a chunk beside a record's own bytes (the chunk's header, the record's header)
_CHUNK_ROOM = 4096


def definition_chunk_bytes(longest_string: int) -> int:
    """The definition chunk size for definitions whose longest string has ``longest_string``
    bytes: 256 KiB, doubled until the string's record fits (a context's
    ``cell2otf2::sync_intervals`` of some 10,000 intervals is 0.4 MB); OutputError where no
    chunk OTF2 allows (16 MiB) holds it."""
    size = MIN_DEF_CHUNK_BYTES
    while size < longest_string + _CHUNK_ROOM and size < MAX_DEF_CHUNK_BYTES:
        size *= 2
    if size < longest_string + _CHUNK_ROOM:
        raise OutputError(f"a definition string of {longest_string} bytes: more than OTF2's "
                          f"largest definition chunk ({MAX_DEF_CHUNK_BYTES} bytes) holds")
    return size


class OpenArchive:
    """An OTF2 archive open for writing, closed exactly once."""

    def __init__(self, archive_dir: Path, archive_name: str,
                 collectives: MpiCollectives | None = None,
                 def_chunk_bytes: int = MIN_DEF_CHUNK_BYTES) -> None:
        """``collectives``: an ``mpi_callbacks.MpiCollectives`` for parallel writing (every process
        of its communicator opens the same archive; the master checks the entries, and all
        agree on the opening before OTF2's first collective step, setting the callbacks),
        None for one writing process. ``def_chunk_bytes``: the definition buffers' chunk
        size, which must hold the largest definition record (``definition_chunk_bytes``)."""
        archive_dir = Path(archive_dir)
        self.collectives = collectives
        self.handle: Any = None  # the bindings' archive handle (untyped)
        #: the Python flush callbacks given to the library, kept referenced while it may call
        #: them (None: the compiled ones, or none yet)
        self._flush_callbacks: Any = None
        #: the thread that closes event writers (None: they are closed where they were written)
        self._closer: ThreadPoolExecutor | None = None
        self._closing: list[Future[None]] = []  # closes handed to it, oldest first
        where = f"{archive_dir / archive_name}.otf2: cannot create the archive"
        failure: OutputError | None = None
        callbacks = compiled_callbacks()
        try:
            for entry in (archive_dir / f"{archive_name}.otf2", archive_dir / archive_name):
                if entry.exists() and (collectives is None or collectives.is_master):
                    raise OutputError(f"{entry}: already exists (the OTF2 library will not "
                                      f"overwrite an archive)")
            archive_dir.mkdir(parents=True, exist_ok=True)
            # chunk sizes: 1 MiB per event buffer; 256 KiB (OTF2's smallest) per definition
            # buffer unless a record needs more, which grows by chunks as needed: a 4 MiB
            # chunk per location's (empty) local definition writer cost 2-3 ms each to set up
            # and tear down
            self.handle = _otf2.Archive_Open(
                str(archive_dir), archive_name, _otf2.FILEMODE_WRITE, 1024 * 1024,
                def_chunk_bytes, _otf2.SUBSTRATE_POSIX, _otf2.COMPRESSION_NONE,
            )
            self._flush_callbacks = _set_flush_callbacks(
                self.handle, None if callbacks is None else callbacks[0])
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
            if callbacks is not None and _set_locking_callbacks(self.handle, callbacks[1]):
                self._closer = ThreadPoolExecutor(1, thread_name_prefix="otf2-close")
            _otf2.Archive_OpenEvtFiles(self.handle)
            _otf2.Archive_OpenDefFiles(self.handle)
        except (_otf2.Error, OSError) as exc:
            raise OutputError(f"{where}: {exc}") from exc
        self._evt_files_open = True
        self._def_files_open = True

    def close_event_files(self) -> None:
        self.finish_closing()
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
            # a close that failed was raised by ``finish_closing`` when the writing ended
            # normally, and is in the library's error log either way: here (often while
            # another error or an interruption is on its way) it is only waited for
            self._wait_for_closes()
            self.close_event_files()
        finally:
            self._stop_closer()  # no close may still run when the archive goes
            handle, self.handle = self.handle, None
            _otf2.Archive_Close(handle)

    def location_writer(self, loc: int) -> tuple[Any, int]:
        """Open the event writer of one location; returns (handle, address for the C calls).
        Raises the failure of an earlier location's close, if one failed."""
        self._raise_failed_close()
        # an empty local definition file per location, as the otf2 bindings write it: readers
        # then find every location's definitions where they look for them
        def_writer = _otf2.Archive_GetDefWriter(self.handle, loc)
        _otf2.Archive_CloseDefWriter(self.handle, def_writer)
        writer = _otf2.Archive_GetEvtWriter(self.handle, loc)
        if not writer:
            raise OutputError(f"OTF2 could not open the event writer of location {loc}")
        return writer, address(writer)

    def close_location_writer(self, writer: Any) -> None:
        """Close a location's event writer: in the closing thread if there is one (its
        failure is raised by a later ``location_writer`` or by ``finish_closing``)."""
        if self._closer is None:
            _otf2.Archive_CloseEvtWriter(self.handle, writer)
            return
        self._closing.append(self._closer.submit(_otf2.Archive_CloseEvtWriter, self.handle,
                                                 writer))

    def finish_closing(self) -> None:
        """Wait until every event writer handed to the closing thread is closed; raise the
        first failure among them."""
        failure: Exception | None = None
        while self._closing:
            try:
                self._closing[0].result()
            except Exception as exc:  # that close failed (a signal leaves it to wait for)
                failure = failure or exc
            self._closing.pop(0)
        if failure is not None:
            raise failure

    def _wait_for_closes(self) -> None:
        while self._closing:
            with contextlib.suppress(Exception):  # its failure: see ``close``
                self._closing[0].result()
            self._closing.pop(0)

    def _raise_failed_close(self) -> None:
        while self._closing and self._closing[0].done():
            self._closing.pop(0).result()

    def _stop_closer(self) -> None:
        """Let the closes handed over end, whatever else goes wrong meanwhile (a signal while
        waiting is raised once they have ended), and stop the thread."""
        if self._closer is None:
            return
        interrupted: BaseException | None = None
        while True:
            try:
                self._closer.shutdown(wait=True)
                break
            except BaseException as exc:  # a signal while waiting: the closes still run
                interrupted = interrupted or exc
        self._closer = None
        self._closing.clear()
        if interrupted is not None:
            raise interrupted


def _set_flush_callbacks(handle: Any, compiled: int | None) -> Any:
    """Every buffer is flushed to its file (the library's default for event buffers is not to
    flush): through the compiled callbacks at address ``compiled`` where built, which a
    closing thread calls without the GIL (returns None), else through Python ones (returned:
    the caller keeps them referenced as long as the archive is open)."""
    if compiled is not None and _set_compiled("OTF2_Archive_SetFlushCallbacks", handle,
                                              compiled):
        return None
    flush_callbacks = _otf2.FlushCallbacks(pre_flush=_pre_flush, post_flush=None)
    _otf2.Archive_SetFlushCallbacks(handle, flush_callbacks, None)
    return flush_callbacks


def _set_locking_callbacks(handle: Any, compiled: int) -> bool:
    """Give the archive OTF2's locking callbacks (the compiled ones at address ``compiled``),
    which make it safe to close one location's event writer in a thread while another's is
    written. False (every writer closed where it was written) if the library refuses them."""
    return _set_compiled("OTF2_Archive_SetLockingCallbacks", handle, compiled)


def _set_compiled(setter: str, handle: Any, callbacks: int) -> bool:
    """Call the library's ``setter(archive, callbacks, NULL)`` with the address of a struct of
    compiled callbacks (the bindings' setter takes only a Python struct); True if it
    succeeded."""
    set_callbacks = c_function(setter)
    set_callbacks.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    set_callbacks.restype = ctypes.c_int
    return set_callbacks(address(handle), callbacks, None) == 0
