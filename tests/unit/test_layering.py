"""The product's import graph: no cycle, no upward import, no private name across modules.

Every product module is parsed with ``ast`` (nothing is imported). All of its imports count:
module level, inside functions, and under ``if TYPE_CHECKING:``. A function-level import
run late to dodge a cycle is still a cycle, and a TYPE_CHECKING import is still a
dependency of the design (the importer is written against the other module's types; change
one and the other must follow), so neither is exempt.

Run as a script for the figures: ``python tests/unit/test_layering.py``.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Packages from the bottom up: a module may import its own package and those listed before
# it, never one listed after it. Names on one line are peers and must not import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("protocol",),  # the Kafka wire format
    # What controller/ and broker/ share: the ACL model, topic-config keys and validation,
    # secret references, serving HTTP, stopping background tasks (common/__init__.py).
    ("common",),
    ("storage", "replication"),  # the stores behind the interfaces; classic log replication
    ("controller",),  # the metadata quorum
    ("broker",),
    ("jobs",),  # batch jobs reading a cluster's data
    ("sluice",),  # the command line, cluster launcher and backend wiring
    ("bench",),
)
PACKAGES = frozenset(name for layer in LAYERS for name in layer)
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}

# There is no list of known violations (issue 26 removed the last ones): a cycle, an upward
# import or a private name imported across modules fails its test. Fix the layout (an
# interface defined at the level that uses it, a type moved down to its users), or, if the
# layering itself is wrong, change LAYERS or BROKER_LAYERS and say why.

# Inside broker/, its parts from the bottom up, by data flow: a sub-package is a part (its
# sub-packages belong to it, except logs/, whose engines are parts of their own: the
# interface they implement below them, the router that picks one above them); the broker's
# configuration (config, loose at broker/'s top) is the part "broker" at the bottom; the
# modules that wire it all together sit on top: the request pipeline (server/'s connection,
# listener, API table and ApiVersions, whose version ranges the table serves) and the
# Broker (node). The rest of server/ is what every stage shares (metrics, log budget,
# refusals, quota enforcement, connection limits, HTTP endpoint, handler helpers).
BROKER_LAYERS: tuple[tuple[str, ...], ...] = (
    ("broker",),  # the broker's configuration
    ("server",),  # shared by every stage
    ("security",),  # principals, authentication, the authorizer
    ("metadata",),  # topics and their configs, membership, the Metadata handlers
    # The partition logs: the interface the engines implement and the fetch slots they fill
    # (partition_log, fetch_slots), the engines (the classic appender shares the diskless
    # one's types; classic with its tiered part behind it), the migration between them,
    # then the router and the engines' table that handlers call.
    ("logs.interface",),
    ("logs.diskless",),
    ("logs.classic",),
    ("logs.tiered", "logs.migration"),
    ("logs",),
    ("groups",),  # consumer groups
    ("transactions",),  # the transaction coordinator (its markers go through the logs)
    ("produce", "fetch", "admin"),  # the data-path and administration handlers
    ("pipeline",),  # the request pipeline: connections, dispatch to the handlers
    ("node",),  # the Broker
)
BROKER_RANK = {name: i for i, layer in enumerate(BROKER_LAYERS) for name in layer}
# Modules whose part is not their package's (see above).
BROKER_MODULE_PART = {
    "broker.node": "node",
    "broker.server.api_table": "pipeline",
    "broker.server.api_versions": "pipeline",
    "broker.server.connection": "pipeline",
    "broker.server.listener": "pipeline",
    "broker.logs.partition_log": "logs.interface",
    "broker.logs.fetch_slots": "logs.interface",
}


@dataclass(frozen=True)
class Import:
    importer: str
    module: str  # the product module depended on
    names: tuple[str, ...]  # the names taken from it by ``from module import ...``
    line: int
    type_only: bool  # under ``if TYPE_CHECKING:`` (counted all the same; reported apart)


def product_modules(root: Path = ROOT) -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in sorted(PACKAGES):
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _is_package(name: str, modules: dict[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _nodes(
    node: ast.AST, type_only: bool = False
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement anywhere in ``node`` (functions, classes, branches), with
    whether it sits under ``if TYPE_CHECKING:``."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node, type_only
        return
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        for child in node.body:
            yield from _nodes(child, True)
        for child in node.orelse:
            yield from _nodes(child, type_only)
        return
    for child in ast.iter_child_nodes(node):
        yield from _nodes(child, type_only)


def _longest_module(dotted: str, modules: dict[str, Path]) -> str | None:
    parts = dotted.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def imports_of(name: str, modules: dict[str, Path]) -> list[Import]:
    """The product modules ``name`` imports, each with the names it takes from them."""
    path = modules[name]
    tree = ast.parse(path.read_text(), str(path))
    package = name if _is_package(name, modules) else name.rpartition(".")[0]
    found: list[Import] = []
    for node, type_only in _nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _longest_module(alias.name, modules)
                if target is not None:
                    found.append(Import(name, target, (), node.lineno, type_only))
            continue
        if node.level:
            base_parts = package.split(".")
            base_parts = base_parts[: len(base_parts) - (node.level - 1)]
            base = ".".join([*base_parts, *([node.module] if node.module else [])])
        else:
            base = node.module or ""
        if base.split(".")[0] not in PACKAGES:
            continue
        names: list[str] = []
        for alias in node.names:
            # ``from package import module`` depends on that module, not on the package.
            submodule = f"{base}.{alias.name}"
            if submodule in modules:
                found.append(Import(name, submodule, (), node.lineno, type_only))
            else:
                names.append(alias.name)
        if names:
            target = _longest_module(base, modules)
            if target is not None:
                found.append(Import(name, target, tuple(names), node.lineno, type_only))
    return found


def graph(modules: dict[str, Path]) -> dict[str, list[Import]]:
    return {name: imports_of(name, modules) for name in modules}


def cycles(edges: dict[str, list[Import]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    successors = {
        name: sorted({i.module for i in found if i.module != name}) for name, found in edges.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: set[frozenset[str]] = set()
    for root in sorted(successors):
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            descended = False
            for i in range(child, len(successors[node])):
                succ = successors[node][i]
                if succ not in index:
                    work.append((node, i + 1))
                    work.append((succ, 0))
                    descended = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if descended:
                continue
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(frozenset(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def _broker_part(module: str, modules: dict[str, Path]) -> str:
    if module in BROKER_MODULE_PART:
        return BROKER_MODULE_PART[module]
    parts = module.split(".")
    if parts[1:2] == ["logs"] and (
        len(parts) > 3 or (len(parts) == 3 and _is_package(module, modules))
    ):
        return f"logs.{parts[2]}"  # the engines are parts of logs/ in their own right
    if len(parts) > 2 or _is_package(module, modules):
        return parts[1] if len(parts) > 1 else "broker"
    return "broker"


def _is_upward(importer: str, imported: str, modules: dict[str, Path]) -> bool:
    top, other = importer.split(".")[0], imported.split(".")[0]
    if other != top:
        return RANK[other] >= RANK[top]
    if top != "broker":
        return False
    mine, theirs = _broker_part(importer, modules), _broker_part(imported, modules)
    return mine != theirs and BROKER_RANK[theirs] >= BROKER_RANK[mine]


def upward(edges: dict[str, list[Import]], modules: dict[str, Path]) -> set[tuple[str, str]]:
    """Imports of a package not below the importer's (LAYERS) or, inside broker/, of a part
    not below the importer's (BROKER_LAYERS)."""
    return {
        (name, i.module)
        for name, imports in edges.items()
        for i in imports
        if _is_upward(name, i.module, modules)
    }


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(edges: dict[str, list[Import]]) -> set[tuple[str, str, str]]:
    """Private names taken from another module. A private module (``_recwalk``) is private
    to its package, so its own package may import it."""
    found: set[tuple[str, str, str]] = set()
    for name, imports in edges.items():
        for i in imports:
            for taken in i.names:
                if _private(taken):
                    found.add((name, i.module, taken))
            package, _, last = i.module.rpartition(".")
            if _private(last) and not name.startswith(package + "."):
                found.add((name, package, last))
    return found


@dataclass(frozen=True)
class Findings:
    cycles: set[frozenset[str]]
    upward: set[tuple[str, str]]
    private: set[tuple[str, str, str]]
    type_only_upward: set[tuple[str, str]]  # upward imports made only under TYPE_CHECKING

    def figures(self) -> str:
        sizes = sorted(len(c) for c in self.cycles)
        return (
            f"import cycles: {len(self.cycles)} (modules in each: {sizes}); "
            f"upward imports: {len(self.upward)} "
            f"({len(self.type_only_upward)} only under TYPE_CHECKING); "
            f"private imports: {len(self.private)}"
        )


def findings(root: Path = ROOT) -> Findings:
    modules = product_modules(root)
    edges = graph(modules)
    up = upward(edges, modules)
    runtime = {
        (name, i.module)
        for name, imports in edges.items()
        for i in imports
        if not i.type_only and (name, i.module) in up
    }
    return Findings(cycles(edges), up, private_imports(edges), up - runtime)


def test_no_import_cycle() -> None:
    found = findings()
    print(found.figures())
    assert not found.cycles, f"import cycles: {[sorted(c) for c in found.cycles]}"


def test_no_upward_import() -> None:
    found = findings()
    assert not found.upward, (
        f"upward imports (see LAYERS and BROKER_LAYERS; TYPE_CHECKING ones count too): "
        f"{sorted(found.upward)}"
    )


def test_no_private_name_imported_across_modules() -> None:
    found = findings().private
    assert not found, f"private names imported from another module: {sorted(found)}"


def test_every_package_has_a_layer_and_ships() -> None:
    """A new top-level package is placed in LAYERS, installed (pyproject.toml) and copied
    into the image (deploy/Dockerfile); bench/ is a tool of the repository and ships in
    neither."""
    present = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    assert present == PACKAGES, f"packages not in LAYERS: {sorted(present - PACKAGES)}"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    included = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    copied = set(re.findall(r"^COPY (\w+) ", (ROOT / "deploy/Dockerfile").read_text(), re.M))
    shipped = PACKAGES - {"bench"}
    assert {f"{name}*" for name in shipped} <= set(included), included
    assert shipped <= copied, f"not copied into the image: {sorted(shipped - copied)}"


def _write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checks_see_late_type_only_and_private_imports(tmp_path: Path) -> None:
    """The checker itself: a cycle closed by a function-level import, an upward import made
    only under TYPE_CHECKING and a private name are all found."""
    _write(
        tmp_path,
        {
            "protocol/__init__.py": "",
            "protocol/a.py": "def f():\n    from . import b\n",
            "protocol/b.py": "from .a import f\nfrom ._c import walk\n",
            "protocol/_c.py": "",
            "protocol/d.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from broker.x import Broker\n"
            ),
            "broker/__init__.py": "",
            "broker/x.py": "from protocol.a import _hidden\nfrom protocol._c import walk\n",
        },
    )
    found = findings(tmp_path)
    assert found.cycles == {frozenset({"protocol.a", "protocol.b"})}
    assert found.upward == found.type_only_upward == {("protocol.d", "broker.x")}
    assert found.private == {
        ("broker.x", "protocol.a", "_hidden"),
        ("broker.x", "protocol", "_c"),
    }


def test_an_engine_importing_one_above_it_is_upward(tmp_path: Path) -> None:
    """Inside broker/logs/: the classic engine importing its tiered part (above it), even
    for a type only, is found; the other way round is not."""
    _write(
        tmp_path,
        {
            "broker/__init__.py": "",
            "broker/logs/__init__.py": "",
            "broker/logs/classic/__init__.py": "",
            "broker/logs/classic/partition.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from broker.logs.tiered.view import View\n"
            ),
            "broker/logs/tiered/__init__.py": "",
            "broker/logs/tiered/view.py": "from broker.logs.classic.partition import P\n",
        },
    )
    found = findings(tmp_path)
    assert found.upward == {("broker.logs.classic.partition", "broker.logs.tiered.view")}
    assert found.cycles == {frozenset({"broker.logs.classic.partition", "broker.logs.tiered.view"})}


if __name__ == "__main__":
    result = findings()
    for c in sorted(result.cycles, key=len):
        print(f"cycle ({len(c)} modules): {' '.join(sorted(c))}")
    for u in sorted(result.upward):
        print(
            f"upward: {u[0]} -> {u[1]}{' (TYPE_CHECKING)' if u in result.type_only_upward else ''}"
        )
    for p in sorted(result.private):
        print(f"private: {p[0]} imports {p[2]} from {p[1]}")
    print(result.figures())
    sys.exit(0)
