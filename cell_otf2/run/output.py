"""Safe output: the archive named by ``-o`` (its anchor, ``.def`` and event folder) and the optional
sync report, checked before any work (``ArchiveTarget.prepare``: nothing that is an input, and
with ``--force`` only what is recognizably a previous archive or report) and moved into place
only once whole, staged, checked and synced, under a lock (``staged``; the steps:
docs/design.md). It moves and checks directory entries only; it never looks inside events."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import re
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import OutputError, UsageError
from ..signals import Deferred

SUFFIX = ".otf2"
#: the first bytes of every OTF2 file this converter writes: an endianness mark (3) and the
#: byte order of the writing machine
_OTF2_FILE_MARKS = (b"\x03B", b"\x03L")
#: files OTF2 writes into an archive's event folder
_EVENT_FOLDER_FILE = re.compile(r"\d+\.(evt|def|snap)")
#: archive bytes per byte of dumps, rounded up from the bundled samples (docs/performance.md)
ARCHIVE_PER_INPUT_BYTE = 0.85
#: bytes of the node groups set aside in the staging directory per byte of dumps, when a run
#: is converted in more than one group (``spill.Spill``), rounded up (docs/performance.md)
SPILL_PER_INPUT_BYTE = 2.5
#: the folder of the staging directory that holds them (``team_*.spill_directory``)
SPILL_FOLDER = ".spill"
#: keys every sync report of ours holds
_REPORT_KEYS = ("reference", "timebase_hz", "intervals")


@dataclass(frozen=True)
class RunInputs:
    """What a conversion reads: the run directory and its files (real paths)."""

    run_dir: Path
    files: frozenset[Path] = field(default_factory=frozenset)
    #: bytes of the dumps (0 when the manifest could not be read)
    dump_bytes: int = 0

    @classmethod
    def of(cls, run_dir: str | Path) -> RunInputs:
        """The run directory, its manifest and the dumps the manifest names (if it can be
        read: a manifest that cannot is refused by the conversion itself)."""
        from ..errors import CellOtf2Error
        from ..input.manifest import MANIFEST_NAME, load_manifest

        root = Path(os.path.realpath(run_dir))
        files = {root / MANIFEST_NAME}
        dump_bytes = 0
        try:
            man = load_manifest(Path(run_dir))
            dumps = [Path(os.path.realpath(man.dump_path(p.rank))) for p in man.processes]
            files |= set(dumps)
            dump_bytes = sum(os.stat(d).st_size for d in dumps)
        except (CellOtf2Error, OSError):
            pass
        return cls(root, frozenset(files), dump_bytes)

    def clash(self, path: Path) -> str | None:
        """Why writing or replacing ``path`` would harm the input, or None."""
        real = _real(path)
        if real == self.run_dir:
            return "is the input run directory"
        if real in self.run_dir.parents:
            return f"holds the input run directory {self.run_dir}"
        if real in self.files:
            return "is a file of the input run"
        for f in self.files:
            if real in f.parents:
                return f"holds the input file {f}"
        return None


def _real(path: Path) -> Path:
    """``path`` with its directories resolved, its last component kept as it is."""
    path = Path(path)
    return Path(os.path.realpath(path.parent)) / path.name


class ArchiveTarget:
    """The output archive named by ``-o`` (parent directory, three entries) and the report."""

    def __init__(self, path: str | Path, report: str | Path | None = None,
                 run_dir: str | Path | None = None) -> None:
        text = str(path)
        p = Path(text)
        if run_dir is not None:  # an input named as the output: exit 4 whatever its name
            why = RunInputs.of(run_dir).clash(p)
            if why is not None:
                raise OutputError(f"-o {text}: {why}; the archive is never written over the "
                                  "input, not even with --force")
        if not text.endswith(SUFFIX) or p.name == SUFFIX:
            raise UsageError(f"-o {text}: the archive path must name the anchor file and end in "
                             f"'{SUFFIX}', e.g. out/run.otf2")
        _check_name(text, "-o")
        if report is not None:
            _check_name(str(report), "--report")
        self.anchor = p
        self.parent = p.parent
        self.name = p.name[: -len(SUFFIX)]
        self.report = None if report is None else Path(report)
        self.force = False
        self._report_text: str | None = None
        #: bytes of the run's dumps, for the space an archive needs (``prepare`` sets it)
        self.input_bytes = 0
        #: the conversion set node groups aside in the staging directory (the converter sets
        #: it before the spill is removed): a full disk then says their space too
        self.spilled = False
        #: directories ``prepare`` created (deepest first), removed again on failure
        self.made: list[Path] = []

    def __repr__(self) -> str:
        return f"ArchiveTarget({str(self.anchor)!r})"

    @property
    def entries(self) -> tuple[Path, Path, Path]:
        """The anchor file, the definitions file and the event directory, in the parent."""
        return self.entries_in(self.parent)

    def entries_in(self, directory: Path) -> tuple[Path, Path, Path]:
        """The same three entries inside another directory (the staging directory)."""
        directory = Path(directory)
        return (
            directory / f"{self.name}{SUFFIX}",
            directory / f"{self.name}.def",
            directory / self.name,
        )

    def existing(self) -> list[Path]:
        """Entries of this archive that exist now (symlinks count, even dangling ones)."""
        return [e for e in self.entries if os.path.lexists(e)]

    # ---- before the work ---------------------------------------------------------------------

    def prepare(self, force: bool, inputs: RunInputs | None = None) -> None:
        """Check the archive and report paths before any work is done; create missing parent
        directories (``made``). Raises ``OutputError`` naming the path and why."""
        self.force = force
        self.input_bytes = inputs.dump_bytes if inputs is not None else 0
        if self.parent.exists() and not self.parent.is_dir():
            raise OutputError(f"{self.parent}: is not a directory")
        for entry in self.entries:
            why = inputs.clash(entry) if inputs is not None else None
            if why is not None:
                raise OutputError(f"{entry}: {why}; the archive {self.anchor} would replace "
                                  f"it. {self._rename_hint()}")
        self._check_existing(self.existing(), force, "")
        if self.report is not None:
            self._check_report(force, inputs)
        self.made = _missing_dirs(self.parent)
        if self.report is not None:
            self.made += [d for d in _missing_dirs(self.report.parent) if d not in self.made]
        places = [(self.parent, "")]
        if self.report is not None:
            places.append((self.report.parent, f"--report {self.report}: "))
        for directory, what in places:
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                self.remove_made()
                raise OutputError(f"{what}{directory}: cannot create the output directory: "
                                  f"{_why(exc)}") from exc
            if not os.access(directory, os.W_OK | os.X_OK):
                self.remove_made()
                raise OutputError(f"{what}{directory}: output directory is not writable")
            try:  # before any work: a folder that takes no new entries (/proc) says so now
                os.rmdir(tempfile.mkdtemp(prefix=".cell2otf2-probe-", dir=directory))
            except OSError as exc:
                self.remove_made()
                raise OutputError(f"{what}{cannot_create(directory, exc)}") from None
        self._remove_stale_staging()

    def remove_made(self) -> None:
        """Remove the directories ``prepare`` created, if they are still empty."""
        for d in sorted(self.made, key=lambda p: len(p.parts), reverse=True):
            try:
                d.rmdir()
            except OSError:
                pass
        self.made = []

    def _rename_hint(self) -> str:
        alt = self.parent / f"{self.name}-trace{SUFFIX}"
        return (f"Name the archive differently (e.g. -o {alt}) or write it into another folder "
                f"(e.g. -o traces/{self.name}{SUFFIX}).")

    def _check_existing(self, found: list[Path], force: bool, when: str) -> None:
        if not found:
            return
        for entry, kind in zip(self.entries, ("anchor", "definitions", "events"), strict=True):
            if entry in found:
                why = _not_archive_entry(entry, kind)
                if why is not None:
                    raise OutputError(f"{entry}: exists{when} and {why}; it is not part of a "
                                      f"previous OTF2 archive and is never replaced, not even "
                                      f"with --force. {self._rename_hint()}")
        if not force:
            names = ", ".join(str(e) for e in found)
            raise OutputError(f"{names}: already exists{when}; use --force to replace the "
                              f"previous archive")

    def _check_report(self, force: bool, inputs: RunInputs | None) -> None:
        report = self.report
        assert report is not None
        why = inputs.clash(report) if inputs is not None else None
        if why is not None:
            raise OutputError(f"--report {report}: {why}; the report is never written over "
                              f"the input")
        real = _real(report)
        for entry in self.entries:
            if real == _real(entry) or _real(entry) in real.parents:
                raise OutputError(f"--report {report}: lies where the archive {self.anchor} "
                                  f"is written ({entry}); choose another report path")
        if report.parent.exists() and not report.parent.is_dir():
            raise OutputError(f"--report {report}: {report.parent} is not a directory")
        if os.path.lexists(report):
            why = _not_report(report)
            if why is not None:
                raise OutputError(f"--report {report}: exists and {why}; it is not a previous "
                                  f"sync report and is never replaced, not even with --force")
            if not force:
                raise OutputError(f"--report {report}: already exists; use --force to replace "
                                  f"the previous report")

    def _remove_stale_staging(self) -> None:
        """Remove staging directories of this archive left by a conversion on this host whose
        process no longer exists (killed with SIGKILL, or the machine went down)."""
        prefix = f".{self.name}{SUFFIX}.tmp-{socket.gethostname()}-"
        try:
            names = os.listdir(self.parent)
        except OSError:
            return
        for name in names:
            if not name.startswith(prefix):
                continue
            pid_text = name[len(prefix):].partition("-")[0]
            if pid_text.isdigit() and not _alive(int(pid_text)):
                shutil.rmtree(self.parent / name, ignore_errors=True)

    # ---- the work ----------------------------------------------------------------------------

    def stage_report(self, text: str) -> None:
        """The report's text, written and moved into place with the archive."""
        self._report_text = text

    @contextmanager
    def staged(self) -> Iterator[Path]:
        """A fresh directory to write the archive into, moved into place on success."""
        prefix = f".{self.name}{SUFFIX}.tmp-{socket.gethostname()}-{os.getpid()}-"
        try:
            tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=self.parent))
        except OSError as exc:
            raise OutputError(cannot_create(self.parent, exc)) from exc
        # opened now, so that a write-back error of the file system after this point is
        # reported to the one sync of the commit (``_sync_tree``)
        try:
            fs = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            fs = None
        try:
            yield tmp
            self._commit(tmp, fs)
        except OutputError as exc:
            if getattr(exc, "no_space", False):
                raise self._no_space(tmp) from exc
            raise
        finally:
            if fs is not None:
                os.close(fs)
            shutil.rmtree(tmp, ignore_errors=True)

    def _no_space(self, tmp: Path) -> OutputError:
        need = ""
        if self.input_bytes:
            files = sum(len(f) for _, _, f in os.walk(tmp))  # a block or page each at least
            mb = (ARCHIVE_PER_INPUT_BYTE * self.input_bytes + files * 8192) / 1e6
            need = f" (the archive needs about {mb:.1f} MB"
            if self.spilled:
                need += (f", and about {SPILL_PER_INPUT_BYTE * self.input_bytes / 1e6:.0f} MB "
                         "more while converting, for the node groups set aside")
            need += ")"
        exc = OutputError(f"no space left on the device writing {self.anchor}{need}; "
                          "nothing was replaced")
        exc.no_space = True
        return exc

    def _commit(self, tmp: Path, fs: int | None = None) -> None:
        """Check and sync the staged archive, then move it (and the report) into place under
        the output directory's lock; on failure leave the target as it was. ``fs``: a
        descriptor of the staging directory opened when it was made (``_sync_tree``)."""
        new = self.entries_in(tmp)
        missing = [str(e.name) for e in new if not os.path.lexists(e)]
        if missing:
            raise OutputError(f"{self.anchor}: the writer did not produce {', '.join(missing)}")
        for path in new[:2]:
            if not _has_otf2_mark(path):
                raise OutputError(f"{self.anchor}: the OTF2 library wrote an incomplete "
                                  f"{path.name} (is the disk full?); nothing was replaced")
        _sync_tree(tmp, self.anchor, fs)
        made: list[Path] = []  # the report's temporary file, once it exists
        try:
            report_tmp = self._write_report_tmp(made)
            with _locked(self.parent):
                self._move_in(new, report_tmp)
        finally:
            for path in made:
                if os.path.lexists(path):
                    os.unlink(path)

    def _write_report_tmp(self, made: list[Path]) -> Path | None:
        """Write the sync report beside its place, synced; its name goes into ``made`` as
        soon as the file exists, so the caller removes it whatever interrupts the writing."""
        if self.report is None or self._report_text is None:
            return None
        report = self.report
        try:
            with Deferred():  # a signal here is raised once the file's name is in ``made``
                fd, name = tempfile.mkstemp(prefix=f".{report.name}.tmp-", dir=report.parent)
                made.append(Path(name))
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(self._report_text)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            raise OutputError(f"--report {report}: cannot write the report: {_why(exc)}"
                              ) from exc
        return Path(name)

    def _move_in(self, new: tuple[Path, Path, Path], report_tmp: Path | None) -> None:
        found = self.existing()
        self._check_existing(found, self.force, " (it appeared while converting)")
        report = self.report
        if report_tmp is not None and report is not None and os.path.lexists(report):
            why = _not_report(report)
            if why is not None or not self.force:
                raise OutputError(f"--report {self.report}: appeared while converting; not "
                                  f"replaced{'' if self.force else ' (use --force)'}")
        backup: Path | None = None
        moved_aside: list[tuple[Path, Path]] = []  # (original place, place in backup)
        moved_in: list[Path] = []
        try:
            if found:
                backup = Path(tempfile.mkdtemp(prefix=f".{self.name}{SUFFIX}.old-",
                                               dir=self.parent))
                for entry in found:
                    aside = backup / entry.name
                    os.rename(entry, aside)
                    moved_aside.append((entry, aside))
            for src, dst in zip(new, self.entries, strict=True):
                os.rename(src, dst)
                moved_in.append(dst)
            if report_tmp is not None and report is not None:
                os.replace(report_tmp, report)
            _fsync_dir(self.parent)
        except BaseException as exc:
            _roll_back(moved_in, moved_aside)
            if backup is not None and not any(os.path.lexists(a) for _, a in moved_aside):
                shutil.rmtree(backup, ignore_errors=True)
            if isinstance(exc, OSError):
                raise OutputError(f"{self.anchor}: cannot move the archive into place: "
                                  f"{_why(exc)}; the previous state was restored") from exc
            raise
        if backup is not None:
            shutil.rmtree(backup, ignore_errors=True)


def _check_name(text: str, option: str) -> None:
    """Refuse an output path that the OTF2 library (UTF-8 C strings) or the file system cannot
    take, as an output problem, before any work: bytes that are not UTF-8 (Python holds them
    as lone surrogates, ``os.fsdecode``) or a NUL. (A name too long for the file system fails
    when the staging folder is made, also before any work.)"""
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        byte = os.fsencode(text[exc.start:exc.start + 1])
        raise OutputError(f"{option} {text!r}: the path is not UTF-8 (byte 0x{byte[0]:02X} at "
                          f"character {exc.start}); the OTF2 library and the summary take UTF-8 "
                          "names only: choose a UTF-8 name") from None
    if b"\0" in raw:
        raise OutputError(f"{option} {text!r}: the path holds a NUL character")


# ---- recognizing what may be replaced -------------------------------------------------------

def _has_otf2_mark(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) in _OTF2_FILE_MARKS
    except OSError:
        return False


def _not_archive_entry(entry: Path, kind: str) -> str | None:
    """Why ``entry`` is not recognizably this kind of entry of an OTF2 archive, or None."""
    try:
        mode = os.lstat(entry).st_mode
    except OSError as exc:
        return f"cannot be examined ({_why(exc)})"
    if stat.S_ISLNK(mode):
        return "is a symbolic link"
    if kind in ("anchor", "definitions"):
        if not stat.S_ISREG(mode):
            return "is not a regular file"
        if kind == "anchor":
            with open(entry, "rb") as f:
                head = f.read(6)
            return None if head[:2] in _OTF2_FILE_MARKS and head[2:6] == b"OTF2" else \
                "is not an OTF2 anchor file"
        return None if _has_otf2_mark(entry) else "is not an OTF2 definition file"
    if not stat.S_ISDIR(mode):
        return "is not a directory"
    try:
        with os.scandir(entry) as it:
            for item in it:
                if not (_EVENT_FOLDER_FILE.fullmatch(item.name)
                        and item.is_file(follow_symlinks=False)):
                    return f"holds {item.name!r}, which OTF2 does not write"
    except OSError as exc:
        return f"cannot be examined ({_why(exc)})"
    return None


def _not_report(path: Path) -> str | None:
    """Why ``path`` is not recognizably a sync report of ours, or None."""
    try:
        mode = os.lstat(path).st_mode
        if not stat.S_ISREG(mode):
            return "is not a regular file"
        if os.stat(path).st_size > 1 << 30:
            return "is larger than any sync report"
        with open(path, "rb") as f:
            data = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return "is not a JSON sync report"
    if not isinstance(data, dict) or not all(k in data for k in _REPORT_KEYS):
        return "is not a JSON sync report"
    return None


# ---- file system helpers --------------------------------------------------------------------

def cannot_create(directory: Path, exc: OSError) -> str:
    """Why nothing can be created in ``directory``, in words a user can act on: a virtual file
    system (``/proc``, ``/sys``: no blocks to hold files) is named as such."""
    try:
        virtual = os.statvfs(directory).f_blocks == 0
    except OSError:
        virtual = False
    if virtual:
        return (f"{directory}: is on a virtual file system (like /proc or /sys) where no files "
                "can be created; write the output into a folder on a disk")
    return f"{directory}: cannot create files there ({_why(exc)}); choose a writable folder"


def _why(exc: OSError) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "no space left on the device"
    return exc.strerror or str(exc)


def _missing_dirs(directory: Path) -> list[Path]:
    return [d for d in (directory, *directory.parents) if not d.exists()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a directory; the entries are renamed regardless
    finally:
        os.close(fd)


def _sync_tree(tmp: Path, anchor: Path, fs: int | None = None) -> None:
    """Make every staged file durable before anything is replaced, and let a write the device
    could not take fail here, not later. One ``syncfs`` of the staging directory's file system
    (``fs``, a descriptor of it opened before the files were written, so that a write-back
    error since then is reported) where the C library has it (Linux): one journal commit
    instead of one per file (docs/performance.md). It also
    writes back other dirty data of that file system. Elsewhere, or when the file system
    refuses it: every file and directory synced one by one."""
    if fs is not None and _syncfs(fs, anchor):
        return
    for root, _dirs, files in os.walk(tmp):
        for name in files:
            path = os.path.join(root, name)
            try:
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise OutputError(f"{anchor}: cannot write {name}: {_why(exc)}; nothing was "
                                  f"replaced") from exc
        _fsync_dir(Path(root))


def _libc_syncfs():
    """The C library's ``syncfs(int fd)`` through ctypes, or None where there is none."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        func = libc.syncfs
    except (OSError, AttributeError):
        return None
    func.argtypes = [ctypes.c_int]
    func.restype = ctypes.c_int
    return func


def _syncfs(fd: int, anchor: Path) -> bool:
    """``syncfs(fd)``: True once the file system is synced; False where there is no
    ``syncfs`` or the file system does not support it (the caller syncs file by file);
    an ``OutputError`` when the sync reports an error (a write the device did not take)."""
    func = _libc_syncfs()
    if func is None:
        return False
    if func(fd) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF):
        return False
    why = _why(OSError(code, os.strerror(code)))
    raise OutputError(f"{anchor}: cannot write the archive: {why}; nothing was replaced")


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive lock on ``directory`` (flock), where the file system has one."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass  # no locks here (some network file systems): moves are still atomic each
        yield
    finally:
        os.close(fd)  # releases the lock


def _roll_back(moved_in: list[Path], moved_aside: list[tuple[Path, Path]]) -> None:
    for dst in reversed(moved_in):
        _remove(dst)
    for original, aside in reversed(moved_aside):
        try:
            os.rename(aside, original)
        except OSError:
            pass  # left in the backup directory, which is then kept (see caller)


def _remove(path: Path) -> None:
    if os.path.islink(path) or not os.path.isdir(path):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    else:
        shutil.rmtree(path, ignore_errors=True)


# ---- shared with the report's folder (``report/target.py``) and reader (``report/load.py``) --

#: why an OSError happened, in words (``_why``)
reason = _why
#: the missing directories of a path, deepest first (``_missing_dirs``)
missing_dirs = _missing_dirs
#: fsync a directory where the file system can (``_fsync_dir``)
fsync_dir = _fsync_dir
#: an exclusive lock on a directory (``_locked``)
locked = _locked
#: why a path is not recognizably an entry of an OTF2 archive (``_not_archive_entry``)
not_archive_entry = _not_archive_entry
