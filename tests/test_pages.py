"""``pages.zeros``: large arrays mapped and zeroed at once, small ones from numpy; either way a
zeroed, writable, contiguous array of the asked length and type, whose memory outlives every
view and is given back with the last."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from cell_otf2.model import EVENT_DTYPE, RECORD_DTYPE
from cell_otf2.native import pages


@pytest.mark.parametrize("populate", [True, False])
@pytest.mark.parametrize("n, dtype", [(0, RECORD_DTYPE), (3, RECORD_DTYPE),
                                      ((40 << 20) // 74 + 1, RECORD_DTYPE),
                                      ((33 << 20) // EVENT_DTYPE.itemsize, EVENT_DTYPE),
                                      (5_000_000, np.int64)])
def test_zeros_is_a_zeroed_writable_array_of_the_asked_shape(monkeypatch, populate, n, dtype):
    monkeypatch.setattr(pages, "_POPULATE", populate and pages._POPULATE)
    a = pages.zeros(n, dtype)
    assert a.dtype == np.dtype(dtype) and a.shape == (n,) and a.flags.c_contiguous
    assert a.flags.writeable and not a.view(np.uint8).any()
    mapped = populate and pages._POPULATE and a.nbytes >= pages.POPULATE_FROM
    assert (not a.flags.owndata) == mapped  # the mapping when large, numpy's memory else
    if n:
        view = a[n // 2:]
        del a
        gc.collect()
        view.view(np.uint8)[:] = 7  # the memory outlives the array it was made for
        assert (view.view(np.uint8) == 7).all()
