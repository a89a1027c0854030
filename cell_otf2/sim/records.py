"""The simulator's in-memory record table (one per process) before it becomes slots: PPE and SPE
records with the true time their clock was read (``t``), a second true time where one exists
(``done``), a damage mark (``dmg``) and the insertion order (``uid``), as docs/simulator.md
describes. It does not check semantics; the generators are responsible for them."""

from __future__ import annotations

import numpy as np

PPE = 0
SPE = 1

REC_DTYPE = np.dtype(
    [
        ("t", "<f8"),
        ("uid", "<i8"),
        ("a", "<u8"),
        ("b", "<u8"),
        ("c", "<u8"),
        ("d", "<u8"),
        ("done", "<f8"),
        ("code", "<u2"),
        ("actor", "<u2"),
        ("core", "u1"),
        ("dmg", "u1"),
    ],
    align=True,  # aligned fields: bulk numpy work on this table is much faster
)


class RecordSink:
    """Collects rows one at a time (control records) or as whole arrays (vectorized bodies)."""

    def __init__(self) -> None:
        self._rows: list[tuple] = []
        self._chunks: list[np.ndarray] = []
        self._next_uid = 0

    def add(
        self,
        t: float,
        core: int,
        actor: int,
        code: int,
        a: int = 0,
        b: int = 0,
        c: int = 0,
        d: int = 0,
        done: float = np.nan,
    ) -> int:
        """Append one record; returns its uid."""
        uid = self._next_uid
        self._next_uid += 1
        self._rows.append((float(t), uid, a, b, c, d, done, int(code), actor, core, 0))
        return uid

    def add_array(self, rows: np.ndarray) -> np.ndarray:
        """Append a REC_DTYPE array (uid is overwritten); returns the uids given."""
        self._flush_rows()
        rows = rows.copy()
        uids = np.arange(self._next_uid, self._next_uid + len(rows), dtype=np.int64)
        rows["uid"] = uids
        self._next_uid += len(rows)
        self._chunks.append(rows)
        return uids

    @property
    def next_uid(self) -> int:
        return self._next_uid

    def _recent(self, since_uid: int) -> list[np.ndarray]:
        """Chunks that may hold uids >= ``since_uid`` (chunks are in uid order)."""
        self._flush_rows()
        out = []
        for ch in reversed(self._chunks):
            if len(ch) and ch["uid"][-1] < since_uid:
                break
            out.append(ch)
        return out

    def times(self, core: int, actor: int, since_uid: int) -> np.ndarray:
        """Sorted times of ``actor``'s records with uid >= ``since_uid``."""
        parts = [ch["t"][(ch["core"] == core) & (ch["actor"] == actor) & (ch["uid"] >= since_uid)]
                 for ch in self._recent(since_uid)]
        return np.sort(np.concatenate(parts)) if parts else np.zeros(0)

    def shift(self, core: int, actor: int, since_uid: int, t_after: float, dt: float) -> None:
        """Move ``actor``'s records (uid >= since_uid) later than ``t_after`` by ``dt``, and
        their ``done`` times later than ``t_after`` too (a context switched off mid-way)."""
        for ch in self._recent(since_uid):
            m = (ch["core"] == core) & (ch["actor"] == actor) & (ch["uid"] >= since_uid)
            ch["t"][m & (ch["t"] > t_after)] += dt
            ch["done"][m & (ch["done"] > t_after)] += dt

    def _flush_rows(self) -> None:
        if self._rows:
            self._chunks.append(np.array(self._rows, dtype=REC_DTYPE))
            self._rows = []

    def finish(self) -> np.ndarray:
        """All records, sorted by uid (insertion order)."""
        self._flush_rows()
        out = np.empty(sum(len(ch) for ch in self._chunks), REC_DTYPE)
        i = 0
        for ch in self._chunks:  # chunks are in uid order already
            out[i : i + len(ch)] = ch
            i += len(ch)
        return out


def empty(n: int) -> np.ndarray:
    """n zeroed records with ``done`` = NaN."""
    rows = np.zeros(n, REC_DTYPE)
    rows["done"] = np.nan
    return rows
