"""Signals a user or a batch system sends: SIGTERM and SIGHUP become ``Terminated``, a kind of
``KeyboardInterrupt``, so every clean-up that runs after Ctrl-C (removing the staging
directory, restoring an archive being replaced) runs for them too; ``exit_status`` gives the
shell's 128 + signal number. It only installs handlers and names statuses; the commands
print the message.
"""

from __future__ import annotations

import os
import signal
from types import FrameType

#: exit status after Ctrl-C (128 + SIGINT)
EXIT_INTERRUPTED = 128 + signal.SIGINT


class Terminated(KeyboardInterrupt):
    """The process was asked to stop by ``signal_number`` (SIGTERM, SIGHUP)."""

    def __init__(self, signal_number: int) -> None:
        super().__init__(signal_number)
        self.signal_number = signal_number


#: a signal that lands in the import system's module-lock weakref callback (where an
#: exception is printed as "Exception ignored" and lost) is sent again this much later
_REDELIVER_S = 0.02


#: the first signal turned into an exception (``received``), or None
_first: list[int | None] = [None]


def _interruption(signal_number: int) -> KeyboardInterrupt:
    """The exception ``signal_number`` is raised as (noted for ``received``)."""
    if _first[0] is None:
        _first[0] = signal_number
    return KeyboardInterrupt() if signal_number == signal.SIGINT else Terminated(signal_number)


def _raise_terminated(signal_number: int, frame: FrameType | None) -> None:
    if (frame is not None and frame.f_code.co_name == "cb"
            and frame.f_code.co_filename.startswith("<frozen importlib")):
        import threading  # only here: every start-up imports this module first

        later = threading.Timer(_REDELIVER_S, os.kill, (os.getpid(), signal_number))
        later.daemon = True  # never delays or interrupts the interpreter's own exit
        later.start()
        return
    raise _interruption(signal_number)


def install() -> None:
    """Turn SIGTERM and SIGHUP into ``Terminated`` and keep Ctrl-C a ``KeyboardInterrupt``,
    in this (main) thread, neither of them raised inside the import system."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler, None):
            signal.signal(sig, _raise_terminated)


def received() -> KeyboardInterrupt | None:
    """The interruption the first signal raised (``Terminated`` or ``KeyboardInterrupt``),
    or None when none was. An exception that code raised while it was interrupted may have
    lost the interruption itself: a C extension whose import Ctrl-C stopped reports
    "ImportError: initialization failed", for instance."""
    first = _first[0]
    return None if first is None else _interruption(first)


def exit_status(exc: BaseException | None) -> int:
    """128 + the signal behind ``exc`` (SIGINT for a plain ``KeyboardInterrupt``)."""
    if isinstance(exc, Terminated):
        return 128 + exc.signal_number
    return EXIT_INTERRUPTED


def describe(exc: BaseException | None) -> str:
    """``interrupted``, with the signal's name when it was not Ctrl-C."""
    if isinstance(exc, Terminated):
        return f"interrupted ({signal.Signals(exc.signal_number).name})"
    return "interrupted"


class Deferred:
    """Within ``with Deferred() as d:`` Ctrl-C, SIGTERM and SIGHUP are only noted; ``d.check()``
    (call it where stopping is safe, e.g. between batches of library callbacks) and leaving the
    block raise what was noted. For C libraries that call back into Python: an exception
    raised inside a callback is lost in the library or printed as a traceback by ctypes."""

    _SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.noted: int | None = None
        self._previous: dict[int, object] = {}

    def _note(self, signal_number: int, _frame: object) -> None:
        if self.noted is None:
            self.noted = signal_number

    def __enter__(self) -> Deferred:
        try:
            for sig in self._SIGNALS:
                if signal.getsignal(sig) is not signal.SIG_IGN:  # ignored stays ignored
                    self._previous[sig] = signal.signal(sig, self._note)
        except ValueError:  # not the main thread: signals cannot be handled here anyway
            self._restore()
        return self

    def check(self) -> None:
        if self.noted is not None:
            noted, self.noted = self.noted, None
            raise _interruption(noted)

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def __exit__(self, *exc: object) -> None:
        self._restore()
        if exc[0] is None:
            self.check()


def ignore_from_now_on() -> None:
    """Ignore Ctrl-C, SIGTERM and SIGHUP from here on: called once the command has finished,
    so that a signal arriving while the interpreter shuts down neither kills the process
    with the signal (status -2) nor prints a traceback; the exit status is already decided."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(sig, signal.SIG_IGN)
        except (ValueError, OSError):  # not the main thread
            pass


def forget_unhandled_interrupt() -> None:
    """Tell the interpreter that the last KeyboardInterrupt was handled. CPython remembers a
    KeyboardInterrupt that escaped code run through ``PyRun_*`` (some C extensions run Python
    code that way while they are imported) and then ends the process with SIGINT at exit
    (status -2) even after it was handled; running any code through ``PyRun_SimpleString``
    clears that mark. Called once the interruption is reported."""
    try:
        import ctypes

        ctypes.pythonapi.PyRun_SimpleString(b"pass")
    except (ImportError, AttributeError, OSError):
        pass
