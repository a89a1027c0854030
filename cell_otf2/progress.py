"""The progress line of a long conversion on a terminal: ``TerminalProgress`` is the
``progress(stage, fraction)`` callback the pipeline calls, and rewrites on stderr the stage
running now, the whole conversion's percent (stages weighted by ``STAGE_WEIGHTS``) and the time
left. It prints nothing when stderr is not a terminal, and it knows nothing of the pipeline.
``StageAnnouncer`` (used by this line and by the report's): with the environment variable
``CELL2OTF2_ANNOUNCE_STAGES`` set to a non-empty value, one line ``cell2otf2 stage: NAME`` on
stderr when a stage starts (terminal or not), a stated point of a command that tests and
scripts wait for instead of a time."""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

#: share of a conversion's time per stage, in pipeline order, so that the overall percent
#: moves evenly (the profile they come from: docs/performance.md)
STAGE_WEIGHTS = {"read": 0.10, "layout": 0.01, "decode": 0.16, "match": 0.02, "mpi": 0.02,
                 "order": 0.04, "sync": 0.06, "emit": 0.09, "write": 0.50}
#: the time left is shown after this many seconds and this overall fraction
ETA_AFTER_S, ETA_AFTER_FRACTION = 3.0, 0.03
#: non-empty: announce each stage's start on stderr (read once, when the callback is made)
ANNOUNCE_STAGES_ENV = "CELL2OTF2_ANNOUNCE_STAGES"


class StageAnnouncer:
    """``announce(stage)``: writes ``cell2otf2 stage: STAGE`` the first time each stage is
    named, only when ``ANNOUNCE_STAGES_ENV`` is set (read once, here)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = bool(os.environ.get(ANNOUNCE_STAGES_ENV))
        self.announced: set[str] = set()

    def __call__(self, stage: str) -> None:
        if self.enabled and stage not in self.announced:
            self.announced.add(stage)
            self.stream.write(f"cell2otf2 stage: {stage}\n")
            self.stream.flush()


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 \
        else f"{seconds // 60}:{seconds % 60:02d}"


class TerminalProgress:
    """``progress(stage, fraction)``: one self-overwriting line on a terminal."""

    def __init__(self, enabled: bool, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled and self.stream.isatty()
        self.order = list(STAGE_WEIGHTS)
        self.stage_index = -1
        self.fraction = 0.0
        self.started = time.monotonic()
        self.last_text = ""
        self.last_time = 0.0
        self.announce = StageAnnouncer(self.stream)

    def overall(self) -> float:
        if self.stage_index < 0:
            return 0.0
        done = sum(STAGE_WEIGHTS[s] for s in self.order[: self.stage_index])
        here = STAGE_WEIGHTS[self.order[self.stage_index]] * self.fraction
        return min(1.0, (done + here) / sum(STAGE_WEIGHTS.values()))

    def __call__(self, stage: str, fraction: float) -> None:
        self.announce(stage)
        index = self.order.index(stage) if stage in self.order else self.stage_index
        if index > self.stage_index:
            self.stage_index, self.fraction = index, 0.0
        elif index < self.stage_index:
            return  # an earlier stage's work inside a later one
        self.fraction = max(self.fraction, min(1.0, max(0.0, fraction)))
        if self.enabled:
            self.show()

    def text(self) -> str:
        stage = self.order[self.stage_index] if self.stage_index >= 0 else "start"
        overall = self.overall()
        elapsed = time.monotonic() - self.started
        line = f"{stage:<7} {100 * self.fraction:5.1f}%   overall {100 * overall:3.0f}%"
        if elapsed >= ETA_AFTER_S and overall >= ETA_AFTER_FRACTION:
            line += f", {_clock(elapsed * (1 - overall) / overall)} left"
        return line

    def show(self) -> None:
        now = time.monotonic()
        text = self.text()
        if text == self.last_text or (now - self.last_time < 0.1 and self.fraction < 1.0):
            return
        self.stream.write("\r" + text.ljust(len(self.last_text)))
        self.stream.flush()
        self.last_text, self.last_time = text, now

    def close(self) -> None:
        if self.enabled and self.last_text:
            self.stream.write("\r" + " " * len(self.last_text) + "\r")
            self.stream.flush()
