"""``cell2otf2 inspect`` / ``cell_otf2.inspect``: every number checked against the raw dump
bytes (parsed here with plain numpy, not through the reader) or the simulator's truth."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from paths import SAMPLES  # noqa: E402

from cell_otf2.cli import main as cli_main
from cell_otf2.input import format as fmt
from cell_otf2.input.manifest import load_manifest
from cell_otf2.run.run_info import _readings, inspect

ALL = sorted(p.name for p in SAMPLES.iterdir() if (p / "run.json").exists())
UNDAMAGED = [s for s in ALL if s != "damaged-gap-truncate"]
MOD = 1 << 32


def cli(args: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        cli_main(args)
    return int(exc.value.code or 0)


class Raw:
    """One dump parsed straight from its bytes (docs/format.md 4.1-4.2)."""

    def __init__(self, path: Path) -> None:
        data = path.read_bytes()
        self.order = ">" if data[4:5] == b"B" else "<"
        self.n = (len(data) - 64) // 32
        self.header = data[:64]
        self.body = np.frombuffer(data, np.uint8, count=self.n * 32, offset=64).reshape(-1, 32)
        self.code = self.field(0, "u2")
        self.cls = self.code >> 8

    def field(self, offset: int, kind: str) -> np.ndarray:
        size = np.dtype(kind).itemsize
        return self.body[:, offset:offset + size].copy().view(self.order + kind).ravel()

    def head(self, offset: int, kind: str) -> int:
        return int(np.frombuffer(self.header, self.order + kind, 1, offset)[0])

    def blocks(self) -> list[tuple[int, int, int, int]]:
        """(slot, ctx, seq, count) of every block header."""
        idx = np.flatnonzero(self.code == fmt.ControlCode.BLOCK)
        return list(zip(idx.tolist(), self.field(2, "u2")[idx].tolist(),
                        self.field(8, "u4")[idx].tolist(), self.field(12, "u2")[idx].tolist(),
                        strict=True))

    def readings(self) -> dict[int, list[int]]:
        """Per context, its raw decrementer readings in program order (an undamaged dump:
        each block's records, then its header)."""
        decr = self.field(4, "u4")
        out: dict[int, list[int]] = {}
        for slot, ctx, _seq, count in self.blocks():
            out.setdefault(ctx, []).extend(decr[slot + 1:slot + 1 + count].tolist())
            out[ctx].append(int(decr[slot]))
        return out


def raws(run: Path) -> dict[int, Raw]:
    man = load_manifest(run)
    return {p.rank: Raw(man.dump_path(p.rank)) for p in man.processes}


@pytest.fixture(scope="module")
def infos():
    return {name: inspect(SAMPLES / name) for name in ALL}


@pytest.mark.parametrize("name", ALL)
def test_records_per_kind_blocks_and_slots_match_the_raw_dump(infos, name):
    info = infos[name]
    total: Counter = Counter()
    for p in info.processes:
        raw = raws(SAMPLES / name)[p.rank]
        codes = Counter(raw.code.tolist())
        ppe = {c.name: codes[int(c)] for c in fmt.PpeCode}
        spe = {c.name: codes[int(c)] for c in fmt.SpeCode}
        assert p.records_per_kind == {"ppe": ppe, "spe": spe}
        assert p.records == {"ppe": int((raw.cls == 1).sum()), "spe": int((raw.cls == 2).sum())}
        assert p.slots == raw.n
        assert p.slots_reserved == raw.head(32, "u8")
        assert p.spe_buffer_records == raw.head(10, "u2")
        assert p.byte_order == ("B" if raw.order == ">" else "L")
        blocks = raw.blocks()
        assert p.blocks["count"] == len(blocks) == sum(c.blocks for c in p.contexts)
        assert p.blocks["partial"] == sum(cnt < p.spe_buffer_records for *_, cnt in blocks)
        gaps = np.flatnonzero(raw.code == fmt.ControlCode.GAP)
        assert p.gaps == gaps.size
        assert p.lost_slots == int(raw.field(8, "u8")[gaps].sum())
        assert p.dump_bytes == (SAMPLES / name / p.dump).stat().st_size
        total.update({k: v for side in ("ppe", "spe") for k, v in
                      ((side + k, v) for k, v in p.records_per_kind[side].items())})
    truth = json.loads((SAMPLES / name / "truth.json").read_text())["summary"]
    assert info.totals["records"] == truth["records"]
    assert info.totals["slots"] == truth["slots"]
    assert info.totals["contexts"] == truth["contexts"]
    assert info.totals["processes"] == truth["ranks"] and info.totals["nodes"] == truth["nodes"]
    for side in ("ppe", "spe"):
        assert info.totals["records_per_kind"][side] == {
            k: total[side + k] for k in info.totals["records_per_kind"][side]}


@pytest.mark.parametrize("name", UNDAMAGED)
def test_switches_writes_and_intervals(infos, name):
    """Switches = CTX_SWITCH STOP records of the context, also the simulator's count; every
    STOP/START pair and every DECR_WRITE starts a live interval (docs/format.md 7)."""
    info = infos[name]
    truth = json.loads((SAMPLES / name / "truth.json").read_text())["summary"]
    assert info.totals["switches"] == truth["context_switches"]
    for p in info.processes:
        raw = raws(SAMPLES / name)[p.rank]
        stop = (raw.code == fmt.PpeCode.CTX_SWITCH) & (raw.field(16, "u8") == 1)
        stops = Counter(raw.field(4, "u4")[stop].tolist())
        ctx_of = {slot: ctx for slot, ctx, _, _ in raw.blocks()}
        owner = np.maximum.accumulate(np.where(raw.code == fmt.ControlCode.BLOCK,
                                               np.arange(raw.n), 0))
        writes = Counter(ctx_of[int(o)] for o in
                         owner[raw.code == fmt.SpeCode.DECR_WRITE].tolist())
        for c in p.contexts:
            assert c.switches == stops[c.ctx]
            assert c.decr_writes == writes[c.ctx]
            assert c.intervals == 1 + c.switches + c.decr_writes
            assert c.unresolved_wraps == 0
    if name == "context-switch-restored":
        assert info.totals["switches"] == 24 and info.totals["decr_writes"] == 16


@pytest.mark.parametrize("name", ["fft-16spe", "wraps-heartbeats", "two-nodes-hybrid"])
def test_decrementer_first_last_span_and_wraps(infos, name):
    """Single-interval contexts: span = the unwrapped ticks from the first to the last
    reading, wraps = readings above their predecessor (the decrementer counts down)."""
    info = infos[name]
    for p in info.processes:
        readings = raws(SAMPLES / name)[p.rank].readings()
        for c in p.contexts:
            r = np.array(readings[c.ctx], dtype=np.int64)
            assert c.intervals == 1
            assert (c.first_decr, c.last_decr, c.readings) == (r[0], r[-1], r.size)
            assert c.span_ticks == int(((r[:-1] - r[1:]) % MOD).sum())
            assert c.wraps == int((r[1:] > r[:-1]).sum())
    if name == "wraps-heartbeats":  # minutes of compute: each context wraps (300 s a wrap)
        assert all(c.wraps >= 5 for c in info.processes[0].contexts)
        assert info.totals["heartbeats"] > 0
    else:
        assert info.totals["wraps"] == 0


@pytest.mark.parametrize("name", ALL)
def test_readings_line_up_with_decode(name):
    """Every reading's raw value and its decoded local time differ by whole wraps."""
    from cell_otf2.damage import DamageLog
    from cell_otf2.decode.decoder import decode
    from cell_otf2.input.reader import read_dump

    man = load_manifest(SAMPLES / name)
    dumps = [read_dump(man.dump_path(p.rank), man, p.rank) for p in man.processes]
    dec = decode(man, dumps, DamageLog())
    for d in dumps:
        dom, local, raw = _readings(dec, d)
        assert dom.size == d.spe.size + d.blocks.size
        assert np.all((raw + local) % MOD == 0)
        assert np.all(dec.domains["rank"][dom] == d.rank)


@pytest.mark.parametrize("name", ["two-nodes-hybrid", "context-switch-compensated"])
def test_node_timebase_span(infos, name):
    info = infos[name]
    man = load_manifest(SAMPLES / name)
    per_node: dict[str, list[int]] = {}
    for rank, raw in raws(SAMPLES / name).items():
        tb = raw.field(8, "u8")[raw.cls == 1]
        p = info.processes[rank]
        assert (p.timebase_first, p.timebase_last) == (int(tb.min()), int(tb.max()))
        assert p.span_s == pytest.approx((int(tb.max()) - int(tb.min())) / man.timebase_hz)
        per_node.setdefault(man.processes[rank].node, []).extend([int(tb.min()), int(tb.max())])
    for n in info.nodes:
        assert (n.timebase_first, n.timebase_last) == (min(per_node[n.name]),
                                                       max(per_node[n.name]))
        assert n.ranks == [p.rank for p in man.processes if p.node == n.name]
    assert len(info.nodes) == len(man.nodes)


def test_damaged_run_lost_slots_missing_blocks_and_damage_lines(infos):
    """sample_traces/damaged-gap-truncate: a GAP of 34 slots and a file cut in slot 1054."""
    name = "damaged-gap-truncate"
    info = infos[name]
    truth = json.loads((SAMPLES / name / "truth.json").read_text())
    gap = next(d for d in truth["damage"] if d["kind"] == "gap")
    cut = next(d for d in truth["damage"] if d["kind"] == "truncate")
    p = info.processes[0]
    assert p.gaps == 1 and p.lost_slots == gap["lost_slots"] == 34
    assert p.slots == cut["partial_slot"] == 1054
    raw = raws(SAMPLES / name)[0]
    blocks = raw.blocks()
    # blocks lost in the GAP: per context, the seq numbers skipped
    missing = 0
    for ctx in {b[1] for b in blocks}:
        seq = [s for _, c, s, _ in blocks if c == ctx]
        missing += sum(b - a - 1 for a, b in zip([-1, *seq], seq, strict=False))
    assert missing > 0 and p.blocks["missing"] == info.totals["missing_blocks"] == missing
    # the last block runs past the cut: its declared records beyond the file are missing
    slot, _, _, count = blocks[-1]
    assert p.blocks["records_missing"] == slot + 1 + count - raw.n > 0
    kinds = [line.split(":")[0] for line in info.damage]
    assert {"gap", "truncated_file", "missing_block", "block_overrun"} <= set(kinds)
    assert any(line.startswith("gap: 34 slots lost in 1 GAP") for line in info.damage)


def test_damage_lines_are_the_checks_for_reading_and_decoding(tmp_path):
    """inspect's damage lines are check's lines for the kinds reading and decoding find."""
    from cell_otf2.run.check import check_run

    run = SAMPLES / "damaged-gap-truncate"
    mine = inspect(run).damage
    theirs = check_run(run).lines
    assert mine and all(line in theirs for line in mine)


def test_cli_table_and_json(tmp_path, capsys):
    run = SAMPLES / "two-nodes-hybrid"
    assert cli(["inspect", str(run)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[0] == f"cell2otf2 inspect: {run}"
    assert max(map(len, lines)) <= 100
    assert "SPE contexts" in lines and "Processes" in lines
    assert cli(["inspect", str(run), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == json.loads(json.dumps(inspect(run).to_dict()))
    assert list(data) == ["run_dir", "application", "timebase_hz", "decrementer_restore",
                          "nodes", "processes", "totals", "damage"]
    ctx = data["processes"][0]["contexts"][0]
    assert list(ctx) == ["ctx", "program", "program_id", "created", "records", "blocks",
                         "partial_blocks", "missing_blocks", "intervals", "switches",
                         "decr_writes", "heartbeats", "wraps", "unresolved_wraps", "readings",
                         "first_decr", "last_decr", "span_ticks"]
    programs = {p["id"]: p["name"] for p in json.loads((run / "run.json").read_text())["programs"]}
    assert ctx["program"] == programs[ctx["program_id"]] and ctx["created"] is True
    assert data["totals"]["processes"] == 4 and len(data["nodes"]) == 2


@pytest.mark.parametrize("name", ALL)
def test_every_sample_table_fits_100_columns(infos, name):
    lines = infos[name].lines()
    assert max(map(len, lines)) <= 100
    assert ("Damage found reading and decoding: none" in lines[-1]) == (not infos[name].damage)


def test_damaged_run_is_inspected_with_exit_0(capsys):
    assert cli(["inspect", str(SAMPLES / "damaged-gap-truncate")]) == 0
    out = capsys.readouterr().out
    assert "gap: 34 slots lost in 1 GAP" in out


def write_run(tmp_path: Path, dump: bytes | None) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    manifest = json.loads((SAMPLES / "wraps-heartbeats" / "run.json").read_text())
    (run / "run.json").write_text(json.dumps(manifest))
    if dump is not None:
        (run / manifest["processes"][0]["path"]).write_bytes(dump)
    return run


@pytest.mark.parametrize("case", ["no dir", "no manifest", "bad json", "garbage dump",
                                  "empty dump", "header only", "other rank"])
def test_refused_input_exits_3_with_one_message(tmp_path, capsys, case):
    good = (SAMPLES / "wraps-heartbeats" / "rank00000.cbt").read_bytes()
    if case == "no dir":
        run = tmp_path / "missing"
    elif case == "no manifest":
        run = tmp_path
    elif case == "bad json":
        run = write_run(tmp_path, good)
        (run / "run.json").write_text("{ nope")
    elif case == "garbage dump":
        run = write_run(tmp_path, bytes(np.random.default_rng(0).integers(0, 256, 4096,
                                                                           dtype=np.uint8)))
    elif case == "empty dump":
        run = write_run(tmp_path, b"")
    elif case == "header only":
        run = write_run(tmp_path, good[:64])
    else:
        bad = bytearray(good)
        bad[16:20] = (7).to_bytes(4, "big")
        run = write_run(tmp_path, bytes(bad))
    status = cli(["inspect", str(run)])
    out, err = capsys.readouterr()
    if case == "header only":  # a valid, empty dump: inspected
        assert status == 0 and "0 records" in out
        return
    assert status == 3 and out == ""
    assert err.startswith("cell2otf2: error: ") and len(err.splitlines()) == 1
    assert "Traceback" not in err and "internal error" not in err


def test_usage_errors_exit_2(capsys):
    assert cli(["inspect"]) == 2
    assert cli(["inspect", str(SAMPLES / "fft-16spe"), "--bogus"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_fresh_simulated_run_with_preemption(tmp_path):
    """More contexts than SPUs on two ranks, with short time slices: the simulator's own
    count of context switches and its record count."""
    sim = pytest.importorskip("cell_otf2.sim.run")
    run = tmp_path / "run"
    s = sim.simulate_run(run, "julia", 11, ranks=2, nodes=1, spes=3, spus=2, phases=2,
                         chunks=6, slice_ms=0.2, decr_writes=True)
    info = inspect(run)
    assert s.context_switches > 0
    assert info.totals["switches"] == s.context_switches
    assert info.totals["records"] == s.records and info.totals["slots"] == s.slots
    assert info.totals["contexts"] == s.contexts
    assert info.totals["intervals"] == (info.totals["contexts"] + info.totals["switches"]
                                        + info.totals["decr_writes"])
    assert [p.rank for p in info.processes] == [0, 1]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
