"""manifest.py: a valid run.json loads with every value; each docs/format.md 2 check refuses."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from cell_otf2.errors import FormatError
from cell_otf2.input.manifest import Core, DecrementerRestore, RegionKind, load_manifest


def base() -> dict:
    return {
        "format": "cbt",
        "version": 1,
        "application": "fft16m",
        "timebase_hz": 14318000,
        "decrementer_restore": "compensated",
        "nodes": [
            {"name": "qs20-a", "cell_chips": 2, "spes_per_chip": 8},
            {"name": "qs20-b", "cell_chips": 1, "spes_per_chip": 6},
        ],
        "processes": [
            {"rank": 1, "node": "qs20-b", "path": "rank00001.cbt",
             "start_timebase": 777, "start_realtime_ns": 1226400000000000001},
            {"rank": 0, "node": "qs20-a", "path": "rank00000.cbt", "pid": 4242,
             "start_timebase": 90210, "start_realtime_ns": 1226400000000000000},
        ],
        "regions": [
            {"id": 1, "name": "main", "core": "ppe", "kind": "function"},
            {"id": 65535, "name": "MPI_Send", "core": "ppe", "kind": "mpi"},
            {"id": 7, "name": "spu_main", "core": "spe", "kind": "user"},
        ],
        "programs": [{"id": 1, "name": "fft_spu"}],
        "counters": [{"id": 1, "name": "flops", "unit": "flop", "core": "spe"}],
        "communicators": [
            {"id": 0, "name": "MPI_COMM_WORLD", "ranks": [0, 1]},
            {"id": 5, "name": "reversed", "ranks": [1, 0]},
        ],
    }


def write_run(tmp_path: Path, doc: dict | str) -> Path:
    (tmp_path / "rank00000.cbt").write_bytes(b"")
    (tmp_path / "rank00001.cbt").write_bytes(b"")
    text = doc if isinstance(doc, str) else json.dumps(doc, indent=2)
    (tmp_path / "run.json").write_text(text, encoding="utf-8")
    return tmp_path


def test_valid_manifest_loads_every_value(tmp_path):
    m = load_manifest(write_run(tmp_path, base()))
    assert m.run_dir == tmp_path
    assert m.application == "fft16m"
    assert m.timebase_hz == 14318000
    assert m.decrementer_restore == DecrementerRestore.compensated
    assert [n.name for n in m.nodes] == ["qs20-a", "qs20-b"]
    assert m.nodes[0].n_spus == 16 and m.nodes[1].n_spus == 6
    # processes come back in rank order
    assert [p.rank for p in m.processes] == [0, 1]
    p0, p1 = m.processes
    assert (p0.node, p0.path, p0.pid, p0.start_timebase, p0.start_realtime_ns) == (
        "qs20-a", "rank00000.cbt", 4242, 90210, 1226400000000000000)
    assert p1.pid is None and p1.start_timebase == 777
    assert m.n_ranks == 2
    assert m.node_index("qs20-b") == 1 and m.node_of_rank(1) == 1 and m.node_of_rank(0) == 0
    assert m.dump_path(1) == tmp_path / "rank00001.cbt"
    assert m.region_by_id[65535].name == "MPI_Send"
    assert m.region_by_id[7].core == Core.spe and m.region_by_id[7].kind == RegionKind.user
    assert m.program_by_id[1].name == "fft_spu"
    assert m.counter_by_id[1].unit == "flop" and m.counter_by_id[1].core == "spe"
    assert m.communicator_by_id[5].ranks == (1, 0)
    assert m.communicator_by_id[0].ranks == (0, 1)
    with pytest.raises(KeyError):
        m.node_index("nope")


def test_optional_and_unknown_keys(tmp_path):
    doc = base()
    del doc["application"]
    del doc["processes"][1]["pid"]
    doc["future_key"] = {"x": 1}
    doc["nodes"][0]["memory_gb"] = 32
    doc["regions"] = []
    doc["programs"] = []
    doc["counters"] = []
    m = load_manifest(write_run(tmp_path, doc))
    assert m.application is None and m.processes[0].pid is None
    assert m.regions == () and m.programs == () and m.counters == ()


def test_invalid_json_names_line_and_column(tmp_path):
    text = '{\n  "format": "cbt",\n  "version": 1,,\n}'
    with pytest.raises(FormatError) as e:
        load_manifest(write_run(tmp_path, text))
    msg = str(e.value)
    assert "run.json" in msg and "line 3" in msg and "column 16" in msg


def test_missing_manifest(tmp_path):
    with pytest.raises(FormatError, match="run.json"):
        load_manifest(tmp_path)


def test_not_utf8(tmp_path):
    write_run(tmp_path, base())
    (tmp_path / "run.json").write_bytes(b'{"format": "cb\xff"}')
    with pytest.raises(FormatError, match="UTF-8"):
        load_manifest(tmp_path)


def test_top_level_not_object(tmp_path):
    with pytest.raises(FormatError, match="object"):
        load_manifest(write_run(tmp_path, "[1, 2]"))


REQUIRED = [
    "format", "version", "timebase_hz", "decrementer_restore", "nodes", "processes",
    "regions", "programs", "counters", "communicators",
    "nodes[0].name", "nodes[0].cell_chips", "nodes[0].spes_per_chip",
    "processes[0].rank", "processes[0].node", "processes[0].path",
    "processes[0].start_timebase", "processes[0].start_realtime_ns",
    "regions[0].id", "regions[0].name", "regions[0].core", "regions[0].kind",
    "programs[0].id", "programs[0].name",
    "counters[0].id", "counters[0].name", "counters[0].unit", "counters[0].core",
    "communicators[0].id", "communicators[0].name", "communicators[0].ranks",
]


def _locate(doc: dict, path: str) -> tuple[dict, str]:
    """(parent object, key) for a JSON path like ``processes[0].rank``."""
    parts = path.split(".")
    obj = doc
    for part in parts[:-1]:
        name, idx = part[:-1].split("[")
        obj = obj[name][int(idx)]
    return obj, parts[-1]


@pytest.mark.parametrize("path", REQUIRED)
def test_missing_required_key(tmp_path, path):
    doc = base()
    parent, key = _locate(doc, path)
    del parent[key]
    with pytest.raises(FormatError) as e:
        load_manifest(write_run(tmp_path, doc))
    assert e.value.field == path
    assert "missing required key" in str(e.value)
    assert "run.json" in str(e.value)


# (path, bad value, field reported, text in message)
BAD_VALUES = [
    ("format", "otf2", "format", "not a CBT manifest"),
    ("version", 2, "version", "unsupported version"),
    ("version", "1", "version", "unsupported version"),
    ("version", True, "version", "unsupported version"),
    ("timebase_hz", "14318000", "timebase_hz", "wrong type"),
    ("timebase_hz", 14318000.0, "timebase_hz", "wrong type"),
    ("timebase_hz", 0, "timebase_hz", "out of range"),
    ("decrementer_restore", "frozen", "decrementer_restore", "unknown value"),
    ("nodes", {"name": "x"}, "nodes", "wrong type"),
    ("nodes[0].cell_chips", 0, "nodes[0].cell_chips", "out of range"),
    ("nodes[0].name", "", "nodes[0].name", "empty"),
    ("processes[0].rank", True, "processes[0].rank", "wrong type"),
    ("processes[0].rank", -1, "processes[0].rank", "out of range"),
    ("processes[0].start_timebase", 1 << 64, "processes[0].start_timebase", "out of range"),
    ("processes[1].pid", "4242", "processes[1].pid", "wrong type"),
    ("processes[0].node", "qs21-z", "processes[0].node", "undeclared node"),
    ("processes[0].path", "missing.cbt", "processes[0].path", "does not exist"),
    ("processes[0].path", "/etc/passwd", "processes[0].path", "relative"),
    ("processes[0].path", "rank00000.cbt", "processes[1].path", "duplicate path"),
    ("regions[0].core", "gpu", "regions[0].core", "unknown value"),
    ("regions[0].kind", "loop", "regions[0].kind", "unknown value"),
    ("regions[0].id", 0, "regions[0].id", "out of range"),
    ("regions[0].id", 65536, "regions[0].id", "out of range"),
    ("counters[0].core", "both", "counters[0].core", "unknown value"),
    ("counters[0].unit", 3, "counters[0].unit", "wrong type"),
    ("application", 5, "application", "wrong type"),
    ("communicators[1].ranks", [0, 2], "communicators[1].ranks[1]", "not a world rank"),
    ("communicators[1].ranks", [1, 1], "communicators[1].ranks[1]", "twice"),
    ("communicators[1].ranks", [], "communicators[1].ranks", "empty"),
    ("communicators[1].ranks", "0,1", "communicators[1].ranks", "wrong type"),
    ("communicators[0].ranks", [0], "communicators[0].ranks", "every world rank"),
    ("communicators[0].ranks", [1, 0], "communicators[0].ranks", "every world rank"),
    ("communicators[0].name", "WORLD", "communicators[0].name", "MPI_COMM_WORLD"),
    ("communicators[1].id", 0, "communicators[1].id", "duplicate id"),
]


@pytest.mark.parametrize("path,value,field,text", BAD_VALUES)
def test_bad_value(tmp_path, path, value, field, text):
    doc = base()
    parent, key = _locate(doc, path)
    parent[key] = value
    with pytest.raises(FormatError) as e:
        load_manifest(write_run(tmp_path, doc))
    assert e.value.field == field
    assert text in str(e.value)
    assert "run.json" in str(e.value)
    assert e.value.expected is not None and e.value.found is not None


def _dup(list_name: str, key: str):
    def mutate(doc: dict) -> None:
        item = copy.deepcopy(doc[list_name][0])
        other = 99 if key != "id" else "other-name"
        for k in ("id", "name"):
            if k in item and k != key:
                item[k] = other if k == "name" else 99
        doc[list_name].append(item)

    return mutate


@pytest.mark.parametrize(
    "list_name,key",
    [("nodes", "name"), ("regions", "id"), ("regions", "name"), ("programs", "id"),
     ("programs", "name"), ("counters", "id"), ("counters", "name"),
     ("communicators", "name")],
)
def test_duplicate_in_list(tmp_path, list_name, key):
    doc = base()
    _dup(list_name, key)(doc)
    n = len(doc[list_name]) - 1
    with pytest.raises(FormatError) as e:
        load_manifest(write_run(tmp_path, doc))
    assert e.value.field == f"{list_name}[{n}].{key}"
    assert f"duplicate {key} (also at {list_name}[0])" in str(e.value)


def test_duplicate_rank(tmp_path):
    doc = base()
    doc["processes"][0]["rank"] = 0
    with pytest.raises(FormatError) as e:
        load_manifest(write_run(tmp_path, doc))
    assert e.value.field == "processes[1].rank"
    assert "duplicate rank" in str(e.value)


def test_rank_gap(tmp_path):
    doc = base()
    doc["processes"][0]["rank"] = 2  # ranks 2 and 0: rank 1 missing
    doc["communicators"] = [{"id": 0, "name": "MPI_COMM_WORLD", "ranks": [0, 1]}]
    with pytest.raises(FormatError) as e:
        load_manifest(write_run(tmp_path, doc))
    assert e.value.field == "processes[0].rank"
    assert "rank 1 is missing" in str(e.value)
    assert e.value.expected == "0..1" and e.value.found == 2


def test_no_processes(tmp_path):
    doc = base()
    doc["processes"] = []
    with pytest.raises(FormatError) as e:
        load_manifest(write_run(tmp_path, doc))
    assert e.value.field == "processes"


def test_communicator_zero_missing(tmp_path):
    doc = base()
    doc["communicators"] = doc["communicators"][1:]
    with pytest.raises(FormatError) as e:
        load_manifest(write_run(tmp_path, doc))
    assert e.value.field == "communicators"
    assert "communicator 0" in str(e.value)


def test_path_to_directory_refused(tmp_path):
    doc = base()
    (tmp_path / "adir").mkdir()
    doc["processes"][0]["path"] = "adir"
    with pytest.raises(FormatError) as e:
        load_manifest(write_run(tmp_path, doc))
    assert e.value.field == "processes[0].path"


def test_list_item_not_object(tmp_path):
    doc = base()
    doc["regions"][1] = 5
    with pytest.raises(FormatError) as e:
        load_manifest(write_run(tmp_path, doc))
    assert e.value.field == "regions[1]"
