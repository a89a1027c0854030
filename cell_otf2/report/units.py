"""Numbers as an analyst reads them: a unit, three significant digits, thousands separated. Ticks
are shown whole from 100 up (one decimal below) with the time they stand for; times, byte
counts and rates pick the unit that keeps the number between 1 and 1000. Pure functions of
floats; every figure and table of the report formats through them.
"""

from __future__ import annotations

import math


def sig(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, thousands separated, no exponent."""
    if value is None or not math.isfinite(value):
        return "n/a" if value is None or math.isnan(value) else ("∞" if value > 0 else "-∞")
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(value)))))
    text = f"{round(value, decimals):,.{decimals}f}"
    return text


def seconds(value: float) -> str:
    """A duration: '3.33 ms', '196 µs', '12.5 s'."""
    if value is None or not math.isfinite(value):
        return sig(value)
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(value) >= scale:
            return f"{sig(value / scale)} {unit}"
    return f"{sig(value * 1e9)} ns" if value else "0 s"


def ticks(value: float, hz: float) -> str:
    """Ticks and the time they stand for: '2,803 ticks (196 µs)', '7.0 ticks (0.489 µs)'."""
    if value is None or not math.isfinite(value):
        return "unbounded" if value is None or value > 0 else sig(value)
    whole = f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.1f}"
    return f"{whole} ticks ({seconds(value / hz)})"


def nbytes(value: float) -> str:
    """'16 KiB', '4.19 MB' (decimal units from kB up, as bandwidths are decimal)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= scale:
            return f"{sig(value / scale)} {unit}"
    return f"{value:,.0f} B"


def rate(value: float) -> str:
    """Bytes per second: '3.2 GB/s'."""
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if abs(value) >= scale:
            return f"{sig(value / scale)} {unit}"
    return f"{sig(value)} B/s"


def percent(share: float) -> str:
    """A share of 1 as a percentage with one decimal: '85.3%'."""
    return f"{100 * share:.1f}%" if math.isfinite(share) else "n/a"


def count(value: int) -> str:
    return f"{int(value):,}"
