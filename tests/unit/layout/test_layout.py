"""The house's floors: the package's imports form no cycle, every room imports only rooms on
lower floors (docs/architecture.md), the product imports neither the benchmarks nor the
Celery app module, and an import inside a function says why beside it.

The imports are read from the source (every `import` and `from ... import`, at any depth),
so nothing here depends on what happens to be imported at run time.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("scheduler_app", "project", "bench")

# Bottom first. A room may import rooms of lower floors and itself, never a room of its own
# floor or above (so the beat and the worker, or the API and the admin, do not call each other).
FLOORS = [
    ["scheduler_app.conf"],  # the settings and their defaults, read by every room
    [
        "scheduler_app.schedules",
        "scheduler_app.validation",
        "scheduler_app.queues",
        "scheduler_app.fire",
        "scheduler_app.migrationops",
        "scheduler_app.formats",
        "scheduler_app.redisclient",
        "scheduler_app.fsbroker",
        "scheduler_app.cells",
        "scheduler_app.taskapi",
    ],
    ["scheduler_app.models"],
    ["scheduler_app.ledger"],
    ["scheduler_app.observability"],
    ["scheduler_app.hints"],  # what to do next, in the words of a host project or the deployment
    ["scheduler_app.http"],  # outgoing HTTP: the SSRF guard, the clients, signing, shared by targets, worker, alerts
    ["scheduler_app.targets"],
    ["scheduler_app.dispatch", "scheduler_app.worker"],
    ["scheduler_app.alerts"],
    ["scheduler_app.services"],
    ["scheduler_app.djangotasks"],  # the django.tasks backend: enqueue through the services
    ["scheduler_app.management"],  # the commands, and the text renderings the admin shares (tables.py)
    [
        "scheduler_app.api",
        "scheduler_app.admin",
        "scheduler_app.tasks",
        "scheduler_app.webhooks",
        "scheduler_app.checks",
    ],
    ["scheduler_app.apps", "scheduler_app.urls"],  # the URLs a project includes: the API's and the admin's pages
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> Iterator[Path]:
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


MODULES = {module_name(path): path for path in source_files()}


def resolve(importer: str, node: ast.ImportFrom | ast.Import, is_package: bool) -> Iterator[str]:
    """The modules of this tree an import statement names."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        anchor = importer.split(".")
        anchor = anchor if is_package else anchor[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    for alias in node.names:
        yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base


def imports_of(name: str) -> Iterator[tuple[str, ast.stmt, bool]]:
    """(imported module, statement, inside a function?) for each import in module `name`."""
    tree = ast.parse(MODULES[name].read_text())
    is_package = MODULES[name].name == "__init__.py"

    def walk(node: ast.AST, in_function: bool) -> Iterator[tuple[str, ast.stmt, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in resolve(name, child, is_package):
                    yield target, child, in_function
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from walk(child, nested)

    yield from walk(tree, False)


def edges() -> dict[str, set[str]]:
    """Module -> the modules of this tree it imports, with the packages whose __init__ the
    import runs (all but the importer's own)."""
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name in MODULES:
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 2)}
        for target, _, _ in imports_of(name):
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                prefix = ".".join(parts[:i])
                if prefix in MODULES and prefix not in own and prefix != name:
                    graph[name].add(prefix)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def room_of(module: str) -> tuple[str, int] | None:
    for floor, rooms in enumerate(FLOORS):
        for room in rooms:
            if module == room or module.startswith(room + "."):
                return room, floor
    return None


def test_the_package_has_no_import_cycle():
    assert cycles(edges()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_room_imports_only_rooms_below_it():
    upward = []
    for name, targets in edges().items():
        here = room_of(name)
        if here is None:
            continue
        for target in targets:
            there = room_of(target)
            if there is not None and there[0] != here[0] and there[1] >= here[1]:
                upward.append(f"{name} -> {target}")
    assert sorted(upward) == []


def test_every_module_of_the_product_stands_on_a_floor():
    """All but the migrations, which import nothing of the app but its migration operations."""
    unplaced = [name for name in MODULES if name.startswith("scheduler_app.") and room_of(name) is None]
    assert [name for name in unplaced if not name.startswith("scheduler_app.migrations")] == []


def test_the_product_imports_neither_the_benchmarks_nor_the_celery_module():
    wrong = sorted(
        f"{name} -> {target}"
        for name, targets in edges().items()
        if name.startswith("scheduler_app")
        for target in targets
        if target.startswith(("bench", "project"))
    )
    assert wrong == []


def comment_above(lines: list[str], lineno: int) -> bool:
    """A comment on line `lineno` (1-based) or just above the run of imports it stands in."""
    if "#" in lines[lineno - 1]:
        return True
    for line in reversed(lines[: lineno - 1]):
        text = line.strip()
        if text.startswith("#"):
            return True
        if text and not text.startswith(("from ", "import ", ")")) and not text.endswith(","):
            return False
    return False


def test_an_import_inside_a_function_says_why():
    """A comment on the import's line, or above the imports it stands among, says why it is
    not at the top."""
    silent = []
    for name in MODULES:
        if not name.startswith(("scheduler_app", "project")):
            continue
        lines = MODULES[name].read_text().splitlines()
        for _, statement, in_function in imports_of(name):
            last = statement.end_lineno or statement.lineno
            if in_function and not (comment_above(lines, statement.lineno) or "#" in lines[last - 1]):
                silent.append(f"{name}:{statement.lineno}")
    assert sorted(set(silent)) == []


def test_an_import_without_a_comment_is_found():
    lines = ["def f():", "    x = 1", "    import json", "", "    # why", "    import os", "    import re"]
    assert [comment_above(lines, n) for n in (3, 6, 7)] == [False, True, True]
