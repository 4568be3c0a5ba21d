"""The rooms' dependencies point one way (DESIGN.md section 3), checked on the source with ``ast``: every
import statement counts, inside functions and ``if TYPE_CHECKING:`` blocks too."""

from __future__ import annotations

import ast
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: room -> the rooms (package prefixes) it must not import
FORBIDDEN = {
    "profiler.profile": ("profiler.tree", "profiler.symbolize", "profiler.export", "profiler.sampling",
                         "profiler.unwind", "profiler.cli", "agents"),
    "profiler.tree": ("profiler.sampling", "profiler.cli", "profiler.export", "agents"),
    "profiler.symbolize": ("profiler.sampling", "profiler.cli", "profiler.export", "agents"),
    "profiler.export": ("profiler.sampling", "profiler.cli", "agents"),
    "profiler.binary": ("profiler.sampling", "profiler.cli", "profiler.unwind", "profiler.profile", "agents"),
    "profiler.target": ("profiler.sampling", "profiler.cli", "profiler.unwind", "profiler.profile", "agents"),
    "profiler.unwind": ("profiler.sampling", "profiler.cli", "agents"),
    # the engine never imports a concrete agent: cli (and the entry point) wire them in
    "profiler.sampling": ("profiler.cli", "agents"),
    "profiler.model": ("profiler.", "agents"),
}  # fmt: skip


def modules_of(package: str) -> list[tuple[str, str]]:
    """(module name, path) of every Python file of ``package`` (a module path, or a package's)."""
    path = os.path.join(REPO, *package.split("."))
    if os.path.isfile(path + ".py"):
        return [(package, path + ".py")]
    out = []
    for root, _dirs, files in os.walk(path):
        for name in files:
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(root, name), REPO)[: -len(".py")]
                out.append((rel.replace(os.sep, ".").removesuffix(".__init__"), os.path.join(root, name)))
    return out


def imports_of(path: str, module: str) -> list[tuple[int, str]]:
    """(line, imported module) of every import in the file, relative ones made absolute."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    found = []
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names] or [(node.lineno, base)]
    return found


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_a_room_imports_none_of_the_rooms_above_it(room):
    wrong = []
    for module, path in modules_of(room):
        for line, name in imports_of(path, module):
            if any(name == bad or name.startswith(bad if bad.endswith(".") else bad + ".") for bad in FORBIDDEN[room]):
                wrong.append(f"{os.path.relpath(path, REPO)}:{line} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_the_architecture_map_names_every_room_and_top_level_module():
    """docs/architecture.md's table of rooms names each package of profiler/ and agents/, and each module at
    profiler/'s top, so that a newcomer finds every room there."""
    with open(os.path.join(REPO, "docs", "architecture.md"), encoding="utf-8") as f:
        rows = {line.split("|")[1].strip().strip("`") for line in f if line.startswith("| `")}
    rooms = {f"{name}/" for name in os.listdir(os.path.join(REPO, "profiler"))
             if os.path.isfile(os.path.join(REPO, "profiler", name, "__init__.py"))}  # fmt: skip
    rooms |= {f"agents/{name}/" for name in os.listdir(os.path.join(REPO, "agents"))
              if os.path.isfile(os.path.join(REPO, "agents", name, "__init__.py"))}  # fmt: skip
    modules = {name for name in os.listdir(os.path.join(REPO, "profiler"))
               if name.endswith(".py") and name not in ("__init__.py", "__main__.py")}  # fmt: skip
    missing = sorted((rooms | modules) - rows)
    assert not missing, f"docs/architecture.md names no row for {missing}"
