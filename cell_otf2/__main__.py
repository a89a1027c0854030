"""``python -m cell_otf2`` and the ``cell2otf2`` command: installs the signal handling before
anything heavy is imported (so Ctrl-C or SIGTERM during start-up is one message and 130/143,
not a traceback), keeps OpenBLAS to one thread unless the environment says otherwise
(``process_setup``, before numpy is imported), then runs the command line (``cli.main``).
Nothing else.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    """Console entry point."""
    try:
        from . import signals
        from .process_setup import one_blas_thread
    except KeyboardInterrupt:  # Ctrl-C before any handler is in place: nothing was done
        sys.stderr.write("cell2otf2: interrupted\n")
        raise SystemExit(130) from None

    one_blas_thread(os.environ)  # before anything imports numpy
    signals.install()
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt as exc:
        sys.stderr.write(f"cell2otf2: {signals.describe(exc)}\n")
        signals.forget_unhandled_interrupt()
        raise SystemExit(signals.exit_status(exc)) from None
    try:
        cli_main()
    finally:  # the command is done: a signal during the interpreter's shutdown changes nothing
        signals.ignore_from_now_on()


if __name__ == "__main__":
    main()
