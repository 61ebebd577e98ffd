"""The layers, checked on the source: encoders < indexer < training < retriever < propdex < eval.

A module imports from its own layer or the ones below it, never above:
encoders turn text into vectors, the indexer reads corpora and writes
indexes with them, training reads corpora through the indexer's readers,
the retriever loads and searches, `propdex` is the user's surface (API, CLI,
server, adapters), and eval measures all of them. Nothing imports eval at
start-up: the CLI registers its commands and imports them when run. No two
modules import each other at module level.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"propdex": "propdex", "propdex.encoders": "encoders", "propdex.indexer": "indexer",
           "propdex.retriever": "retriever", "propdex.eval": "eval"}
LAYERS = ["propdex.encoders", "propdex.indexer", "propdex.encoders.training", "propdex.retriever", "propdex", "propdex.eval"]


def layer(module: str) -> int:
    """The layer of a module: its longest prefix in LAYERS."""
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS.index(best)


def module_name(path: Path) -> str:
    for package, folder in FOLDERS.items():
        if path.is_relative_to(ROOT / folder):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            return ".".join([package, *parts[:-1]] if parts[-1] == "__init__" else [package, *parts])
    raise ValueError(path)


def imports(module: str, source: str, is_package: bool = False) -> list[tuple[str, int, bool]]:
    """(imported module, line, at module level) for every propdex import in `source`."""
    tree = ast.parse(source)
    top = {id(n) for n in _module_level(tree.body)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) - (node.level - (1 if is_package else 0))]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] if node.module or not node.level else [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        out += [(n, node.lineno, id(node) in top) for n in names if n.split(".")[0] == "propdex"]
    return out


def _module_level(body: list[ast.stmt]):
    """The statements run on import: the body, and inside its if/try blocks, but not under TYPE_CHECKING."""
    for node in body:
        yield node
        if isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            yield from _module_level(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            yield from _module_level(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])


def sources() -> dict[str, tuple[Path, str]]:
    return {module_name(p): (p, p.read_text()) for folder in FOLDERS.values() for p in sorted((ROOT / folder).rglob("*.py"))}


def upward(module: str, source: str, is_package: bool = False) -> list[str]:
    return [f"{module} imports {target} (line {line})" for target, line, _ in imports(module, source, is_package)
            if layer(target) > layer(module)]


def test_no_module_imports_a_layer_above_its_own():
    problems = [p for m, (path, src) in sources().items() for p in upward(m, src, path.name == "__init__.py")]
    assert problems == []


def test_the_check_catches_an_upward_import():
    assert upward("propdex.encoders.tokens", "from propdex.retriever import Searcher\n")
    assert upward("propdex.indexer.build", "def f():\n    from ..retriever.searcher import Searcher\n")
    assert upward("propdex.retriever.hits", "import propdex.eval.run\n")
    assert not upward("propdex.retriever.hits", "from propdex.indexer import store\nfrom . import fusion\n")


def test_nothing_outside_eval_imports_eval_at_module_level():
    found = [f"{m} line {line}" for m, (path, src) in sources().items() if layer(m) < layer("propdex.eval")
             for target, line, top in imports(m, src, path.name == "__init__.py") if top and layer(target) == layer("propdex.eval")]
    assert found == []


def test_no_import_cycle_at_module_level():
    found = sources()
    graph = {m: {t for t, _, top in imports(m, src, path.name == "__init__.py") if top and t in found and t != m}
             for m, (path, src) in found.items()}
    assert cycles(graph) == []


def test_the_check_catches_a_cycle():
    assert cycles({"propdex.eval.rr": {"propdex.eval.run"}, "propdex.eval.run": {"propdex.eval.rr"}})
    assert not cycles({"propdex.eval.rr": {"propdex.eval.run"}, "propdex.eval.run": set()})


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles in `graph`, except a package's __init__ and its own modules re-exporting each other."""
    found = []

    def visit(node, stack, seen):
        for nxt in graph[node]:
            if nxt in stack:
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in seen:
                seen.add(nxt)
                visit(nxt, stack + [nxt], seen)

    for m in graph:
        visit(m, [m], {m})
    # A package's __init__ re-exporting its modules is no cycle.
    return [c for c in found if not any(a.startswith(b + ".") or b.startswith(a + ".") for a, b in zip(c, c[1:]))]


@pytest.mark.parametrize("module, expected", [("propdex.encoders.tokens", 0), ("propdex.encoders.training.cli", 2),
                                              ("propdex.index", 4), ("propdex.eval.run", 5), ("propdex", 4)])
def test_layer_of(module, expected):
    assert layer(module) == expected


MAX_MODULE_LINES, MAX_CLASS_LINES = 500, 250


def test_modules_and_classes_stay_small_enough_to_read():
    """A module over 500 lines or a class over 250 does several jobs: split it by job."""
    long = []
    for module, (path, src) in sources().items():
        if len(src.splitlines()) > MAX_MODULE_LINES:
            long.append(f"{module}: {len(src.splitlines())} lines")
        long += [f"{module}.{n.name}: {n.end_lineno - n.lineno + 1} lines" for n in ast.walk(ast.parse(src))
                 if isinstance(n, ast.ClassDef) and n.end_lineno - n.lineno + 1 > MAX_CLASS_LINES]
    assert long == []
