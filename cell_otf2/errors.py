"""Domain exceptions and the exit status each maps to (README: Command line); a ``FormatError``
carries the file, the slot index or byte offset, the field, what was expected and what was
found. The CLI turns each exception into one message and an exit status, and any other
exception into an internal error (``EXIT_SOFTWARE``); nothing here prints or exits."""

from __future__ import annotations

from pathlib import Path

EXIT_OK = 0
EXIT_LOSSY = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_OUTPUT = 4
#: an unexpected exception: a bug in cell2otf2, not a problem of the input (sysexits.h's
#: EX_SOFTWARE); ``--debug`` or ``CELL2OTF2_DEBUG=1`` prints its traceback
EXIT_SOFTWARE = 70


class CellOtf2Error(Exception):
    """Base of every error the CLI reports as one message and its exit status."""

    exit_status = EXIT_INPUT
    #: raised on a process of a parallel conversion because another one failed (and printed
    #: the message): the CLI exits with the status without printing it again
    secondary = False


class FormatError(CellOtf2Error):
    """Input unreadable or not CBT 1."""

    exit_status = EXIT_INPUT

    def __init__(
        self,
        file: str | Path,
        message: str,
        *,
        slot: int | None = None,
        offset: int | None = None,
        field: str | None = None,
        expected: object = None,
        found: object = None,
    ) -> None:
        self.file = str(file)
        self.slot = slot
        self.offset = offset
        self.field = field
        self.expected = expected
        self.found = found
        self.detail = message
        #: further refusals of the same run found independently (``check`` lists them all)
        self.more: list[FormatError] = []
        super().__init__(self._render())

    def _render(self) -> str:
        where = [self.file]
        if self.slot is not None:
            where.append(f"slot {self.slot}")
        if self.offset is not None:
            where.append(f"byte offset {self.offset}")
        text = ", ".join(where) + ": "
        if self.field is not None:
            text += f"field '{self.field}': "
        text += self.detail
        if self.expected is not None or self.found is not None:
            text += f" (expected {self.expected}, found {self.found})"
        return text


class OutputError(CellOtf2Error):
    """The archive cannot be written (exists, not writable, library failure)."""

    exit_status = EXIT_OUTPUT

    def __init__(self, message: str, *, no_space: bool = False) -> None:
        super().__init__(message)
        #: the device is full (or over quota): the output layer says how much room is needed
        self.no_space = no_space


class UsageError(CellOtf2Error):
    """Wrong command-line usage that typer itself cannot catch."""

    exit_status = EXIT_USAGE
