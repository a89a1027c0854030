"""Atomic archive output: ``-o out/name.otf2`` owns ``name.otf2``, ``name.def`` and ``name/``.

``ArchiveTarget`` parses the ``-o`` path (it must end in ``.otf2``; ``UsageError`` otherwise)
and knows the three entries an OTF2 archive consists of. ``prepare(force)`` refuses an existing
entry unless ``force``, creates a missing parent directory and refuses a parent that is not a
writable directory. ``staged()`` yields a fresh temporary directory inside the parent
(``.name.otf2.tmp-XXXX``) for the writer; on normal exit it moves the three new entries into
place. With ``force``, old entries are first moved aside into ``.name.otf2.old-XXXX`` and deleted
only after all new ones are in place; if moving fails, the new ones are taken out again and the
old ones restored. On any exception, ``KeyboardInterrupt`` included, the temporary directory is
removed and the output path is exactly as it was before. Every failure is an ``OutputError``
(exit status 4), except the exception raised inside the ``with`` block, which propagates as is.

Use (the CLI's conversion)::

    target = ArchiveTarget(o_option)          # UsageError unless it ends in .otf2
    target.prepare(force)                     # before the long work: fail early
    with target.staged() as tmp:
        write_archive(defs, events, tmp, target.name, progress)

Renames within one directory are atomic per entry, not for the three together: a reader that
looks between two renames may see a half-replaced archive for a moment. A process killed with
SIGKILL leaves its hidden temporary directory behind. This module does not look inside the
archive; it only moves directory entries.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import OutputError, UsageError

SUFFIX = ".otf2"


class ArchiveTarget:
    """The output archive named by ``-o``: its parent directory and its three entries."""

    def __init__(self, path: str | Path) -> None:
        text = str(path)
        p = Path(text)
        if not text.endswith(SUFFIX) or p.name == SUFFIX:
            raise UsageError(f"-o {text}: the archive path must name the anchor file and end in "
                             f"'{SUFFIX}', e.g. out/run.otf2")
        self.anchor = p
        self.parent = p.parent
        self.name = p.name[: -len(SUFFIX)]
        self.force = False

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

    def prepare(self, force: bool) -> None:
        """Check the target before any work is done; create a missing parent directory."""
        self.force = force
        found = self.existing()
        if found and not force:
            names = ", ".join(str(e) for e in found)
            raise OutputError(f"{names}: already exists; use --force to replace the archive")
        if self.parent.exists() and not self.parent.is_dir():
            raise OutputError(f"{self.parent}: is not a directory")
        try:
            self.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"{self.parent}: cannot create the output directory: "
                              f"{exc.strerror or exc}") from exc
        if not os.access(self.parent, os.W_OK | os.X_OK):
            raise OutputError(f"{self.parent}: output directory is not writable")

    @contextmanager
    def staged(self) -> Iterator[Path]:
        """A fresh directory to write the archive into, moved into place on success."""
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".{self.name}{SUFFIX}.tmp-", dir=self.parent))
        except OSError as exc:
            raise OutputError(f"{self.parent}: cannot create a temporary directory: "
                              f"{exc.strerror or exc}") from exc
        try:
            yield tmp
            self._commit(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    # ----------------------------------------------------------------------------------------

    def _commit(self, tmp: Path) -> None:
        """Move the staged entries into place; on failure leave the target as it was."""
        new = self.entries_in(tmp)
        missing = [str(e.name) for e in new if not os.path.lexists(e)]
        if missing:
            raise OutputError(f"{self.anchor}: the writer did not produce {', '.join(missing)}")
        found = self.existing()
        if found and not self.force:
            names = ", ".join(str(e) for e in found)
            raise OutputError(f"{names}: appeared while converting; not replaced (use --force)")
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
        except BaseException as exc:
            self._roll_back(moved_in, moved_aside)
            if backup is not None and not _moved_aside_left(moved_aside):
                shutil.rmtree(backup, ignore_errors=True)
            if isinstance(exc, OSError):
                raise OutputError(f"{self.anchor}: cannot move the archive into place: "
                                  f"{exc.strerror or exc}; the previous state was restored"
                                  ) from exc
            raise
        if backup is not None:
            shutil.rmtree(backup, ignore_errors=True)

    @staticmethod
    def _roll_back(moved_in: list[Path], moved_aside: list[tuple[Path, Path]]) -> None:
        for dst in reversed(moved_in):
            _remove(dst)
        for original, aside in reversed(moved_aside):
            try:
                os.rename(aside, original)
            except OSError:
                pass  # left in the backup directory, which is then kept (see caller)


def _moved_aside_left(moved_aside: list[tuple[Path, Path]]) -> bool:
    """True if some old entry could not be restored and still lives in the backup directory."""
    return any(os.path.lexists(aside) for _, aside in moved_aside)


def _remove(path: Path) -> None:
    if os.path.islink(path) or not os.path.isdir(path):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    else:
        shutil.rmtree(path, ignore_errors=True)
