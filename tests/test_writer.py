"""writer: a hand-built archive with every Ev kind reads back exactly as written.

The scenario is tests/writer_samples.py's: two MPI processes on two nodes, every Ev kind.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from otf2check import otf2_print_ok, read_events, vite_render
from write_ceilings import write_ceiling
from writer_samples import (
    LOC_NAMES,
    MEM,
    PPE0,
    PPE1,
    REGIONS,
    SPE,
    R,
    sample_defs,
    sample_events,
)

from cell_otf2.errors import OutputError
from cell_otf2.model import (
    EVENT_DTYPE,
    Ev,
    Location,
    LocationProperty,
    LocationType,
    Paradigm,
    SystemNode,
    SystemNodeDomain,
)
from cell_otf2.writer import events as writer_events
from cell_otf2.writer.archive import write_archive
from cell_otf2.writer.checks import WriterInputError
from cell_otf2.writer.open_archive import (
    MAX_DEF_CHUNK_BYTES,
    MIN_DEF_CHUNK_BYTES,
    definition_chunk_bytes,
)

#: reader event class of each Ev
READER_CLASS = {
    Ev.ENTER: "Enter", Ev.LEAVE: "Leave", Ev.MPI_SEND: "MpiSend", Ev.MPI_RECV: "MpiRecv",
    Ev.MPI_ISEND: "MpiIsend", Ev.MPI_ISEND_COMPLETE: "MpiIsendComplete",
    Ev.MPI_IRECV_REQUEST: "MpiIrecvRequest", Ev.MPI_IRECV: "MpiIrecv",
    Ev.MPI_COLL_BEGIN: "MpiCollectiveBegin", Ev.MPI_COLL_END: "MpiCollectiveEnd",
    Ev.RMA_GET: "RmaGet", Ev.RMA_PUT: "RmaPut",
    Ev.RMA_OP_COMPLETE_BLOCKING: "RmaOpCompleteBlocking", Ev.METRIC: "Metric",
    Ev.ENTER_OFF_SPU: "Enter", Ev.RMA_WIN_CREATE: "RmaWinCreate",
    Ev.RMA_WIN_DESTROY: "RmaWinDestroy", Ev.PROGRAM_BEGIN: "ProgramBegin",
    Ev.PROGRAM_END: "ProgramEnd",
}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("archive")
    defs, events = sample_defs(), sample_events()
    seen: list[int] = []
    stats = write_archive(defs, events, out, "trace", progress=seen.append)
    anchor = out / "trace.otf2"
    return defs, events, stats, anchor, read_events(anchor), seen


def test_every_ev_kind_is_covered():
    assert set(np.unique(sample_events()["type"]).tolist()) == {int(e) for e in Ev}


def test_archive_entries_and_otf2_print(written):
    _, _, _, anchor, _, _ = written
    assert anchor.is_file()
    assert (anchor.parent / "trace.def").is_file()
    assert (anchor.parent / "trace").is_dir()
    otf2_print_ok(anchor)


def test_counts_per_location_and_kind(written):
    _, events, stats, _, back, seen = written
    expected = Counter(
        (LOC_NAMES[loc], READER_CLASS[Ev(ty)])
        for loc, ty in zip(events["loc"].tolist(), events["type"].tolist(), strict=True)
    )
    assert back.counts == expected
    assert stats.events_per_location.tolist() == [21, 15, 17, 0]
    assert stats.n_events == len(events) == 53
    assert stats.events_per_type[Ev.ENTER] == 6 + 5 + 4
    assert stats.events_per_type[Ev.ENTER_OFF_SPU] == 1
    assert sum(stats.events_per_type.values()) == len(events)
    assert seen == [53]  # fewer than PROGRESS_EVENTS: once, at the end


def test_timestamps_per_location(written):
    _, events, _, _, back, _ = written
    for loc, name in enumerate(LOC_NAMES):
        assert back.times[name] == events["time"][events["loc"] == loc].tolist()


def test_messages_match_in_order(written):
    back = written[4]
    assert back.unmatched_sends == [] and back.unmatched_recvs == []
    got = sorted((m.comm, m.sender, m.receiver, m.tag, m.length, m.send_time, m.recv_time,
                  m.send_kind, m.recv_kind) for m in back.messages)
    assert got == sorted([
        ("Cell mailboxes", LOC_NAMES[PPE0], LOC_NAMES[SPE], 1, 4, 125, 160, "MpiSend", "MpiRecv"),
        ("MPI_COMM_WORLD", LOC_NAMES[PPE0], LOC_NAMES[PPE1], 42, 1024, 205, 215, "MpiSend",
         "MpiRecv"),
        ("MPI_COMM_WORLD", LOC_NAMES[PPE0], LOC_NAMES[PPE1], 43, 8, 221, 226, "MpiIsend",
         "MpiIrecv"),
    ])
    isend, = back.of_kind("MpiIsend")
    irecv, = back.of_kind("MpiIrecv")
    assert isend.fields["request_id"] == 7 and irecv.fields["request_id"] == 9
    assert back.of_kind("MpiIsendComplete")[0].fields["request_id"] == 7
    assert back.of_kind("MpiIrecvRequest")[0].fields["request_id"] == 9


def test_rma_operations_and_dma_attributes(written):
    back = written[4]
    assert back.unmatched_completions == []
    ops = {op.matching_id: op for op in back.rma}
    assert set(ops) == {1, 2}
    get, put = ops[1], ops[2]
    assert (get.kind, get.loc, get.win, get.remote, get.bytes) == (
        "RmaGet", LOC_NAMES[SPE], "DMA (rank 0)", LOC_NAMES[MEM], 16384)
    assert (get.issue_time, get.complete_time) == (170, 190)
    assert get.attrs == {"DMA tag": 5, "MFC opcode": 0x40, "list elements": 0,
                         "EA": 0x10000000, "LS address": 0x4000}
    assert (put.kind, put.bytes, put.issue_time, put.complete_time) == ("RmaPut", 128, 175, 190)
    assert put.attrs == {"DMA tag": 6, "MFC opcode": 0x24, "list elements": 3,
                         "EA": 0x20000, "LS address": 0x8000}


def test_off_spu_attribute_only_on_its_enter(written):
    back = written[4]
    with_attrs = [e for e in back.events if e.attrs and not e.kind.startswith("Rma")]
    assert len(with_attrs) == 1
    off, = with_attrs
    assert (off.loc, off.kind, off.time, off.fields["region"]) == (
        LOC_NAMES[SPE], "Enter", 250, "off SPU")
    assert off.attrs == {"physical SPU": 3}


def test_collectives_and_metric(written):
    back = written[4]
    ends = back.of_kind("MpiCollectiveEnd")
    assert [(e.loc, e.time) for e in ends] == [(LOC_NAMES[PPE0], 310), (LOC_NAMES[PPE1], 312)]
    for end in ends:
        assert end.fields["collective_op"] == "ALLREDUCE"
        assert end.fields["communicator"] == "MPI_COMM_WORLD"
        assert end.fields["root"] == 0xFFFFFFFF  # OTF2_UNDEFINED_UINT32: no root
        assert (end.fields["size_sent"], end.fields["size_received"]) == (8, 16)
    metric, = back.of_kind("Metric")
    assert (metric.loc, metric.time, metric.fields["values"]) == (LOC_NAMES[PPE0], 110, [12345])
    assert back.defs.metrics == ["PPE cycles"]


def test_clock_properties_exactly_as_given(written):
    assert written[4].defs.clock == {
        "timer_resolution": 14_318_000, "global_offset": 100, "trace_length": 300,
        "realtime_timestamp": 1_600_000_000_123_456_789,
    }


def test_locations_groups_and_system_tree(written):
    defs = written[4].defs
    # location ref = index, names exactly as given, group ref = index of ArchiveDefs
    assert defs.locations == [
        (LOC_NAMES[PPE0], "CPU_THREAD", "MPI rank 0", 0, 21),
        (LOC_NAMES[PPE1], "CPU_THREAD", "MPI rank 1", 1, 15),
        (LOC_NAMES[SPE], "ACCELERATOR_STREAM", "SPEs (rank 0)", 2, 17),
        (LOC_NAMES[MEM], "CPU_THREAD", "MPI rank 0", 0, 0),
    ]
    assert defs.location_groups == [
        ("MPI rank 0", "PROCESS", "qs20-a", None),
        ("MPI rank 1", "PROCESS", "qs20-b", None),
        ("SPEs (rank 0)", "ACCELERATOR", "SPE complex (qs20-a)", "MPI rank 0"),
    ]
    assert defs.system_tree == [
        ("Cell cluster", "machine", None, ("MACHINE",)),
        ("qs20-a", "node", "Cell cluster", ("SHARED_MEMORY",)),
        ("qs20-b", "node", "Cell cluster", ("SHARED_MEMORY",)),
        ("SPE complex (qs20-a)", "spe complex", "qs20-a", ("ACCELERATOR_DEVICE",)),
    ]
    assert defs.location_properties == {
        LOC_NAMES[MEM]: {"cell2otf2::main_memory": "true"},
        LOC_NAMES[SPE]: {"cell2otf2::sync_bound_ticks": "12"},
    }
    assert defs.creator == "cell2otf2 0.1.0 (test)"


def test_regions_communicators_windows(written):
    defs = written[4].defs
    paradigm = {Paradigm.USER: "USER", Paradigm.MPI: "MPI", Paradigm.CELL: "USER"}
    assert defs.regions == [(r.name, r.role.name, paradigm[r.paradigm]) for r in REGIONS]
    assert defs.comms == {
        "MPI_COMM_WORLD": [LOC_NAMES[PPE0], LOC_NAMES[PPE1]],
        "Cell mailboxes": LOC_NAMES,
        "MPI_COMM_SELF": [],  # Score-P's, after ours, in every run with MPI communicators
    }
    assert defs.rma_windows == {"DMA (rank 0)": "Cell mailboxes"}


def test_vite_draws_the_messages(written, tmp_path):
    anchor, back = written[3], written[4]
    arrows = vite_render(anchor, tmp_path / "trace.svg")
    if arrows is None:
        pytest.skip("ViTE (Debian package vite) is not installed: run scripts/ensure-tools.sh")
    assert arrows == len(back.messages) == 3


def test_progress_every_chunk_and_fast_path(tmp_path, monkeypatch):
    """Many Enter/Leave events (the fast path) in small progress chunks read back exactly."""
    monkeypatch.setattr(writer_events, "PROGRESS_EVENTS", 1000)
    defs = sample_defs()
    n_per_loc = 2500  # odd number of chunks per location, last one partial
    events = np.zeros(3 * n_per_loc, EVENT_DTYPE)
    for loc in range(3):
        part = events[loc * n_per_loc:(loc + 1) * n_per_loc]
        part["loc"] = loc
        part["type"][0::2], part["type"][1::2] = Ev.ENTER, Ev.LEAVE
        part["ref"] = R["main"]
        part["time"] = 1000 + np.arange(n_per_loc) // 2 * 3  # Enter and Leave at equal time
    seen: list[int] = []
    stats = write_archive(defs, events, tmp_path, "big", progress=seen.append)
    # after a chunk once PROGRESS_EVENTS more are done (chunks end at location ends), then
    # the total
    assert seen == [1000, 2000, 3500, 4500, 6000, 7000, 7500]
    assert stats.events_per_location.tolist() == [2500, 2500, 2500, 0]
    back = read_events(tmp_path / "big.otf2")
    for loc in range(3):
        assert back.kinds(LOC_NAMES[loc]) == {"Enter": 1250, "Leave": 1250}
        assert back.times[LOC_NAMES[loc]] == events["time"][events["loc"] == loc].tolist()


def _refused(tmp_path, events, match, defs=None):
    with pytest.raises(WriterInputError, match=match):
        write_archive(defs or sample_defs(), events, tmp_path, "bad")
    assert not (tmp_path / "bad.otf2").exists() and not (tmp_path / "bad").exists()


def test_time_going_backwards_is_refused_before_writing(tmp_path):
    events = sample_events()
    spe = np.flatnonzero(events["loc"] == SPE)
    events["time"][spe[3]] = 149  # before the Enter at 150 on the same location
    _refused(tmp_path, events, r"time goes backwards on location 2 'SPE ctx 0 \(rank 0\)'")


def test_unsorted_locations_and_bad_refs_are_refused(tmp_path):
    events = sample_events()
    _refused(tmp_path, events[::-1].copy(), "not sorted by location")
    events = sample_events()
    events["ref"][1] = len(REGIONS)
    _refused(tmp_path, events, "ENTER.*not one of the 12 regions")
    events = sample_events()
    events["ref"][0] = 1
    _refused(tmp_path, events, "PROGRAM_BEGIN.*ref 1, not 0")
    events = sample_events()
    events["loc"][-1] = 4
    _refused(tmp_path, events, "location ref 4 does not exist")
    events = sample_events()
    events["time"][0] = -1
    _refused(tmp_path, events, "negative timestamp")
    events = sample_events()
    events["type"][0] = 99
    _refused(tmp_path, events, "unknown event type 99")
    defs = sample_defs()
    defs.locations[3] = Location(LOC_NAMES[0], LocationType.CPU_THREAD, 0)
    _refused(tmp_path, sample_events(), "used twice", defs=defs)
    defs = sample_defs()
    defs.system_nodes[2] = SystemNode("0", "node", 0, SystemNodeDomain.SHARED_MEMORY)
    _refused(tmp_path, sample_events(), "named '0'", defs=defs)


@pytest.mark.parametrize("kind, column, value, what", [
    (Ev.MPI_SEND, "p1", 2, "peer rank 2"),  # MPI_COMM_WORLD has 2 ranks
    (Ev.RMA_GET, "p1", 4, "remote rank 4"),  # the DMA window's communicator has 4
    (Ev.MPI_COLL_END, "p2", 2, "root rank 2"),
])
def test_ranks_outside_the_communicator_are_refused(tmp_path, kind, column, value, what):
    events = sample_events()
    i = int(np.flatnonzero(events["type"] == kind)[-1])
    events[column][i] = value
    _refused(tmp_path, events, f"event {i} \\({kind.name}\\): {what} is not a rank")


@pytest.mark.parametrize("kind, column, value, what", [
    (Ev.MPI_SEND, "p2", 1 << 32, "uint32_t"),  # tag
    (Ev.MPI_COLL_END, "p1", 256, "uint8_t"),  # collective operation
])
def test_values_wider_than_their_c_parameter_are_refused(tmp_path, kind, column, value, what):
    events = sample_events()
    i = int(np.flatnonzero(events["type"] == kind)[-1])
    events[column][i] = value
    _refused(tmp_path, events, f"event {i} \\({kind.name}\\): {column} = {value} does not fit "
             f"its {what} parameter")


def test_existing_archive_is_refused(written):
    anchor = written[3]
    with pytest.raises(OutputError, match="already exists"):
        write_archive(sample_defs(), sample_events(), anchor.parent, "trace")


def test_empty_table_writes_a_valid_archive(tmp_path):
    seen: list[int] = []
    stats = write_archive(sample_defs(), np.zeros(0, EVENT_DTYPE), tmp_path, "empty",
                          progress=seen.append)
    assert stats.n_events == 0 and seen == [0]
    otf2_print_ok(tmp_path / "empty.otf2")
    assert read_events(tmp_path / "empty.otf2").counts == Counter()


def test_write_ceiling_writes_through_the_c_entry_points(tmp_path):
    rate = write_ceiling(20_000, tmp_path)
    assert rate > 0
    assert list(tmp_path.iterdir()) == []  # the scratch archive is removed again


def test_a_definition_string_longer_than_the_smallest_chunk(tmp_path):
    """A context's ``cell2otf2::sync_intervals`` of some 10,000 intervals is 0.4 MB, more
    than a 256 KiB definition chunk holds (OTF2 refused it: INVALID_SIZE_GIVEN on a 5 s
    hybrid run with context switches every few milliseconds): the archive is written with
    chunks that hold it, and reads back whole."""
    defs, events = sample_defs(), sample_events()
    long_value = ";".join(f"{280319736169 + 40_000 * k}:{280319741291 + 40_000 * k}:14.0"
                          for k in range(12_000))
    assert len(long_value) > MIN_DEF_CHUNK_BYTES
    defs.location_properties = [*defs.location_properties,
                                LocationProperty(SPE, "cell2otf2::sync_intervals", long_value)]
    write_archive(defs, events, tmp_path, "long")
    anchor = tmp_path / "long.otf2"
    otf2_print_ok(anchor)
    props = read_events(anchor).defs.location_properties
    assert props[LOC_NAMES[SPE]]["cell2otf2::sync_intervals"] == long_value


def test_definition_chunk_sizes():
    assert definition_chunk_bytes(0) == MIN_DEF_CHUNK_BYTES
    assert definition_chunk_bytes(MIN_DEF_CHUNK_BYTES - 5000) == MIN_DEF_CHUNK_BYTES
    assert definition_chunk_bytes(MIN_DEF_CHUNK_BYTES) == 2 * MIN_DEF_CHUNK_BYTES
    assert definition_chunk_bytes(385_512) == 512 * 1024
    assert definition_chunk_bytes(MAX_DEF_CHUNK_BYTES - 5000) == MAX_DEF_CHUNK_BYTES
    with pytest.raises(OutputError, match="largest definition chunk"):
        definition_chunk_bytes(MAX_DEF_CHUNK_BYTES)
