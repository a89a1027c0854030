"""The package's shape: no import cycle among its modules (imports inside functions count,
since they only hide a cycle), and no module importing another module's private name, so each
module's underscore names are its own to change; the compiled helpers are reached through
``native.helper`` only (no module imports one). Also the README's module map names every
module of the package."""

from __future__ import annotations

import ast

from paths import ROOT

PACKAGE = ROOT / "cell_otf2"


def module_imports() -> dict[str, set[str]]:
    """Module name (``decode``, ``report.load``) -> the package modules it imports."""
    out: dict[str, set[str]] = {}
    for f in sorted(PACKAGE.rglob("*.py")):
        parts = f.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts)
        pkg = list(parts[:-1])
        deps: set[str] = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level >= 1:
                base = pkg[: len(pkg) - (node.level - 1)] if node.level > 1 else pkg
                if node.module:
                    deps.add(".".join([*base, node.module]))
                else:
                    deps.update(".".join([*base, a.name]) for a in node.names)
        out[name] = deps
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_inside_the_package():
    assert cycles(module_imports()) == []


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_private_name_imported_from_another_module():
    bad = []
    for f in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level >= 1:
                bad += [f"{f.relative_to(ROOT)}: {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert bad == []


def test_compiled_helpers_are_imported_by_the_native_switch_only():
    """No module but ``native/__init__.py`` names a compiled helper's module in an import
    (absolute or relative)."""
    helpers = ("_decodeloops", "_syncloops", "_emitloops", "_evtwrite", "_evtread")
    bad = []
    for f in sorted(PACKAGE.rglob("*.py")):
        if f == PACKAGE / "native" / "__init__.py":
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or "", *(a.name for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            bad += [f"{f.relative_to(ROOT)}: {n}" for n in names
                    if any(h in n.split(".") for h in helpers)]
    assert bad == []


def test_readme_module_map_names_every_module():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Module map"):]
    missing = [f.name for f in PACKAGE.glob("*.py") if f.name != "__init__.py"
               and f"`{f.name}`" not in section]
    missing += [f"{d.name}/" for d in PACKAGE.iterdir()
                if d.is_dir() and (d / "__init__.py").exists() and f"`{d.name}/`" not in section]
    assert missing == []


def test_every_module_has_a_one_paragraph_docstring():
    """The project standard: a module's docstring says in one paragraph what it does and what
    it does not; rationale, measurements and lists live in docs/."""
    bad = []
    for f in sorted(PACKAGE.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(f.read_text()), clean=False)
        if doc is None or not doc.strip():
            bad.append(f"{f.relative_to(ROOT)}: no module docstring")
        elif any(not line.strip() for line in doc.strip().splitlines()):
            bad.append(f"{f.relative_to(ROOT)}: more than one paragraph")
    assert bad == []


def test_bench_scripts_import_what_exists():
    """Every ``cell_otf2`` module a bench script (or the code it runs in a child, like
    ``family._HOOK``) imports exists: the benches are run by hand, so a moved module
    would otherwise break them unnoticed (``family.py`` imported ``cell_otf2.output`` after
    it moved to ``cell_otf2.run``)."""
    import importlib
    import re

    missing = []
    for path in sorted((ROOT / "bench").rglob("*.py")):
        text = path.read_text()
        for mod, names in re.findall(r"from (cell_otf2[\w.]*) import ([\w, ]+)", text):
            module = importlib.import_module(mod)
            for name in (n.split(" as ")[0].strip() for n in names.split(",")):
                if name and not hasattr(module, name):
                    try:
                        importlib.import_module(f"{mod}.{name}")
                    except ImportError:
                        missing.append(f"{path.name}: from {mod} import {name}")
        for mod in re.findall(r"^\s*import (cell_otf2[\w.]*)", text, re.MULTILINE):
            try:
                importlib.import_module(mod)
            except ImportError:
                missing.append(f"{path.name}: import {mod}")
    assert not missing, missing
