"""The import graph of Brook's packages, read from the source (ast, nothing imported).

Five rules (docs/decisions.md, "Layout and packaging" and "RPC plumbing"):
- no import cycle between modules, counting imports inside functions too (a function-local
  import hides a cycle, it does not remove it); only ``if TYPE_CHECKING:`` imports are left out,
  since they never run;
- the storage node's log package is a library: it imports nothing from the rest of
  ``brook_storage_node``;
- ``brook`` is what the services share, so it imports no service package;
- a service imports nothing of the client SDK but the consumer protocol it reads
  (``brook.client.group.protocol``): backoff, error mapping and channels are ``brook.rpc``'s;
- only ``brook.rpc.channels`` opens gRPC channels (``insecure_channel``), so every channel gets
  the one set of options.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICE_PACKAGES = (
    "brook_storage_node",
    "brook_controller",
    "brook_group_coordinator",
    "brook_gateway",
)
LOG_PACKAGE = "brook_storage_node.log"
CHANNELS_MODULE = "brook.rpc.channels"
# The SDK module a service may import: the group coordinator decodes consumer subscriptions.
CLIENT_MODULES_SERVICES_USE = ("brook.client.group.protocol",)


def _package_dirs() -> list[Path]:
    # Where pyproject.toml's [tool.setuptools.packages.find] finds them.
    dirs = [
        ROOT / "brook",
        *sorted(ROOT.glob("services/*/brook_*")),
        ROOT / "gateway" / "brook_gateway",
    ]
    assert {path.name for path in dirs} == {"brook", *SERVICE_PACKAGES}, dirs
    return dirs


def _modules() -> dict[str, Path]:
    """Every first-party module by dotted name."""
    modules = {}
    for package_dir in _package_dirs():
        for path in package_dir.rglob("*.py"):
            parts = path.relative_to(package_dir.parent).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run, wherever it is written."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from (n for child in node.orelse for n in _imports_in(child))
            continue
        yield from _imports_in(node)


def _imports_in(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    else:
        yield from _imports(node)


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The dotted names a statement imports (modules, or names that may be modules)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        anchor = module.split(".")
        anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
        base = ".".join([*anchor, base] if base else anchor)
    yield base
    yield from (f"{base}.{alias.name}" for alias in node.names)


def _graph() -> dict[str, set[str]]:
    """Module -> the first-party modules it imports."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        graph[name] = {
            target
            for node in _imports(tree)
            for target in _targets(name, is_package, node)
            if target in modules and target != name
        }
    return graph


def _cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        # Iterative, so a long import chain cannot hit the recursion limit.
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
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
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

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_no_import_cycles() -> None:
    graph = _graph()
    described = []
    for component in _cycles(graph):
        members = set(component)
        edges = [f"  {a} -> {b}" for a in component for b in sorted(graph[a] & members)]
        described.append("cycle:\n" + "\n".join(edges))
    assert not described, "\n".join(described)


def _imports_from(importers: str, forbidden: Callable[[str], bool]) -> list[str]:
    """Each import by a module of the package ``importers`` of a module ``forbidden`` names."""
    return [
        f"{module} imports {target}"
        for module, targets in sorted(_graph().items())
        if _within(module, importers)
        for target in sorted(targets)
        if forbidden(target)
    ]


def test_log_package_imports_nothing_else_of_the_storage_node() -> None:
    found = _imports_from(
        LOG_PACKAGE,
        lambda target: _within(target, "brook_storage_node") and not _within(target, LOG_PACKAGE),
    )
    assert not found, "\n".join(found)


def test_brook_imports_no_service_package() -> None:
    found = _imports_from(
        "brook", lambda target: any(_within(target, service) for service in SERVICE_PACKAGES)
    )
    assert not found, "\n".join(found)


def test_services_import_no_client_sdk_but_the_consumer_protocol() -> None:
    found = [
        line
        for service in SERVICE_PACKAGES
        for line in _imports_from(
            service,
            lambda target: (
                _within(target, "brook.client") and target not in CLIENT_MODULES_SERVICES_USE
            ),
        )
    ]
    assert not found, "\n".join(found)


def test_the_graph_sees_function_local_and_relative_imports() -> None:
    """The rules above are only as good as the graph: an import inside a function counts, one
    under TYPE_CHECKING does not, and relative imports resolve."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    import brook.errors\n"
        "def f():\n"
        "    from brook_storage_node.config import CONFIG_DEF\n"
        "    from . import files\n"
    )
    module = "brook_storage_node.log.loader"
    targets = {t for n in _imports(ast.parse(source)) for t in _targets(module, False, n)}
    assert "brook_storage_node.config" in targets
    assert "brook_storage_node.log.files" in targets
    assert "brook.errors" not in targets
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_only_the_channel_module_opens_grpc_channels() -> None:
    found = [
        f"{name}:{node.lineno}"
        for name, path in sorted(_modules().items())
        if name != CHANNELS_MODULE
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Attribute) and node.attr in ("insecure_channel", "secure_channel")
    ]
    assert not found, "channels opened outside brook.rpc.channels: " + ", ".join(found)
