"""Byte layout of CBT 1 (docs/format.md section 4): every structure of a dump declared once as an
explicit-endian numpy structured dtype for both byte orders, used both to decode and to encode
(the simulator writes through them), plus the slot codes as ``IntEnum``s; sizes are asserted at
import. It does not open files, does not check field values (``reader.py``) and does not
interpret time."""

from __future__ import annotations

from enum import IntEnum

import numpy as np

MAGIC = b"CBT1"
VERSION = 1
HEADER_SIZE = 64
SLOT_SIZE = 32
BYTE_ORDER_BIG = ord("B")
BYTE_ORDER_LITTLE = ord("L")
#: numpy byte-order prefix for each header ``byte_order`` value
NUMPY_ORDER = {BYTE_ORDER_BIG: ">", BYTE_ORDER_LITTLE: "<"}

DECR_MODULUS = 1 << 32
#: PS: problem-state area, LS: Local Store (docs/format.md 5.3)
LS_SIZE = 256 * 1024
PS_SIZE = 128 * 1024
#: offsets of the signal-notification registers inside a problem-state area (docs/format.md 5.3)
SIGNAL1_PS_OFFSET = 0x1400C
SIGNAL2_PS_OFFSET = 0x1C00C


class SlotClass(IntEnum):
    """``code >> 8`` of a slot."""

    PPE = 0x01
    SPE = 0x02
    CONTROL = 0x03


class PpeCode(IntEnum):
    """PPE record codes (docs/format.md 5.1)."""

    ENTER = 0x0101
    LEAVE = 0x0102
    CTX_CREATE = 0x0110
    CTX_LOAD = 0x0111
    CTX_RUN_BEGIN = 0x0112
    CTX_RUN_END = 0x0113
    CTX_DESTROY = 0x0114
    CTX_SWITCH = 0x0115
    IN_MBOX_WRITE_BEGIN = 0x0120
    IN_MBOX_WRITE_END = 0x0121
    OUT_MBOX_READ_BEGIN = 0x0122
    OUT_MBOX_READ_END = 0x0123
    OUT_INTR_MBOX_READ_BEGIN = 0x0124
    OUT_INTR_MBOX_READ_END = 0x0125
    SIGNAL_WRITE = 0x0126
    MPI_SEND = 0x0130
    MPI_RECV = 0x0131
    MPI_ISEND = 0x0132
    MPI_ISEND_COMPLETE = 0x0133
    MPI_IRECV_REQUEST = 0x0134
    MPI_IRECV = 0x0135
    MPI_COLL_BEGIN = 0x0136
    MPI_COLL_END = 0x0137
    COUNTER = 0x0140


class SpeCode(IntEnum):
    """SPE record codes (docs/format.md 5.2)."""

    ENTER = 0x0201
    LEAVE = 0x0202
    START = 0x0203
    EXIT = 0x0204
    DMA = 0x0210
    TAG_WAIT_BEGIN = 0x0211
    TAG_WAIT_END = 0x0212
    IN_MBOX_READ_BEGIN = 0x0220
    IN_MBOX_READ_END = 0x0221
    OUT_MBOX_WRITE_BEGIN = 0x0222
    OUT_MBOX_WRITE_END = 0x0223
    OUT_INTR_MBOX_WRITE_BEGIN = 0x0224
    OUT_INTR_MBOX_WRITE_END = 0x0225
    SIGNAL_READ_BEGIN = 0x0230
    SIGNAL_READ_END = 0x0231
    DECR_WRITE = 0x0240
    HEARTBEAT = 0x0250
    COUNTER = 0x0260


class ControlCode(IntEnum):
    """Control slot codes (docs/format.md 4.2)."""

    BLOCK = 0x0301
    GAP = 0x0302


class SwitchType(IntEnum):
    """``b`` of a CTX_SWITCH record."""

    START = 0
    STOP = 1


class StopReason(IntEnum):
    """``b`` of CTX_RUN_END (libspe2 stop reasons)."""

    EXIT = 1
    STOP_AND_SIGNAL = 2
    RUNTIME_EXCEPTION = 3
    RUNTIME_FATAL = 4
    CALLBACK_ERROR = 5
    ISOLATION_ERROR = 6


class WaitMode(IntEnum):
    """``a`` of TAG_WAIT_BEGIN."""

    IMMEDIATE = 0
    ANY = 1
    ALL = 2


class CollOp(IntEnum):
    """``op`` of MPI_COLL_END."""

    BARRIER = 0
    BCAST = 1
    GATHER = 2
    SCATTER = 3
    ALLGATHER = 4
    ALLTOALL = 5
    REDUCE = 6
    ALLREDUCE = 7
    REDUCE_SCATTER = 8
    SCAN = 9


ROOTLESS = 0xFFFFFFFF


class MfcOpcode(IntEnum):
    """MFC command opcodes the DMA record may carry (docs/format.md 5.3)."""

    PUT = 0x20
    PUTB = 0x21
    PUTF = 0x22
    PUTL = 0x24
    PUTLB = 0x25
    PUTLF = 0x26
    GET = 0x40
    GETB = 0x41
    GETF = 0x42
    GETL = 0x44
    GETLB = 0x45
    GETLF = 0x46
    SNDSIG = 0xA0
    SNDSIGB = 0xA1
    SNDSIGF = 0xA2


MFC_LIST_BIT = 0x04
MFC_OPCODES = frozenset(int(op) for op in MfcOpcode)


def is_get(opcode: int) -> bool:
    """True for the GET family (data flows into the issuing SPE's Local Store)."""
    return 0x40 <= opcode <= 0x46


def is_put(opcode: int) -> bool:
    """True for the PUT family (data flows out of the issuing SPE's Local Store)."""
    return 0x20 <= opcode <= 0x26


def is_sndsig(opcode: int) -> bool:
    """True for SNDSIG commands (write a signal-notification register)."""
    return 0xA0 <= opcode <= 0xA2


# --------------------------------------------------------------------------------------------
# dtypes. Each builder takes the numpy byte-order prefix (">" or "<").
# --------------------------------------------------------------------------------------------


def _dtype(order: str, fields: list[tuple[str, str, int]], itemsize: int) -> np.dtype:
    """Explicit-offset structured dtype; ``fields`` are (name, type without order, offset)."""
    names = [f[0] for f in fields]
    formats = []
    for _, typ, _ in fields:
        if typ.startswith(("S", "V")) or typ == "u1":
            formats.append(typ)
        else:
            formats.append(order + typ)
    offsets = [f[2] for f in fields]
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": itemsize})


def header_dtype(order: str) -> np.dtype:
    """File header (docs/format.md 4.1), 64 bytes."""
    return _dtype(
        order,
        [
            ("magic", "S4", 0),
            ("byte_order", "u1", 4),
            ("version", "u1", 5),
            ("header_size", "u2", 6),
            ("slot_size", "u2", 8),
            ("spe_buffer_records", "u2", 10),
            ("spe_buffers", "u1", 12),
            ("reserved0", "V3", 13),
            ("rank", "u4", 16),
            ("reserved1", "u4", 20),
            ("timebase_hz", "u8", 24),
            ("slots_reserved", "u8", 32),
            ("reserved2", "V24", 40),
        ],
        HEADER_SIZE,
    )


def code_dtype(order: str) -> np.dtype:
    """Just the code of any slot: the view used to classify slots."""
    return _dtype(order, [("code", "u2", 0)], SLOT_SIZE)


def ppe_dtype(order: str) -> np.dtype:
    """PPE record (class 0x01)."""
    return _dtype(
        order,
        [
            ("code", "u2", 0),
            ("thread", "u2", 2),
            ("a", "u4", 4),
            ("timebase", "u8", 8),
            ("b", "u8", 16),
            ("c", "u8", 24),
        ],
        SLOT_SIZE,
    )


def spe_dtype(order: str) -> np.dtype:
    """SPE record (class 0x02), only inside a block."""
    return _dtype(
        order,
        [
            ("code", "u2", 0),
            ("a", "u2", 2),
            ("decr", "u4", 4),
            ("b", "u8", 8),
            ("c", "u8", 16),
            ("d", "u8", 24),
        ],
        SLOT_SIZE,
    )


def block_dtype(order: str) -> np.dtype:
    """SPE block header (code 0x0301)."""
    return _dtype(
        order,
        [
            ("code", "u2", 0),
            ("ctx", "u2", 2),
            ("decr", "u4", 4),
            ("seq", "u4", 8),
            ("count", "u2", 12),
            ("buffer", "u1", 14),
            ("flags", "u1", 15),
            ("ticket", "u8", 16),
            ("reserved", "u8", 24),
        ],
        SLOT_SIZE,
    )


def gap_dtype(order: str) -> np.dtype:
    """GAP control slot (code 0x0302)."""
    return _dtype(
        order,
        [
            ("code", "u2", 0),
            ("reserved0", "u2", 2),
            ("reserved1", "u4", 4),
            ("lost", "u8", 8),
            ("first_ticket", "u8", 16),
            ("reserved2", "u8", 24),
        ],
        SLOT_SIZE,
    )


BLOCK_FLAG_LAST = 0x01


class Layout:
    """All dtypes of one byte order, built once."""

    def __init__(self, order: str) -> None:
        if order not in (">", "<"):
            raise ValueError(f"byte order must be '>' or '<', not {order!r}")
        self.order = order
        self.byte_order_code = BYTE_ORDER_BIG if order == ">" else BYTE_ORDER_LITTLE
        self.header = header_dtype(order)
        self.code = code_dtype(order)
        self.ppe = ppe_dtype(order)
        self.spe = spe_dtype(order)
        self.block = block_dtype(order)
        self.gap = gap_dtype(order)

    def new_header(self) -> np.ndarray:
        """A zeroed one-element header array with the constant fields set."""
        h = np.zeros(1, self.header)
        h["magic"] = MAGIC
        h["byte_order"] = self.byte_order_code
        h["version"] = VERSION
        h["header_size"] = HEADER_SIZE
        h["slot_size"] = SLOT_SIZE
        return h


BIG = Layout(">")
LITTLE = Layout("<")
LAYOUTS = {BYTE_ORDER_BIG: BIG, BYTE_ORDER_LITTLE: LITTLE}


for _layout in (BIG, LITTLE):
    assert _layout.header.itemsize == HEADER_SIZE
    for _dt in (_layout.code, _layout.ppe, _layout.spe, _layout.block, _layout.gap):
        assert _dt.itemsize == SLOT_SIZE, _dt
del _layout, _dt


def slot_class(codes: np.ndarray) -> np.ndarray:
    """Class (``code >> 8``) of every code in ``codes``."""
    return (np.asarray(codes, dtype=np.uint16) >> 8).astype(np.uint8)


PPE_CODES = frozenset(int(c) for c in PpeCode)
SPE_CODES = frozenset(int(c) for c in SpeCode)
CONTROL_CODES = frozenset(int(c) for c in ControlCode)
