"""Issue 17's safety net: every golden case (tests/golden.py: the bundled samples and small
simulated runs) converted, checked and reported by the real command gives exactly the bytes
recorded in tests/golden/expected.json before any module moved (run-to-run noise normalized
as golden.py says); a failure names the case and every output that differs."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import golden
import pytest

EXPECTED = golden.load_expected()


def _param(case: golden.Case, marks: list) -> object:
    return pytest.param(case, id=case.name, marks=marks)


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Callable[[golden.Case], tuple[Path, dict[str, str]]]:
    """A case's directory and conversion digests, produced once per module (its report's
    test reuses the archive)."""
    done: dict[str, tuple[Path, dict[str, str]]] = {}

    def get(case: golden.Case) -> tuple[Path, dict[str, str]]:
        if case.name not in done:
            work = tmp_path_factory.mktemp(case.name) / "case"
            done[case.name] = work, golden.produce_conversion(case, work)
        return done[case.name]

    return get


def _expected(case: golden.Case) -> dict[str, str]:
    if case.name not in EXPECTED:
        pytest.fail(f"golden case {case.name!r} has no expectations in "
                    f"tests/golden/expected.json; make them with: {golden.UPDATE_COMMAND}")
    return EXPECTED[case.name]


@pytest.mark.parametrize("case", [_param(c, []) for c in golden.CASES])
def test_conversion_identical(case, converted):
    _, digests = converted(case)
    expected, _ = golden.split(_expected(case))
    problems = golden.compare(case.name, expected, digests)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


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
    assert not stale, (f"tests/golden/expected.json holds cases golden.py no longer has: "
                       f"{stale}; rewrite it with: {golden.UPDATE_COMMAND}")
