"""``cell2otf2 report``: ``render_report(archive, out_dir)`` reads a converted OTF2 archive back
(``load``), derives what to draw with numpy (``derive``, ``axis``) and writes the figures, one
module each, ``contexts.csv`` and an ``index.html`` (``html``); above ``max_events`` only the
timeline is drawn from a sample, everything else is exact (docs/design.md). matplotlib, the
optional extra ``cell2otf2[report]``, is imported only here and only when a report is rendered."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import FormatError, OutputError, UsageError

FIGURES = ("timeline.png", "dma_bandwidth.png", "dma_histograms.png", "waits.png",
           "ppe_mpi.png", "sync_bounds.png", "node_clocks.png")


@dataclass
class ReportResult:
    index_html: Path
    figures: list[Path] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)  # figure name -> rows drawn
    events: dict[str, int] = field(default_factory=dict)  # figure name -> events drawn
    skipped: dict[str, str] = field(default_factory=dict)  # figure not drawn -> why
    csv: Path | None = None  # contexts.csv: one row per SPE context
    sampled: bool = False
    total_events: int = 0  # events in the archive


def render_report(archive: Path, out_dir: Path, *, max_events: int = 200_000,
                  sync_report: Path | None = None, progress=None,
                  force: bool = False) -> ReportResult:
    """Write the figures, contexts.csv and index.html into ``out_dir``: a new or empty folder,
    or a previous report replaced with ``force`` (``target.ReportTarget``: drawn into a
    staging folder beside it and moved into place whole; never a folder holding anything
    else).

    Raises UsageError without matplotlib or with ``max_events`` < 1, FormatError when the
    archive or the sync report cannot be read or the sync report belongs to another run,
    OutputError when ``out_dir`` may not be written (checked before any work) or cannot be.
    ``progress`` (a ``progress.ProgressLine``) is told how many events were read and which
    figure is being drawn.
    """
    try:
        import matplotlib  # noqa: F401  (the figure modules import its parts)
    except ImportError:
        raise UsageError("cell2otf2 report needs matplotlib: pip install 'cell2otf2[report]'"
                         ) from None
    if max_events < 1:
        raise UsageError(f"--max-events must be at least 1 (found {max_events})")
    from . import syncfile
    from .html import sync_summary
    from .load import load_archive
    from .target import ReportTarget

    archive, final_dir = Path(archive), Path(out_dir)
    target = ReportTarget(final_dir)
    report = None
    if sync_report is not None:
        report = syncfile.read_for(Path(sync_report), archive)
        try:
            sync_summary(report)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise FormatError(sync_report, "not a cell2otf2 synchronization report "
                              f"(docs/sync-report.md): {exc}") from None
    target.prepare(force, archive)
    try:
        loaded = load_archive(archive, max_events=max_events,
                              progress=progress.reading if progress is not None else None)
    except BaseException:
        target.remove_made()
        raise
    with target.staged() as out_dir:
        result = _draw(loaded, out_dir, report, sync_report, progress)
    # the paths where the report now is
    result.index_html = final_dir / result.index_html.name
    result.figures = [final_dir / p.name for p in result.figures]
    if result.csv is not None:
        result.csv = final_dir / result.csv.name
    return result


def _draw(loaded, out_dir: Path, report: dict | None, sync_report: Path | None, progress
          ) -> ReportResult:
    """Every figure, the CSV and index.html into ``out_dir``."""
    from . import bounds, contexts, dma, dmahist, nodeclock, ppempi, timeline, waits
    from .axis import make_axis
    from .derive import segments
    from .html import write_index

    seg = segments(loaded)
    result = ReportResult(index_html=out_dir / "index.html", sampled=loaded.sampled,
                          total_events=loaded.total_events)
    draws = {
        "timeline.png": lambda p: timeline.draw(loaded, seg, make_axis(loaded.window_bounds),
                                                p),
        "dma_bandwidth.png": lambda p: dma.draw(loaded, seg, p),
        "dma_histograms.png": lambda p: dmahist.draw(loaded, p),
        "waits.png": lambda p: waits.draw(loaded, seg, p),
        "ppe_mpi.png": lambda p: ppempi.draw(loaded, p),
        "sync_bounds.png": lambda p: bounds.draw(loaded, p),
        "node_clocks.png": lambda p: nodeclock.draw(loaded, report, p),
    }
    try:
        for name in FIGURES:
            if progress is not None:
                progress.stage(f"drawing {name}")
            path = out_dir / name
            drawn = draws[name](path)
            if isinstance(drawn, str):  # nothing to draw, and why
                result.skipped[name] = drawn
                path.unlink(missing_ok=True)  # a previous report's figure
                continue
            result.rows[name], result.events[name] = drawn
            result.figures.append(path)
        ctx_rows = contexts.rows(loaded)
        result.csv = out_dir / "contexts.csv"
        contexts.write_csv(result.csv, ctx_rows)
        write_index(result.index_html, loaded, result.figures, report,
                    Path(sync_report).name if sync_report is not None else "", result.skipped,
                    ctx_rows, result.csv.name)
    except OSError as exc:
        from ..run.output import reason

        raise OutputError(f"{out_dir.parent}: cannot write the report: {reason(exc)}"
                          ) from None
    return result
