"""No import cycles among the project's own modules (pipeline/, retrieval/, ui/ and app.py), and no import
against the order of pipeline/'s subpackages (PIPELINE_LAYERS).

The graph is read from the source with `ast`; nothing is imported. Every import counts: module-level
ones and the lazy ones inside functions (which keep torch and friends off the start-up path), since a
lazy import that closes a cycle still ties the two modules together. `from pkg import name` counts as
an edge to `pkg.name` when that is a module, else to `pkg`. A package's `__init__` is a module of its
own: importing `pkg.sub` does not count as importing `pkg/__init__.py`, which holds no logic here.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("pipeline", "retrieval", "ui")
# pipeline/'s subpackages, lowest first. A module imports from its own subpackage and the ones before it, never
# from a later one; the modules directly in pipeline/ (the jobs users and the runner launch: train, evaluate,
# export, and the runner) come after them all, and nothing in pipeline/ imports retrieval/, ui/ or app.py.
PIPELINE_LAYERS = ("pipeline.run_folder", "pipeline.models", "pipeline.rewards", "pipeline.setup", "pipeline.training")


def project_modules() -> dict[str, Path]:
    """Dotted module name -> source file, for every module the graph covers."""
    modules = {"app": ROOT / "app.py"}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules that `name` imports, at any depth of its source."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([base] if base else []))
            # `from pkg import sub` imports the module pkg.sub when there is one.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            # `import pipeline.run_folder.runs` names pipeline.run_folder.runs; `import pipeline.run_folder.runs.x` can't here.
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def pipeline_layer(module: str) -> int | None:
    """Where a module stands in PIPELINE_LAYERS: its subpackage's index, one past the last for a module directly
    in pipeline/, None for a subpackage missing from the list.

    >>> pipeline_layer("pipeline.run_folder.runs"), pipeline_layer("pipeline.train"), pipeline_layer("pipeline.new.x")
    (0, 5, None)
    """
    for index, package in enumerate(PIPELINE_LAYERS):
        if module == package or module.startswith(package + "."):
            return index
    return len(PIPELINE_LAYERS) if module.count(".") == 1 else None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import by a pipeline/ module of a later layer, or of anything outside pipeline/.

    >>> upward_imports({"pipeline.setup.config": {"pipeline.models.loading", "pipeline.training.probes"},
    ...                 "pipeline.run_folder.runs": {"ui.views"}, "ui.views": {"pipeline.train"}})
    ['pipeline.run_folder.runs -> ui.views', 'pipeline.setup.config -> pipeline.training.probes']
    """
    found = []
    for module in sorted(name for name in graph if name.startswith("pipeline.")):
        own = pipeline_layer(module)
        for target in sorted(graph[module]):
            layer = pipeline_layer(target) if target.startswith("pipeline.") else None
            if not target.startswith("pipeline.") or None not in (own, layer) and layer > own:
                found.append(f"{module} -> {target}")
    return found


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected group of two or more modules, as one cycle through it.

    >>> find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    [['a', 'b', 'c', 'a']]
    >>> find_cycles({"a": {"b"}, "b": set()})
    []
    """
    # Tarjan's strongly connected components, iterative so deep graphs can't hit the recursion limit.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
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
                    components.append(set(component))
    return [_cycle_within(graph, component) for component in components]


def _cycle_within(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, inside the component."""
    first = min(component)
    paths = {first: [first]}
    queue = [first]
    while queue:
        node = queue.pop(0)
        for child in sorted(graph[node] & component):
            if child == first:
                return paths[node] + [first]
            if child not in paths:
                paths[child] = paths[node] + [child]
                queue.append(child)
    raise AssertionError("a strongly connected component always holds a cycle")


def test_the_graph_sees_known_edges():
    graph = import_graph()
    # A module-level import and a lazy one inside a function, so the parser can't silently see nothing.
    assert "pipeline.setup.config" in graph["ui.form"]
    assert "pipeline.run_folder.runs" in graph["pipeline.runner"]
    assert len(graph) > 30


def test_no_import_cycles():
    cycles = find_cycles(import_graph())
    assert not cycles, "Import cycles (break each by moving what both sides need into a leaf module):\n" + \
        "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_every_pipeline_subpackage_has_its_place_in_the_order():
    unplaced = sorted(name for name in import_graph() if name.startswith("pipeline.") and pipeline_layer(name) is None)
    assert not unplaced, f"Add their subpackage to PIPELINE_LAYERS, after what it imports: {unplaced}"


def test_pipeline_imports_only_its_own_layer_and_the_ones_below():
    upward = upward_imports(import_graph())
    assert not upward, ("Imports against the order of pipeline/'s subpackages, lowest first " + ", ".join(PIPELINE_LAYERS)
                        + " (move what both need into the lower one):\n" + "\n".join(upward))
