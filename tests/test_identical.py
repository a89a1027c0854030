"""The safety net of every refactoring: every golden case (tests/golden.py: the bundled samples
and small simulated runs) converted, checked and reported by the real command gives the
outputs recorded in tests/golden/<case>.json.gz, compared in the normalized form golden.py
describes (archives as otf2-print text, JSON as values, figures only as valid PNGs); a failure
names the case, every output that differs and its first differing line or value. It does not
judge whether the recorded outputs are right: other tests do."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable
from pathlib import Path

import golden
import pytest

EXPECTED = golden.load_expected()
needs_otf2_print = pytest.mark.skipif(shutil.which("otf2-print") is None,
                                      reason="the archives are compared as otf2-print prints them")


def _param(case: golden.Case, marks: list) -> object:
    return pytest.param(case, id=case.name, marks=marks)


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Callable[[golden.Case], tuple[Path, dict[str, golden.Output]]]:
    """A case's directory and conversion outputs, produced once per module (its report's
    test reuses the archive)."""
    done: dict[str, tuple[Path, dict[str, golden.Output]]] = {}

    def get(case: golden.Case) -> tuple[Path, dict[str, golden.Output]]:
        if case.name not in done:
            work = tmp_path_factory.mktemp(case.name) / "case"
            done[case.name] = work, golden.produce_conversion(case, work)
        return done[case.name]

    return get


def _expected(case: golden.Case) -> dict[str, golden.Output]:
    if case.name not in EXPECTED:
        pytest.fail(f"golden case {case.name!r} has no expectations in "
                    f"{golden.golden_file(case.name)}; make them with: {golden.UPDATE_COMMAND}")
    return EXPECTED[case.name]


@needs_otf2_print
@pytest.mark.parametrize("case", [_param(c, []) for c in golden.CASES])
def test_conversion_identical(case, converted):
    _, outputs = converted(case)
    expected, _ = golden.split(_expected(case))
    problems = golden.compare(case.name, expected, outputs)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@needs_otf2_print
@pytest.mark.parametrize("case", [_param(c, [pytest.mark.slow] if c.slow_report else [])
                                  for c in golden.CASES if c.report])
def test_report_identical(case, converted):
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("cell2otf2 report needs matplotlib (the 'report' extra)")
    work, _ = converted(case)
    _, expected = golden.split(_expected(case))
    problems = golden.compare(case.name, expected, golden.produce_report(work))
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def test_no_stale_expectations():
    stale = sorted(EXPECTED.keys() - {c.name for c in golden.CASES})
    assert not stale, (f"tests/golden/ holds cases golden.py no longer has: "
                       f"{stale}; rewrite it with: {golden.UPDATE_COMMAND}")


def test_a_difference_is_shown_at_its_first_line_and_value():
    expected = {"archive/otf2-print": {"text": ["ENTER 0 10", "LEAVE 0 12", "ENTER 1 13"]},
                "sync report": {"json": {"nodes": [{"offset": 1.5}, {"offset": 2.0}]}},
                "report/timeline.png": {"png": "valid"}}
    found = {"archive/otf2-print": {"text": ["ENTER 0 10", "LEAVE 0 11", "ENTER 1 13"]},
             "sync report": {"json": {"nodes": [{"offset": 1.5}, {"offset": 2.5}]}},
             "report/timeline.png": {"png": "valid"}}
    lines = golden.compare("c", expected, found)
    assert "  archive/otf2-print: line 2: expected 'LEAVE 0 12', found 'LEAVE 0 11'" in lines
    assert "  sync report: .nodes[1].offset: expected 2.0, found 2.5" in lines
    assert not any("timeline" in line for line in lines)
    assert golden.compare("c", expected, expected) == []
