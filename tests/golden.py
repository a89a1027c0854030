"""Golden digests of everything the command writes, for issue 17's "a move, not a rewrite": each
case (every bundled sample run, and small simulated runs made with fixed seeds) is converted by
the real command in a subprocess (``cell2otf2 run -o out/a.otf2 --report out/a.sync.json``),
checked (``cell2otf2 check run``) and, for some cases, reported (``cell2otf2 report out/a.otf2
-o rep --sync-report out/a.sync.json``); the sha256 of every output (exit statuses, stdout and
stderr, every file of the archive, the sync report, every file of the report, and for a
simulated run the simulator's own files and stdout) is compared with ``golden/expected.json``,
made from main f92705e before any module moved. ``python tests/golden.py --update`` rewrites
the expectations (only for an intended change of behaviour); ``python tests/golden.py --prove``
produces every case twice, in two different directories, and shows which raw bytes differ.

What is normalized, exactly, and why (``--prove`` shows these are the only differences from
run to run): (1) the summary's ``  wall time ...`` line, whose seconds are measured: each
decimal number on that one line becomes ``#`` (the stage names stay); (2) the anchor's
8-byte OTF2 trace identifier, which the OTF2 library draws afresh for every archive: the value
the OTF2 reader reports must occur exactly once in the anchor file and those 8 bytes become
zeros; (3) a simulated run's ``truth.npz`` is a zip archive with the write time in it, so it is
digested by its members' names and uncompressed bytes instead of its raw bytes. Nothing else
is touched: the report's PNG files are deterministic (matplotlib writes only its version into
them) and so are its HTML and CSV. Paths never need normalizing because every command runs in
the case's own directory with relative paths (``run``, ``out/a.otf2``, ``rep``), so the
outputs that echo a path (summary, check, report, simulate) hold the same relative path on
every machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from paths import ENV, ROOT, SAMPLES

EXPECTED = Path(__file__).resolve().parent / "golden" / "expected.json"
UPDATE_COMMAND = "python tests/golden.py --update"
#: the names the commands are given, relative to the case's directory
RUN, ANCHOR, SYNC_REPORT, REPORT_DIR = "run", "out/a.otf2", "out/a.sync.json", "rep"
WALL_TIME_LINE = re.compile(rb"^  wall time .*$", re.MULTILINE)
DECIMAL = re.compile(rb"\d+\.\d+")
#: the outputs of ``cell2otf2 simulate`` (the others are the converter's)
SIMULATOR_OUTPUTS = ("simulate/", "simulated run/")


@dataclass(frozen=True)
class Case:
    """One golden case: a bundled sample run or a simulated one, converted with options."""

    name: str
    sample: str | None = None  # a run directory under sample_traces/
    simulate: tuple[str, ...] = ()  # else: the options of `cell2otf2 simulate`
    convert: tuple[str, ...] = ()  # extra options of the conversion
    report: bool = False  # also run `cell2otf2 report` (matplotlib; 2 s of CPU each)
    slow_report: bool = False  # the report's test is marked slow


SMALL_FFT = ("--workload", "fft", "--seed", "11", "--spes", "4", "--phases", "2", "--chunks", "4")
SWITCHES = ("--workload", "fft", "--seed", "15", "--spes", "6", "--spus", "4", "--phases", "2",
            "--chunks", "6")

CASES: tuple[Case, ...] = (
    Case("sample-fft-16spe", sample="fft-16spe", report=True,
         slow_report=True),
    Case("sample-context-switch-compensated", sample="context-switch-compensated", report=True,
         slow_report=True),
    Case("sample-context-switch-restored", sample="context-switch-restored"),
    Case("sample-damaged-gap-truncate", sample="damaged-gap-truncate", report=True),
    Case("sample-two-nodes-hybrid", sample="two-nodes-hybrid", report=True),
    Case("sample-two-nodes-hybrid-read-delay-8", sample="two-nodes-hybrid",
         convert=("--read-delay-ticks", "8")),
    Case("sample-wraps-heartbeats", sample="wraps-heartbeats", report=True,
         slow_report=True),
    Case("sim-single-node", simulate=SMALL_FFT),
    Case("sim-single-node-dma-messages", simulate=SMALL_FFT, convert=("--dma-style", "messages")),
    Case("sim-hybrid", simulate=("--workload", "hybrid", "--seed", "12", "--ranks", "4",
                                 "--nodes", "2", "--spes", "2", "--phases", "2", "--chunks", "4"),
         report=True, slow_report=True),
    Case("sim-damaged", simulate=("--workload", "matmul", "--seed", "13", "--spes", "4",
                                  "--phases", "2", "--chunks", "4", "--damage", "block-overrun",
                                  "--damage", "unknown-code", "--damage", "unmatched-mailbox")),
    Case("sim-damaged-hybrid", simulate=("--workload", "hybrid", "--seed", "14", "--ranks", "2",
                                         "--nodes", "2", "--spes", "2", "--phases", "2",
                                         "--chunks", "4", "--damage", "unmatched-mpi",
                                         "--damage", "backwards-timebase", "--damage", "no-exit"),
         report=True, slow_report=True),
    Case("sim-four-nodes-messages",
         simulate=("--workload", "hybrid", "--seed", "11", "--ranks", "8", "--nodes", "4",
                   "--spes", "2", "--phases", "3", "--chunks", "4"),
         convert=("--dma-style", "messages", "--alpha", "0.25")),
    Case("sim-switch-compensated",
         simulate=(*SWITCHES, "--decrementer-restore", "compensated")),
    Case("sim-switch-restored", simulate=(*SWITCHES, "--decrementer-restore", "restored"),
         report=True),
)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def normalize_summary(stdout: bytes) -> bytes:
    """The conversion's stdout with the decimals of its one ``wall time`` line made ``#``."""
    return WALL_TIME_LINE.sub(lambda m: DECIMAL.sub(b"#", m.group(0)), stdout)


def normalize_anchor(anchor: Path) -> bytes:
    """The anchor file's bytes with its 8-byte trace identifier zeroed."""
    import _otf2  # the OTF2 library's own reader (the ``otf2`` package's extension)

    handle = _otf2.Reader_Open(str(anchor))
    try:
        trace_id = _otf2.Reader_GetTraceId(handle)
    finally:
        _otf2.Reader_Close(handle)
    data = anchor.read_bytes()
    packed = [p for p in (struct.pack("<Q", trace_id), struct.pack(">Q", trace_id))
              if data.count(p) == 1]
    if len(packed) != 1:
        raise AssertionError(f"trace id {trace_id:#x} not found exactly once in {anchor.name}")
    return data.replace(packed[0], bytes(8))


def zip_members_digest(path: Path) -> str:
    """sha256 over a zip archive's member names and uncompressed bytes (not its timestamps)."""
    h = hashlib.sha256()
    with zipfile.ZipFile(path) as z:
        for name in sorted(z.namelist()):
            data = z.read(name)
            h.update(f"{name}\0{len(data)}\0".encode())
            h.update(data)
    return h.hexdigest()


def command(args: list[str], cwd: Path, prefix: list[str] | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The real command (``python -m cell_otf2``, this checkout's package) in ``cwd``;
    ``prefix`` replaces ``python -m cell_otf2`` (e.g. ``mpiexec -n 2 python script.py``)."""
    return subprocess.run([*(prefix or [sys.executable, "-m", "cell_otf2"]), *args], cwd=cwd,
                          env=env or ENV, capture_output=True, timeout=600)


def files_below(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file())


def record(out: dict[str, str], work: Path, step: str, proc: subprocess.CompletedProcess,
           stdout: bytes | None = None) -> None:
    """Digest a command's exit status, stdout (``stdout`` if given: normalized) and stderr;
    keep the raw streams in ``work/log/`` to look at."""
    (work / "log").mkdir(exist_ok=True)
    (work / "log" / f"{step}.stdout").write_bytes(proc.stdout)
    (work / "log" / f"{step}.stderr").write_bytes(proc.stderr)
    out[f"{step}/status"] = f"exit {proc.returncode}"
    out[f"{step}/stdout"] = sha256(proc.stdout if stdout is None else stdout)
    out[f"{step}/stderr"] = sha256(proc.stderr)


def produce_conversion(case: Case, work: Path, prefix: list[str] | None = None,
                       env: dict[str, str] | None = None, check: bool = True) -> dict[str, str]:
    """Simulate (or copy the sample), convert and check in the empty directory ``work``;
    output name -> digest. ``prefix``/``env``: how the conversion runs (``command``);
    ``check``: also run ``cell2otf2 check``."""
    out: dict[str, str] = {}
    work.mkdir(parents=True, exist_ok=True)
    run = work / RUN
    if case.sample is not None:
        shutil.copytree(SAMPLES / case.sample, run)
    else:
        proc = command(["simulate", RUN, *case.simulate], work)
        record(out, work, "simulate", proc)
        if proc.returncode != 0:
            return out
        for path in files_below(run):
            name = f"simulated run/{path.relative_to(run).as_posix()}"
            out[name] = (zip_members_digest(path) if path.suffix == ".npz"
                         else sha256(path.read_bytes()))
    proc = command([RUN, "-o", ANCHOR, "--report", SYNC_REPORT, *case.convert], work, prefix, env)
    record(out, work, "convert", proc, stdout=normalize_summary(proc.stdout))
    anchor = work / ANCHOR
    for path in files_below(anchor.parent):
        if path == work / SYNC_REPORT:
            out["sync report"] = sha256(path.read_bytes())
        else:
            name = f"archive/{path.relative_to(anchor.parent).as_posix()}"
            out[name] = sha256(normalize_anchor(path) if path == anchor else path.read_bytes())
    if check:
        record(out, work, "check", command(["check", RUN], work))
    return out


def produce_report(work: Path) -> dict[str, str]:
    """``cell2otf2 report`` of the archive ``produce_conversion`` left in ``work``; output
    name (all start with ``report/``) -> digest."""
    out: dict[str, str] = {}
    record(out, work, "report", command(["report", ANCHOR, "-o", REPORT_DIR,
                                         "--sync-report", SYNC_REPORT], work))
    for path in files_below(work / REPORT_DIR):
        out[f"report/{path.relative_to(work / REPORT_DIR).as_posix()}"] = \
            sha256(path.read_bytes())
    return out


def produce(case: Case, work: Path) -> dict[str, str]:
    """Every output of the case (the report's too if it has one); output name -> digest."""
    out = produce_conversion(case, work)
    if case.report:
        out.update(produce_report(work))
    return out


def split(digests: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(conversion outputs, report outputs) of a case's digests."""
    report = {k: v for k, v in digests.items() if k.startswith("report/")}
    return {k: v for k, v in digests.items() if k not in report}, report


def load_expected() -> dict[str, dict[str, str]]:
    return json.loads(EXPECTED.read_text()) if EXPECTED.is_file() else {}


def compare(case: str, expected: dict[str, str], actual: dict[str, str]) -> list[str]:
    """Lines saying what differs (empty: identical), naming the case and every output."""
    names = sorted(expected.keys() | actual.keys(),
                   key=lambda n: (not n.startswith(SIMULATOR_OUTPUTS), n))
    differ = [n for n in names if expected.get(n) != actual.get(n)]
    if not differ:
        return []
    lines = [f"golden case {case!r}: {len(differ)} output(s) differ from "
             f"{EXPECTED.relative_to(ROOT)}:"]
    if differ[0].startswith(SIMULATOR_OUTPUTS):
        lines.append("  (the SIMULATOR's output for this seed changed: a simulator change; "
                     "the converter's outputs listed after it may only follow from it)")
    for n in differ:
        if n not in actual:
            lines.append(f"  {n}: missing (expected {expected[n][:16]})")
        elif n not in expected:
            lines.append(f"  {n}: not expected (now {actual[n][:16]})")
        else:
            lines.append(f"  {n}: expected {expected[n][:16]}, got {actual[n][:16]}")
    lines.append(f"If the change of behaviour is intended, regenerate with: {UPDATE_COMMAND}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--update", action="store_true",
                      help=f"rewrite {EXPECTED.relative_to(ROOT)} from this checkout")
    what.add_argument("--prove", action="store_true",
                      help="produce every case twice and show which raw outputs differ")
    parser.add_argument("cases", nargs="*", help="only these cases (default: all)")
    args = parser.parse_args(argv)
    unknown = set(args.cases) - {c.name for c in CASES}
    if unknown:
        parser.error(f"unknown cases: {', '.join(sorted(unknown))}")
    cases = [c for c in CASES if not args.cases or c.name in args.cases]
    if args.prove:
        return prove(cases)
    expected = load_expected()
    expected = {k: v for k, v in expected.items() if k in {c.name for c in CASES}}
    with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
        for case in cases:
            expected[case.name] = produce(case, Path(tmp) / case.name)
            print(f"{case.name}: {len(expected[case.name])} outputs")
    EXPECTED.parent.mkdir(exist_ok=True)
    ordered = {c.name: dict(sorted(expected[c.name].items())) for c in CASES if c.name in expected}
    EXPECTED.write_text(json.dumps(ordered, indent=1) + "\n")
    print(f"wrote {EXPECTED.relative_to(ROOT)}")
    return 0


def prove(cases: list[Case]) -> int:
    """Produce each case twice in differently named directories; print every raw difference
    (byte ranges of differing files) and whether the normalized digests agree."""
    status = 0
    with tempfile.TemporaryDirectory(prefix="golden-a-") as a, \
            tempfile.TemporaryDirectory(prefix="golden-bb-") as b:
        for case in cases:
            first, second = Path(a) / case.name, Path(b) / "x" / case.name
            digests = produce(case, first), produce(case, second)
            for path in files_below(first):
                rel = path.relative_to(first)
                other = second / rel
                x, y = path.read_bytes(), other.read_bytes() if other.is_file() else b""
                if x != y:
                    at = [i for i in range(min(len(x), len(y))) if x[i] != y[i]]
                    print(f"{case.name}: raw {rel} differs at bytes {at[:3]}..{at[-3:]} "
                          f"({len(at)} bytes, sizes {len(x)}/{len(y)})")
            same = compare(case.name, digests[0], digests[1])
            print(f"{case.name}: normalized digests {'differ' if same else 'agree'}")
            status |= bool(same)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
