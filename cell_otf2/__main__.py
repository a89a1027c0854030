"""``python -m cell_otf2`` and the ``cell2otf2`` command: installs the signal handling before
anything heavy is imported (so Ctrl-C or SIGTERM during start-up is one message and 130/143,
not a traceback), keeps OpenBLAS to one thread unless the environment says otherwise and
numpy's unused submodules unloaded until used (``process_setup``, before numpy is imported),
then runs the command line (``cli.main``), and ends the process without the interpreter's
teardown once everything is written (``_exit``). Nothing else.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def main() -> None:
    """Console entry point."""
    try:
        from . import signals
        from .process_setup import defer_numpy_extras, one_blas_thread
    except KeyboardInterrupt:  # Ctrl-C before any handler is in place: nothing was done
        sys.stderr.write("cell2otf2: interrupted\n")
        raise SystemExit(130) from None

    try:  # a signal while the handlers go in: one line too (CI once saw the traceback)
        one_blas_thread(os.environ)  # before anything imports numpy
        signals.install()
    except KeyboardInterrupt as exc:
        _stopped(exc)
    try:
        defer_numpy_extras()
        from .cli import main as cli_main
    except KeyboardInterrupt as exc:
        _stopped(exc)
    except Exception:  # what an interruption broke: a C extension's import it stopped
        cause = signals.received()  # reports "ImportError: ... failed", not the Ctrl-C
        if cause is None:
            raise
        _stopped(cause)
    try:
        cli_main()
        done = SystemExit(0)
    except SystemExit as exc:
        done = exc
    finally:  # the command is done: a signal during the interpreter's shutdown changes nothing
        signals.ignore_from_now_on()
    _exit(done)
    raise done


def _stopped(exc: KeyboardInterrupt) -> NoReturn:
    """Start-up interrupted (Ctrl-C, SIGTERM, SIGHUP): one line and 130 (143, 129)."""
    from . import signals

    sys.stderr.write(f"cell2otf2: {signals.describe(exc)}\n")
    signals.forget_unhandled_interrupt()
    raise SystemExit(signals.exit_status(exc)) from None


def _exit(done: SystemExit) -> None:
    """End the process now with ``done``'s status, as the interpreter would after its teardown,
    which frees every module and array one by one (0.13-0.19 s of every command here): the
    command has written and closed all it writes, and the logging module's handlers are
    flushed here as its exit hook would. Returns, leaving the ordinary exit, where that
    teardown still has work: a status that is a message, output that cannot be flushed (a
    closed pipe: the interpreter reports it), a thread still running, or a library loaded
    that acts at exit (mpi4py finalizes MPI, matplotlib closes its figures, multiprocessing
    joins its children)."""
    status = 0 if done.code is None else done.code
    if not isinstance(status, int) or status < 0 or status > 255:
        return
    if any(name in sys.modules for name in ("mpi4py", "matplotlib", "multiprocessing")):
        return
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    logging = sys.modules.get("logging")
    if logging is not None:
        logging.shutdown()
    os._exit(status)


if __name__ == "__main__":
    main()
