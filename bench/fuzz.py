"""Fuzz the converter with mutated runs: no traceback, no hang, ``check`` agrees with convert.

Tiny valid runs come from the simulator (several shapes: both byte orders, context switches,
restored decrementers, decrementer writes, unbuffered SPEs, no heartbeats, SPE-to-SPE DMA and
signals, MPI over two nodes). Each case takes one of them and applies 1 to 3 mutations:

- dumps: bit flips (body or header), truncation at any byte, duplicated slots, swapped slots,
  deleted slot runs, a slot field set to an edge value (0, 1, all ones, random, +-1), a slot
  code replaced (defined or not), slots replaced by a GAP, a header field set to an edge value;
- manifest: a JSON value deleted, replaced (wrong type, negative, huge, string), a list
  element duplicated or deleted, the text cut short, or garbage bytes.

35 % of the cases (``--env-share``) instead vary what surrounds a valid run (``fuzz_env.py``:
manifest JSON that breaks parsers, manifest numbers at and past their ranges, manifest strings
with NULs, surrogates and paths that name no file in the run, special files, dumps extended by
holes to gigabytes with their peak memory measured, output paths that clash with the input,
a full disk, a full or closed stdout, missing permissions, concurrent conversions, signals,
and check against convert as commands over drawn options).

Half the mutated runs are converted and checked with drawn options (``--alpha``,
``--read-delay-ticks``, ``--dma-style``, ``--accept-unsynchronized-nodes``); their damage
kinds are also compared with a check under the default alpha and the same read delay (which
widens the bounds themselves): what is damaged must not depend on where offsets sit within
their bounds.

Then it runs ``convert`` (archive written into a scratch directory, ``--force``) and
``check.check_run`` in a worker process and sorts the outcome: converted (exit 0), converted
with contained damage (1), refused with a ``CellOtf2Error`` (its exit status, normally 3),
**internal error** (any other exception: what the CLI reports as an internal error with exit
status 70, a bug),
**output error** (exit 4 from an input problem, a bug), **check mismatch** (``check`` and
conversion disagree on the status or the damage lines, a bug), **invalid archive** (every
``--verify-every``-th converted archive goes through ``otf2-print --silent -Werror``), and
**memory** (a command's peak virtual memory grew by more than 2x the run's size over the base
run's), **hang** (a case over 60 s, or no answer within ``--timeout`` seconds: the worker is
killed and replaced). Bugs are
printed grouped by where they were raised, with the case numbers to replay.

    .venv/bin/python bench/fuzz.py [--runs 10000] [--seed 0] [--workers 2] [--timeout 200]
    .venv/bin/python bench/fuzz.py --replay CASE [--keep DIR]   # one case, with its traceback

Same seed, same cases. Not part of CI (minutes, not seconds); tests/test_damage.py holds the
fast, exact damage tests.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter, defaultdict
from pathlib import Path

from cell_otf2.input import format as fmt

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_env import Disk, pick_class, run_env_case  # noqa: E402  (beside this script)

#: the share of cases that vary the environment (fuzz_env) instead of the run's bytes
ENV_SHARE = 0.35
#: a case (or, in fuzz_env, one command) that takes longer is a hang
HANG_SECONDS = 60

#: the valid runs mutations start from: name -> simulate_run options (all tiny)
BASES: dict[str, dict] = {
    "fft-B": dict(workload="fft", spes=2, phases=2, chunks=2),
    "fft-switch-L": dict(workload="fft", spes=3, spus=1, phases=2, chunks=2, byte_order="L"),
    "restored-writes-unbuffered": dict(workload="fft", spes=2, spus=1, phases=2, chunks=2,
                                       decrementer_restore="restored", decr_writes=True,
                                       spe_buffer_records=1, spe_buffers=1),
    "julia-ls-dma-signals": dict(workload="julia", spes=3, phases=1, chunks=2),
    "hybrid-2-nodes": dict(workload="hybrid", spes=1, ranks=2, nodes=2, phases=1, chunks=2),
    "matmul-no-heartbeats": dict(workload="matmul", spes=2, phases=1, chunks=2,
                                 heartbeats=False, byte_order="L"),
    # nodes no MPI message links both ways: convert and check both say unsynchronized_node
    "matmul-3-nodes": dict(workload="matmul", spes=1, ranks=3, nodes=3, phases=1, chunks=2),
}
#: the options a case converts and checks with (``pick_options``): where offsets sit, the
#: guaranteed mode, the DMA style and the acceptance of unsynchronized nodes
ALPHAS = (0.0, 0.143, 0.5, 0.857, 1.0)
READ_DELAYS = (0.0, 1.0, 8.0, 1000.0, float(1 << 31))

EDGE_U = ("zero", "one", "max", "random", "plus", "minus", "high-bit")
PPE_FIELDS = ((0, 2), (2, 2), (4, 4), (8, 8), (16, 8), (24, 8))
BLOCK_FIELDS = ((2, 2), (4, 4), (8, 4), (12, 2), (14, 1), (15, 1), (16, 8), (24, 8))
HEADER_FIELDS = ((4, 1), (5, 1), (6, 2), (8, 2), (10, 2), (12, 1), (16, 4), (24, 8), (32, 8))
ALL_CODES = [int(c) for c in (*fmt.PpeCode, *fmt.SpeCode, *fmt.ControlCode)]
JSON_VALUES = (None, True, False, -1, 0, 1, 2, 7, 1 << 64, -(1 << 63), 1.5, "", "x",
               "MPI_COMM_WORLD", [], {}, [0], [0, 0], {"id": 1})


# ------------------------------------------------------------------------------------------
# base runs
# ------------------------------------------------------------------------------------------


def make_bases(seed: int) -> dict[str, dict[str, bytes]]:
    """Every base run as {file name: bytes} (run.json and the dumps, no truth files)."""
    from cell_otf2.sim.run import simulate_run

    out = {}
    with tempfile.TemporaryDirectory(prefix="fuzz-base-") as tmp:
        for name, opts in BASES.items():
            run = Path(tmp) / name
            simulate_run(run, seed=seed, **opts)
            files = {"run.json": (run / "run.json").read_bytes()}
            for p in sorted(run.glob("*.cbt")):
                files[p.name] = p.read_bytes()
            out[name] = files
    return out


# ------------------------------------------------------------------------------------------
# mutations: each takes (rng, files) and edits files in place, returning a short description
# ------------------------------------------------------------------------------------------


def _dump(rng: random.Random, files: dict) -> str:
    return rng.choice(sorted(k for k in files if k.endswith(".cbt")))


def _order(data: bytearray) -> str:
    return "<" if len(data) > 4 and data[4] == fmt.BYTE_ORDER_LITTLE else ">"


def _n_slots(data: bytearray) -> int:
    return max(0, (len(data) - fmt.HEADER_SIZE) // fmt.SLOT_SIZE)


def _slot(i: int) -> slice:
    start = fmt.HEADER_SIZE + i * fmt.SLOT_SIZE
    return slice(start, start + fmt.SLOT_SIZE)


def _edge(rng: random.Random, old: int, size: int) -> tuple[int, str]:
    top = (1 << (8 * size)) - 1
    how = rng.choice(EDGE_U)
    value = {"zero": 0, "one": 1, "max": top, "random": rng.randint(0, top),
             "plus": old + 1, "minus": old - 1, "high-bit": old ^ (1 << (8 * size - 1))}[how]
    return value & top, how


def _put(data: bytearray, offset: int, size: int, value: int, order: str) -> None:
    data[offset:offset + size] = value.to_bytes(size, "little" if order == "<" else "big")


def _get(data: bytearray, offset: int, size: int, order: str) -> int:
    return int.from_bytes(data[offset:offset + size], "little" if order == "<" else "big")


def m_bitflip(rng, files):
    name = _dump(rng, files)
    data = files[name]
    k = rng.randint(1, 8)
    header = rng.random() < 0.1
    lo = 0 if header else min(len(data) - 1, fmt.HEADER_SIZE)
    hi = fmt.HEADER_SIZE if header else len(data)
    for _ in range(k):
        pos = rng.randrange(lo, max(lo + 1, hi))
        if pos < len(data):
            data[pos] ^= 1 << rng.randrange(8)
    return f"bitflip {name} x{k}{' header' if header else ''}"


def m_truncate(rng, files):
    name = _dump(rng, files)
    data = files[name]
    cut = rng.choice([rng.randrange(0, len(data) + 1), len(data) - rng.randint(1, 40),
                      fmt.HEADER_SIZE + rng.randrange(0, max(1, len(data) - fmt.HEADER_SIZE))])
    cut = max(0, min(len(data), cut))
    del data[cut:]
    return f"truncate {name} at {cut}"


def m_dup_slots(rng, files):
    name = _dump(rng, files)
    data = files[name]
    n = _n_slots(data)
    if n == 0:
        return f"dup {name}: no slots"
    i = rng.randrange(n)
    k = rng.randint(1, min(4, n - i))
    j = rng.randrange(n + 1)
    chunk = bytes(data[_slot(i).start:_slot(i + k - 1).stop])
    at = _slot(j).start if j < n else fmt.HEADER_SIZE + n * fmt.SLOT_SIZE
    data[at:at] = chunk
    return f"dup {name} slots {i}..{i + k - 1} at {j}"


def m_swap_slots(rng, files):
    name = _dump(rng, files)
    data = files[name]
    n = _n_slots(data)
    if n < 2:
        return f"swap {name}: too few slots"
    i = rng.randrange(n)
    j = min(n - 1, i + rng.randint(1, 3)) if rng.random() < 0.6 else rng.randrange(n)
    a, b = bytes(data[_slot(i)]), bytes(data[_slot(j)])
    data[_slot(i)], data[_slot(j)] = b, a
    return f"swap {name} slots {i} {j}"


def m_delete_slots(rng, files):
    name = _dump(rng, files)
    data = files[name]
    n = _n_slots(data)
    if n == 0:
        return f"delete {name}: no slots"
    i = rng.randrange(n)
    k = rng.randint(1, min(20, n - i))
    del data[_slot(i).start:_slot(i + k - 1).stop]
    return f"delete {name} slots {i}..{i + k - 1}"


def m_field(rng, files):
    name = _dump(rng, files)
    data = files[name]
    n = _n_slots(data)
    if n == 0:
        return f"field {name}: no slots"
    i = rng.randrange(n)
    order = _order(data)
    base = _slot(i).start
    code = _get(data, base, 2, order)
    fields = BLOCK_FIELDS if code == fmt.ControlCode.BLOCK else PPE_FIELDS
    off, size = rng.choice(fields)
    value, how = _edge(rng, _get(data, base + off, size, order), size)
    _put(data, base + off, size, value, order)
    return f"field {name} slot {i} (code 0x{code:04X}) +{off}:{size} {how}"


def m_code(rng, files):
    name = _dump(rng, files)
    data = files[name]
    n = _n_slots(data)
    if n == 0:
        return f"code {name}: no slots"
    i = rng.randrange(n)
    code = rng.choice(ALL_CODES) if rng.random() < 0.7 else rng.randrange(1 << 16)
    _put(data, _slot(i).start, 2, code, _order(data))
    return f"code {name} slot {i} -> 0x{code:04X}"


def m_gap(rng, files):
    name = _dump(rng, files)
    data = files[name]
    n = _n_slots(data)
    if n == 0:
        return f"gap {name}: no slots"
    i = rng.randrange(n)
    k = rng.randint(1, min(12, n - i))
    order = _order(data)
    slot = bytearray(fmt.SLOT_SIZE)
    _put(slot, 0, 2, int(fmt.ControlCode.GAP), order)
    lost = k if rng.random() < 0.7 else rng.choice([0, 1 << 63, rng.randrange(1 << 64)])
    _put(slot, 8, 8, lost, order)
    _put(slot, 16, 8, i if rng.random() < 0.7 else rng.randrange(1 << 64), order)
    data[_slot(i).start:_slot(i + k - 1).stop] = slot
    return f"gap {name} slots {i}..{i + k - 1} lost={lost}"


def m_header(rng, files):
    name = _dump(rng, files)
    data = files[name]
    if len(data) < fmt.HEADER_SIZE:
        return f"header {name}: too short"
    off, size = rng.choice(HEADER_FIELDS)
    order = _order(data)
    value, how = _edge(rng, _get(data, off, size, order), size)
    _put(data, off, size, value, order)
    return f"header {name} +{off}:{size} {how}"


def _json_paths(node, path=()):
    yield path
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _json_paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _json_paths(v, (*path, i))


def m_manifest(rng, files):
    text = bytes(files["run.json"])
    how = rng.choices(["edit", "cut", "garbage"], weights=[90, 6, 4])[0]
    if how == "cut":
        cut = rng.randrange(len(text) + 1)
        files["run.json"] = bytearray(text[:cut])
        return f"manifest cut at {cut}"
    if how == "garbage":
        pos = rng.randrange(len(text) + 1)
        files["run.json"] = bytearray(text[:pos] + bytes(rng.randrange(256) for _ in range(4))
                                      + text[pos:])
        return f"manifest garbage at {pos}"
    try:
        doc = json.loads(text)
    except ValueError:
        return "manifest not JSON already"
    paths = [p for p in _json_paths(doc) if p]
    path = rng.choice(paths)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    action = rng.choice(["delete", "replace", "replace", "tweak", "dup"])
    old = parent[key]
    if action == "delete":
        del parent[key]
    elif action == "tweak" and isinstance(old, int) and not isinstance(old, bool):
        parent[key] = old + rng.choice([-1, 1, 1 << 32])
    elif action == "dup" and isinstance(parent, list):
        parent.insert(key, json.loads(json.dumps(old)))
    else:
        action = "replace"
        parent[key] = rng.choice(JSON_VALUES)
    files["run.json"] = bytearray(json.dumps(doc).encode())
    return f"manifest {action} {'/'.join(map(str, path))}"


MUTATIONS = {
    m_bitflip: 20, m_truncate: 10, m_dup_slots: 8, m_swap_slots: 10, m_delete_slots: 8,
    m_field: 20, m_code: 8, m_gap: 6, m_header: 4, m_manifest: 14,
}


def make_case(case: int, seed: int, bases: dict) -> tuple[str, dict[str, bytearray], list[str]]:
    """The mutated run of case number ``case``: (base name, files, mutation descriptions)."""
    rng = random.Random(f"{seed}:{case}")
    base = rng.choice(sorted(bases))
    files = {k: bytearray(v) for k, v in bases[base].items()}
    ops = rng.choices(list(MUTATIONS), weights=list(MUTATIONS.values()), k=rng.randint(1, 3))
    return base, files, [op(rng, files) for op in ops]


# ------------------------------------------------------------------------------------------
# running one case
# ------------------------------------------------------------------------------------------


def _where(exc: BaseException) -> str:
    """The innermost project frame of a traceback: 'module.py:line in function'."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if "cell_otf2" in f.filename] or frames
    f = mine[-1] if mine else None
    return f"{Path(f.filename).name}:{f.lineno} in {f.name}" if f else "?"


def _otf2_print_fails(anchor: Path) -> str:
    """'' when ``otf2-print --silent -Werror`` accepts the archive, else its complaint."""
    if shutil.which("otf2-print") is None:
        return ""
    try:
        p = subprocess.run(["otf2-print", "--silent", "-Werror", str(anchor)],
                           capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "otf2-print timed out"
    return "" if p.returncode == 0 else (p.stdout + p.stderr).strip()[:300]


def run_case(case: int, seed: int, bases: dict, work: Path, verify: bool = False,
             disk: Disk | None = None, env_share: float = ENV_SHARE) -> dict:
    """Convert and check one mutated run (or one environment case, ``fuzz_env``); never
    raises. ``verify``: otf2-print the archive. A case that takes over ``HANG_SECONDS`` is
    a hang even when it ends."""
    t0 = time.monotonic()
    out = _run_case(case, seed, bases, work, verify, disk, env_share)
    took = time.monotonic() - t0
    if out.get("env") != "sparse" and took > HANG_SECONDS and out["kind"] not in (
            "internal", "crash", "output", "mismatch", "memory"):
        # sparse cases run several commands, each under its own 60 s limit
        out.update(kind="hang", message=f"took {took:.0f} s (over {HANG_SECONDS} s)")
    return out


def _run_case(case: int, seed: int, bases: dict, work: Path, verify: bool,
              disk: Disk | None, env_share: float) -> dict:
    from cell_otf2 import convert
    from cell_otf2.errors import CellOtf2Error
    from cell_otf2.run.check import check_run
    from cell_otf2.run.options import ConvertOptions

    base, files, muts = make_case(case, seed, bases)
    klass = pick_class(case, seed, env_share)
    if klass is not None:  # the environment is the case: the run's own bytes stay valid
        files = bases[base]
    run = work / "run"
    if work.exists():
        for p in (work, run, work / "out"):
            if p.exists():
                p.chmod(0o755)
    shutil.rmtree(work, ignore_errors=True)
    run.mkdir(parents=True)
    for name, data in files.items():
        (run / name).write_bytes(bytes(data))
    if klass is not None:
        return {"case": case, "base": base, "env": klass,
                **run_env_case(klass, case, seed, run, work, disk, base)}
    opts = pick_options(case, seed)
    out: dict = {"case": case, "base": base, "mutations": muts + [_show_options(opts)]}

    def outcome(fn) -> tuple[str, int | None, str, list[str]]:
        try:
            lines = fn()
            return "ok", 1 if lines else 0, "", lines
        except CellOtf2Error as exc:
            return "refused", exc.exit_status, str(exc), []
        except Exception as exc:  # noqa: BLE001 - what the fuzzer is looking for
            return "internal", None, f"{type(exc).__name__}: {exc} @ {_where(exc)}", []

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kind, status, msg, lines = outcome(
            lambda: convert(run, work / "out" / "a.otf2", force=True, **opts).unusable())
        ckind, cstatus, cmsg, clines = outcome(
            lambda: check_run(run, ConvertOptions.of(**opts)).lines)
        dkind = dstatus = dlines = None
        if kind == "ok" and _moves_offsets(opts):  # damage must not depend on the offsets
            # the same read delay (it widens the bounds themselves), the default alpha
            dkind, dstatus, _dmsg, dlines = outcome(lambda: check_run(run, ConvertOptions.of(**{
                k: v for k, v in opts.items()
                if k in ("accept_unsynchronized_nodes", "read_delay_ticks")})).lines)
    if caught:
        w = caught[0]
        out["warning"] = f"{w.category.__name__}: {w.message} @ {Path(w.filename).name}:{w.lineno}"
    out.update(kind=kind, status=status, message=msg, lines=lines)
    if kind == "refused" and status == 4:
        out["kind"] = "output"
    if verify and kind == "ok":
        complaint = _otf2_print_fails(work / "out" / "a.otf2")
        out["verified"] = True
        if complaint:
            out.update(kind="invalid", message=f"otf2-print -Werror: {complaint}")
    if kind != "internal" and ckind == "internal":
        out.update(kind="internal", message="check: " + cmsg)
    elif kind != "internal" and (status, lines) != (cstatus, clines):
        out.update(kind="mismatch", message=f"convert {status} {lines[:3]} / check {cstatus} "
                                            f"{clines[:3]} {cmsg}")
    elif dkind is not None and (dkind, dstatus, _kinds(dlines)) != (kind, status, _kinds(lines)):
        out.update(kind="mismatch", message=f"damage moves with the offsets: "
                   f"{_show_options(opts)} {status} {_kinds(lines)} / default options "
                   f"{dstatus} {_kinds(dlines)}")
    return out


def pick_options(case: int, seed: int) -> dict:
    """The conversion options of ``case`` (``convert``'s and ``check_run``'s keywords): the
    defaults for half the cases, else a draw of every option."""
    from cell_otf2.model import DmaStyle

    rng = random.Random(f"{seed}:{case}:options")
    if rng.random() < 0.5:
        return {}
    opts: dict = {"alpha": rng.choice(ALPHAS + (rng.random(),))}
    if rng.random() < 0.5:
        opts["read_delay_ticks"] = rng.choice(READ_DELAYS)
    if rng.random() < 0.3:
        opts["dma_style"] = DmaStyle.MESSAGES
    if rng.random() < 0.3:
        opts["accept_unsynchronized_nodes"] = True
    return opts


def _moves_offsets(opts: dict) -> bool:
    return opts.get("alpha", 0.5) != 0.5


def _show_options(opts: dict) -> str:
    parts = [f"alpha {opts['alpha']:.3g}"] if "alpha" in opts else []
    if "read_delay_ticks" in opts:
        parts.append(f"read-delay {opts['read_delay_ticks']:g}")
    if "dma_style" in opts:
        parts.append("dma messages")
    if opts.get("accept_unsynchronized_nodes"):
        parts.append("accept-unsynchronized")
    return "options: " + (", ".join(parts) or "default")


def _kinds(lines: list[str] | None) -> list[str]:
    """The damage kinds of summary lines ("kind: ..."), in order."""
    return [line.split(":", 1)[0] for line in lines or []]


def _worker(conn, seed: int, bases: dict, work: str, mem_gb: float, verify_every: int,
            env_share: float = ENV_SHARE) -> None:
    if mem_gb > 0:
        limit = int(mem_gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    disk = Disk(Path(work)) if env_share > 0 else None
    while True:
        case = conn.recv()
        if case is None:
            if disk is not None:
                disk.close()
            return
        try:
            verify = verify_every > 0 and case % verify_every == 0
            conn.send(run_case(case, seed, bases, Path(work), verify, disk, env_share))
        except BaseException as exc:  # noqa: BLE001 - report, keep serving
            conn.send({"case": case, "kind": "internal", "message":
                       f"fuzz worker: {type(exc).__name__}: {exc} @ {_where(exc)}",
                       "base": "?", "mutations": []})


class _Slot:
    """One worker process and the case it is running."""

    def __init__(self, ctx, seed: int, bases: dict, root: Path, index: int, mem_gb: float,
                 verify_every: int, env_share: float):
        self.args = (seed, bases, str(root / f"w{index}"), mem_gb, verify_every, env_share)
        self.ctx = ctx
        self.start()

    def start(self) -> None:
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker, args=(child, *self.args), daemon=True)
        self.proc.start()
        child.close()
        self.case: int | None = None
        self.since = 0.0

    def submit(self, case: int) -> None:
        self.case, self.since = case, time.monotonic()
        self.conn.send(case)

    def kill(self) -> None:
        self.proc.kill()  # only this worker, by its own handle
        self.proc.join()
        self.conn.close()


def fuzz(runs: int, seed: int, workers: int, timeout: float, mem_gb: float,
         verbose: bool, verify_every: int, env_share: float = ENV_SHARE) -> int:
    t0 = time.monotonic()
    bases = make_bases(seed)
    print(f"fuzz: {runs} mutated runs from {len(bases)} base runs "
          f"({', '.join(f'{k} {sum(map(len, v.values()))} B' for k, v in bases.items())}), "
          f"seed {seed}, {workers} workers, timeout {timeout:g} s", flush=True)
    ctx = mp.get_context("fork")
    root = Path(tempfile.mkdtemp(prefix="cell2otf2-fuzz-"))
    results: list[dict] = []
    pending = list(range(runs))[::-1]
    slots = [_Slot(ctx, seed, bases, root, i, mem_gb, verify_every, env_share)
             for i in range(max(1, workers))]
    try:
        for s in slots:
            if pending:
                s.submit(pending.pop())
        while any(s.case is not None for s in slots):
            for s in slots:
                if s.case is None:
                    continue
                if s.conn.poll(0.01):
                    try:
                        results.append(s.conn.recv())
                    except EOFError:  # the worker died (e.g. a signal in C code)
                        results.append({"case": s.case, "kind": "crash", "base": "?",
                                        "mutations": [], "message": "worker process died, "
                                        f"exit code {s.proc.exitcode}"})
                        s.kill()
                        s.start()
                elif time.monotonic() - s.since > timeout:
                    results.append({"case": s.case, "kind": "hang", "base": "?", "mutations": [],
                                    "message": f"no answer within {timeout:g} s"})
                    s.kill()
                    s.start()
                else:
                    continue
                s.case = None
                if pending:
                    s.submit(pending.pop())
                done = len(results)
                if verbose and done % 500 == 0:
                    print(f"  {done} runs, {time.monotonic() - t0:.0f} s", flush=True)
    finally:
        for s in slots:
            if s.proc.is_alive():
                try:
                    s.conn.send(None)
                except OSError:
                    pass
                s.proc.join(timeout=5)
                if s.proc.is_alive():
                    s.kill()
        shutil.rmtree(root, ignore_errors=True)
    return report(results, time.monotonic() - t0)


def _refusal_kind(message: str) -> str:
    """A refusal message without its file, numbers and found values: what it names."""
    text = re.sub(r"^\S*?(rank\d+\.cbt|run\.json)", r"\1", message)
    text = re.sub(r"\(expected .*?, found .*\)$", "(expected ..., found ...)", text)
    return re.sub(r"\d+", "N", text)[:140]


def report(results: list[dict], seconds: float) -> int:
    kinds = Counter(r["kind"] for r in results)
    statuses = Counter(r.get("status") for r in results if r["kind"] in ("ok", "refused"))
    bugs = [r for r in results if r["kind"] in ("internal", "hang", "crash", "output",
                                                "mismatch", "invalid", "leftover",
                                                "input-changed", "memory")]
    envs = Counter(r["env"] for r in results if r.get("env"))
    print(f"runs {len(results)} in {seconds:.0f} s ({len(results) / max(seconds, 1e-9):.1f}/s)")
    print(f"  converted clean (exit 0) {statuses.get(0, 0)}, converted with contained damage "
          f"(exit 1) {statuses.get(1, 0)}, refused with a precise message (exit 3) "
          f"{statuses.get(3, 0)}")
    print(f"  internal errors (tracebacks) {kinds.get('internal', 0)}, hangs "
          f"{kinds.get('hang', 0)}, worker crashes {kinds.get('crash', 0)}, output errors "
          f"{kinds.get('output', 0)}, check/convert mismatches {kinds.get('mismatch', 0)}")
    grown = [g for r in results for g in r.get("vm_growth", [])]
    print(f"  allocations above 2x the run's size {kinds.get('memory', 0)} (sparse and huge "
          f"dumps: {len(grown)} commands measured, largest growth of peak virtual memory over "
          f"the base run's {max(grown, default=0) / 2**20:.0f} MiB)")
    print(f"  leftovers (staging, spill, half-written) {kinds.get('leftover', 0)}, inputs "
          f"changed {kinds.get('input-changed', 0)}, environment cases skipped "
          f"{kinds.get('skipped', 0)}")
    print("  environment cases: " + (", ".join(f"{k} {n}" for k, n in sorted(envs.items()))
                                     or "none"))
    verified = sum(1 for r in results if r.get("verified"))
    print(f"  archives checked with otf2-print -Werror {verified}, rejected "
          f"{kinds.get('invalid', 0)}")
    refusals = Counter(_refusal_kind(r["message"]) for r in results
                       if r["kind"] == "refused" and r.get("status") == 3)
    print(f"  refusals by what they name ({len(refusals)} kinds), most frequent first:")
    for text, n in refusals.most_common(12):
        print(f"    x{n} {text}")
    warned = Counter(r["warning"] for r in results if r.get("warning"))
    print(f"  runs that printed a Python warning {sum(warned.values())}")
    for text, n in warned.most_common(8):
        print(f"    x{n} {text[:160]}")
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in bugs:
        key = r["kind"] + ": " + (r["message"].split(" @ ")[-1] if " @ " in r["message"]
                                  else r["message"][:80])
        groups[key].append(r)
    for key, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        ex = rs[0]
        print(f"  BUG x{len(rs)} {key}\n      e.g. case {ex['case']} ({ex['base']}: "
              f"{'; '.join(ex['mutations'])}): {ex['message'][:300]}\n      cases "
              f"{[r['case'] for r in rs[:12]]}")
    return 1 if bugs else 0


def replay(case: int, seed: int, keep: Path | None) -> int:
    """Run one case in this process and show everything, traceback included."""
    from cell_otf2.run.check import check_run
    from cell_otf2.run.conversion import convert

    bases = make_bases(seed)
    base, files, muts = make_case(case, seed, bases)
    work = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="cell2otf2-replay-"))
    run = work / "run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    for name, data in files.items():
        (run / name).write_bytes(bytes(data))
    print(f"case {case}: base {base}; {'; '.join(muts)}; run dir {run}")
    try:
        s = convert(run, work / "out" / "a.otf2", force=True)
        print("\n".join(s.lines()))
        print("\n".join(check_run(run).report()))
    except Exception:  # noqa: BLE001
        traceback.print_exc()
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--timeout", type=float, default=200.0,
                    help="seconds per case before its worker is killed (a case over "
                    f"{HANG_SECONDS} s counts as a hang in any case)")
    ap.add_argument("--mem-gb", type=float, default=4.0, help="address-space limit per worker")
    ap.add_argument("--verify-every", type=int, default=25,
                    help="otf2-print -Werror every N-th converted archive (0: never)")
    ap.add_argument("--env-share", type=float, default=ENV_SHARE,
                    help="share of cases that vary the environment (fuzz_env.py), 0 to 1")
    ap.add_argument("--replay", type=int, default=None, help="run one case in-process")
    ap.add_argument("--keep", type=Path, default=None, help="with --replay: keep the run here")
    ap.add_argument("-v", "--verbose", action="store_true", help="progress every 500 runs")
    a = ap.parse_args(argv)
    if a.replay is not None:
        return replay(a.replay, a.seed, a.keep)
    return fuzz(a.runs, a.seed, a.workers, a.timeout, a.mem_gb, a.verbose, a.verify_every,
                a.env_share)


if __name__ == "__main__":
    sys.exit(main())
