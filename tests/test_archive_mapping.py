"""The archive as Score-P users know it, read back with the otf2 reader: SPE groups under the
chip that ran them, one region per context run on the PPE, numeric location properties, balanced
Enter/Leave in damaged runs, the DMA window created and destroyed where it is used, "MPI Rank N"
groups, and what ViTE prints for our communicators (docs/archive.md)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import otf2
import pytest
from otf2check import otf2_print_ok  # noqa: E402

from cell_otf2.input import format as fmt  # noqa: E402
from cell_otf2.run.conversion import convert  # noqa: E402

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    """sample name -> (anchor, summary), converted once."""
    out = {}
    root = tmp_path_factory.mktemp("mapping")
    for name in ("fft-16spe", "damaged-gap-truncate", "two-nodes-hybrid"):
        anchor = root / name / "a.otf2"
        out[name] = (anchor, convert(SAMPLES / name, anchor))
        otf2_print_ok(anchor)
    return out


def _events(anchor: Path) -> dict[str, list]:
    """location name -> its events in order."""
    per: dict[str, list] = defaultdict(list)
    with otf2.reader.open(str(anchor)) as trace:
        for location, event in trace.events:
            per[location.name].append(event)
    return per


def _switch_run_on_chip1(tmp_path: Path) -> Path:
    """context-switch-restored (8 contexts on SPUs 0..3 of chip 0) with every CTX_SWITCH of
    context 1 naming SPU 12, an SPU of chip 1 (8 SPEs per chip)."""
    run = tmp_path / "run"
    shutil.copytree(SAMPLES / "context-switch-restored", run)
    dump = run / "rank00000.cbt"
    raw = bytearray(dump.read_bytes())
    lay = fmt.LAYOUTS[raw[4]]  # the header's byte_order (docs/format.md 4.1)
    n = (len(raw) - fmt.HEADER_SIZE) // fmt.SLOT_SIZE
    slots = np.frombuffer(raw, lay.ppe, count=n, offset=fmt.HEADER_SIZE).copy()
    mine = (slots["code"] == fmt.PpeCode.CTX_SWITCH) & (slots["a"] == 1)
    assert mine.sum() >= 2
    low = slots["c"][mine] & np.uint64(0xFFFFFFFF)
    slots["c"][mine] = (np.uint64(12) << np.uint64(32)) | low
    raw[fmt.HEADER_SIZE:fmt.HEADER_SIZE + n * fmt.SLOT_SIZE] = slots.tobytes()
    dump.write_bytes(bytes(raw))
    return run


def test_spe_groups_hang_below_the_chip_whose_spu_ran_them(tmp_path):
    anchor = tmp_path / "a.otf2"
    convert(_switch_run_on_chip1(tmp_path), anchor)
    otf2_print_ok(anchor)
    with otf2.reader.open(str(anchor)) as trace:
        d = trace.definitions
        chip_of = {loc.name: loc.group.system_tree_parent.name for loc in d.locations
                   if loc.name.startswith("SPE ctx")}
        parents = {g.system_tree_parent.name for g in d.location_groups}
        complexes = [n.name for n in d.system_tree_nodes if n.class_name == "spe complex"]
        groups = {g.name: g.location_group_type for g in d.location_groups}
    assert chip_of["SPE ctx 1 (rank 0)"] == "qs20-a chip 1 SPE complex"
    assert {chip_of[f"SPE ctx {c} (rank 0)"] for c in (0, 2, 3, 4, 5, 6, 7)} \
        == {"qs20-a chip 0 SPE complex"}
    assert sorted(complexes) == ["qs20-a chip 0 SPE complex", "qs20-a chip 1 SPE complex"]
    assert set(complexes) <= parents  # no empty chip row in a viewer
    assert "SPEs (rank 0, chip 1)" in groups and "SPEs (rank 0, chip 0)" in groups


def test_contexts_whose_spu_no_record_names_hang_below_the_node(archives):
    # fft-16spe: 16 contexts, no context switch, so no record says which chip ran them
    anchor, _ = archives["fft-16spe"]
    with otf2.reader.open(str(anchor)) as trace:
        d = trace.definitions
        complexes = [n for n in d.system_tree_nodes if n.class_name == "spe complex"]
        spe_groups = [g for g in d.location_groups if g.name.startswith("SPEs")]
    assert complexes == []  # no empty "chip 1" (nor an unfounded "chip 0")
    assert [(g.name, g.system_tree_parent.name) for g in spe_groups] \
        == [("SPEs (rank 0)", "qs20-a")]


def test_location_groups_named_as_score_p_names_them(archives):
    anchor, _ = archives["two-nodes-hybrid"]
    with otf2.reader.open(str(anchor)) as trace:
        names = [g.name for g in trace.definitions.location_groups
                 if str(g.location_group_type).endswith("PROCESS")]
    assert names == [f"MPI Rank {r}" for r in range(4)]


def test_one_region_per_context_run_on_the_ppe(archives):
    # the samples' manifests declare the PPE region "spe_context_run" (the tracer's
    # ENTER/LEAVE around the call): CTX_RUN_BEGIN/END must not nest a second one inside it
    anchor, _ = archives["fft-16spe"]
    with otf2.reader.open(str(anchor)) as trace:
        regions = [r.name for r in trace.definitions.regions]
    assert regions.count("spe_context_run") == 1
    assert not [r for r in regions if r.startswith("spe_context_run ")]
    for loc, events in _events(anchor).items():
        if not loc.startswith("PPE"):
            continue
        depth = 0
        for ev in events:
            name = getattr(getattr(ev, "region", None), "name", None)
            if name != "spe_context_run":
                continue
            depth += 1 if type(ev).__name__ == "Enter" else -1
            assert depth in (0, 1), f"{loc}: spe_context_run nested in itself"
    runs = Counter(loc for loc, events in _events(anchor).items() for ev in events
                   if type(ev).__name__ == "Enter" and ev.region.name == "spe_context_run")
    assert sum(runs.values()) == 16  # one per context run


def test_numeric_location_properties(archives):
    anchor, _ = archives["fft-16spe"]
    with otf2.reader.open(str(anchor)) as trace:
        props = [(p.location.name, p.name, str(p.type), p.value)
                 for p in trace.definitions.location_properties]
    bounds = [p for p in props if p[1] == "cell2otf2::sync_bound_ticks"]
    assert len(bounds) == 16
    for _, _, typ, value in bounds:
        # 0 is possible: exact slot order can pin an interval
        assert typ.endswith("DOUBLE") and isinstance(value, float) and 0 <= value < 100
    strings = {p[1] for p in props if p[2].endswith("STRING")}
    assert strings == {"cell2otf2::pseudo_location", "cell2otf2::sync_intervals"}


def _nesting(events: list) -> tuple[int, int, list[str]]:
    """(Enters, Leaves, problems) of one location's events."""
    stack: list[str] = []
    problems = []
    n_enter = n_leave = 0
    for ev in events:
        kind = type(ev).__name__
        if kind == "Enter":
            n_enter += 1
            stack.append(ev.region.name)
        elif kind == "Leave":
            n_leave += 1
            if not stack or stack[-1] != ev.region.name:
                problems.append(f"Leave {ev.region.name} at {ev.time} with {stack} open")
                if ev.region.name in stack:
                    while stack.pop() != ev.region.name:
                        pass
            else:
                stack.pop()
    if stack:
        problems.append(f"{stack} open at the end")
    return n_enter, n_leave, problems


@pytest.mark.parametrize("name", ["damaged-gap-truncate", "fft-16spe", "two-nodes-hybrid"])
def test_enter_leave_balanced_and_nested_per_location(archives, name):
    anchor, summary = archives[name]
    for loc, events in _events(anchor).items():
        n_enter, n_leave, problems = _nesting(events)
        assert n_enter == n_leave and not problems, (loc, n_enter, n_leave, problems[:3])
    repairs = [line for line in summary.damage
               if line.startswith(("unclosed_region", "leave_without_enter"))]
    if name == "damaged-gap-truncate":
        # the GAP and the cut file lose ENTER and LEAVE records: what is still open at a
        # location's end is closed at its last event, a Leave whose Enter was lost is not
        # written, and both are counted
        assert any(line.startswith("unclosed_region: 18 regions") for line in repairs), repairs
        assert any(line.startswith("leave_without_enter: 1 Leave") for line in repairs)
        assert all(len(line) <= 100 for line in repairs)
    else:
        assert repairs == []


def test_damaged_run_regions_closed_at_the_last_event(archives):
    anchor, _ = archives["damaged-gap-truncate"]
    events = _events(anchor)["PPE thread 1 (rank 0)"]
    last = max(ev.time for ev in events)
    leaves = [ev for ev in events if type(ev).__name__ == "Leave"]
    assert leaves and all(ev.time == last for ev in leaves[-1:])


def test_dma_window_created_and_destroyed_where_it_is_used(archives):
    anchor, _ = archives["fft-16spe"]
    users = 0
    for loc, events in _events(anchor).items():
        kinds = [type(ev).__name__ for ev in events]
        if "RmaGet" in kinds or "RmaPut" in kinds:
            users += 1
            assert kinds[0] == "RmaWinCreate" and kinds[-1] == "RmaWinDestroy", loc
            assert kinds.count("RmaWinCreate") == kinds.count("RmaWinDestroy") == 1
            assert events[0].win.name == events[-1].win.name == "DMA"
            assert events[0].time == min(ev.time for ev in events)
            assert events[-1].time == max(ev.time for ev in events)
        else:
            assert "RmaWinCreate" not in kinds and "RmaWinDestroy" not in kinds, loc
    assert users == 16


_WARNING = re.compile(r"^Warning: cannot find rank (\d+) in communicator (\d+)$")


def test_vite_warnings_are_vite_s_own(archives, tmp_path):
    """ViTE 1.2 keeps only COMM_LOCATIONS groups ("New comm group ... Not yet implemented"
    for every COMM_GROUP) and looks a communicator's group up among them: so for every
    point-to-point event of an archive that follows the OTF2 standard (a Comm's group is a
    COMM_GROUP of positions in the paradigm's COMM_LOCATIONS group, as Score-P writes it) it
    prints "cannot find rank R in communicator C" and takes R as the location ref. One
    warning per message event, none else of that kind: nothing in our definitions is
    missing (docs/archive.md, section 15)."""
    vite = shutil.which("vite")
    if vite is None:
        pytest.skip("ViTE (Debian package vite) is not installed")
    anchor, _ = archives["fft-16spe"]
    run = subprocess.run([vite, str(anchor), "-e", str(tmp_path / "a.svg")],
                         capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, QT_QPA_PLATFORM="offscreen"))
    lines = (run.stdout + run.stderr).splitlines()
    warnings = [m.groups() for m in map(_WARNING.match, lines) if m]
    messages = Counter()
    with otf2.reader.open(str(anchor)) as trace:
        comm_ref = {c.name: c._ref for c in trace.definitions.comms}
        for _, ev in trace.events:
            if type(ev).__name__ in ("MpiSend", "MpiRecv", "MpiIsend", "MpiIrecv"):
                peer = ev.receiver if hasattr(ev, "receiver") else ev.sender
                messages[str(peer), str(comm_ref[ev.communicator.name])] += 1
    assert Counter(warnings) == messages  # 1184 on this sample: 592 name rank 0
    assert len(warnings) == 1184 and Counter(w[0] for w in warnings)["0"] == 592
    # one per group ViTE does not keep: our 3 COMM_GROUPs, the region groups MPI and Cell
    # and MPI_COMM_SELF's group
    assert sum("Not yet implemented" in line for line in lines) == 6
    text = (DOCS / "archive.md").read_text()
    assert "cannot find rank" in text and "COMM_GROUP" in text


def test_region_left_open_inside_another_is_closed_at_its_leave(tmp_path):
    """The minirun's OUT_MBOX_READ_END made unreadable (an undefined code): the PPE thread's
    spe_out_mbox_read is still open when the enclosing spe_context_run is left (CTX_RUN_END;
    the minirun's manifest declares no such region); it is closed right before that Leave,
    at its time, and counted."""
    import minirun

    run = tmp_path / "run"
    minirun.build(run)
    dump = run / "rank00000.cbt"
    raw = bytearray(dump.read_bytes())
    lay = fmt.LAYOUTS[raw[4]]
    n = (len(raw) - fmt.HEADER_SIZE) // fmt.SLOT_SIZE
    slots = np.frombuffer(raw, lay.ppe, count=n, offset=fmt.HEADER_SIZE).copy()
    (at,) = np.flatnonzero(slots["code"] == fmt.PpeCode.OUT_MBOX_READ_END)
    slots["code"][at] = 0x01EE
    raw[fmt.HEADER_SIZE:fmt.HEADER_SIZE + n * fmt.SLOT_SIZE] = slots.tobytes()
    dump.write_bytes(bytes(raw))
    anchor = tmp_path / "a.otf2"
    summary = convert(run, anchor)
    otf2_print_ok(anchor)
    events = _events(anchor)["PPE thread 0 (rank 0)"]
    n_enter, n_leave, problems = _nesting(events)
    assert n_enter == n_leave and not problems, problems
    names = [(type(ev).__name__, getattr(getattr(ev, "region", None), "name", None))
             for ev in events]
    at = names.index(("Leave", "spe_out_mbox_read"))
    assert names[at + 1] == ("Leave", "spe_context_run")
    assert events[at].time == events[at + 1].time
    assert any(line.startswith("unclosed_region: 1 region") for line in summary.damage)
