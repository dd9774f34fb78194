"""gputape's modules form layers that only look down (gputape/README.md, "Layers").

Every ``import`` in ``gputape/`` is parsed, function-local ones included, and each module is
placed in a layer. A module may import only from its own layer or the ones below it, the whole
graph has no cycle, and no module assigns another module's attributes: state changes go
through functions of the module that owns the state. Each layer is one package (or one
top-level module): a package spans several layers only where its modules sit at different
heights (``core``: the tape is above ``ops``, whose functions are its VJPs' namespace). A new
module must be given a layer here (the test says so), which is the moment to decide where it
belongs.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "gputape"

# Bottom up; patterns are fnmatch patterns (``gputape.nn*``: the package and its submodules).
# gputape/README.md lists the same layers; keep the two in step.
LAYERS: list[tuple[str, list[str]]] = [
    (
        "core: thread state and leaf helpers",
        ["gputape.core", "gputape.core.state", "gputape.core._errors", "gputape.core._nest", "gputape.core._generate"],
    ),
    (
        "devices: the backend (the only cupy importer) and cuBLAS",
        ["gputape.devices", "gputape.devices.backend", "gputape.devices.cublas"],
    ),
    ("config", ["gputape.config"]),
    ("devices: placement", ["gputape.devices.placement"]),
    ("core.expr: the derivative language and its renderers", ["gputape.core.expr*"]),
    (
        "core: tensor, primitive registry, recording, dispatch, explanations, Module",
        [
            "gputape.core.tensor",
            "gputape.core.primitive",
            "gputape.core.recording",
            "gputape.core.dispatch",
            "gputape.core.explain",
            "gputape.core.module",
        ],
    ),
    ("core.backward: the sweep, its compiled form, the CUDA-graph replay", ["gputape.core.backward*"]),
    ("kernels: the build (sources, NVRTC harness, per-device compile)", ["gputape.kernels", "gputape.kernels.build"]),
    ("ops: the op library (linalg/, fft)", ["gputape.ops*"]),
    ("linalg: the public path of ops.linalg", ["gputape.linalg"]),
    ("fft: the public path of ops.fft", ["gputape.fft"]),
    ("random", ["gputape.random"]),
    (
        "core: the tape and custom_gradient (their VJP namespace is the op library)",
        ["gputape.core.tape", "gputape.core.custom_gradient", "gputape.core.loss_head"],
    ),
    ("devices: memory (what tapes hold, the pools)", ["gputape.devices.memory"]),
    ("testing", ["gputape.testing"]),
    ("debug (with the profiler)", ["gputape.debug*"]),
    ("function", ["gputape.function*"]),
    ("optim", ["gputape.optim*"]),
    ("checkpoint", ["gputape.checkpoint*"]),
    ("distributed", ["gputape.distributed*"]),
    ("data", ["gputape.data"]),
    ("nn", ["gputape.nn*"]),
    ("kernels: the registry (gathers the kernels nn and optim declare)", ["gputape.kernels.registry"]),
    ("tf", ["gputape.tf*"]),
    ("the package", ["gputape", "gputape.__main__"]),
]


def _modules() -> dict[str, Path]:
    mods = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


MODULES = _modules()


def layer_of(mod: str) -> int | None:
    for k, (_, patterns) in enumerate(LAYERS):
        for pat in patterns:
            if mod == pat or fnmatch.fnmatch(mod, pat) or (pat.endswith("*") and mod == pat[:-1]):
                return k
    return None


def _imports(mod: str, path: Path) -> list[tuple[str, int, bool]]:
    """(imported gputape module, line, at module level?) for every import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    here = mod.split(".") if is_pkg else mod.split(".")[:-1]
    top_level = {id(n) for n in tree.body}
    top_level |= {id(n) for s in tree.body if isinstance(s, (ast.If, ast.Try)) for n in ast.walk(s)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name == "gputape" or a.name.startswith("gputape.")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and (node.module == "gputape" or node.module.startswith("gputape.")):
                target = node.module
            else:
                continue
            names = [f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target for a in node.names]
        else:
            continue
        for name in names:
            while name not in MODULES and "." in name:
                name = name.rsplit(".", 1)[0]
            if name != mod:
                found.append((name, node.lineno, id(node) in top_level))
    return found


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def test_every_module_has_a_layer():
    missing = [m for m in MODULES if layer_of(m) is None]
    assert not missing, f"give these modules a layer in tests/test_import_layers.py: {missing}"


def test_each_layer_is_one_package():
    """The modules of a layer share one package (or are one top-level module): no layer lumps packages."""
    lumped = []
    for k, (title, _) in enumerate(LAYERS):
        mods = sorted(m for m in MODULES if layer_of(m) == k)
        assert mods, f"layer {title!r} matches no module"
        parts = [m.split(".") for m in mods]
        common = parts[0]
        for p in parts[1:]:
            n = 0
            while n < min(len(common), len(p)) and common[n] == p[n]:
                n += 1
            common = common[:n]
        if common == ["gputape"] and title != "the package":
            lumped.append(f"{title}: {mods}")
    assert not lumped, "layers holding more than one package:\n" + "\n".join(lumped)


def test_the_layers_are_written_down_in_the_package_readme():
    text = (PKG / "README.md").read_text()
    missing = [title for title, _ in LAYERS if f"**{title.split(':')[0].split()[0]}**" not in text]
    assert not missing, f"gputape/README.md does not describe these layers: {missing}"


def test_no_module_imports_from_a_layer_above_it():
    upward = []
    for mod, imports in GRAPH.items():
        mine = layer_of(mod)
        for target, line, _ in imports:
            theirs = layer_of(target)
            if mine is not None and theirs is not None and theirs > mine:
                upward.append(
                    f"{MODULES[mod].relative_to(PKG.parent)}:{line}: {mod} ({LAYERS[mine][0]}) imports "
                    f"{target} ({LAYERS[theirs][0]})"
                )
    assert not upward, "upward imports:\n" + "\n".join(upward)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_not_even_through_a_function_local_import():
    graph = {m: {t for t, _, _ in imports} for m, imports in GRAPH.items()}
    graph["gputape"] = set()  # the package imports everything to re-export it; nothing below may import it back
    cycles = _cycles(graph)
    detail = []
    for comp in cycles:
        members = set(comp)
        for m in comp:
            for t, line, _ in GRAPH[m]:
                if t in members:
                    detail.append(f"  {MODULES[m].relative_to(PKG.parent)}:{line}: {m} -> {t}")
    assert not cycles, f"import cycles {cycles}:\n" + "\n".join(detail)


def test_nothing_imports_the_package_root_from_inside():
    inside = [
        f"{m}:{line}"
        for m, imports in GRAPH.items()
        if m != "gputape.__main__"  # ``python -m gputape``: the package's entry point, above it
        for t, line, _ in imports
        if t == "gputape"
    ]
    assert not inside, f"modules importing gputape itself (a cycle through __init__): {inside}"


def _module_aliases(tree: ast.Module, mod: str, is_pkg: bool) -> set[str]:
    """Local names bound to gputape modules by the imports of ``tree``."""
    here = mod.split(".") if is_pkg else mod.split(".")[:-1]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("gputape"):
                    names.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                target = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                if f"{target}.{a.name}" in MODULES:
                    names.add(a.asname or a.name)
    return names


def _assigned_module_attributes(src: str, mod: str, is_pkg: bool) -> list[tuple[int, str]]:
    """(line, ``alias.attr``) for each assignment (or setattr/delattr) to an imported gputape module's attribute."""
    tree = ast.parse(src)
    aliases = _module_aliases(tree, mod, is_pkg)
    found = []
    for node in ast.walk(tree):
        targets: list = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            targets = [ast.Attribute(value=node.args[0], attr="?")] if node.args else []
        flat = []
        for t in targets:
            flat.extend(t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])
        for t in flat:  # rebinding ``module.name`` (mutating an object it holds is that object's business)
            base = t
            while isinstance(base, ast.Attribute) and isinstance(base.value, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) and base.value.id in aliases:
                if base is t or _is_module_path(base.value.id, t):
                    found.append((node.lineno, f"{base.value.id}.{base.attr}"))
    return found


def _is_module_path(alias: str, t: ast.Attribute) -> bool:
    """``gputape.core.tape.x = ...`` (a dotted module path) rebinds a module's attribute too."""
    return alias == "gputape"


def test_no_module_assigns_another_modules_attributes():
    found = [
        f"{path.relative_to(PKG.parent)}:{line}: {what}"
        for mod, path in MODULES.items()
        for line, what in _assigned_module_attributes(path.read_text(), mod, path.name == "__init__.py")
    ]
    assert not found, "assignments to another module's attributes (call a function of that module instead):\n" + (
        "\n".join(found)
    )


@pytest.mark.parametrize(
    ("src", "expect"),
    [
        ("from . import tape as _tape\n_tape._DIFF_F = 1\n", ["_tape._DIFF_F"]),
        ("from . import tape\ndef f():\n    setattr(tape, 'x', 1)\n", ["tape.?"]),
        ("import gputape.core.tape\ngputape.core.tape.x += 1\n", ["gputape.core"]),
        ("from . import tape\ntape.state.cache['k'] = 1\ntape.state.n = 2\n", []),  # objects the module holds
        ("from .tensor import Tensor\nTensor.T = 1\n", []),  # a class's attribute: the ops install operators
    ],
)
def test_the_assignment_check_sees_what_it_should(src, expect):
    assert [w for _, w in _assigned_module_attributes(src, "gputape.core.m", False)] == expect


def test_the_layer_rule_sees_function_local_imports():
    # tape.py's methods once imported gputape.debug's explanations inside the function body: such
    # an import is found (and would be reported as upward) like a module-level one
    src = "def f():\n    from ..debug.numerics import check_numerics\n"
    tree = ast.parse(src)
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert imports and imports[0].module == "debug.numerics" and imports[0].level == 2
    assert layer_of("gputape.debug.numerics") > layer_of("gputape.core.tape")
