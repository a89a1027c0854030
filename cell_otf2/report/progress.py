"""The progress line of ``cell2otf2 report`` on a terminal: events read of all, the time left,
then the figure being drawn, rewritten in place on stderr and erased at the end.
``ProgressLine.reading(done, total)`` is what ``load.load_archive`` calls between batches of
events; ``stage(text)`` names what runs next. Nothing is printed when the stream is not a
terminal (a pipe, a log file, a test's capture), so output meant for machines stays clean,
except for the stage announcements ``cell_otf2.progress.StageAnnouncer`` writes when asked to.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from ..progress import StageAnnouncer

#: the time left is shown after this many seconds and this fraction of the events
ETA_AFTER_S, ETA_AFTER_FRACTION = 2.0, 0.02


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
    return f"{s // 60}:{s % 60:02d}"


def _millions(n: int) -> str:
    return f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n:,}"


class ProgressLine:
    def __init__(self, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled and self.stream.isatty()
        self.started = time.monotonic()
        self.last = ""
        self.announce = StageAnnouncer(self.stream)

    def reading(self, done: int, total: int) -> None:
        self.announce("reading events")
        fraction = done / total if total else 1.0
        elapsed = time.monotonic() - self.started
        text = (f"cell2otf2 report: reading events {100 * fraction:5.1f}% "
                f"({_millions(done)} of {_millions(total)})")
        if elapsed >= ETA_AFTER_S and ETA_AFTER_FRACTION <= fraction < 1:
            text += f", {_clock(elapsed * (1 - fraction) / fraction)} left"
        self.show(text)

    def stage(self, text: str) -> None:
        self.announce(text)
        self.show(f"cell2otf2 report: {text}")

    def show(self, text: str) -> None:
        if not self.enabled or text == self.last:
            return
        self.stream.write("\r" + text.ljust(len(self.last)))
        self.stream.flush()
        self.last = text

    def close(self) -> None:
        if self.enabled and self.last:
            self.stream.write("\r" + " " * len(self.last) + "\r")
            self.stream.flush()
            self.last = ""
