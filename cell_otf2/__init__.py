"""cell2otf2: convert Cell Broadband Engine trace runs (CBT 1) into synchronized OTF2 archives.

Python API (everything else is internal; ``import cell_otf2`` imports nothing heavy, the names
below load their modules on first use):

- ``cell_otf2.convert(run_dir, archive, *, force=False, dma_style="rma", alpha=0.5,
  report=None, read_delay_ticks=0.0, accept_unsynchronized_nodes=False, progress=None) ->
  Summary``: what ``cell2otf2 RUN_DIR -o ARCHIVE`` does, with the same options; raises
  ``CellOtf2Error`` (``cell_otf2.errors``) where the command line would exit 3 or 4,
  ``ValueError`` for an option out of range.
- ``cell_otf2.inspect(run_dir) -> RunInfo``: what ``cell2otf2 inspect`` shows.
- ``Summary`` (``to_dict()``, ``lines()``, ``lossy``) and ``RunInfo`` (``to_dict()``,
  ``lines()``): the dataclasses they return.

``cell_otf2.convert`` and ``cell_otf2.inspect`` are also the names of the modules that hold
them (``from cell_otf2.convert import analyze`` keeps working), so they are made callable:
``cell_otf2.convert(...)`` calls the API function whether or not the module was imported
first. That is what the package's module class below does, and all it does.
"""

from __future__ import annotations

import sys
import types
from importlib import import_module

#: ``typing.TYPE_CHECKING`` without importing typing and pathlib (tens of milliseconds) in
#: every ``cell2otf2`` start-up, before the command can handle Ctrl-C (``__main__.py``)
TYPE_CHECKING = False

__version__ = "0.1.0"
__all__ = ["RunInfo", "Summary", "__version__", "convert", "inspect"]

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from .dumps import Progress
    from .inspect import RunInfo
    from .summary import Summary


def _api_convert(run_dir: str | Path, archive: str | Path, *, force: bool = False,
                 dma_style: str = "rma", alpha: float = 0.5, report: str | Path | None = None,
                 read_delay_ticks: float | None = None,
                 accept_unsynchronized_nodes: bool = False,
                 progress: Progress | None = None) -> Summary:
    """Convert ``run_dir`` into the OTF2 archive ``archive`` (``.../name.otf2``).

    Options as on the command line: ``force`` replaces an existing archive, ``dma_style``
    "rma" or "messages", ``alpha`` in [0, 1], ``report`` a path for the sync report JSON,
    ``read_delay_ticks`` in 0..2^31 (default 0: slot order exact, least uniform relaxation;
    D > 0: bounds that hold for any read delay up to D), ``accept_unsynchronized_nodes``
    (a node placed only by its start readings is unusable input, ``lossy``, unless
    accepted), ``progress(stage, fraction)`` a callback.
    """
    from .convert import convert
    from .model import DmaStyle
    from .order import OrderOptions, check_read_delay

    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    if read_delay_ticks is not None:
        read_delay_ticks = check_read_delay(read_delay_ticks)
    try:
        style = DmaStyle(dma_style)
    except ValueError:
        raise ValueError(f"dma_style must be one of {[s.value for s in DmaStyle]}, "
                         f"got {dma_style!r}") from None
    options = (OrderOptions() if read_delay_ticks is None
               else OrderOptions(read_delay_ticks=float(read_delay_ticks)))
    return convert(run_dir, archive, force=force, dma_style=style, alpha=alpha, report=report,
                   order_options=options, progress=progress,
                   accept_unsynchronized_nodes=accept_unsynchronized_nodes)


def _api_inspect(run_dir: str | Path) -> RunInfo:
    from .inspect import inspect

    return inspect(run_dir)


#: submodule -> the API function calling it runs
_CALLS = {f"{__name__}.convert": _api_convert, f"{__name__}.inspect": _api_inspect}


class _CallableModule(types.ModuleType):
    """``cell_otf2.convert`` / ``cell_otf2.inspect``: the module, callable as the API."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _CALLS[self.__name__](*args, **kwargs)


class _Package(types.ModuleType):
    """This package: makes the API submodules callable as the import system attaches them."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and value.__name__ in _CALLS:
            value.__class__ = _CallableModule
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    if name in ("convert", "inspect"):
        return import_module(f"{__name__}.{name}")  # attached (callable) by the import
    if name == "Summary":
        return import_module(f"{__name__}.convert").Summary
    if name == "RunInfo":
        return import_module(f"{__name__}.inspect").RunInfo
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
