"""The archive read as a trace-analysis library in Score-P's manner (pipit) reads it, through
the ``otf2`` bindings (``pipit_view``): CPU threads in PROCESS groups, no Metric event on a
CPU thread without an event at its time after it (the PPE threads' counter samples are on
METRIC locations, one per sampling thread, as Score-P writes asynchronous metrics),
Enter/Leave nested on every CPU thread, every MpiSend with a length, every defined metric
written; and Score-P's definitions beside ours (region
groups, MPI_COMM_SELF). What a reader's communication matrix makes of the mailbox
communicator is counted, as docs/archive.md section 18 says, not required to fit."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import otf2
import pytest
from otf2check import otf2_print_ok
from pipit_view import view

from cell_otf2 import convert
from cell_otf2.model import DmaStyle

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize("name,style", [
    ("fft-16spe", DmaStyle.RMA), ("two-nodes-hybrid", DmaStyle.MESSAGES),
    ("damaged-gap-truncate", DmaStyle.RMA), ("context-switch-restored", DmaStyle.MESSAGES),
])
def test_a_pipit_like_reader_loads_the_samples(name, style, tmp_path):
    anchor = tmp_path / "a.otf2"
    convert(SAMPLES / name, anchor, dma_style=style.value)
    otf2_print_ok(anchor)
    v = view(str(anchor))
    assert v.problems == []
    # the PPE's counter: the first metric class, sampled on the thread's METRIC location
    assert v.metric_columns == ["phase"] and v.cpu_metric_events == 0
    assert v.metric_locations >= 1 and v.sampled_events > 0
    assert v.defined_metrics == v.written_metrics
    assert v.enters > 0 and v.processes >= 1
    # MPI messages address processes; only the mailbox communicator's ranks (location refs)
    # go beyond them
    assert set(v.beyond_processes) <= {"Cell mailboxes", "DMA"}


def test_simulated_run_with_mpi(simulated, tmp_path):
    anchor = tmp_path / "a.otf2"
    convert(simulated(workload="hybrid", nodes=2, ranks=4, phases=2), anchor)
    v = view(str(anchor))
    assert v.problems == [] and v.processes == 4
    assert v.sends["MPI_COMM_WORLD"] > 0 and "MPI_COMM_WORLD" not in v.beyond_processes


def test_ppe_samples_on_a_metric_location_of_their_thread(tmp_path):
    anchor = tmp_path / "a.otf2"
    convert(SAMPLES / "fft-16spe", anchor)
    with otf2.reader.open(str(anchor)) as trace:
        defs = trace.definitions
        instances = list(defs.metric_instances)
        holders = [loc for loc in defs.locations if loc.type == otf2.LocationType.METRIC]
        sampled = Counter(location.name for location, event in trace.events
                          if isinstance(event, otf2.events.Metric))
    assert [loc.name for loc in holders] == ["PPE thread 0 (rank 0) counters"]
    assert holders[0].group.name == "MPI Rank 0"
    assert [(i.metric_class.members[0].name, i.recorder.name, i.scope.name)
            for i in instances] == [("phase", "PPE thread 0 (rank 0)", "PPE thread 0 (rank 0)")]
    assert sampled["PPE thread 0 (rank 0) counters"] > 0
    assert sampled["PPE thread 0 (rank 0)"] == 0


def test_scorep_definitions_beside_ours(tmp_path):
    anchor = tmp_path / "a.otf2"
    convert(SAMPLES / "two-nodes-hybrid", anchor)
    with otf2.reader.open(str(anchor)) as trace:
        defs = trace.definitions
        region_groups = {g.name: {r.name for r in g.members} for g in defs.groups
                         if g.group_type == otf2.GroupType.REGIONS}
        comms = {c.name: c for c in defs.comms}
    assert "MPI_Send" in region_groups["MPI"] and "spe_context_run" in region_groups["Cell"]
    assert "main" not in set().union(*region_groups.values())
    assert comms["MPI_COMM_SELF"].group.group_type == otf2.GroupType.COMM_SELF
    assert list(comms)[-1] == "MPI_COMM_SELF"  # after ours: our refs are unchanged


def test_docs_say_what_a_comm_matrix_shows():
    text = (DOCS / "archive.md").read_text()
    assert "Trace-analysis libraries" in text and "communication matrix" in text
