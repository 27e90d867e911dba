"""storage/ stays the bottom layer: it imports none of the packages built on it, its
modules import each other without a cycle (imports for type checking included), and
none grows past 800 lines."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STORAGE = ROOT / "storage"
ABOVE = {"broker", "controller", "sluice", "jobs", "bench", "tests", "replication"}
MAX_LINES = 800


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in STORAGE.rglob("*.py")}


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules ``name`` imports, anywhere in it (functions and TYPE_CHECKING too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                # "from package import submodule" imports the submodule.
                sub = f"{module}.{alias.name}"
                out.add(sub if sub in known else module)
    return out


def test_storage_imports_no_package_above_it() -> None:
    known = modules()
    wrong = {
        (name, target)
        for name, path in known.items()
        for target in imported(name, path, known)
        if target.split(".")[0] in ABOVE
    }
    assert wrong == set()


def test_storage_modules_import_each_other_without_a_cycle() -> None:
    known = modules()
    graph = {
        name: {t for t in imported(name, path, known) if t in known and t != name}
        for name, path in known.items()
    }
    done: set[str] = set()

    def visit(node: str, trail: list[str]) -> None:
        if node in trail:
            raise AssertionError(
                "import cycle: " + " -> ".join([*trail[trail.index(node) :], node])
            )
        if node in done:
            return
        for target in sorted(graph[node]):
            visit(target, [*trail, node])
        done.add(node)

    for name in sorted(graph):
        visit(name, [])


def test_no_storage_module_is_over_800_lines() -> None:
    sizes = {name: len(p.read_text(encoding="utf-8").splitlines()) for name, p in modules().items()}
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
