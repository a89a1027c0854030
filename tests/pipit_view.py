"""What a trace-analysis reader built on the ``otf2`` Python bindings in the manner of pipit
(LLNL/hpcgroup) makes of an archive, as the properties such a reader relies on: it reads CPU
threads only (process = location group, which must be a PROCESS group), takes the member names
of the first metric class as the metric columns of the CPU threads' Metric events and
reads such an event as a value of the next event of its thread (which must be no Metric and
have its time, else the value is left without a row), pairs Enter/Leave per thread for its
flat and time profiles, reads message sizes from MpiSend for its message histogram, and takes
a message's receiver rank in its communicator as a process index for its communication matrix.
It skips METRIC locations, where Score-P (and cell2otf2, for the PPE threads' counters) writes
asynchronous samples with a MetricInstance naming the thread that sampled them: ``view``
checks that each names a CPU thread of its own location group. ``view`` checks the first
four and counts what the fifth would make of each communicator; it does not run pipit
(docs/archive.md section "Trace-analysis libraries" has the commands that do). Usable as a
script: ``python tests/pipit_view.py ARCHIVE.otf2 ...`` prints one line per archive.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field

import otf2


@dataclass
class ReaderView:
    """What the checks found in one archive: ``problems`` empty when such a reader loads it
    and runs its flat profile, time profile and message histogram."""

    processes: int = 0
    cpu_threads: int = 0
    metric_columns: list[str] = field(default_factory=list)
    cpu_metric_events: int = 0
    metric_locations: int = 0
    sampled_events: int = 0  # Metric events on METRIC locations (asynchronous samples)
    enters: int = 0
    sends: Counter = field(default_factory=Counter)  # communicator name -> MpiSend events
    beyond_processes: Counter = field(default_factory=Counter)  # comm name -> receivers >= n
    defined_metrics: set[str] = field(default_factory=set)
    written_metrics: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)


def _members(metric: object) -> list[str]:
    """Member names of a Metric event's metric (a class, or an instance of one)."""
    cls = getattr(metric, "metric_class", metric)
    return [m.name for m in cls.members]


def view(anchor: str) -> ReaderView:
    """Read ``anchor`` as such a reader would and collect ``ReaderView``."""
    out = ReaderView()
    with otf2.reader.open(anchor) as trace:
        defs = trace.definitions
        classes = list(defs.metric_classes)
        out.metric_columns = _members(classes[0]) if classes else []
        out.defined_metrics = {m.name for m in defs.metric_members}
        groups = {g._ref: g for g in defs.location_groups}
        cpu = [loc for loc in defs.locations if loc.type == otf2.LocationType.CPU_THREAD]
        out.cpu_threads = len(cpu)
        for loc in cpu:
            if groups[loc.group._ref].location_group_type != otf2.LocationGroupType.PROCESS:
                out.problems.append(f"{loc.name}: CPU thread outside a PROCESS group")
        out.processes = sum(1 for g in groups.values()
                            if g.location_group_type == otf2.LocationGroupType.PROCESS)
        holders = [loc for loc in defs.locations if loc.type == otf2.LocationType.METRIC]
        out.metric_locations = len(holders)
        recorders = {(i.recorder.name, i.recorder.group._ref) for i in defs.metric_instances
                     if i.recorder.type == otf2.LocationType.CPU_THREAD}
        for loc in holders:
            if (loc.name.removesuffix(" counters"), loc.group._ref) not in recorders:
                out.problems.append(f"{loc.name}: METRIC location of no CPU thread's "
                                    "metric instance in its group")
        stacks: dict[int, list[int]] = {}
        pending: dict[int, int] = {}  # CPU thread -> time of its Metric events not yet taken
        for location, event in trace.events:
            if isinstance(event, otf2.events.Metric):
                out.written_metrics.update(_members(event.metric))
                if location.type == otf2.LocationType.METRIC:
                    out.sampled_events += 1
            if location.type != otf2.LocationType.CPU_THREAD:
                continue
            if location._ref in pending and (
                    event.time != pending[location._ref]
                    or not isinstance(event, otf2.events.Metric)):
                if event.time != pending.pop(location._ref):
                    out.problems.append(f"{location.name}: a Metric event not followed by "
                                        "another event at its time")
            if isinstance(event, otf2.events.Metric):
                pending[location._ref] = event.time
            stack = stacks.setdefault(location._ref, [])
            if isinstance(event, otf2.events.Enter):
                out.enters += 1
                stack.append(event.region._ref)
            elif isinstance(event, otf2.events.Leave):
                if not stack or stack.pop() != event.region._ref:
                    out.problems.append(f"{location.name}: Leave of {event.region.name} "
                                        "does not close the innermost Enter")
            elif isinstance(event, otf2.events.Metric):
                out.cpu_metric_events += 1
                missing = set(_members(event.metric)) - set(out.metric_columns)
                if missing:
                    out.problems.append(f"{location.name}: metric {sorted(missing)} is not "
                                        "a member of the first metric class")
            elif isinstance(event, otf2.events.MpiSend):
                name = event.communicator.name
                out.sends[name] += 1
                if event.msg_length is None:
                    out.problems.append(f"{location.name}: MpiSend without a length")
                if event.receiver >= out.processes:
                    out.beyond_processes[name] += 1
        for ref in pending:
            out.problems.append(f"location {ref}: a Metric event is its last")
        for ref, stack in stacks.items():
            if stack:
                out.problems.append(f"location {ref}: {len(stack)} Enter without Leave")
    for name in sorted(out.defined_metrics - out.written_metrics):
        out.problems.append(f"metric {name!r} defined and never written")
    out.problems = sorted(set(out.problems))
    return out


def main(anchors: list[str]) -> int:
    """One line per archive; exit status 1 when any has a problem."""
    bad = 0
    for anchor in anchors:
        v = view(anchor)
        bad += bool(v.problems)
        print(f"{anchor}: processes {v.processes}, CPU threads {v.cpu_threads}, metric columns "
              f"{v.metric_columns}, CPU metric events {v.cpu_metric_events}, METRIC locations "
              f"{v.metric_locations} with {v.sampled_events} samples, Enter "
              f"{v.enters}, MpiSend {dict(v.sends)}, receiver rank >= processes "
              f"{dict(v.beyond_processes)}, problems {v.problems[:3] or 'none'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
