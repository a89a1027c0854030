"""format.py: every slot kind encodes to and decodes from a hex literal, in both byte orders."""

import numpy as np
import pytest

from cell_otf2.input import format as fmt


def _hex(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", ""))


# (layout, dtype name, fields, hex)
CASES = [
    (
        fmt.BIG, "ppe",
        dict(code=0x0101, thread=2, a=0x11223344, timebase=0x0102030405060708, b=5, c=6),
        "0101 0002 11223344 0102030405060708 0000000000000005 0000000000000006",
    ),
    (
        fmt.LITTLE, "ppe",
        dict(code=0x0101, thread=2, a=0x11223344, timebase=0x0102030405060708, b=5, c=6),
        "0101 0200 44332211 0807060504030201 0500000000000000 0600000000000000",
    ),
    (
        fmt.BIG, "spe",
        dict(code=0x0210, a=0x40, decr=0xFFFFFFF0, b=0x1000, c=(0x200 << 32) | 0x4000, d=3),
        "0210 0040 FFFFFFF0 0000000000001000 0000020000004000 0000000000000003",
    ),
    (
        fmt.LITTLE, "spe",
        dict(code=0x0210, a=0x40, decr=0xFFFFFFF0, b=0x1000, c=(0x200 << 32) | 0x4000, d=3),
        "1002 4000 F0FFFFFF 0010000000000000 0040000000020000 0300000000000000",
    ),
    (
        fmt.BIG, "block",
        dict(code=0x0301, ctx=7, decr=0x89ABCDEF, seq=3, count=16, buffer=1, flags=1, ticket=42),
        "0301 0007 89ABCDEF 00000003 0010 01 01 000000000000002A 0000000000000000",
    ),
    (
        fmt.LITTLE, "block",
        dict(code=0x0301, ctx=7, decr=0x89ABCDEF, seq=3, count=16, buffer=1, flags=1, ticket=42),
        "0103 0700 EFCDAB89 03000000 1000 01 01 2A00000000000000 0000000000000000",
    ),
    (
        fmt.BIG, "gap",
        dict(code=0x0302, lost=9, first_ticket=100),
        "0302 0000 00000000 0000000000000009 0000000000000064 0000000000000000",
    ),
    (
        fmt.LITTLE, "gap",
        dict(code=0x0302, lost=9, first_ticket=100),
        "0203 0000 00000000 0900000000000000 6400000000000000 0000000000000000",
    ),
]


@pytest.mark.parametrize("layout,kind,fields,hexstr", CASES)
def test_slot_roundtrip(layout, kind, fields, hexstr):
    dtype = getattr(layout, kind)
    arr = np.zeros(1, dtype)
    for name, value in fields.items():
        arr[name] = value
    assert arr.tobytes() == _hex(hexstr)
    back = np.frombuffer(_hex(hexstr), dtype)
    for name, value in fields.items():
        assert int(back[name][0]) == value, name
    assert int(np.frombuffer(_hex(hexstr), layout.code)["code"][0]) == fields["code"]


@pytest.mark.parametrize("layout", [fmt.BIG, fmt.LITTLE])
def test_header_roundtrip(layout):
    h = layout.new_header()
    h["spe_buffer_records"] = 16
    h["spe_buffers"] = 2
    h["rank"] = 3
    h["timebase_hz"] = 14318000
    h["slots_reserved"] = 1000
    raw = h.tobytes()
    assert len(raw) == fmt.HEADER_SIZE
    if layout is fmt.BIG:
        expect = (
            "43425431 42 01 0040 0020 0010 02 000000 00000003 00000000 0000000000DA79B0"
            "00000000000003E8" + "00" * 24
        )
    else:
        expect = (
            "43425431 4C 01 4000 2000 1000 02 000000 03000000 00000000 B079DA0000000000"
            "E803000000000000" + "00" * 24
        )
    assert raw == _hex(expect)
    back = np.frombuffer(raw, layout.header)[0]
    assert back["magic"] == fmt.MAGIC
    assert int(back["timebase_hz"]) == 14318000
    assert int(back["rank"]) == 3


def test_codes_classes():
    assert all(c >> 8 == fmt.SlotClass.PPE for c in fmt.PpeCode)
    assert all(c >> 8 == fmt.SlotClass.SPE for c in fmt.SpeCode)
    assert all(c >> 8 == fmt.SlotClass.CONTROL for c in fmt.ControlCode)
    codes = np.array([0x0101, 0x0210, 0x0302], dtype=np.uint16)
    assert list(fmt.slot_class(codes)) == [1, 2, 3]


def test_opcode_families():
    assert fmt.is_get(fmt.MfcOpcode.GETL) and not fmt.is_put(fmt.MfcOpcode.GETL)
    assert fmt.is_put(fmt.MfcOpcode.PUTF) and fmt.is_sndsig(fmt.MfcOpcode.SNDSIGB)
    assert fmt.MfcOpcode.GETL & fmt.MFC_LIST_BIT and not fmt.MfcOpcode.GET & fmt.MFC_LIST_BIT
