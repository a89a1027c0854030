"""Bars drawn as one ``PolyCollection`` per series (``hbars``, ``vbars``) instead of
matplotlib's ``barh`` and ``bar``, which make one ``Rectangle`` artist per bar: the report's
figures have hundreds of bars and matplotlib's drawing cost is mostly per artist. A series
keeps its label (a legend shows it as a swatch of its color) and, like ``bar``, sticks the
autoscaled value axis at the bars' base. Imports matplotlib: only the figure modules use it."""

from __future__ import annotations

import numpy as np
from matplotlib.collections import PolyCollection


def _rects(x0: np.ndarray, x1: np.ndarray, y0: np.ndarray, y1: np.ndarray) -> np.ndarray:
    """(n, 4, 2) corners of the rectangles [x0, x1] x [y0, y1]."""
    return np.stack([np.column_stack([x0, y0]), np.column_stack([x1, y0]),
                     np.column_stack([x1, y1]), np.column_stack([x0, y1])], axis=1)


def _add(ax, verts: np.ndarray, color, edgecolor, lw: float, label: str | None,
         zorder: float | None) -> PolyCollection:
    # matplotlib takes an (N, M, 2) array of vertices (its stub asks for a sequence)
    coll = PolyCollection(verts,  # type: ignore[arg-type]
                          facecolors=color, edgecolors=edgecolor, linewidths=lw,
                          label=label if label is not None else "_nolegend_")
    if zorder is not None:
        coll.set_zorder(zorder)
    ax.add_collection(coll)
    ax.autoscale_view()
    return coll


def hbars(ax, y, width, *, left=0.0, height: float = 0.8, color=None, edgecolor="none",
          lw: float = 0.0, label: str | None = None, zorder: float | None = None
          ) -> PolyCollection:
    """Horizontal bars centred on ``y`` from ``left`` to ``left + width`` (as ``barh``)."""
    y = np.asarray(y, np.float64).ravel()
    width = np.broadcast_to(np.asarray(width, np.float64), y.shape)
    left = np.broadcast_to(np.asarray(left, np.float64), y.shape)
    coll = _add(ax, _rects(left, left + width, y - height / 2, y + height / 2), color,
                edgecolor, lw, label, zorder)
    coll.sticky_edges.x.append(float(left.min()) if left.size else 0.0)
    return coll


def vbars(ax, x, height, *, bottom=0.0, width=0.8, align: str = "center", color=None,
          edgecolor="none", lw: float = 0.0, label: str | None = None,
          zorder: float | None = None) -> PolyCollection:
    """Vertical bars at ``x`` (their centre, or their left edge with ``align="edge"``) from
    ``bottom`` to ``bottom + height`` (as ``bar``)."""
    x = np.asarray(x, np.float64).ravel()
    height = np.broadcast_to(np.asarray(height, np.float64), x.shape)
    bottom = np.broadcast_to(np.asarray(bottom, np.float64), x.shape)
    width = np.broadcast_to(np.asarray(width, np.float64), x.shape)
    x0 = x if align == "edge" else x - width / 2
    coll = _add(ax, _rects(x0, x0 + width, bottom, bottom + height), color, edgecolor, lw,
                label, zorder)
    coll.sticky_edges.y.append(float(bottom.min()) if bottom.size else 0.0)
    return coll
