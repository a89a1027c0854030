"""cell2otf2: convert Cell Broadband Engine trace runs (CBT 1) into synchronized OTF2 archives.
The Python API is ``convert`` (what ``cell2otf2 RUN_DIR -o ARCHIVE`` does, same options; raises
``CellOtf2Error`` from ``cell_otf2.errors`` where the command would exit 3 or 4, ``ValueError``
for an option out of range), ``inspect`` (what ``cell2otf2 inspect`` shows) and the ``Summary``
and ``RunInfo`` they return; everything else is internal. ``import cell_otf2`` imports nothing
heavy: each name loads its module on first use."""

from __future__ import annotations

from importlib import import_module

#: ``typing.TYPE_CHECKING`` without importing typing and pathlib (tens of milliseconds) in
#: every ``cell2otf2`` start-up, before the command can handle Ctrl-C (``__main__.py``)
TYPE_CHECKING = False

__version__ = "0.1.0"
__all__ = ["RunInfo", "Summary", "__version__", "convert", "inspect"]

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from .input.dumps import Progress
    from .run.run_info import RunInfo
    from .run.summary import Summary


def convert(run_dir: str | Path, archive: str | Path, *, force: bool = False,
            dma_style: str = "rma", alpha: float = 0.5, report: str | Path | None = None,
            read_delay_ticks: float | None = None, accept_unsynchronized_nodes: bool = False,
            progress: Progress | None = None) -> Summary:
    """Convert ``run_dir`` into the OTF2 archive ``archive`` (``.../name.otf2``).

    Options as on the command line: ``force`` replaces an existing archive, ``dma_style``
    "rma" or "messages", ``alpha`` in [0, 1], ``report`` a path for the sync report JSON,
    ``read_delay_ticks`` in 0..2^31 (default 0: slot order exact, least uniform relaxation;
    D > 0: bounds that hold for any read delay up to D), ``accept_unsynchronized_nodes``
    (a node placed only by its start readings is unusable input, ``lossy``, unless
    accepted), ``progress(stage, fraction)`` a callback.
    """
    from .run.conversion import convert as run_conversion
    from .run.options import ConvertOptions

    options = ConvertOptions.of(dma_style, alpha, read_delay_ticks, accept_unsynchronized_nodes)
    return run_conversion(run_dir, archive, options, force=force, report=report,
                          progress=progress)


def inspect(run_dir: str | Path) -> RunInfo:
    """What ``cell2otf2 inspect RUN_DIR`` shows about ``run_dir``."""
    from .run.run_info import inspect as run_inspect

    return run_inspect(run_dir)


def __getattr__(name: str) -> Any:
    if name == "Summary":
        return import_module(f"{__name__}.run.summary").Summary
    if name == "RunInfo":
        return import_module(f"{__name__}.run.run_info").RunInfo
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
