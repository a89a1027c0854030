"""Whole-row copies of structured tables (records, events, pairs) at the speed of plain bytes:
``take`` gathers rows by index or mask, ``put`` scatters rows to indexes, ``concatenate``
joins tables. numpy copies a
structured dtype field by field, through a cast per field (5-15x slower than one copy per row
for the 74-byte ``RECORD_DTYPE``: 2 M rows scattered in 0.19 s against 0.04 s); an opaque
view of the same item size is copied one row at a time, with the same bytes. Tables with
padding and plain arrays go through numpy as they are. Nothing here looks into a field or
decides which rows."""

from __future__ import annotations

import numpy as np


def _packed(dtype: np.dtype) -> bool:
    """A structured dtype without padding: its opaque rows hold nothing numpy would not copy
    (numpy leaves padding bytes out, and its ``concatenate`` even packs the dtype)."""
    fields = dtype.fields
    return fields is not None and dtype.itemsize == sum(f[0].itemsize for f in fields.values())


def _opaque(table: np.ndarray) -> np.ndarray:
    return table.view(np.dtype((np.void, table.dtype.itemsize)))


def take(table: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``table[index]`` (an integer array or a boolean mask), a new table of the same dtype."""
    if not _packed(table.dtype):
        return table[index]
    return _opaque(table)[index].view(table.dtype)


def put(table: np.ndarray, index: np.ndarray, rows: np.ndarray) -> None:
    """``table[index] = rows`` for rows of the table's own dtype."""
    if not _packed(table.dtype) or rows.dtype != table.dtype:
        table[index] = rows
        return
    _opaque(table)[index] = _opaque(rows)


def concatenate(tables: list[np.ndarray]) -> np.ndarray:
    """``np.concatenate(tables)`` of 1-D tables of one structured dtype."""
    dtypes = {t.dtype for t in tables}
    if len(dtypes) != 1 or not _packed(next(iter(dtypes))):
        return np.concatenate(tables)
    return np.concatenate([_opaque(t) for t in tables]).view(tables[0].dtype)
