"""The house (docs/architecture.md): data flows one way, rules ask only the program model.

Read with `ast` from the source files, never by importing them: every `import` statement of
every module under `tapecheck/` counts, those inside functions too (a lazy import is still a
dependency), and those under `if TYPE_CHECKING:` (a type checker follows them; a reader does too).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tapecheck"
RULE_IMPORTS = {"tapecheck.model", "tapecheck.findings", "tapecheck.rules._common"}
MAX_MODEL_LINES = 700


def modules(package: Path) -> dict[str, Path]:
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that the module `name` imports (the longest known prefix of each)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    wanted = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            wanted += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            wanted += [f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module for alias in node.names]
    found = set()
    for dotted in wanted:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        if dotted and dotted != name:
            found.add(dotted)
    return found


def graph(package: Path) -> dict[str, set[str]]:
    known = modules(package)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_circle_finder_sees_a_lazy_import_circle(tmp_path):
    """The check below can fail: a circle made only by an import inside a function is found, and
    one made only by an `if TYPE_CHECKING:` import."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def f():\n    from pkg.c import g\n")
    (package / "c.py").write_text("import pkg.a\n")
    (package / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import e\n")
    (package / "e.py").write_text("from pkg import d\n")
    assert circles(graph(package)) == [["pkg.a", "pkg.b", "pkg.c"], ["pkg.d", "pkg.e"]]


def test_no_import_circle_in_tapecheck():
    assert circles(graph(PACKAGE)) == []


def test_rules_ask_only_the_model():
    edges = graph(PACKAGE)
    for name, imported in sorted(edges.items()):
        if name.startswith("tapecheck.rules.tap"):
            assert imported <= RULE_IMPORTS, f"{name} imports {sorted(imported - RULE_IMPORTS)}"
    assert edges["tapecheck.rules._common"] <= {"tapecheck.model", "tapecheck.findings"}


def test_findings_know_no_rules_and_the_engine_is_called_not_calling():
    edges = graph(PACKAGE)
    assert edges["tapecheck.findings"] == set()
    for lower in ("tapecheck.lint.fixes", "tapecheck.lint.notebooks", "tapecheck.lint.source", "tapecheck.lint.facts"):
        assert "tapecheck.lint.engine" not in edges[lower], lower
    model = {name for name in edges if name.startswith("tapecheck.model")}
    for name in sorted(model):
        outside = {dep for dep in edges[name] if not dep.startswith("tapecheck.model")}
        assert outside <= {"tapecheck.lint.facts", "tapecheck.lint.source"}, f"{name} imports {sorted(outside)}"


def test_model_modules_are_small_documented_and_free_of_libcst_and_tensorflow():
    for path in sorted((PACKAGE / "model").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        assert ast.get_docstring(tree), f"{path.name} has no docstring saying what it answers"
        assert len(text.splitlines()) < MAX_MODEL_LINES, f"{path.name}: {len(text.splitlines())} lines"
        heads = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                heads |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level:
                heads.add((node.module or "").split(".")[0])
        assert not heads & {"libcst", "tensorflow", "keras"}, path.name
    assert not (PACKAGE / "lint" / "model.py").exists()
