"""The options of a conversion (and of ``check``, which runs the same phases), as one frozen
``ConvertOptions`` checked once when it is made: the DMA style, ``alpha``, the read delay and
the other order slacks, and whether nodes placed only by their start readings are accepted.
The Python API and the command line both build one and hand it down unchanged; it reads no
input and knows nothing of how the phases use the values."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import cast

from ..model import DmaStyle, OrderOptions
from ..sync.order import check_read_delay


@dataclass(frozen=True)
class ConvertOptions:
    """What a conversion may be asked to do differently; ``ValueError`` when made with a value
    out of range (the command line's own checks turn the same ranges into usage errors)."""

    #: DMA transfers as RMA records or as messages ("rma", "messages" or a ``DmaStyle``)
    dma_style: DmaStyle = DmaStyle.RMA
    #: where offsets sit between their bounds: 0 lower, 1 upper
    alpha: float = 0.5
    #: the slacks assumed where the trace cannot measure them (the read delay among them)
    order: OrderOptions = field(default_factory=OrderOptions)
    #: a node placed only by the manifest's start readings is not lost input (exit 0, not 1)
    accept_unsynchronized_nodes: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.alpha) and 0.0 <= self.alpha <= 1.0):
            raise ValueError(f"alpha must lie in [0, 1], got {self.alpha}")
        check_read_delay(self.order.read_delay_ticks)
        try:
            style = DmaStyle(self.dma_style)
        except ValueError:
            raise ValueError(f"dma_style must be one of {[s.value for s in DmaStyle]}, "
                             f"got {self.dma_style!r}") from None
        # a frozen dataclass sets its own fields through object.__setattr__ (a str given:
        # the enum from here on)
        object.__setattr__(self, "dma_style", style)

    @classmethod
    def of(cls, dma_style: DmaStyle | str = DmaStyle.RMA, alpha: float = 0.5,
           read_delay_ticks: float | None = None,
           accept_unsynchronized_nodes: bool = False) -> ConvertOptions:
        """The options as the command line and ``cell_otf2.convert`` name them
        (``read_delay_ticks`` None: the default order slacks, read delay 0)."""
        order = (OrderOptions() if read_delay_ticks is None
                 else OrderOptions(read_delay_ticks=float(read_delay_ticks)))
        # ``__post_init__`` checks a str and turns it into the enum
        return cls(cast(DmaStyle, dma_style), alpha, order, accept_unsynchronized_nodes)
