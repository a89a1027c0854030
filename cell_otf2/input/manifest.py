"""The run manifest ``run.json`` (docs/format.md section 2) -> frozen dataclasses, fully checked:
``load_manifest(run_dir)`` refuses any violation with a ``FormatError`` naming ``run.json``, the
JSON path of the field, what was expected and what was found (the checks and the choices where
section 2 is silent: docs/format.md 2.5). It does not open the dumps (``reader.py``) and does not
check that records name defined ids (``decode.py`` counts those as damage)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..errors import FormatError

MANIFEST_NAME = "run.json"
FORMAT_NAME = "cbt"
FORMAT_VERSION = 1
#: a manifest describes processes, regions and communicators: far below this
MANIFEST_MAX_BYTES = 64 << 20
#: longest name (application, node, region, program, ...) written into an archive
NAME_MAX_CHARS = 4096
U32_MAX = (1 << 32) - 1
U64_MAX = (1 << 64) - 1
REGION_ID_MAX = 65535
#: Cell chips in one machine (one timebase): 2 on a QS20/QS21/QS22 blade, 1 on a PS3; the
#: bound leaves room for any shared-memory machine while keeping the system tree, which has
#: one definition per chip, small
CELL_CHIPS_MAX = 64
#: SPEs on one Cell chip: the chip has 8 (6 usable on a PS3)
SPES_PER_CHIP_MAX = 8


class Core(StrEnum):
    ppe = "ppe"
    spe = "spe"


class RegionKind(StrEnum):
    function = "function"
    mpi = "mpi"
    spe_runtime = "spe_runtime"
    user = "user"


class DecrementerRestore(StrEnum):
    compensated = "compensated"
    restored = "restored"


@dataclass(frozen=True)
class Node:
    name: str
    cell_chips: int
    spes_per_chip: int

    @property
    def n_spus(self) -> int:
        """Physical SPUs on the node (valid ``spu`` numbers are 0..n_spus-1)."""
        return self.cell_chips * self.spes_per_chip


@dataclass(frozen=True)
class Process:
    rank: int
    node: str
    path: str  # as written in run.json, relative to the run directory
    start_timebase: int
    start_realtime_ns: int
    pid: int | None = None


@dataclass(frozen=True)
class Region:
    id: int
    name: str
    core: Core
    kind: RegionKind


@dataclass(frozen=True)
class Program:
    id: int
    name: str


@dataclass(frozen=True)
class Counter:
    id: int
    name: str
    unit: str
    core: Core


@dataclass(frozen=True)
class Communicator:
    id: int
    name: str
    ranks: tuple[int, ...]  # ranks[i] = world rank of communicator rank i


def _index(items: tuple[Any, ...], key: Callable[[Any], Any]) -> Mapping[Any, Any]:
    return MappingProxyType({key(x): x for x in items})


@dataclass(frozen=True)
class Manifest:
    """A checked run manifest. ``processes[r].rank == r``."""

    run_dir: Path
    timebase_hz: int
    decrementer_restore: DecrementerRestore
    nodes: tuple[Node, ...]
    processes: tuple[Process, ...]
    regions: tuple[Region, ...]
    programs: tuple[Program, ...]
    counters: tuple[Counter, ...]
    communicators: tuple[Communicator, ...]
    application: str | None = None
    # lookups, built once
    region_by_id: Mapping[int, Region] = field(init=False, repr=False, compare=False)
    program_by_id: Mapping[int, Program] = field(init=False, repr=False, compare=False)
    counter_by_id: Mapping[int, Counter] = field(init=False, repr=False, compare=False)
    communicator_by_id: Mapping[int, Communicator] = field(
        init=False, repr=False, compare=False
    )
    node_by_name: Mapping[str, Node] = field(init=False, repr=False, compare=False)
    _node_index: Mapping[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        def put(name: str, value: object) -> None:
            object.__setattr__(self, name, value)

        put("region_by_id", _index(self.regions, lambda r: r.id))
        put("program_by_id", _index(self.programs, lambda p: p.id))
        put("counter_by_id", _index(self.counters, lambda c: c.id))
        put("communicator_by_id", _index(self.communicators, lambda c: c.id))
        put("node_by_name", _index(self.nodes, lambda n: n.name))
        put("_node_index", MappingProxyType({n.name: i for i, n in enumerate(self.nodes)}))

    @property
    def n_ranks(self) -> int:
        return len(self.processes)

    def node_index(self, name: str) -> int:
        """Index in ``nodes`` of the node called ``name`` (KeyError if undeclared)."""
        return self._node_index[name]

    def node_of_rank(self, rank: int) -> int:
        """Index in ``nodes`` of the node that runs ``rank``."""
        return self._node_index[self.processes[rank].node]

    def dump_path(self, rank: int) -> Path:
        """Path of ``rank``'s shared-buffer dump."""
        return self.run_dir / self.processes[rank].path


# --------------------------------------------------------------------------------------------
# checking
# --------------------------------------------------------------------------------------------


def _show(value: object) -> str:
    """Short JSON rendering of a found value for messages."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = f"<{_type_name(value)}>"
    return text if len(text) <= 60 else text[:57] + "..."


def _found(value: object) -> str:
    """A found value for messages: its JSON type and a short rendering ("null" once)."""
    return "null" if value is None else f"{_type_name(value)} {_show(value)}"


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


class _Checker:
    """Typed access to JSON values that raises FormatError with the JSON path."""

    def __init__(self, file: Path) -> None:
        self.file = file

    def fail(self, path: str, message: str, expected: object, found: object) -> FormatError:
        return FormatError(self.file, message, field=path, expected=expected, found=found)

    def obj(self, value: object, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, "wrong type", "object", _found(value))
        return value

    def key(self, obj: dict[str, Any], key: str, path: str) -> Any:
        where = f"{path}.{key}" if path else key
        if key not in obj:
            raise self.fail(where, "missing required key", f"key '{key}'", "nothing")
        return obj[key]

    def integer(
        self, obj: dict[str, Any], key: str, path: str, lo: int = 0, hi: int = U64_MAX
    ) -> int:
        value = self.key(obj, key, path)
        where = f"{path}.{key}" if path else key
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(
                where, "wrong type", "integer", _found(value)
            )
        if not lo <= value <= hi:
            raise self.fail(where, "out of range", f"integer {lo}..{hi}", value)
        return value

    def string(self, obj: dict[str, Any], key: str, path: str) -> str:
        value = self.key(obj, key, path)
        where = f"{path}.{key}" if path else key
        if not isinstance(value, str):
            raise self.fail(
                where, "wrong type", "string", _found(value)
            )
        if not value:
            raise self.fail(where, "empty string", "non-empty string", '""')
        self.text(value, where)
        return value

    def text(self, value: str, where: str) -> None:
        """Refuse a string that no UTF-8 file can hold (a lone surrogate such as \\ud800),
        that holds a NUL (OTF2 and the file system take C strings: it would cut the name) or
        that is too long for a name (OTF2 refuses definitions past its buffer chunk)."""
        if len(value) > NAME_MAX_CHARS:
            raise self.fail(where, "string too long for a name", f"<= {NAME_MAX_CHARS} "
                            "characters", f"{len(value)} characters")
        if "\0" in value:
            raise self.fail(where, f"NUL character at character {value.index(chr(0))}",
                            "a string without NUL (\\u0000)", _show(value))
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise self.fail(where, f"lone surrogate at character {exc.start}",
                            "a string of Unicode characters", _show(value)) from None

    def choice(self, obj: dict[str, Any], key: str, path: str, enum: type[StrEnum]) -> Any:
        value = self.key(obj, key, path)
        where = f"{path}.{key}" if path else key
        allowed = [e.value for e in enum]
        if not isinstance(value, str) or value not in allowed:
            raise self.fail(where, "unknown value", " or ".join(allowed), _show(value))
        return enum(value)

    def items(self, obj: dict[str, Any], key: str) -> list[dict[str, Any]]:
        value = self.key(obj, key, "")
        if not isinstance(value, list):
            raise self.fail(key, "wrong type", "list", _found(value))
        return [self.obj(item, f"{key}[{i}]") for i, item in enumerate(value)]

    def unique(self, values: list[Any], list_name: str, key: str) -> None:
        seen: dict[Any, int] = {}
        for i, v in enumerate(values):
            if v in seen:
                raise self.fail(
                    f"{list_name}[{i}].{key}",
                    f"duplicate {key} (also at {list_name}[{seen[v]}])",
                    f"a {key} unique within {list_name}",
                    _show(v),
                )
            seen[v] = i


def _read_json(file: Path) -> Any:
    run_dir = file.parent
    try:
        info = os.stat(file)
    except (FileNotFoundError, NotADirectoryError):
        if not os.path.lexists(run_dir):
            raise FormatError(run_dir, "no such run directory") from None
        if not run_dir.is_dir():
            hint = (f" (give the folder that holds it: {run_dir.parent})"
                    if run_dir.name == MANIFEST_NAME else "")
            raise FormatError(run_dir, f"not a run directory{hint}") from None
        raise FormatError(file, "no manifest: the run directory must hold run.json") from None
    except OSError as exc:
        raise FormatError(file, f"cannot read the manifest: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise FormatError(file, f"not a regular file (a {file_kind(info.st_mode)}); the "
                          "manifest must be a JSON file")
    if info.st_size > MANIFEST_MAX_BYTES:
        raise FormatError(file, "manifest too large", expected=f"<= {MANIFEST_MAX_BYTES} bytes",
                          found=f"{info.st_size} bytes")
    try:
        with open(file, "rb") as f:
            raw = f.read(MANIFEST_MAX_BYTES + 1)
    except OSError as exc:
        raise FormatError(file, f"cannot read the manifest: {exc.strerror or exc}") from None
    if raw.startswith(b"\xef\xbb\xbf"):
        raise FormatError(file, "starts with a UTF-8 byte order mark, which JSON does not "
                          "allow; save the file as UTF-8 without BOM", offset=0)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(
            file, f"not UTF-8 at byte {exc.start} (saved in another encoding, e.g. latin-1?)",
            offset=exc.start, expected="UTF-8 JSON", found=f"byte 0x{raw[exc.start]:02X}",
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(
            file, f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise FormatError(file, "JSON nested too deeply for a manifest") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise FormatError(file, f"invalid JSON value: {exc}") from None


def file_kind(mode: int) -> str:
    """What kind of file system entry ``mode`` (from ``os.stat``) says, for messages."""
    kinds = ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "named pipe"),
             (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
             (stat.S_ISSOCK, "socket"))
    return next((name for test, name in kinds if test(mode)), "special file")


def load_manifest(run_dir: Path) -> Manifest:
    """Read and check ``run_dir/run.json``; raise ``FormatError`` on the first violation."""
    run_dir = Path(run_dir)
    file = run_dir / MANIFEST_NAME
    c = _Checker(file)
    top = c.obj(_read_json(file), "(top level)")

    fmt_name = c.key(top, "format", "")
    if fmt_name != FORMAT_NAME:
        raise c.fail("format", "not a CBT manifest", f'"{FORMAT_NAME}"', _show(fmt_name))
    version = c.key(top, "version", "")
    if not isinstance(version, int) or isinstance(version, bool) or version != FORMAT_VERSION:
        raise c.fail("version", "unsupported version", FORMAT_VERSION, _show(version))
    application = None
    if "application" in top:  # optional, but a string when given (null too is refused)
        application = top["application"]
        if not isinstance(application, str):
            raise c.fail(
                "application", "wrong type", "string", _found(application)
            )
        c.text(application, "application")
    timebase_hz = c.integer(top, "timebase_hz", "", lo=1)
    restore = c.choice(top, "decrementer_restore", "", DecrementerRestore)

    nodes = _nodes(c, top)
    processes = _processes(c, top, run_dir, {n.name for n in nodes})
    regions = _regions(c, top)
    programs = _programs(c, top)
    counters = _counters(c, top)
    communicators = _communicators(c, top, len(processes))

    return Manifest(
        run_dir=run_dir,
        timebase_hz=timebase_hz,
        decrementer_restore=restore,
        nodes=nodes,
        processes=processes,
        regions=regions,
        programs=programs,
        counters=counters,
        communicators=communicators,
        application=application,
    )


def _nodes(c: _Checker, top: dict[str, Any]) -> tuple[Node, ...]:
    out = []
    for i, item in enumerate(c.items(top, "nodes")):
        p = f"nodes[{i}]"
        out.append(
            Node(
                name=c.string(item, "name", p),
                cell_chips=c.integer(item, "cell_chips", p, lo=1, hi=CELL_CHIPS_MAX),
                spes_per_chip=c.integer(item, "spes_per_chip", p, lo=1, hi=SPES_PER_CHIP_MAX),
            )
        )
    c.unique([n.name for n in out], "nodes", "name")
    return tuple(out)


def _processes(
    c: _Checker, top: dict[str, Any], run_dir: Path, node_names: set[str]
) -> tuple[Process, ...]:
    out = []
    for i, item in enumerate(c.items(top, "processes")):
        p = f"processes[{i}]"
        pid = None
        if "pid" in item and item["pid"] is not None:
            pid = c.integer(item, "pid", p)
        out.append(
            Process(
                rank=c.integer(item, "rank", p, hi=U32_MAX),
                node=c.string(item, "node", p),
                path=c.string(item, "path", p),
                start_timebase=c.integer(item, "start_timebase", p),
                start_realtime_ns=c.integer(item, "start_realtime_ns", p),
                pid=pid,
            )
        )
    if not out:
        raise c.fail("processes", "no process", "at least one process", "empty list")
    c.unique([x.rank for x in out], "processes", "rank")
    n = len(out)
    for i, x in enumerate(out):
        if x.rank >= n:
            missing = sorted(set(range(n)) - {y.rank for y in out})
            raise c.fail(
                f"processes[{i}].rank",
                f"ranks must be exactly 0..{n - 1} (rank {missing[0]} is missing)",
                f"0..{n - 1}",
                x.rank,
            )
    for i, x in enumerate(out):
        if x.node not in node_names:
            raise c.fail(
                f"processes[{i}].node",
                "process on an undeclared node",
                "a name from nodes[]",
                _show(x.node),
            )
        if Path(x.path).is_absolute():
            raise c.fail(
                f"processes[{i}].path",
                "path must be relative to the run directory",
                "relative path",
                _show(x.path),
            )
        problem = _path_problem(x.path)
        if problem is not None:
            raise c.fail(f"processes[{i}].path", problem,
                         "the relative path of a file inside the run directory", _show(x.path))
    # one file under two spellings ("a.cbt", "./a.cbt") is one file
    c.unique([os.path.normpath(x.path) for x in out], "processes", "path")
    missing_dumps = [c.fail(f"processes[{i}].path", problem, "an existing regular file",
                            _show(x.path))
                     for i, x in enumerate(out)
                     if (problem := _dump_problem(run_dir / x.path)) is not None]
    if missing_dumps:  # every missing dump, not only the first (``check`` lists them all)
        missing_dumps[0].more = missing_dumps[1:]
        raise missing_dumps[0]
    return tuple(sorted(out, key=lambda x: x.rank))


def _path_problem(text: str) -> str | None:
    """Why the manifest path ``text`` (relative, without NUL) cannot name a file inside the
    run directory, or None: a trailing separator names a directory (``Path`` would drop it),
    ``..`` leaves the run, and ``.`` or nothing names the run directory itself."""
    if text.endswith("/") or (os.altsep is not None and text.endswith(os.altsep)):
        return "path ends in a separator (it names a directory, a dump is a file)"
    parts = text.split("/")
    if ".." in parts:
        return "path leaves the run directory ('..')"
    if all(p in ("", ".") for p in parts):
        return "path names the run directory itself"
    return None


def _dump_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a dump, or None."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return f"dump file does not exist in {path.parent}"
    except OSError as exc:
        return f"cannot access the dump file {path}: {exc.strerror or exc}"
    if not stat.S_ISREG(info.st_mode):
        return f"the dump is not a regular file but a {file_kind(info.st_mode)}"
    if not os.access(path, os.R_OK):
        return f"the dump file {path} is not readable (permission denied)"
    return None


def _regions(c: _Checker, top: dict[str, Any]) -> tuple[Region, ...]:
    out = []
    for i, item in enumerate(c.items(top, "regions")):
        p = f"regions[{i}]"
        out.append(
            Region(
                id=c.integer(item, "id", p, lo=1, hi=REGION_ID_MAX),
                name=c.string(item, "name", p),
                core=c.choice(item, "core", p, Core),
                kind=c.choice(item, "kind", p, RegionKind),
            )
        )
    c.unique([r.id for r in out], "regions", "id")
    c.unique([r.name for r in out], "regions", "name")
    return tuple(out)


def _programs(c: _Checker, top: dict[str, Any]) -> tuple[Program, ...]:
    out = []
    for i, item in enumerate(c.items(top, "programs")):
        p = f"programs[{i}]"
        out.append(Program(id=c.integer(item, "id", p), name=c.string(item, "name", p)))
    c.unique([x.id for x in out], "programs", "id")
    c.unique([x.name for x in out], "programs", "name")
    return tuple(out)


def _counters(c: _Checker, top: dict[str, Any]) -> tuple[Counter, ...]:
    out = []
    for i, item in enumerate(c.items(top, "counters")):
        p = f"counters[{i}]"
        unit = c.key(item, "unit", p)
        if not isinstance(unit, str):  # an empty unit ("") is a unit-less counter
            raise c.fail(f"{p}.unit", "wrong type", "string", _found(unit))
        c.text(unit, f"{p}.unit")
        out.append(
            Counter(
                id=c.integer(item, "id", p, hi=U32_MAX),
                name=c.string(item, "name", p),
                unit=unit,
                core=c.choice(item, "core", p, Core),
            )
        )
    c.unique([x.id for x in out], "counters", "id")
    c.unique([x.name for x in out], "counters", "name")
    return tuple(out)


def _communicators(c: _Checker, top: dict[str, Any], n_ranks: int) -> tuple[Communicator, ...]:
    out = []
    for i, item in enumerate(c.items(top, "communicators")):
        p = f"communicators[{i}]"
        cid = c.integer(item, "id", p, hi=U32_MAX)
        name = c.string(item, "name", p)
        ranks = c.key(item, "ranks", p)
        if not isinstance(ranks, list):
            raise c.fail(f"{p}.ranks", "wrong type", "list", _found(ranks))
        if not ranks:
            raise c.fail(f"{p}.ranks", "empty communicator", "at least one rank", "[]")
        seen: dict[int, int] = {}
        for j, r in enumerate(ranks):
            where = f"{p}.ranks[{j}]"
            if not isinstance(r, int) or isinstance(r, bool):
                raise c.fail(where, "wrong type", "integer", _found(r))
            if not 0 <= r < n_ranks:
                raise c.fail(where, "not a world rank", f"0..{n_ranks - 1}", r)
            if r in seen:
                raise c.fail(
                    where, f"world rank twice in one communicator (also at ranks[{seen[r]}])",
                    "distinct world ranks", r,
                )
            seen[r] = j
        out.append(Communicator(id=cid, name=name, ranks=tuple(ranks)))
    c.unique([x.id for x in out], "communicators", "id")
    c.unique([x.name for x in out], "communicators", "name")
    world = [i for i, x in enumerate(out) if x.id == 0]
    if not world:
        raise c.fail(
            "communicators", "communicator 0 (MPI_COMM_WORLD) is missing", "an entry with id 0",
            "none",
        )
    i = world[0]
    if out[i].name != "MPI_COMM_WORLD":
        raise c.fail(
            f"communicators[{i}].name", "communicator 0 must be MPI_COMM_WORLD",
            '"MPI_COMM_WORLD"', _show(out[i].name),
        )
    if out[i].ranks != tuple(range(n_ranks)):
        raise c.fail(
            f"communicators[{i}].ranks",
            "communicator 0 must hold every world rank in rank order",
            _show(list(range(n_ranks))),
            _show(list(out[i].ranks)),
        )
    return tuple(out)
