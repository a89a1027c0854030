"""The folder ``cell2otf2 report ARCHIVE -o DIR`` writes, under the output rules of ``convert``
(``cell_otf2.run.output``): DIR is new or empty, or it holds only a previous report (its
``index.html`` and ``contexts.csv`` as this command writes them, its figures) and ``--force``
replaces it; anything else in DIR, a symbolic link or a file is never replaced. The report is
drawn into a hidden staging folder beside DIR and moved into place whole, under the parent's
lock, the previous report set aside until then: on any failure, a full disk or Ctrl-C, DIR is as
it was. It moves and checks directory entries only."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import OutputError
from ..run.output import cannot_create, fsync_dir, locked, missing_dirs, reason

#: the figures a report may hold (``report.FIGURES``, kept here to import no matplotlib)
_FIGURES = frozenset({"timeline.png", "dma_bandwidth.png", "dma_histograms.png", "waits.png",
                      "ppe_mpi.png", "sync_bounds.png", "node_clocks.png"})
_PNG = b"\x89PNG\r\n\x1a\n"
#: how each file of a report starts (index.html: within its first bytes)
_INDEX_MARK = b"<title>cell2otf2 report: "
_CSV_HEAD = b"context,rank,node,program,"


class ReportTarget:
    """The report folder named by ``-o``: checked before any work, written staged."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.parent = self.directory.parent
        self.replace = False  # DIR exists (empty, or a previous report with --force)
        self.made: list[Path] = []

    def prepare(self, force: bool, archive: Path | None = None) -> None:
        """Refuse, with ``OutputError`` naming the path and why, a DIR that is not new, empty
        or (with ``force``) a previous report; create missing parents."""
        d = self.directory
        if archive is not None:
            real, anchor = Path(os.path.realpath(d)), Path(os.path.realpath(archive))
            if real == anchor or real in anchor.parents:
                raise OutputError(f"-o {d}: holds the archive {archive}; the report is never "
                                  "written over its input: choose another folder")
        if os.path.lexists(d):
            mode = os.lstat(d).st_mode
            if stat.S_ISLNK(mode):
                raise OutputError(f"-o {d}: is a symbolic link; it is never replaced: choose "
                                  "another folder")
            if not stat.S_ISDIR(mode):
                raise OutputError(f"-o {d}: exists and is not a folder; it is never replaced: "
                                  "choose another folder")
            try:
                names = sorted(os.listdir(d))
            except OSError as exc:
                raise OutputError(f"-o {d}: cannot be examined: {reason(exc)}") from None
            if names:
                for name in names:
                    why = _not_report_file(d / name)
                    if why is not None:
                        raise OutputError(
                            f"-o {d}: holds {name!r}, which {why}; a folder that is not a "
                            "previous report is never written into, not even with --force: "
                            "choose a new or empty folder")
                if not force:
                    raise OutputError(f"-o {d}: holds a previous report; use --force to "
                                      "replace it")
            self.replace = True
        if self.parent.exists() and not self.parent.is_dir():
            raise OutputError(f"-o {d}: {self.parent} is not a folder")
        self.made = missing_dirs(self.parent)
        try:
            self.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self.remove_made()
            raise OutputError(f"-o {d}: cannot create the folder {self.parent}: "
                              f"{reason(exc)}") from None
        if not os.access(self.parent, os.W_OK | os.X_OK):
            self.remove_made()
            raise OutputError(f"-o {d}: the folder {self.parent} is not writable")
        try:  # before any work: a folder that takes no new entries (/proc) says so now
            os.rmdir(tempfile.mkdtemp(prefix=".cell2otf2-probe-", dir=self.parent))
        except OSError as exc:
            self.remove_made()
            raise OutputError(f"-o {d}: {cannot_create(self.parent, exc)}") from None

    def remove_made(self) -> None:
        """Remove the parent folders ``prepare`` created, if still empty."""
        for p in sorted(self.made, key=lambda p: len(p.parts), reverse=True):
            try:
                p.rmdir()
            except OSError:
                pass
        self.made = []

    @contextmanager
    def staged(self) -> Iterator[Path]:
        """A fresh hidden folder beside DIR to draw the report into, moved into DIR's place
        once the body returns; removed on any failure (DIR then as it was)."""
        prefix = f".{self.directory.name}.tmp-{socket.gethostname()}-{os.getpid()}-"
        try:
            tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=self.parent))
            umask = os.umask(0)
            os.umask(umask)
            tmp.chmod(0o777 & ~umask)  # mkdtemp's 0700 would otherwise stay with the report
        except OSError as exc:
            self.remove_made()
            raise OutputError(f"-o {self.directory}: {cannot_create(self.parent, exc)}"
                              ) from None
        try:
            yield tmp
            self._commit(tmp)
        except BaseException:
            self.remove_made()
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _commit(self, tmp: Path) -> None:
        d = self.directory
        for entry in os.scandir(tmp):  # durable before anything is replaced (a few files)
            try:
                fd = os.open(entry.path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise OutputError(f"-o {d}: cannot write the report: {reason(exc)}; nothing "
                                  "was replaced") from None
        with locked(self.parent):
            aside = None
            if os.path.lexists(d):
                if not self.replace:
                    raise OutputError(f"-o {d}: appeared while the report was drawn; not "
                                      "replaced")
                for name in os.listdir(d):  # the check again: it may have changed since
                    if _not_report_file(d / name) is not None:
                        raise OutputError(f"-o {d}: {name!r} appeared in it while the report "
                                          "was drawn; not replaced")
                aside = Path(tempfile.mkdtemp(prefix=f".{d.name}.old-", dir=self.parent))
                try:
                    os.rename(d, aside / "report")
                except OSError as exc:
                    shutil.rmtree(aside, ignore_errors=True)
                    raise OutputError(f"-o {d}: cannot replace it: {reason(exc)}") from None
            try:
                os.rename(tmp, d)
            except OSError as exc:
                if aside is not None:
                    os.rename(aside / "report", d)  # put back; only then is ``aside`` empty
                    shutil.rmtree(aside, ignore_errors=True)
                raise OutputError(f"-o {d}: cannot move the report into place: {reason(exc)}; "
                                  "nothing was replaced") from None
            if aside is not None:
                shutil.rmtree(aside, ignore_errors=True)
            fsync_dir(self.parent)


def _not_report_file(path: Path) -> str | None:
    """Why ``path`` is not a file of a previous report, or None."""
    try:
        mode = os.lstat(path).st_mode
        if not stat.S_ISREG(mode):
            return "is not a regular file"
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError as exc:
        return f"cannot be examined ({reason(exc)})"
    name = path.name
    if name == "index.html":
        return None if _INDEX_MARK in head else "is not a page cell2otf2 report wrote"
    if name == "contexts.csv":
        return None if head.startswith(_CSV_HEAD) else "is not a table cell2otf2 report wrote"
    if name in _FIGURES:
        return None if head.startswith(_PNG) else "is not a PNG figure"
    return "cell2otf2 report does not write"
