"""The global definitions of an archive (``write_definitions``): the clock properties exactly as
``ArchiveDefs.clock`` holds them, the string table, paradigms, attributes, system tree,
location groups, locations with their event counts, location properties, regions, communicator
groups, region groups, metrics, communicators (and MPI_COMM_SELF after them) and RMA windows,
each with ref = its index in ``ArchiveDefs``, nothing merged by value. It checks nothing
(``checks.check_defs`` does) and writes no events; how model values map to OTF2's, and why, is
in docs/archive.md.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass

import _otf2
import numpy as np

from ..model import (
    PROGRAM_NAME_STRING,
    ArchiveDefs,
    AttrType,
    GroupType,
    LocationType,
    Paradigm,
    RegionRole,
    SystemNodeDomain,
)
from .open_archive import OpenArchive

_ROLE = {
    RegionRole.FUNCTION: _otf2.REGION_ROLE_FUNCTION,
    RegionRole.WRAPPER: _otf2.REGION_ROLE_WRAPPER,
    RegionRole.RMA: _otf2.REGION_ROLE_RMA,
    RegionRole.POINT2POINT: _otf2.REGION_ROLE_POINT2POINT,
    RegionRole.COLL_ONE2ALL: _otf2.REGION_ROLE_COLL_ONE2ALL,
    RegionRole.COLL_ALL2ONE: _otf2.REGION_ROLE_COLL_ALL2ONE,
    RegionRole.COLL_ALL2ALL: _otf2.REGION_ROLE_COLL_ALL2ALL,
    RegionRole.COLL_OTHER: _otf2.REGION_ROLE_COLL_OTHER,
    RegionRole.BARRIER: _otf2.REGION_ROLE_BARRIER,
    RegionRole.USER: _otf2.REGION_ROLE_CODE,  # OTF2 has no "user" role; CODE is a code block
    RegionRole.DATA_TRANSFER: _otf2.REGION_ROLE_DATA_TRANSFER,
}

#: model paradigm -> (OTF2 paradigm, name written in its Paradigm definition, class)
_PARADIGM = {
    Paradigm.USER: (_otf2.PARADIGM_USER, "User", _otf2.PARADIGM_CLASS_PROCESS),
    Paradigm.MPI: (_otf2.PARADIGM_MPI, "MPI", _otf2.PARADIGM_CLASS_PROCESS),
    Paradigm.CELL: (_otf2.PARADIGM_USER, "User", _otf2.PARADIGM_CLASS_PROCESS),
}

#: model paradigm -> name of the REGIONS group of its regions (user code has none)
_REGION_GROUP = {Paradigm.MPI: "MPI", Paradigm.CELL: "Cell"}

#: the communicator Score-P defines for every MPI run, after the archive's own communicators
COMM_SELF_NAME = "MPI_COMM_SELF"

_DOMAIN = {
    SystemNodeDomain.MACHINE: _otf2.SYSTEM_TREE_DOMAIN_MACHINE,
    SystemNodeDomain.SHARED_MEMORY: _otf2.SYSTEM_TREE_DOMAIN_SHARED_MEMORY,
    SystemNodeDomain.ACCELERATOR_DEVICE: _otf2.SYSTEM_TREE_DOMAIN_ACCELERATOR_DEVICE,
}

_GROUP_TYPE = {
    GroupType.PROCESS: _otf2.LOCATION_GROUP_TYPE_PROCESS,
    GroupType.ACCELERATOR: _otf2.LOCATION_GROUP_TYPE_ACCELERATOR,
}

_LOCATION_TYPE = {
    LocationType.CPU_THREAD: _otf2.LOCATION_TYPE_CPU_THREAD,
    LocationType.ACCELERATOR_STREAM: _otf2.LOCATION_TYPE_ACCELERATOR_STREAM,
    LocationType.METRIC: _otf2.LOCATION_TYPE_METRIC,
}

_ATTR_TYPE = {AttrType.UINT64: _otf2.TYPE_UINT64, AttrType.STRING: _otf2.TYPE_STRING}


class _Strings:
    """The global string table: get-or-create by value, ref 0 is the empty string."""

    def __init__(self) -> None:
        self.refs: dict[str, int] = {"": 0}

    def __call__(self, text: str) -> int:
        ref = self.refs.get(text)
        if ref is None:
            ref = self.refs[text] = len(self.refs)
        return ref


def longest_string(defs: ArchiveDefs) -> int:
    """UTF-8 bytes of the longest string among ``defs`` (their names, descriptions and
    string values; a string definition is one record, which one definition chunk must
    hold)."""
    longest = 0
    for f in fields(defs):
        value = getattr(defs, f.name)
        items = value if isinstance(value, (list, tuple)) else [value]
        for item in items:
            texts = ([item] if isinstance(item, str) else
                     [getattr(item, g.name) for g in fields(item)] if is_dataclass(item)
                     else [])
            for text in texts:
                if isinstance(text, str):
                    longest = max(longest, len(text.encode("utf-8", "surrogatepass")))
    return longest


def write_definitions(archive: OpenArchive, defs: ArchiveDefs, counts: np.ndarray) -> None:
    """Write every global definition with ref = its index in ``defs``."""
    s = _Strings()
    undefined_node = _otf2.UNDEFINED_SYSTEM_TREE_NODE
    undefined_group = _otf2.UNDEFINED_LOCATION_GROUP

    # communicator groups: one COMM_LOCATIONS group per OTF2 paradigm, one COMM_GROUP per comm
    comm_locations: dict[int, list[int]] = {}
    for comm in defs.communicators:
        members = comm_locations.setdefault(_PARADIGM[comm.paradigm][0].value, [])
        members.extend(comm.members)
    comm_locations = {p: sorted(set(m)) for p, m in comm_locations.items()}
    locations_group_ref = {p: ref for ref, p in enumerate(comm_locations)}

    used_paradigms: dict[int, tuple[object, str, object]] = {}
    for model_paradigm in ([r.paradigm for r in defs.regions]
                           + [c.paradigm for c in defs.communicators]):
        otf2_paradigm, name, cls = _PARADIGM[model_paradigm]
        used_paradigms.setdefault(otf2_paradigm.value, (otf2_paradigm, name, cls))

    # Score-P's conventions beside ours: one REGIONS group per paradigm of regions that are
    # not user code (named after the paradigm, regions in ref order), and MPI_COMM_SELF (a
    # COMM_SELF group without members) where the run has MPI communicators
    region_groups: dict[str, tuple[object, list[int]]] = {}
    for ref, region in enumerate(defs.regions):
        if region.paradigm in _REGION_GROUP:
            name = _REGION_GROUP[region.paradigm]
            region_groups.setdefault(name, (_PARADIGM[region.paradigm][0], []))[1].append(ref)
    comm_self = _otf2.PARADIGM_MPI.value in comm_locations

    # intern every string first: a definition must not refer to a string written after it;
    # the program's name first, as ProgramBegin events name it by its ref
    if s(defs.program_name) != PROGRAM_NAME_STRING:
        raise ValueError("the program name must not be empty")  # check_defs refuses it
    for _, name, _ in used_paradigms.values():
        s(name)
    for attribute in defs.attributes:
        s(attribute.name), s(attribute.description)
    for system_node in defs.system_nodes:
        s(system_node.name), s(system_node.class_name)
    for def_name in [*(group.name for group in defs.location_groups),
                     *(loc.name for loc in defs.locations),
                     *(region.name for region in defs.regions)]:
        s(def_name)
    for metric in defs.metrics:
        s(metric.name), s(metric.unit)
    for paradigm in comm_locations:
        s(f"{used_paradigms[paradigm][1]} communicator locations")
    for def_name in [*(comm.name for comm in defs.communicators),
                     *(window.name for window in defs.rma_windows)]:
        s(def_name)
    for region_group_name in region_groups:
        s(region_group_name)
    if comm_self:
        s(COMM_SELF_NAME)
    for location_property in defs.location_properties:
        s(location_property.name)
        if isinstance(location_property.value, str):
            s(location_property.value)

    g = _otf2.Archive_GetGlobalDefWriter(archive.handle)
    try:
        clock = defs.clock
        _otf2.GlobalDefWriter_WriteClockProperties(
            g, clock.timer_resolution, clock.global_offset, clock.trace_length, clock.realtime_ns
        )
        for text, ref in s.refs.items():
            _otf2.GlobalDefWriter_WriteString(g, ref, text)
        for otf2_paradigm, name, cls in used_paradigms.values():
            _otf2.GlobalDefWriter_WriteParadigm(g, otf2_paradigm, s.refs[name], cls)
        for ref, a in enumerate(defs.attributes):
            _otf2.GlobalDefWriter_WriteAttribute(
                g, ref, s(a.name), s(a.description), _ATTR_TYPE[a.type]
            )
        for ref, node in enumerate(defs.system_nodes):
            parent = undefined_node if node.parent is None else node.parent
            _otf2.GlobalDefWriter_WriteSystemTreeNode(
                g, ref, s(node.name), s(node.class_name), parent
            )
            _otf2.GlobalDefWriter_WriteSystemTreeNodeDomain(g, ref, _DOMAIN[node.domain])
        for ref, group in enumerate(defs.location_groups):
            creator = undefined_group if group.creating_group is None else group.creating_group
            _otf2.GlobalDefWriter_WriteLocationGroup(
                g, ref, s(group.name), _GROUP_TYPE[group.type], group.system_node, creator
            )
        for ref, loc in enumerate(defs.locations):
            _otf2.GlobalDefWriter_WriteLocation(
                g, ref, s(loc.name), _LOCATION_TYPE[loc.type], int(counts[ref]), loc.group
            )
        for prop in defs.location_properties:
            value = _otf2.AttributeValue()
            if isinstance(prop.value, str):
                value.stringRef, otf2_type = s(prop.value), _otf2.TYPE_STRING
            elif isinstance(prop.value, float):
                value.float64, otf2_type = prop.value, _otf2.TYPE_DOUBLE
            else:
                value.uint64, otf2_type = int(prop.value), _otf2.TYPE_UINT64
            _otf2.GlobalDefWriter_WriteLocationProperty(
                g, prop.loc, s(prop.name), otf2_type, value
            )
        for ref, region in enumerate(defs.regions):
            name_ref = s(region.name)
            _otf2.GlobalDefWriter_WriteRegion(
                g, ref, name_ref, name_ref, 0, _ROLE[region.role], _PARADIGM[region.paradigm][0],
                _otf2.REGION_FLAG_NONE, 0, 0, 0,
            )
        for paradigm, members in comm_locations.items():
            _otf2.GlobalDefWriter_WriteGroup(
                g, locations_group_ref[paradigm],
                s(f"{used_paradigms[paradigm][1]} communicator locations"),
                _otf2.GROUP_TYPE_COMM_LOCATIONS, _otf2.Paradigm(paradigm),
                _otf2.GROUP_FLAG_NONE, members,
            )
        next_group = len(comm_locations)
        for ref, comm in enumerate(defs.communicators):
            paradigm = _PARADIGM[comm.paradigm][0]
            index = {loc: i for i, loc in enumerate(comm_locations[paradigm.value])}
            _otf2.GlobalDefWriter_WriteGroup(
                g, next_group + ref, s(comm.name), _otf2.GROUP_TYPE_COMM_GROUP, paradigm,
                _otf2.GROUP_FLAG_NONE, [index[m] for m in comm.members],
            )
        extra_group = next_group + len(defs.communicators)
        for name, (regions_paradigm, regions) in region_groups.items():
            _otf2.GlobalDefWriter_WriteGroup(
                g, extra_group, s(name), _otf2.GROUP_TYPE_REGIONS, regions_paradigm,
                _otf2.GROUP_FLAG_NONE, regions,
            )
            extra_group += 1
        if comm_self:
            self_group = extra_group
            _otf2.GlobalDefWriter_WriteGroup(
                g, self_group, s(""), _otf2.GROUP_TYPE_COMM_SELF, _otf2.PARADIGM_MPI,
                _otf2.GROUP_FLAG_NONE, [],
            )
        for ref, metric in enumerate(defs.metrics):
            _otf2.GlobalDefWriter_WriteMetricMember(
                g, ref, s(metric.name), 0, _otf2.METRIC_TYPE_OTHER, _otf2.METRIC_ABSOLUTE_POINT,
                _otf2.TYPE_UINT64, _otf2.BASE_DECIMAL, 0, s(metric.unit),
            )
        for ref in range(len(defs.metrics)):
            _otf2.GlobalDefWriter_WriteMetricClass(
                g, ref, [ref], _otf2.METRIC_ASYNCHRONOUS, _otf2.RECORDER_KIND_CPU
            )
        # instance refs follow the class refs (one ref space); scope: the recorder itself
        for ref, instance in enumerate(defs.metric_instances, start=len(defs.metrics)):
            _otf2.GlobalDefWriter_WriteMetricInstance(
                g, ref, instance.metric, instance.recorder, _otf2.SCOPE_LOCATION,
                instance.recorder,
            )
        for ref, comm in enumerate(defs.communicators):
            _otf2.GlobalDefWriter_WriteComm(
                g, ref, s(comm.name), next_group + ref, _otf2.UNDEFINED_COMM, _otf2.COMM_FLAG_NONE
            )
        if comm_self:
            _otf2.GlobalDefWriter_WriteComm(
                g, len(defs.communicators), s(COMM_SELF_NAME), self_group,
                _otf2.UNDEFINED_COMM, _otf2.COMM_FLAG_NONE,
            )
        for ref, win in enumerate(defs.rma_windows):
            _otf2.GlobalDefWriter_WriteRmaWin(
                g, ref, s(win.name), win.comm, _otf2.RMA_WIN_FLAG_NONE
            )
    finally:
        _otf2.Archive_CloseGlobalDefWriter(archive.handle, g)

