"""What ``cell_otf2/writer/otf2_internals.py`` assumes about the OTF2 Python bindings beyond
their public functions, checked against the installed bindings: each test names the
assumption, so a release of the bindings that breaks one fails here, not as a wrong archive or
a crash in the middle of a conversion."""

from __future__ import annotations

import ctypes
import sys

import _otf2
import otf2
import pytest

from cell_otf2.writer import otf2_internals


def test_library_path_names_the_library_the_bindings_loaded():
    """``_otf2.Config.lib_path()`` is the file the bindings loaded their handle from."""
    assert hasattr(_otf2, "Config") and callable(getattr(_otf2.Config, "lib_path", None)), \
        "the bindings no longer have _otf2.Config.lib_path(): find the library another way"
    for name in ("OTF2_Archive_Open", "OTF2_EvtWriter_Enter",
                 "OTF2_GlobalEvtReaderCallbacks_SetEnterCallback"):
        theirs = ctypes.cast(getattr(_otf2.conf.lib, name), ctypes.c_void_p).value
        assert otf2_internals.function_address(name) == theirs, \
            f"{name}: our handle of {otf2_internals.library_path()} is another library"


def test_c_functions_are_our_own_objects():
    """Setting argtypes on a function fetched here leaves the bindings' (and other callers')
    function objects alone."""
    fn = otf2_internals.c_function("OTF2_Archive_SetFlushCallbacks")
    assert fn is not otf2_internals.c_function("OTF2_Archive_SetFlushCallbacks")
    assert fn is not _otf2.conf.lib.OTF2_Archive_SetFlushCallbacks
    kept = otf2_internals.c_function("OTF2_EvtWriter_Enter", keep_gil=True)
    assert isinstance(otf2_internals.c_library(True), ctypes.PyDLL)
    assert ctypes.cast(kept, ctypes.c_void_p).value == \
        otf2_internals.function_address("OTF2_EvtWriter_Enter")


def test_definitions_read_back_carry_their_ref(tmp_path):
    """otf2's definition objects keep their reference number in ``_ref`` (no public accessor),
    as read back by ``otf2.reader``: locations, regions, communicators and group members."""
    from otf2.enums import GroupType, Paradigm, RegionRole

    anchor = tmp_path / "t.otf2"
    with otf2.writer.open(str(tmp_path), "t", timer_resolution=1) as trace:
        node = trace.definitions.system_tree_node("node")
        group = trace.definitions.location_group("process", system_tree_parent=node)
        locations = [trace.definitions.location(f"thread {i}", group=group) for i in range(3)]
        region = trace.definitions.region("work", region_role=RegionRole.FUNCTION,
                                          paradigm=Paradigm.USER)
        members = trace.definitions.group("everyone", group_type=GroupType.COMM_LOCATIONS,
                                          paradigm=Paradigm.MPI, members=locations)
        trace.definitions.comm("world", group=members)
        for i, location in enumerate(locations):
            writer = trace.event_writer_from_location(location)
            writer.enter(i + 1, region)
            writer.leave(i + 2, region)
    with otf2.reader.open(str(anchor)) as back:
        defs = back.definitions
        assert [otf2_internals.definition_ref(loc) for loc in defs.locations] == [0, 1, 2]
        assert [otf2_internals.definition_ref(r) for r in defs.regions] == [0]
        [comm] = list(defs.comms)
        assert otf2_internals.definition_ref(comm) == 0
        assert [otf2_internals.definition_ref(m) for m in comm.group.members] == [0, 1, 2]
        assert all(defs.locations[otf2_internals.definition_ref(loc)] is loc
                   for loc in defs.locations), "a ref does not find its own definition"


def test_importing_the_module_loads_no_bindings():
    import subprocess

    code = ("import sys, cell_otf2.writer.otf2_internals\n"
            "print(sorted(m for m in ('_otf2', 'otf2') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("name", ["OTF2_Error_RegisterCallback",
                                  "OTF2_Archive_SetLockingCallbacks"])
def test_the_c_functions_called_without_the_bindings_exist(name):
    assert otf2_internals.function_address(name) != 0
