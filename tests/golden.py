"""Golden outputs of everything the command writes, compared by meaning rather than by bytes:
each case (every bundled sample run, and small simulated runs made with fixed seeds) is
converted by the real command in a subprocess (``cell2otf2 run -o out/a.otf2 --report
out/a.sync.json``), checked (``cell2otf2 check run``) and, for some cases, reported
(``cell2otf2 report out/a.otf2 -o rep --sync-report out/a.sync.json``). What is kept of each
output is a normalized form, stored per case in ``golden/<case>.json.gz``: exit statuses; the
text of stdout and stderr; the archive as ``otf2-print -A -M -C`` prints it (anchor, global
definitions, mappings, clock offsets and every event) plus the list of its files; JSON files
(the sync report) as parsed values; the report's CSV and HTML as text; PNG figures only as
"a valid PNG of plausible size" (their pixels belong to matplotlib); a simulated run's files
as text when they are text, else as a digest (its ``truth.npz`` by its members, not its zip
timestamps). On a mismatch the test prints the first differing line or value of each output
(output, line, expected, found). ``python tests/golden.py --update`` rewrites the expectations
(only for an intended change of behaviour); ``python tests/golden.py --prove`` produces every
case twice, in two directories, and shows that the normalized forms agree.

What is normalized, and why: (1) the summary's ``  wall time ...`` line, whose seconds are
measured: each decimal number on that one line becomes ``#``; (2) the anchor's ``Trace
identifier`` (drawn afresh by the OTF2 library for every archive) and its ``Version`` (the
library's, which a new ``otf2`` wheel changes without changing the trace) are left out of the
archive's text; (3) PNG pixels and zip timestamps, as said above. Paths never need normalizing
because every command runs in the case's own directory with relative paths. This module does
not decide what the converter should write: it only records and compares what it wrote.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paths import ENV, ROOT, SAMPLES

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
UPDATE_COMMAND = "python tests/golden.py --update"
#: the names the commands are given, relative to the case's directory
RUN, ANCHOR, SYNC_REPORT, REPORT_DIR = "run", "out/a.otf2", "out/a.sync.json", "rep"
WALL_TIME_LINE = re.compile(rb"^  wall time .*$", re.MULTILINE)
DECIMAL = re.compile(rb"\d+\.\d+")
#: lines of ``otf2-print``'s anchor section that the OTF2 library, not the trace, decides
UNSTABLE_ANCHOR_LINE = re.compile(r"^(Trace identifier|Version) ")
#: the outputs of ``cell2otf2 simulate`` (the others are the converter's)
SIMULATOR_OUTPUTS = ("simulate/", "simulated run/")
#: a figure smaller than this is not a plausible plot
MIN_PNG_BYTES = 1000
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: how much of a differing output a failure shows around the first difference
SHOWN_CHARS = 160

#: one output's normalized form: {"status": "exit 0"}, {"text": [lines]}, {"json": value},
#: {"sha256": hex} or {"png": "valid"}
Output = dict[str, Any]


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


def text_output(data: bytes) -> Output:
    """Bytes as lines of text (undecodable bytes escaped, so the form always exists)."""
    return {"text": data.decode("utf-8", errors="backslashreplace").splitlines()}


def archive_text(work: Path) -> Output:
    """The archive as ``otf2-print -A -M -C`` prints it, without the anchor lines the OTF2
    library decides (trace identifier, library version); a failure of otf2-print is kept as
    its status and stderr, so that it shows as a difference."""
    proc = subprocess.run(["otf2-print", "-A", "-M", "-C", ANCHOR], cwd=work,
                          capture_output=True, timeout=600)
    lines = [line for line in text_output(proc.stdout)["text"]
             if not UNSTABLE_ANCHOR_LINE.match(line)]
    if proc.returncode != 0:
        lines += [f"otf2-print: exit {proc.returncode}", *text_output(proc.stderr)["text"]]
    return {"text": lines}


def zip_members_digest(path: Path) -> str:
    """sha256 over a zip archive's member names and uncompressed bytes (not its timestamps)."""
    h = hashlib.sha256()
    with zipfile.ZipFile(path) as z:
        for name in sorted(z.namelist()):
            data = z.read(name)
            h.update(f"{name}\0{len(data)}\0".encode())
            h.update(data)
    return h.hexdigest()


def file_output(path: Path) -> Output:
    """A written file's normalized form: PNG validity, a zip's member digest, parsed JSON,
    text lines, or (binary data) a digest."""
    data = path.read_bytes()
    if path.suffix == ".png":
        plausible = data.startswith(PNG_SIGNATURE) and len(data) >= MIN_PNG_BYTES
        return {"png": "valid" if plausible else f"not a plausible PNG ({len(data)} bytes)"}
    if path.suffix == ".npz":
        return {"sha256": zip_members_digest(path)}
    if b"\0" in data:
        return {"sha256": sha256(data)}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {"sha256": sha256(data)}
    if path.suffix == ".json":
        try:
            return {"json": json.loads(text)}
        except ValueError:
            pass
    return {"text": text.splitlines()}


def command(args: list[str], cwd: Path, prefix: list[str] | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The real command (``python -m cell_otf2``, this checkout's package) in ``cwd``;
    ``prefix`` replaces ``python -m cell_otf2`` (e.g. ``mpiexec -n 2 python script.py``)."""
    return subprocess.run([*(prefix or [sys.executable, "-m", "cell_otf2"]), *args], cwd=cwd,
                          env=env or ENV, capture_output=True, timeout=600)


def files_below(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file())


def record(out: dict[str, Output], work: Path, step: str, proc: subprocess.CompletedProcess,
           stdout: bytes | None = None) -> None:
    """Keep a command's exit status, stdout (``stdout`` if given: normalized) and stderr;
    keep the raw streams in ``work/log/`` to look at."""
    (work / "log").mkdir(exist_ok=True)
    (work / "log" / f"{step}.stdout").write_bytes(proc.stdout)
    (work / "log" / f"{step}.stderr").write_bytes(proc.stderr)
    out[f"{step}/status"] = {"status": f"exit {proc.returncode}"}
    out[f"{step}/stdout"] = text_output(proc.stdout if stdout is None else stdout)
    out[f"{step}/stderr"] = text_output(proc.stderr)


def produce_conversion(case: Case, work: Path, prefix: list[str] | None = None,
                       env: dict[str, str] | None = None,
                       check: bool = True) -> dict[str, Output]:
    """Simulate (or copy the sample), convert and check in the empty directory ``work``;
    output name -> normalized form. ``prefix``/``env``: how the conversion runs
    (``command``); ``check``: also run ``cell2otf2 check``."""
    out: dict[str, Output] = {}
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
            out[f"simulated run/{path.relative_to(run).as_posix()}"] = file_output(path)
    proc = command([RUN, "-o", ANCHOR, "--report", SYNC_REPORT, *case.convert], work, prefix, env)
    record(out, work, "convert", proc, stdout=normalize_summary(proc.stdout))
    anchor = work / ANCHOR
    written = [p for p in files_below(anchor.parent) if p != work / SYNC_REPORT]
    out["archive/files"] = {"text": [p.relative_to(anchor.parent).as_posix() for p in written]}
    if anchor.is_file():
        out["archive/otf2-print"] = archive_text(work)
    if (work / SYNC_REPORT).is_file():
        out["sync report"] = file_output(work / SYNC_REPORT)
    if check:
        record(out, work, "check", command(["check", RUN], work))
    return out


def produce_report(work: Path) -> dict[str, Output]:
    """``cell2otf2 report`` of the archive ``produce_conversion`` left in ``work``; output
    name (all start with ``report/``) -> normalized form."""
    out: dict[str, Output] = {}
    record(out, work, "report", command(["report", ANCHOR, "-o", REPORT_DIR,
                                         "--sync-report", SYNC_REPORT], work))
    for path in files_below(work / REPORT_DIR):
        out[f"report/{path.relative_to(work / REPORT_DIR).as_posix()}"] = file_output(path)
    return out


def produce(case: Case, work: Path) -> dict[str, Output]:
    """Every output of the case (the report's too if it has one); output name -> form."""
    out = produce_conversion(case, work)
    if case.report:
        out.update(produce_report(work))
    return out


def split(outputs: dict[str, Output]) -> tuple[dict[str, Output], dict[str, Output]]:
    """(conversion outputs, report outputs) of a case's outputs."""
    report = {k: v for k, v in outputs.items() if k.startswith("report/")}
    return {k: v for k, v in outputs.items() if k not in report}, report


def golden_file(case: str) -> Path:
    return GOLDEN_DIR / f"{case}.json.gz"


def load_expected() -> dict[str, dict[str, Output]]:
    """Every stored case: case name -> output name -> normalized form."""
    return {p.name.removesuffix(".json.gz"): json.loads(gzip.decompress(p.read_bytes()))
            for p in sorted(GOLDEN_DIR.glob("*.json.gz"))}


def save_expected(case: str, outputs: dict[str, Output]) -> None:
    """Write a case's expectations (gzip without a timestamp: same outputs, same bytes)."""
    text = json.dumps(dict(sorted(outputs.items())), indent=0, sort_keys=True) + "\n"
    GOLDEN_DIR.mkdir(exist_ok=True)
    golden_file(case).write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))


def shorten(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."


def first_json_difference(expected: object, found: object, where: str = "") -> str | None:
    """Where two parsed JSON values first differ (a path like ``.groups[2].offset``, with
    both values), or None when they are equal."""
    if isinstance(expected, dict) and isinstance(found, dict):
        for key in sorted(expected.keys() | found.keys()):
            if key not in found:
                return f"{where}.{key}: expected {shorten(expected[key])}, missing"
            if key not in expected:
                return f"{where}.{key}: not expected, found {shorten(found[key])}"
            inner = first_json_difference(expected[key], found[key], f"{where}.{key}")
            if inner is not None:
                return inner
        return None
    if isinstance(expected, list) and isinstance(found, list):
        for i, (a, b) in enumerate(zip(expected, found, strict=False)):
            inner = first_json_difference(a, b, f"{where}[{i}]")
            if inner is not None:
                return inner
        if len(expected) != len(found):
            return f"{where}: expected {len(expected)} items, found {len(found)}"
        return None
    if expected != found or type(expected) is not type(found):
        return f"{where or '(value)'}: expected {shorten(expected)}, found {shorten(found)}"
    return None


def first_difference(expected: Output, found: Output) -> str:
    """The first difference of two forms of one output, as a line to print."""
    if expected.keys() == found.keys() == {"text"}:
        a, b = expected["text"], found["text"]
        for number, (x, y) in enumerate(zip(a, b, strict=False), start=1):
            if x != y:
                return f"line {number}: expected {shorten(x)!r}, found {shorten(y)!r}"
        number = min(len(a), len(b)) + 1
        if len(a) > len(b):
            return f"line {number}: expected {shorten(a[number - 1])!r}, found the end"
        return f"line {number}: expected the end, found {shorten(b[number - 1])!r}"
    if expected.keys() == found.keys() == {"json"}:
        return first_json_difference(expected["json"], found["json"]) or "(equal)"
    return f"expected {shorten(expected)}, found {shorten(found)}"


def compare(case: str, expected: dict[str, Output], actual: dict[str, Output]) -> list[str]:
    """Lines saying what differs (empty: identical): the case, then every differing output
    with its first differing line or value."""
    names = sorted(expected.keys() | actual.keys(),
                   key=lambda n: (not n.startswith(SIMULATOR_OUTPUTS), n))
    differ = [n for n in names if expected.get(n) != actual.get(n)]
    if not differ:
        return []
    lines = [f"golden case {case!r}: {len(differ)} output(s) differ from "
             f"{golden_file(case).relative_to(ROOT)}:"]
    if differ[0].startswith(SIMULATOR_OUTPUTS):
        lines.append("  (the SIMULATOR's output for this seed changed: a simulator change; "
                     "the converter's outputs listed after it may only follow from it)")
    for n in differ:
        if n not in actual:
            lines.append(f"  {n}: missing")
        elif n not in expected:
            lines.append(f"  {n}: not expected")
        else:
            lines.append(f"  {n}: {first_difference(expected[n], actual[n])}")
    lines.append(f"If the change of behaviour is intended, regenerate with: {UPDATE_COMMAND}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--update", action="store_true",
                      help=f"rewrite {GOLDEN_DIR.relative_to(ROOT)}/ from this checkout")
    what.add_argument("--prove", action="store_true",
                      help="produce every case twice and show whether the outputs agree")
    parser.add_argument("cases", nargs="*", help="only these cases (default: all)")
    args = parser.parse_args(argv)
    unknown = set(args.cases) - {c.name for c in CASES}
    if unknown:
        parser.error(f"unknown cases: {', '.join(sorted(unknown))}")
    cases = [c for c in CASES if not args.cases or c.name in args.cases]
    if args.prove:
        return prove(cases)
    known = {c.name for c in CASES}
    for stale in GOLDEN_DIR.glob("*.json.gz"):
        if stale.name.removesuffix(".json.gz") not in known:
            stale.unlink()
    with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
        for case in cases:
            outputs = produce(case, Path(tmp) / case.name)
            save_expected(case.name, outputs)
            print(f"{case.name}: {len(outputs)} outputs")
    print(f"wrote {GOLDEN_DIR.relative_to(ROOT)}/")
    return 0


def prove(cases: list[Case]) -> int:
    """Produce each case twice in differently named directories; print whether the
    normalized outputs agree (and the first difference when they do not)."""
    status = 0
    with tempfile.TemporaryDirectory(prefix="golden-a-") as a, \
            tempfile.TemporaryDirectory(prefix="golden-bb-") as b:
        for case in cases:
            first = produce(case, Path(a) / case.name)
            second = produce(case, Path(b) / "x" / case.name)
            differ = compare(case.name, first, second)
            print("\n".join(differ) if differ else f"{case.name}: normalized outputs agree")
            status |= bool(differ)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
