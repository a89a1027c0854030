"""One group of nodes' conversion state between phases (``GroupState``), kept in memory for
the group being worked on and in ``.npy`` files (the record table as a shared file mapping)
for the others, so only one group's arrays are resident at a time. It stores and restores;
it does not decide which group is worked on or when."""

from __future__ import annotations

import errno
import mmap
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from ..errors import OutputError
from ..model import RECORD_DTYPE, Decoded, Matches, SyncResult


@dataclass
class GroupState:
    """What a group holds between phases."""

    dec: Decoded
    matches: Matches
    result: SyncResult | None = None
    timed: bool = False  # ``dec.records['time']`` is filled


_ARRAYS = {
    "dec": ("records", "anchors", "domains", "links", "loss_epoch", "loss_cut"),
    "matches": ("messages", "dma", "pairs", "node_pairs"),
    "result": ("offset", "lower", "upper", "bounded", "usable"),
}
#: arrays no phase changes once made: a copy on disk stays valid after loading (the records'
#: times excepted, which are saved apart once set)
_STABLE = frozenset({"records", "domains", "links", "loss_cut", "messages", "dma"})


class Spill:
    """Each group's ``GroupState``: in memory for the group being worked on (``get``/``put``),
    in ``.npy`` files under ``directory`` for the others (made on first use; ``close``
    removes it). Whatever is not an array (counts, the manifest, the layout shared by every
    group) stays in memory. ``seconds`` / ``cpu_seconds``: time spent writing and reading.

    A group's record table, most of its state, can be a shared mapping of a file from the
    start (``record_table``, given to ``decode``): spilling it then copies nothing, its pages
    simply leave the process (they stay in the page cache, or go to disk under memory
    pressure), and loading it maps the file again. Copying it out instead costs a second page
    for every page of the table (on the project's VM, fresh pages are the expensive part).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.hot: tuple[int, GroupState] | None = None
        self.valid: dict[int, set[str]] = {}  # per group: files that hold the current arrays
        self.rest: dict[int, dict] = {}  # per spilled group: everything but the arrays
        self.mapped: dict[int, int] = {}  # per group with a mapped record table: its rows
        self.seconds = self.cpu_seconds = 0.0
        self.written = 0  # bytes

    def record_table(self, g: int) -> Callable[[int], np.ndarray]:
        """``decode``'s ``allocate`` for group ``g``: the record table as a shared mapping of
        the file ``records.bin`` in its spill directory (zeroed: a fresh sparse file)."""

        def allocate(n: int) -> np.ndarray:
            if n == 0:
                return np.zeros(0, RECORD_DTYPE)
            path = self._dir(g) / "records.bin"
            with self._failing(path):
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "w+b") as f:
                    try:  # blocks reserved now: a full disk is an error here, not a SIGBUS
                        os.posix_fallocate(f.fileno(), 0, n * RECORD_DTYPE.itemsize)
                    except OSError as exc:
                        if exc.errno == errno.ENOSPC:
                            raise
                        return np.zeros(n, RECORD_DTYPE)  # no fallocate here: not mapped
            self.mapped[g] = n
            self.valid.setdefault(g, set())
            return self._map(g)

        return allocate

    @contextmanager
    def _failing(self, path: Path) -> Iterator[None]:
        """An ``OSError`` of the spill as the ``OutputError`` it is."""
        try:
            yield
        except OSError as exc:
            raise OutputError(
                f"{path}: cannot set a group of nodes aside while converting: "
                f"{exc.strerror or exc} (the conversion needs free space of about 2.5 times "
                "the run's dumps next to the output)") from exc

    def _map(self, g: int) -> np.ndarray:
        n = self.mapped[g]
        path = self._dir(g) / "records.bin"
        with self._failing(path), open(path, "r+b") as f:
            mapping = mmap.mmap(f.fileno(), n * RECORD_DTYPE.itemsize)
        return np.frombuffer(mapping, RECORD_DTYPE, n)  # unmapped with its last view

    @property
    def used(self) -> bool:
        """Whether any group was set aside on disk (or had its record table made there)."""
        return bool(self.mapped) or self.written > 0

    def put(self, g: int, state: GroupState) -> None:
        """``state`` is group ``g``'s now (the one in memory)."""
        if self.hot is not None and self.hot[0] != g:
            raise RuntimeError("one group in memory at a time: evict the other first")
        self.hot = (g, state)

    def evict(self) -> None:
        """Spill the group in memory, if any."""
        if self.hot is not None:
            g, state = self.hot
            self.hot = None
            with self._timed():
                self._save(g, state)

    def get(self, g: int) -> GroupState:
        """Group ``g``'s state, loaded after spilling the one in memory if that is another."""
        if self.hot is not None and self.hot[0] == g:
            return self.hot[1]
        self.evict()
        with self._timed():
            state = self._load(g)
        self.hot = (g, state)
        return state

    def drop(self, g: int) -> None:
        """Group ``g`` is done: forget it, in memory and on disk."""
        if self.hot is not None and self.hot[0] == g:
            self.hot = None
        self.rest.pop(g, None)
        if self.valid.pop(g, None) is not None:
            shutil.rmtree(self._dir(g), ignore_errors=True)

    def close(self) -> None:
        self.hot = None
        shutil.rmtree(self.directory, ignore_errors=True)

    # ----------------------------------------------------------------------------------------

    @contextmanager
    def _timed(self) -> Iterator[None]:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - t0
            self.cpu_seconds += time.process_time() - c0

    def _dir(self, g: int) -> Path:
        return self.directory / f"group{g}"

    def _save(self, g: int, state: GroupState) -> None:
        where = self._dir(g)
        with self._failing(where):
            where.mkdir(parents=True, exist_ok=True)
        valid = self.valid.setdefault(g, set())
        # where each location's records start: known to the group in memory (decoding laid
        # the records out by them), a pass over the record rows to find again after loading
        rest: dict = {"timed": state.timed, "none": set(),
                      "location_starts": state.dec.location_starts()}
        for part, names in _ARRAYS.items():
            obj = getattr(state, part)
            if obj is None:
                rest[part] = None
                continue
            rest[part] = {f.name: getattr(obj, f.name) for f in fields(obj)
                          if f.name not in names and f.name != "_cache"}
            for name in names:
                value = getattr(obj, name)
                if value is None:
                    rest["none"].add(name)
                elif name == "records" and g in self.mapped:
                    continue  # the file's pages: nothing to write
                elif not (name in valid and name in _STABLE):
                    self._write(where, name, value)
                    valid.add(name)
        if state.timed and g not in self.mapped:
            self._write(where, "time", state.dec.records["time"])
            valid.add("time")
        self.rest[g] = rest

    def _write(self, where: Path, name: str, value: np.ndarray) -> None:
        with self._failing(where / f"{name}.npy"):
            np.save(where / f"{name}.npy", value, allow_pickle=False)
        self.written += int(value.nbytes)

    def _load(self, g: int) -> GroupState:
        with self._failing(self._dir(g)):
            return self._read(g)

    def _read(self, g: int) -> GroupState:
        where = self._dir(g)
        rest = self.rest.pop(g)

        def build(part: str, cls):
            if rest[part] is None:
                return None
            arrays = {name: None if name in rest["none"]
                      else self._map(g) if name == "records" and g in self.mapped
                      else np.load(where / f"{name}.npy") for name in _ARRAYS[part]}
            return cls(**rest[part], **arrays)

        dec = build("dec", Decoded)
        dec.know_location_starts(rest["location_starts"])
        if rest["timed"] and g not in self.mapped:
            dec.records["time"] = np.load(where / "time.npy")
        return GroupState(dec, build("matches", Matches), build("result", SyncResult),
                      rest["timed"])


