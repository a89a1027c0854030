"""Environment cases for bench/fuzz.py: what surrounds a run rather than its bytes.

Classes (each case draws one, after ``fuzz.make_case`` has built the run's files):
- ``manifest-json``: JSON the parser or a later stage trips on: nesting past the recursion
  limit, integers of thousands of digits, lone surrogates, a BOM, latin-1, names "0",
  huge strings, floats for integers;
- ``special``: run.json or a dump that is a FIFO, /dev/zero, a directory, a dangling link;
- ``clash``: an archive or report path that is the run, holds it, is one of its files or lies
  inside the archive, with and without ``--force`` (the input must come out byte-identical);
- ``disk``: the archive written into a small tmpfs filled to a random level (root only);
- ``perm``: a dump, the manifest, the run folder or the output folder without permission,
  converted by root without the capabilities that ignore permissions (``setpriv``);
- ``concurrent``: two conversions into one archive at once, both ``--force``;
- ``signal``: SIGTERM, SIGINT or SIGHUP at a random moment of a conversion;
- ``manifest-range``: a number of the manifest at an edge of or past its range (0, -1, the
  bound and one past it, 2^31, 2^32, 2^63, 2^64 - 1, 2^64), for every numeric key;
- ``manifest-string``: a string of the manifest with a NUL, a lone surrogate, a separator at
  the end, ``..``, nothing, ``null``, a number, 5000 characters or control characters;
- ``sparse``: a dump extended by a hole (``truncate``) to 64 MiB .. 5 GiB, or a valid dump
  followed by one; ``convert`` and ``check`` run as commands and their peak virtual memory
  (``VmPeak``) is compared with the base run's: more than 2x the run's size is an
  allocation from a claimed size;
- ``stdout``: the summary (or check's report, inspect's listing) written to /dev/full or to
  a pipe whose reader has gone: convert and check keep their status with the archive in
  place and say it on stderr, inspect exits 4;
- ``options``: check and convert of one run with the same drawn options (``--alpha``,
  ``--read-delay-ticks``, ``--dma-style``, ``--accept-unsynchronized-nodes``) as commands:
  the same exit status and damage kinds, and the same kinds as with the default options.
The in-process classes call ``convert``; the others run ``python -m cell_otf2``. Every case
checks: no traceback and no "internal error", the exit status allowed for the class, the input
unchanged, no staging or spill folder left, and an archive that otf2-print accepts whenever one
is in place. It writes only below the case's work folder (and its own tmpfs).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from cell_otf2.errors import EXIT_SOFTWARE

CLASSES = {"manifest-json": 10, "special": 5, "clash": 8, "disk": 6, "perm": 4,
           "concurrent": 2, "signal": 3, "manifest-range": 16, "manifest-string": 16,
           "sparse": 2, "stdout": 6, "options": 6}
#: every numeric key of the manifest: (list or None, key, lowest allowed, highest allowed)
NUMBERS = ((None, "timebase_hz", 1, (1 << 64) - 1), (None, "version", 1, 1),
           ("nodes", "cell_chips", 1, 64), ("nodes", "spes_per_chip", 1, 8),
           ("processes", "rank", 0, 0), ("processes", "start_timebase", 0, (1 << 64) - 1),
           ("processes", "start_realtime_ns", 0, (1 << 64) - 1),
           ("processes", "pid", 0, (1 << 64) - 1), ("regions", "id", 1, 65535),
           ("programs", "id", 0, (1 << 64) - 1), ("counters", "id", 0, (1 << 32) - 1),
           ("communicators", "id", 0, (1 << 32) - 1))
#: every string key of the manifest
STRINGS = ((None, "application"), ("nodes", "name"), ("processes", "node"),
           ("processes", "path"), ("regions", "name"), ("programs", "name"),
           ("counters", "name"), ("counters", "unit"), ("communicators", "name"))
#: sizes a dump is extended to by a hole
SPARSE_SIZES = ((64 << 20, 4), (256 << 20, 3), (1 << 30, 2), (2 << 30, 2), (5 << 30, 1))
NO_DAC = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]
ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}




def _before_our_code(message: str) -> bool:
    """A KeyboardInterrupt traceback with only the interpreter's frames (``<frozen runpy>``
    importing the package): Ctrl-C before any line of ``cell_otf2`` ran (README: Ctrl-C)."""
    lines = message.strip().splitlines()
    frames = [x for x in lines if x.lstrip().startswith('File "')]
    return (bool(lines) and lines[0].startswith("Traceback") and lines[-1] == "KeyboardInterrupt"
            and bool(frames) and all(x.lstrip().startswith('File "<frozen ') for x in frames))

def _internal_error(status: int, stderr: str) -> bool:
    """Did the command fail with an internal error (exit 70, a bug), or print a traceback?"""
    return status == EXIT_SOFTWARE or "Traceback" in stderr or "internal error" in stderr

def pick_class(case: int, seed: int, share: float) -> str | None:
    """The environment class of ``case`` (None for a plain mutation case)."""
    rng = random.Random(f"{seed}:{case}:env")
    if rng.random() >= share:
        return None
    return rng.choices(list(CLASSES), weights=list(CLASSES.values()))[0]


def digest(run: Path) -> dict[str, str]:
    """Every entry below ``run`` (links not followed): path -> content hash or kind."""
    out = {}
    for root, dirs, files in os.walk(run):
        for name in dirs + files:
            p = Path(root) / name
            rel = str(p.relative_to(run))
            if p.is_symlink():
                out[rel] = "link " + os.readlink(p)
            elif p.is_file():
                out[rel] = hashlib.sha1(p.read_bytes()).hexdigest()
            else:
                out[rel] = "dir" if p.is_dir() else "special"
    return out


def leftovers(*folders: Path) -> list[str]:
    out = []
    for f in folders:
        if f.is_dir():
            out += [str(f / n) for n in os.listdir(f) if n.startswith(".")]
    return out


def _otf2_print_fails(anchor: Path) -> str:
    if shutil.which("otf2-print") is None:
        return ""
    p = subprocess.run(["otf2-print", "--silent", "-Werror", str(anchor)], capture_output=True,
                       text=True, timeout=60)
    return "" if p.returncode == 0 else (p.stdout + p.stderr).strip()[:300]


def cli(args: list[str], prefix: list[str] | None = None, timeout: float = 60
        ) -> tuple[int, str]:
    p = subprocess.run([*(prefix or []), sys.executable, "-m", "cell_otf2", *args],
                       capture_output=True, text=True, env=ENV, timeout=timeout)
    return p.returncode, p.stderr


# ---- the classes ----------------------------------------------------------------------------

def mutate_manifest_json(rng: random.Random, run: Path) -> str:
    text = (run / "run.json").read_bytes()
    doc = json.loads(text)
    how = rng.choice(["deep", "digits", "surrogate", "bom", "latin1", "zero-names", "huge",
                      "float-int", "deep-value"])
    if how == "deep":
        depth = rng.choice([1000, 5000, 100_000])
        raw = ("[" * depth + "]" * depth).encode()
    elif how == "deep-value":
        depth = rng.choice([50, 2000, 50_000])
        doc["extra"] = json.loads("[" * min(depth, 900) + "]" * min(depth, 900))
        raw = json.dumps(doc).encode()
        raw = raw[:-1] + b', "x": ' + b"[" * depth + b"]" * depth + b"}"
    elif how == "digits":
        n = rng.choice([4000, 4301, 5000, 100_000])
        key = rng.choice(["timebase_hz", "version", "extra"])
        raw = json.dumps(doc).encode()
        raw = raw[:-1] + f', "{key}": {"9" * n}'.encode() + b"}"
    elif how == "surrogate":
        where = rng.choice(["application", "nodes", "regions", "communicators"])
        if where == "application":
            doc["application"] = "\ud800"
        elif doc.get(where):
            doc[where][0]["name"] = "x\udfff"
        raw = json.dumps(doc).encode()
    elif how == "bom":
        raw = b"\xef\xbb\xbf" + text
    elif how == "latin1":
        doc["application"] = "caf\u00e9 \u00fcber"
        raw = json.dumps(doc, ensure_ascii=False).encode("latin-1")
    elif how == "zero-names":
        doc["application"] = "0"
        if doc.get("nodes"):
            old = doc["nodes"][0]["name"]
            doc["nodes"][0]["name"] = "0"
            for p in doc.get("processes", []):
                if p.get("node") == old:
                    p["node"] = "0"
        raw = json.dumps(doc).encode()
    elif how == "huge":
        doc["application"] = "A" * rng.choice([10_000, 2_000_000])
        raw = json.dumps(doc).encode()
    else:
        doc["timebase_hz"] = float(doc.get("timebase_hz", 1))
        raw = json.dumps(doc).encode()
    (run / "run.json").write_bytes(raw)
    return f"manifest-json {how}"


def make_special(rng: random.Random, run: Path) -> str:
    dumps = sorted(run.glob("*.cbt"))
    target = rng.choice([run / "run.json", *dumps])
    how = rng.choice(["fifo", "zero", "dir", "dangling"])
    target.unlink()
    if how == "fifo":
        os.mkfifo(target)
    elif how == "zero":
        target.symlink_to("/dev/zero")
    elif how == "dir":
        target.mkdir()
    else:
        target.symlink_to(run / "no-such-file")
    return f"special {target.name} {how}"


def clash_paths(rng: random.Random, run: Path, work: Path) -> tuple[list[str], str]:
    dumps = sorted(run.glob("*.cbt"))
    how = rng.choice(["archive-is-run", "archive-holds-run", "report-is-manifest",
                      "report-is-dump", "report-in-archive", "archive-in-run",
                      "report-is-archive"])
    out = work / "out"
    out.mkdir(exist_ok=True)
    archive, report = out / "a.otf2", out / "a.json"
    if how == "archive-is-run":
        archive = run.parent / f"{run.name}.otf2"
    elif how == "archive-holds-run":
        archive = run.parent.parent / f"{run.parent.name}.otf2"
    elif how == "report-is-manifest":
        report = run / "run.json"
    elif how == "report-is-dump":
        report = rng.choice(dumps)
    elif how == "report-in-archive":
        report = out / "a" / "r.json"
    elif how == "archive-in-run":
        archive = run / "a.otf2"
    else:
        report = out / "a.otf2"
    force = rng.random() < 0.7
    args = [str(run), "-o", str(archive), "--report", str(report), *(["--force"] * force)]
    return args, f"clash {how}{' --force' if force else ''}"


class Disk:
    """A small tmpfs of this worker's, mounted once (root only)."""

    def __init__(self, work: Path) -> None:
        self.mnt = work.parent / (work.name + "-disk")
        self.mnt.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(self.mnt)],
                           capture_output=True)
        self.ok = r.returncode == 0

    def fill(self, free_kib: int) -> None:
        for name in os.listdir(self.mnt):
            p = self.mnt / name
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        st = os.statvfs(self.mnt)
        total_kib = st.f_blocks * st.f_frsize // 1024
        (self.mnt / "filler").write_bytes(b"\0" * max(0, (total_kib - free_kib) * 1024))

    def close(self) -> None:
        if self.ok:
            subprocess.run(["umount", "-l", str(self.mnt)], capture_output=True)


def mutate_manifest_range(rng: random.Random, run: Path) -> str:
    doc = json.loads((run / "run.json").read_bytes())
    where, key, lo, hi = rng.choice(NUMBERS)
    value = rng.choice([lo - 1, lo, hi, hi + 1, 1 << 31, 1 << 32, 1 << 63, (1 << 64) - 1,
                        1 << 64, -1, 0])
    items = [doc] if where is None else doc.get(where) or []
    if not items:
        return f"manifest-range {where}[].{key}: empty list"
    i = rng.randrange(len(items))
    items[i][key] = value
    (run / "run.json").write_text(json.dumps(doc))
    return f"manifest-range {where or ''}[{i}].{key} = {value}"


def mutate_manifest_string(rng: random.Random, run: Path) -> str:
    doc = json.loads((run / "run.json").read_bytes())
    where, key = rng.choice(STRINGS)
    items = [doc] if where is None else doc.get(where) or []
    if not items:
        return f"manifest-string {where}[].{key}: empty list"
    i = rng.randrange(len(items))
    old = items[i].get(key, "x")
    old = old if isinstance(old, str) else "x"
    how = rng.choice(["nul", "surrogate", "slash", "dotdot", "dot", "empty", "null", "number",
                      "long", "control", "dot-slash"])
    value = {"nul": old + "\0x", "surrogate": old[:1] + "\udc80" + old[1:], "slash": old + "/",
             "dotdot": "../" + old, "dot": ".", "empty": "", "null": None, "number": 7,
             "long": "n" * 5000, "control": old + "\x01\n\t", "dot-slash": "./" + old}[how]
    items[i][key] = value
    (run / "run.json").write_text(json.dumps(doc))
    return f"manifest-string {where or ''}[{i}].{key} {how}"


def vm_command(args: list[str], work: Path, stdout=subprocess.DEVNULL, timeout: float = 60
               ) -> tuple[int, str, dict[str, int]]:
    """``python -m cell_otf2 ARGS`` with its peak virtual and resident memory (kB, from
    /proc/self/status read at its exit): (status, stderr, {"VmPeak": .., "VmHWM": ..})."""
    status_file = work / "vm.status"
    code = ("import atexit, sys\n"
            f"atexit.register(lambda: open({str(status_file)!r}, 'w').write("
            "open('/proc/self/status').read()))\n"
            "sys.argv[0] = 'cell2otf2'\nfrom cell_otf2.cli import main\nmain()\n")
    p = subprocess.run([sys.executable, "-c", code, *args], stdout=stdout,
                       stderr=subprocess.PIPE, text=True, env=ENV, timeout=timeout)
    mem = {}
    try:
        for line in status_file.read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmPeak", "VmHWM"):
                mem[name] = int(value.split()[0])
        status_file.unlink()
    except OSError:
        pass
    return p.returncode, p.stderr, mem


_BASE_VM: dict[str, int] = {}


def _damage_kinds(text: str) -> list[str]:
    """The damage kinds a summary or check report lists (lines "    kind: ...")."""
    return [line.strip().split(":", 1)[0] for line in text.splitlines()
            if line.startswith("    ") and not line.startswith("     ")
            and ":" in line]


def run_sparse_case(rng: random.Random, run: Path, work: Path, base: str) -> dict:
    """A dump extended by a hole; convert and check as commands, their memory measured."""
    dumps = sorted(run.glob("*.cbt"))
    target = rng.choice(dumps)
    size = rng.choices([s for s, _ in SPARSE_SIZES], weights=[w for _, w in SPARSE_SIZES])[0]
    how = rng.choice(["hole", "hole-then-copy"])
    data = target.read_bytes()
    with open(target, "r+b") as f:
        f.truncate(size)
        if how == "hole-then-copy":  # the valid slots again after the hole
            f.seek(size)
            f.write(data[64:])
    apparent = sum(p.stat().st_size for p in run.iterdir() if p.is_file())
    what = f"sparse {target.name} {how} to {size >> 20} MiB"
    out = work / "out" / "a.otf2"
    key = f"{base}"
    if key not in _BASE_VM:  # the unmodified base run's peak, once per worker
        pristine = work / "pristine"
        shutil.rmtree(pristine, ignore_errors=True)
        shutil.copytree(run, pristine)
        (pristine / target.name).write_bytes(data)
        _, _, mem = vm_command([str(pristine), "-o", str(work / "out" / "p.otf2"), "--force",
                                "-q"], work)
        _BASE_VM[key] = mem.get("VmPeak", 0)
        shutil.rmtree(pristine, ignore_errors=True)
    result: dict = {"mutations": [what]}
    statuses = []
    for args in ([str(run), "-o", str(out), "--force"], ["check", str(run)]):
        status, err, mem = vm_command(args, work)
        statuses.append(status)
        if _internal_error(status, err):
            return {**result, "kind": "internal", "message": err.strip()[-300:]}
        grown = (mem.get("VmPeak", 0) - _BASE_VM[key]) * 1024
        result.setdefault("vm_growth", []).append(grown)
        if grown > 2 * apparent:
            return {**result, "kind": "memory", "message": f"{args[0]}: VmPeak grew by "
                    f"{grown >> 20} MiB over the base run's, more than 2x the run's "
                    f"{apparent >> 20} MiB"}
    if statuses[0] != statuses[1] or statuses[0] not in (1, 3):
        return {**result, "kind": "mismatch", "message": f"convert {statuses[0]}, check "
                f"{statuses[1]} (expected 1 or 3, the same)"}
    return {**result, "kind": "ok" if statuses[0] == 1 else "refused", "status": statuses[0],
            "message": "", "lines": []}


def run_stdout_case(rng: random.Random, run: Path, work: Path) -> dict:
    """The command's stdout full or closed: the status is the one with a working stdout."""
    how = rng.choice(["full", "closed-pipe"])
    command = rng.choice(["convert", "check", "inspect"])
    out = work / "out" / "a.otf2"
    args = {"convert": [str(run), "-o", str(out), "--force"], "check": ["check", str(run)],
            "inspect": ["inspect", str(run)]}[command]
    what = f"stdout {how} {command}"
    result: dict = {"mutations": [what]}
    normal, _ = cli(args)
    shutil.rmtree(out.parent, ignore_errors=True)
    out.parent.mkdir()
    if how == "full":
        with open("/dev/full", "w") as full:
            p = subprocess.run([sys.executable, "-m", "cell_otf2", *args], stdout=full,
                               stderr=subprocess.PIPE, text=True, env=ENV, timeout=120)
    else:
        r, w = os.pipe()
        os.close(r)
        try:
            p = subprocess.run([sys.executable, "-m", "cell_otf2", *args], stdout=w,
                               stderr=subprocess.PIPE, text=True, env=ENV, timeout=120)
        finally:
            os.close(w)
    err = p.stderr
    if _internal_error(p.returncode, err):
        return {**result, "kind": "internal", "message": err.strip()[-300:]}
    expected = 4 if command == "inspect" and normal == 0 else normal
    if p.returncode != expected:
        return {**result, "kind": "output", "status": p.returncode,
                "message": f"exit {p.returncode}, expected {expected}: {err.strip()[-200:]}"}
    placed = out.exists()
    if command == "convert" and placed != (p.returncode in (0, 1)):
        return {**result, "kind": "output", "message": f"exit {p.returncode} with the archive "
                f"{'in place' if placed else 'missing'}"}
    if p.returncode in (0, 1, 4) and "could not be written to stdout" not in err:
        return {**result, "kind": "output", "message": "nothing said on stderr: " + err[-200:]}
    return {**result, "kind": "ok" if p.returncode in (0, 1) else "refused",
            "status": p.returncode, "message": "", "lines": []}


def run_options_case(rng: random.Random, run: Path, work: Path) -> dict:
    """check and convert as commands with the same drawn options, and check with the
    defaults: one exit status, one list of damage kinds."""
    opts: list[str] = []
    alpha = rng.choice(["0", "0.143", "0.857", "1", f"{rng.random():.4f}"])
    opts += ["--alpha", alpha]
    if rng.random() < 0.5:
        opts += ["--read-delay-ticks", rng.choice(["1", "8", "1000", str(1 << 31)])]
    if rng.random() < 0.3:
        opts += ["--dma-style", "messages"]
    accept = rng.random() < 0.3
    if accept:
        opts.append("--accept-unsynchronized-nodes")
    out = work / "out" / "a.otf2"
    res = []
    for args in ([str(run), "-o", str(out), "--force", *opts], ["check", str(run), *opts],
                 ["check", str(run), *(["--accept-unsynchronized-nodes"] * accept)]):
        p = subprocess.run([sys.executable, "-m", "cell_otf2", *args], capture_output=True,
                           text=True, env=ENV, timeout=120)
        if _internal_error(p.returncode, p.stderr):
            return {"mutations": [f"options {' '.join(opts)}"], "kind": "internal",
                    "message": p.stderr.strip()[-300:]}
        res.append((p.returncode, _damage_kinds(p.stdout)))
    result: dict = {"mutations": [f"options {' '.join(opts)}"]}
    if not res[0] == res[1] == res[2]:
        return {**result, "kind": "mismatch", "message": f"convert {res[0]}, check {res[1]}, "
                f"check with default options {res[2]}"}
    return {**result, "kind": "ok" if res[0][0] in (0, 1) else "refused", "status": res[0][0],
            "message": "", "lines": []}


# ---- running one environment case -------------------------------------------------------------

def run_env_case(klass: str, case: int, seed: int, run: Path, work: Path,
                 disk: Disk | None, base: str = "") -> dict:
    """One case of ``klass`` on the run at ``run`` (already written); never raises."""
    from cell_otf2.errors import CellOtf2Error
    from cell_otf2.run.check import check_run
    from cell_otf2.run.conversion import convert

    rng = random.Random(f"{seed}:{case}:envcase")
    out_dir = work / "out"
    out_dir.mkdir(exist_ok=True)
    allowed = {0, 1, 3}
    prefix: list[str] | None = None
    what = klass
    archive = out_dir / "a.otf2"
    args = [str(run), "-o", str(archive), "--force"]
    if klass in ("sparse", "stdout", "options"):
        try:
            if klass == "sparse":
                return run_sparse_case(rng, run, work, base)
            return (run_stdout_case if klass == "stdout" else run_options_case)(rng, run, work)
        except subprocess.TimeoutExpired:
            return {"mutations": [klass], "kind": "hang",
                    "message": "a command gave no answer in 60-120 s"}
    if klass == "manifest-json":
        what = mutate_manifest_json(rng, run)
    elif klass == "manifest-range":
        what = mutate_manifest_range(rng, run)
    elif klass == "manifest-string":
        what = mutate_manifest_string(rng, run)
    elif klass == "special":
        what = make_special(rng, run)
        allowed = {3}
    elif klass == "clash":
        args, what = clash_paths(rng, run, work)
        allowed = {0, 1, 3, 4}
        if "archive-in-run" not in what:
            allowed = {3, 4}
        archive = Path(args[2])
    elif klass == "disk":
        if disk is None or not disk.ok:
            return {"kind": "skipped", "mutations": ["disk: no tmpfs"]}
        free = rng.randrange(4, 900)
        disk.fill(free)
        archive = disk.mnt / "out" / "a.otf2"
        args = [str(run), "-o", str(archive), "--report", str(disk.mnt / "out" / "a.json")]
        what = f"disk {free} KiB free"
        allowed = {0, 1, 3, 4}
    elif klass == "perm":
        how = rng.choice(["dump", "manifest", "run-dir", "out-dir", "report-dir"])
        what = f"perm {how}"
        allowed = {3} if how in ("dump", "manifest", "run-dir") else {4}
        if how == "dump":
            dumps = sorted(run.glob("*.cbt"))
            if dumps:
                rng.choice(dumps).chmod(0)
        elif how == "manifest":
            (run / "run.json").chmod(0)
        elif how == "run-dir":
            run.chmod(0)
        elif how == "out-dir":
            out_dir.chmod(0o555)
        else:
            (work / "ro").mkdir(exist_ok=True)
            (work / "ro").chmod(0o555)
            args += ["--report", str(work / "ro" / "r.json")]
        prefix = NO_DAC
        allowed |= {3} if how in ("out-dir", "report-dir") else set()  # a refused input first
    before = digest(run) if klass not in ("perm",) else None
    result: dict = {"mutations": [what]}
    try:
        if klass in ("manifest-json", "special", "manifest-range", "manifest-string"):
            try:
                s = convert(run, archive, force=True)
                status, message = (1 if s.lossy else 0), ""
            except CellOtf2Error as exc:
                status, message = exc.exit_status, str(exc)
            except Exception as exc:  # noqa: BLE001 - what the fuzzer looks for
                return {**result, "kind": "internal", "message": f"{type(exc).__name__}: {exc}"}
            try:
                c = check_run(run)
                c_status = c.status
            except CellOtf2Error as exc:
                c_status = exc.exit_status
            except Exception as exc:  # noqa: BLE001 - what the fuzzer looks for
                return {**result, "kind": "internal",
                        "message": f"check: {type(exc).__name__}: {exc}"}
            if c_status != status:
                return {**result, "kind": "mismatch",
                        "message": f"convert {status}, check {c_status}: {message[:200]}"}
        elif klass == "concurrent":
            cmd = [sys.executable, "-m", "cell_otf2", *args]
            procs = [subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True) for _ in range(2)]
            res = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
            bad = [e for c, e in res if c not in (0, 1, 3, 4) or "Traceback" in e
                   or "internal error" in e]
            if bad:
                return {**result, "kind": "internal", "message": bad[0][-300:]}
            status, message = max(c for c, _ in res), res[0][1]
            allowed = {0, 1, 3, 4}
        elif klass == "signal":
            sig = rng.choice([signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
            delay = rng.uniform(0.0, 1.2)
            what = f"signal {sig.name} after {delay:.2f} s"
            result["mutations"] = [what]
            # SIGINT at its default, as from a terminal, even when the fuzzer runs as a
            # background job (which starts with SIGINT ignored, and so would its children)
            p = subprocess.Popen([sys.executable, "-m", "cell_otf2", *args], env=ENV,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
            time.sleep(delay)
            p.send_signal(sig)
            status, message = p.wait(timeout=120), p.stderr.read()
            # -sig: the signal came while the interpreter itself started (none of our code
            # had run: the default action, nothing written)
            allowed = {0, 1, 3, 128 + int(sig), -int(sig)}
            if status in (128 + int(sig), -int(sig)):
                # nothing may be in place, unless the signal came after the archive was
                # moved in whole (then it must be whole: checked below like any archive)
                whole = sorted(os.listdir(out_dir)) == ["a", "a.def", "a.otf2"]
                if os.listdir(out_dir) and not whole:
                    return {**result, "kind": "leftover",
                            "message": f"after {sig.name}: {os.listdir(out_dir)}"}
                if whole:
                    status = 0
        else:
            status, message = cli(args, prefix)
        if (message.startswith("Fatal Python error: init_import_site")
                or _before_our_code(message)):
            # Python's own start-up was interrupted: not our code; nothing may be written
            if os.listdir(out_dir):
                return {**result, "kind": "leftover", "message": str(os.listdir(out_dir))}
            return {**result, "kind": "refused", "status": 130, "message": "interpreter start-up",
                    "lines": []}
        if "Traceback" in message or "internal error" in message:
            return {**result, "kind": "internal", "message": message.strip()[-300:]}
        if klass not in ("manifest-json", "special", "concurrent", "signal", "manifest-range",
                         "manifest-string") \
                and message.strip().count("\n") > 0 and status not in (0, 1):
            return {**result, "kind": "output", "message": "more than one line: " + message}
        if status not in allowed:
            return {**result, "kind": "output", "status": status,
                    "message": f"exit {status} not in {sorted(allowed)}: {message[-300:]}"}
        after = digest(run) if before is not None else None
        if after is not None and any(after.get(k) != v for k, v in before.items()):
            return {**result, "kind": "input-changed", "message": f"exit {status}: {message}"}
        left = leftovers(out_dir, archive.parent, run.parent)
        if left:
            return {**result, "kind": "leftover", "message": f"exit {status}: {left[:3]}"}
        if status in (0, 1) and archive.exists():
            complaint = _otf2_print_fails(archive)
            result["verified"] = True
            if complaint:
                return {**result, "kind": "invalid", "message": complaint}
        kind = "ok" if status in (0, 1) else "refused"
        return {**result, "kind": kind, "status": status, "message": message.strip()[:300],
                "lines": []}
    except subprocess.TimeoutExpired:
        return {**result, "kind": "hang", "message": "no answer within 60-120 s"}
    finally:
        for p in (run, out_dir, work / "ro"):
            if p.exists():
                p.chmod(0o755)
