"""OTF2's collective callbacks over an mpi4py communicator (``install``), so that every converter
process of a parallel conversion writes the event files of its own locations into one archive
and rank 0 writes the definitions and the anchor; ``agree`` lets every process learn whether any
failed between two collective steps (how and why: docs/performance.md). The caller imports
mpi4py and passes the communicator in, so importing this module initializes nothing; it checks
nothing about the archive's contents."""

from __future__ import annotations

import ctypes
from typing import Any

import _otf2

from ..errors import OutputError
from .otf2_internals import c_function

_CALLBACK_SUCCESS = 0
_CALLBACK_ERROR = 1  # OTF2 treats every code but success as a failure

_vp, _u8, _u32, _int = ctypes.c_void_p, ctypes.c_uint8, ctypes.c_uint32, ctypes.c_int
_u32p = ctypes.POINTER(ctypes.c_uint32)

_RELEASE = ctypes.CFUNCTYPE(None, _vp, _vp, _vp)
_GET_SIZE = ctypes.CFUNCTYPE(_int, _vp, _vp, _u32p)
_GET_RANK = ctypes.CFUNCTYPE(_int, _vp, _vp, _u32p)
_CREATE_LOCAL = ctypes.CFUNCTYPE(_int, _vp, ctypes.POINTER(_vp), _vp, _u32, _u32, _u32, _u32,
                                 _u32, _u32)
_FREE_LOCAL = ctypes.CFUNCTYPE(_int, _vp, _vp)
_BARRIER = ctypes.CFUNCTYPE(_int, _vp, _vp)
_BCAST = ctypes.CFUNCTYPE(_int, _vp, _vp, _vp, _u32, _u8, _u32)
_GATHER = ctypes.CFUNCTYPE(_int, _vp, _vp, _vp, _vp, _u32, _u8, _u32)
_GATHERV = ctypes.CFUNCTYPE(_int, _vp, _vp, _vp, _u32, _vp, _u32p, _u8, _u32)
_SCATTER = ctypes.CFUNCTYPE(_int, _vp, _vp, _vp, _vp, _u32, _u8, _u32)
_SCATTERV = ctypes.CFUNCTYPE(_int, _vp, _vp, _vp, _u32p, _vp, _u32, _u8, _u32)


class _Callbacks(ctypes.Structure):
    """``OTF2_CollectiveCallbacks``, field for field."""

    _fields_ = [
        ("release", _RELEASE),
        ("get_size", _GET_SIZE),
        ("get_rank", _GET_RANK),
        ("create_local_comm", _CREATE_LOCAL),
        ("free_local_comm", _FREE_LOCAL),
        ("barrier", _BARRIER),
        ("bcast", _BCAST),
        ("gather", _GATHER),
        ("gatherv", _GATHERV),
        ("scatter", _SCATTER),
        ("scatterv", _SCATTERV),
    ]


#: bytes per element of the OTF2 types the collectives move (OTF2_Type values)
_TYPE_SIZE = {
    _otf2.TYPE_UINT8.value: 1, _otf2.TYPE_INT8.value: 1,
    _otf2.TYPE_UINT16.value: 2, _otf2.TYPE_INT16.value: 2,
    _otf2.TYPE_UINT32.value: 4, _otf2.TYPE_INT32.value: 4, _otf2.TYPE_FLOAT.value: 4,
    _otf2.TYPE_UINT64.value: 8, _otf2.TYPE_INT64.value: 8, _otf2.TYPE_DOUBLE.value: 8,
}


def _guarded(fn):
    """A callback body that returns an error code instead of raising into C."""

    def call(*args):
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - C cannot take an exception; OTF2 reports the code
            return _CALLBACK_ERROR
        return _CALLBACK_SUCCESS

    return call


class MpiCollectives:
    """OTF2 collective callbacks over one mpi4py communicator (``comm``; rank 0 is master)."""

    def __init__(self, comm: Any) -> None:
        from mpi4py import MPI  # the caller already imported it: no new initialization

        self._mpi = MPI
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        # opaque OTF2_CollectiveContext pointers: addresses of tokens we own -> communicator
        self._tokens: dict[int, tuple[ctypes.c_int, Any]] = {}
        self._global = self._context(comm)
        self._struct = _Callbacks(
            release=_RELEASE(lambda *_: None),
            get_size=_GET_SIZE(_guarded(self._get_size)),
            get_rank=_GET_RANK(_guarded(self._get_rank)),
            create_local_comm=_CREATE_LOCAL(_guarded(self._create_local)),
            free_local_comm=_FREE_LOCAL(_guarded(self._free_local)),
            barrier=_BARRIER(_guarded(self._barrier)),
            bcast=_BCAST(_guarded(self._bcast)),
            gather=_GATHER(_guarded(self._gather)),
            gatherv=_GATHERV(_guarded(self._gatherv)),
            scatter=_SCATTER(_guarded(self._scatter)),
            scatterv=_SCATTERV(_guarded(self._scatterv)),
        )

    @property
    def is_master(self) -> bool:
        return self.rank == 0

    def install(self, archive_handle: Any) -> None:
        """Set the callbacks on an archive just opened (OTF2 keeps a pointer to them: this
        object must outlive the archive). ``archive_handle`` is the ctypes pointer the
        (untyped) otf2 bindings return from ``Archive_Open``."""
        fn = c_function("OTF2_Archive_SetCollectiveCallbacks")  # the bindings' takes no struct
        fn.argtypes = [_vp, ctypes.POINTER(_Callbacks), _vp, _vp, _vp]
        fn.restype = ctypes.c_int
        handle = ctypes.cast(archive_handle, _vp).value
        code = fn(handle, ctypes.byref(self._struct), None, self._global, None)
        if code != 0:
            raise OutputError(f"OTF2 refused the MPI collective callbacks (error code {code})")

    def agree(self, failure: BaseException | None) -> None:
        """Every process learns whether any failed; raises ``OutputError`` on all if one did."""
        failures = self.comm.allgather(None if failure is None else str(failure))
        bad = [(r, f) for r, f in enumerate(failures) if f is not None]
        if bad:
            rank, text = bad[0]
            raise OutputError(text if rank == self.rank else
                              f"converter process {rank} failed to write: {text}")

    # -- contexts

    def _context(self, comm: Any) -> int:
        token = ctypes.c_int(len(self._tokens))
        address = ctypes.addressof(token)
        self._tokens[address] = (token, comm)
        return address

    def _comm(self, context: int | None) -> Any:
        if context is None:
            raise ValueError("OTF2 passed no communicator context")
        return self._tokens[context][1]

    def _buffer(self, address: int | None, nbytes: int) -> Any:
        if nbytes == 0 or not address:
            return bytearray(0)
        return self._mpi.buffer.fromaddress(address, nbytes)

    # -- the callbacks (userData is unused: everything lives on self)

    def _get_size(self, _user, context, out) -> None:
        out[0] = self._comm(context).Get_size()

    def _get_rank(self, _user, context, out) -> None:
        out[0] = self._comm(context).Get_rank()

    def _create_local(self, _user, out, global_context, _grank, _gsize, local_rank, _lsize,
                      file_number, _files) -> None:
        local = self._comm(global_context).Split(file_number, local_rank)
        out[0] = self._context(local)

    def _free_local(self, _user, context) -> None:
        if context in self._tokens:
            _, comm = self._tokens.pop(context)
            comm.Free()

    def _barrier(self, _user, context) -> None:
        self._comm(context).Barrier()

    def _bcast(self, _user, context, data, n, typ, root) -> None:
        buf = self._buffer(data, n * _TYPE_SIZE[typ])
        self._comm(context).Bcast([buf, self._mpi.BYTE], root=root)

    def _gather(self, _user, context, data_in, data_out, n, typ, root) -> None:
        comm = self._comm(context)
        nbytes = n * _TYPE_SIZE[typ]
        out = None
        if comm.Get_rank() == root:
            out = [self._buffer(data_out, nbytes * comm.Get_size()), self._mpi.BYTE]
        comm.Gather([self._buffer(data_in, nbytes), self._mpi.BYTE], out, root=root)

    def _vector(self, data, n_per_rank, size: int, n_ranks: int) -> list:
        """The root's side of a Gatherv/Scatterv: buffer, (byte counts, displacements), BYTE
        for ``n_per_rank[i]`` elements of ``size`` bytes from/to each rank i, packed in order."""
        counts = [int(n_per_rank[i]) * size for i in range(n_ranks)]
        displs = [sum(counts[:i]) for i in range(n_ranks)]
        return [self._buffer(data, sum(counts)), (counts, displs), self._mpi.BYTE]

    def _gatherv(self, _user, context, data_in, n_in, data_out, n_out, typ, root) -> None:
        comm = self._comm(context)
        size = _TYPE_SIZE[typ]
        out = None
        if comm.Get_rank() == root:
            out = self._vector(data_out, n_out, size, comm.Get_size())
        comm.Gatherv([self._buffer(data_in, n_in * size), self._mpi.BYTE], out, root=root)

    def _scatter(self, _user, context, data_in, data_out, n, typ, root) -> None:
        comm = self._comm(context)
        nbytes = n * _TYPE_SIZE[typ]
        send = None
        if comm.Get_rank() == root:
            send = [self._buffer(data_in, nbytes * comm.Get_size()), self._mpi.BYTE]
        comm.Scatter(send, [self._buffer(data_out, nbytes), self._mpi.BYTE], root=root)

    def _scatterv(self, _user, context, data_in, n_in, data_out, n_out, typ, root) -> None:
        comm = self._comm(context)
        size = _TYPE_SIZE[typ]
        send = None
        if comm.Get_rank() == root:
            send = self._vector(data_in, n_in, size, comm.Get_size())
        comm.Scatterv(send, [self._buffer(data_out, n_out * size), self._mpi.BYTE], root=root)
