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
- ``signal``: SIGTERM, SIGINT or SIGHUP at a random moment of a conversion.
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

CLASSES = {"manifest-json": 10, "special": 5, "clash": 8, "disk": 6, "perm": 4,
           "concurrent": 2, "signal": 3}
NO_DAC = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]
ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


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


# ---- running one environment case -------------------------------------------------------------

def run_env_case(klass: str, case: int, seed: int, run: Path, work: Path,
                 disk: Disk | None) -> dict:
    """One case of ``klass`` on the run at ``run`` (already written); never raises."""
    from cell_otf2.conversion import convert
    from cell_otf2.errors import CellOtf2Error

    rng = random.Random(f"{seed}:{case}:envcase")
    out_dir = work / "out"
    out_dir.mkdir(exist_ok=True)
    allowed = {0, 1, 3}
    prefix: list[str] | None = None
    what = klass
    archive = out_dir / "a.otf2"
    args = [str(run), "-o", str(archive), "--force"]
    if klass == "manifest-json":
        what = mutate_manifest_json(rng, run)
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
        if klass in ("manifest-json", "special"):
            try:
                s = convert(run, archive, force=True)
                status, message = (1 if s.lossy else 0), ""
            except CellOtf2Error as exc:
                status, message = exc.exit_status, str(exc)
            except Exception as exc:  # noqa: BLE001 - what the fuzzer looks for
                return {**result, "kind": "internal", "message": f"{type(exc).__name__}: {exc}"}
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
        if message.startswith("Fatal Python error: init_import_site"):
            # Python's own start-up was interrupted: not our code; nothing may be written
            if os.listdir(out_dir):
                return {**result, "kind": "leftover", "message": str(os.listdir(out_dir))}
            return {**result, "kind": "refused", "status": 130, "message": "interpreter start-up",
                    "lines": []}
        if "Traceback" in message or "internal error" in message:
            return {**result, "kind": "internal", "message": message.strip()[-300:]}
        if klass not in ("manifest-json", "special", "concurrent", "signal") \
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
