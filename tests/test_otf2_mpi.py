"""The OTF2 collective callbacks over mpi4py, called the way the OTF2 C library calls them.

OTF2 writing an archive on a POSIX file system uses only a few of them (rank, size,
broadcast), so the conversion tests cannot show the others right. Here three processes call
every callback through its C function pointer with C buffers and OTF2 type codes: broadcast,
gather, gatherv with uneven counts, scatter, scatterv, barrier, a local communicator split by
file number, and ``agree``; the script prints one line per process when every result is as
expected.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.mpi  # every test here launches mpiexec

SCRIPT = r"""
import ctypes
from mpi4py import MPI
import _otf2
from cell_otf2.errors import OutputError
from cell_otf2.writer.mpi_callbacks import MpiCollectives

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
c = MpiCollectives(comm)
cb, ctx = c._struct, c._global
U32, U64 = _otf2.TYPE_UINT32.value, _otf2.TYPE_UINT64.value

def check(ok, what):
    if not ok:
        raise SystemExit(f"process {rank}: {what}")

out = ctypes.c_uint32()
check(cb.get_size(None, ctx, ctypes.byref(out)) == 0 and out.value == size, "size")
check(cb.get_rank(None, ctx, ctypes.byref(out)) == 0 and out.value == rank, "rank")
check(cb.barrier(None, ctx) == 0, "barrier")

data = (ctypes.c_uint64 * 3)(*([7, 8, 9] if rank == 1 else [0, 0, 0]))
check(cb.bcast(None, ctx, ctypes.addressof(data), 3, U64, 1) == 0, "bcast code")
check(list(data) == [7, 8, 9], f"bcast {list(data)}")

mine = (ctypes.c_uint32 * 2)(10 * rank, 10 * rank + 1)
allv = (ctypes.c_uint32 * (2 * size))()
check(cb.gather(None, ctx, ctypes.addressof(mine), ctypes.addressof(allv), 2, U32, 0) == 0,
      "gather code")
if rank == 0:
    check(list(allv) == [v for r in range(size) for v in (10 * r, 10 * r + 1)],
          f"gather {list(allv)}")

counts = [r + 1 for r in range(size)]  # process r sends r + 1 values r
send = (ctypes.c_uint64 * counts[rank])(*([rank] * counts[rank]))
recv = (ctypes.c_uint64 * sum(counts))()
n_out = (ctypes.c_uint32 * size)(*counts)
check(cb.gatherv(None, ctx, ctypes.addressof(send), counts[rank], ctypes.addressof(recv),
                 n_out, U64, 2) == 0, "gatherv code")
if rank == 2:
    check(list(recv) == [r for r in range(size) for _ in range(r + 1)],
          f"gatherv {list(recv)}")

src = (ctypes.c_uint32 * size)(*[100 + r for r in range(size)])
one = ctypes.c_uint32()
check(cb.scatter(None, ctx, ctypes.addressof(src), ctypes.addressof(one), 1, U32, 0) == 0,
      "scatter code")
check(one.value == 100 + rank, f"scatter {one.value}")

flat = (ctypes.c_uint64 * sum(counts))(*[r for r in range(size) for _ in range(r + 1)])
back = (ctypes.c_uint64 * counts[rank])()
check(cb.scatterv(None, ctx, ctypes.addressof(flat), n_out, ctypes.addressof(back),
                  counts[rank], U64, 1) == 0, "scatterv code")
check(list(back) == [rank] * counts[rank], f"scatterv {list(back)}")

local = ctypes.c_void_p()
file_number = 0 if rank < 2 else 1
check(cb.create_local_comm(None, ctypes.byref(local), ctx, rank, size, rank % 2, 2,
                           file_number, 2) == 0, "create_local_comm code")
check(cb.get_size(None, local.value, ctypes.byref(out)) == 0
      and out.value == (2 if rank < 2 else 1), f"local size {out.value}")
check(cb.free_local_comm(None, local.value) == 0, "free_local_comm code")
check(cb.bcast(None, 12345, ctypes.addressof(data), 3, U64, 0) != 0, "unknown context")

c.agree(None)
try:
    c.agree(RuntimeError("disk full") if rank == 2 else None)
    check(False, "agree raised nothing")
except OutputError as exc:
    check(("converter process 2" in str(exc)) == (rank != 2) and "disk full" in str(exc),
          f"agree message {exc}")
print(f"process {rank} ok", flush=True)
"""


@pytest.mark.skipif(shutil.which("mpiexec") is None, reason="needs mpiexec (openmpi-bin)")
def test_every_callback_over_three_processes(tmp_path):
    pytest.importorskip("mpi4py", reason="needs mpi4py (pip install 'cell2otf2[mpi]')")
    script = tmp_path / "collectives.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [shutil.which("mpiexec"), "-n", "3"]
    version = subprocess.run(cmd[:1] + ["--version"], capture_output=True, text=True).stdout
    if "Open MPI" in version or "OpenRTE" in version:
        cmd += ["--oversubscribe", "-x", "PYTHONPATH"]
        if os.geteuid() == 0:
            cmd += ["--allow-run-as-root"]
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    res = subprocess.run(cmd + [sys.executable, str(script)], capture_output=True, text=True,
                         env=env, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    # mpiexec forwards each process's output as it comes: lines may run into each other
    assert sorted(re.findall(r"process (\d) ok", res.stdout)) == ["0", "1", "2"], res.stdout
