"""Type checkers see gputape's API as it runs.

Much of the API is made at import time: the elementwise entry points are generated per primitive
(``gputape.core.dispatch.unary_op``/``binary_op``), the comparisons are closures, and
``gputape.ops`` attaches Tensor's operators and methods by assignment. Type checkers run none of
that code, so it is declared for them: ``UnaryOp``/``BinaryOp`` (the generated functions' types)
and the ``TYPE_CHECKING`` block of ``Tensor``. The tests here check those declarations against
the runtime objects (so they cannot drift), and run mypy (when installed) on gputape's modules,
examples/, the README's python blocks and a small user program whose expected errors are marked.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib
import re
import subprocess
import sys
import tempfile
import types

import pytest

import gputape as gt
from gputape.core.dispatch import BinaryOp, UnaryOp

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _public_paths() -> list[str]:
    """The public import paths, as gputape/README.md lists them (one list for the docs and this test)."""
    text = (ROOT / "gputape" / "README.md").read_text()
    m = re.search(r"Public import paths:(.*?)\. Everything else", text, flags=re.S)
    assert m, "gputape/README.md lists the public import paths"
    return re.findall(r"`(gputape[\w.]*)`", m.group(1))


PUBLIC = _public_paths()


def _public_names() -> list[tuple[str, str, object]]:
    """(module path, name, object) for every public name that is not a module."""
    out = []
    for path in PUBLIC:
        mod = importlib.import_module(path)
        for name in mod.__all__:
            obj = getattr(mod, name)
            if not isinstance(obj, types.ModuleType):
                out.append((path, name, obj))
    return out


def _generated(obj: object) -> bool:
    """Whether ``obj`` is an entry point whose code is made at import time (gputape.core._generate)."""
    code = getattr(obj, "__code__", None)
    return code is not None and "<generated " in code.co_filename


def _call_params(fn: object, drop_first: bool) -> list[inspect.Parameter]:
    params = list(inspect.signature(fn).parameters.values())
    return params[1:] if drop_first else params


def _shape(params: list[inspect.Parameter]) -> list[tuple[str, object, bool]]:
    return [(p.name, p.kind, p.default is inspect.Parameter.empty) for p in params]


_PROTOCOLS = {len(_call_params(p.__call__, True)): p for p in (UnaryOp, BinaryOp)}


def test_the_public_paths_are_read_from_the_package_readme():
    assert {"gputape", "gputape.tf", "gputape.nn", "gputape.linalg"} <= set(PUBLIC), PUBLIC


@pytest.mark.parametrize("path", PUBLIC)
def test_each_public_path_lists_its_names_in_all(path):
    """pyright treats a name a typed package only imports (``from .health import grad_report``) as
    private unless ``__all__`` lists it; every public name must be listed, and exist."""
    mod = importlib.import_module(path)
    assert isinstance(getattr(mod, "__all__", None), list), f"{path} has no __all__ list"
    missing = [n for n in mod.__all__ if not hasattr(mod, n)]
    assert not missing, f"{path}.__all__ names what it does not define: {missing}"


def test_ops_all_lists_every_op_it_defines():
    """gputape.ops writes its __all__ out (type checkers read a star import's names only from a literal
    list); it must name exactly the functions the module binds, not the modules or core's re-exports."""
    ops = gt.ops
    core = {"annotations", "partial", "Any", "REGISTRY", "Tensor", "Variable"}
    defined = {
        n
        for n, v in vars(ops).items()
        if not n.startswith("_")
        and not isinstance(v, types.ModuleType)
        and n not in core
        and n not in ("DIFF_NAMESPACE", "raw_namespace", "tensor_to")  # the sweep's namespaces, Tensor.to
    }
    assert set(ops.__all__) == defined, (
        f"add to gputape/ops/__init__.py's __all__: {sorted(defined - set(ops.__all__))}; "
        f"remove: {sorted(set(ops.__all__) - defined)}"
    )
    assert len(ops.__all__) == len(set(ops.__all__))
    assert set(ops.__all__) <= set(gt.__all__)


def test_every_generated_entry_point_has_the_signature_its_type_declares():
    """Each generated function takes exactly the parameters of UnaryOp.__call__ or BinaryOp.__call__:
    same names, kinds, no defaults (the mypy test below checks the other side: what mypy sees)."""
    seen = 0
    for path, name, obj in _public_names():
        if not _generated(obj):
            continue
        params = _call_params(obj, False)
        proto = _PROTOCOLS.get(len(params))
        assert proto is not None, f"{path}.{name}{inspect.signature(obj)} matches neither UnaryOp nor BinaryOp"
        assert _shape(params) == _shape(_call_params(proto.__call__, True)), (
            f"{path}.{name}{inspect.signature(obj)} differs from {proto.__name__}.__call__"
        )
        seen += 1
    assert seen >= 60, seen  # the generated elementwise ops, under gt and gt.tf


def test_ops_declared_to_return_a_tensor_return_one():
    """Each public op annotated ``-> Tensor`` that takes one required operand returns a Tensor for
    a matrix, a vector and a 0-d operand (no list or tuple behind the annotation)."""
    checked = []
    for path, name, obj in _public_names():
        if not inspect.isfunction(obj) or _generated(obj):
            continue
        sig = inspect.signature(obj)
        if sig.return_annotation not in ("Tensor", gt.Tensor):
            continue
        module = getattr(obj, "__module__", "")
        operands = module == "gputape.nn.functional" or (
            module.startswith("gputape.ops.") and module != "gputape.ops.creation"  # (creation ops take shapes)
        )
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        required = [p for p in sig.parameters.values() if p.default is p.empty and p.kind in positional]
        if not operands or len(required) != 1:
            continue
        for value in ([[1.0, 2.0], [3.0, 4.0]], [1.0, 2.0], 3.0):
            try:
                out = obj(gt.constant(value, "float64"))
            except (ValueError, TypeError, IndexError, gt.linalg.LinAlgError):
                continue  # an operand of the wrong rank for this op (numpy's exception kinds): nothing returned
            assert isinstance(out, gt.Tensor), f"{path}.{name} returned {type(out).__name__}"
        checked.append(f"{path}.{name}")
    assert {"gputape.mean", "gputape.sum", "gputape.transpose", "gputape.nn.softmax"} <= set(checked), checked


# -- Tensor: the TYPE_CHECKING declarations against the attributes gputape.ops installs --------


def _tensor_declarations() -> dict[str, ast.FunctionDef]:
    tree = ast.parse((ROOT / "gputape" / "core" / "tensor.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Tensor")
    block = next(
        n for n in cls.body if isinstance(n, ast.If) and isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING"
    )
    return {f.name: f for f in block.body if isinstance(f, ast.FunctionDef)}


def _declared_shape(f: ast.FunctionDef) -> list[tuple[str, object, bool]]:
    a = f.args
    P = inspect.Parameter
    out = []
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for arg, d in list(zip(positional, defaults))[1:]:  # without self
        kind = P.POSITIONAL_ONLY if arg in a.posonlyargs else P.POSITIONAL_OR_KEYWORD
        out.append((arg.arg, kind, d is None))
    if a.vararg:
        out.append((a.vararg.arg, P.VAR_POSITIONAL, True))
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append((arg.arg, P.KEYWORD_ONLY, d is None))
    if a.kwarg:
        out.append((a.kwarg.arg, P.VAR_KEYWORD, True))
    return out


def _installed_on_tensor() -> set[str]:
    """The attributes of Tensor set outside its class body (by gputape.ops)."""
    tree = ast.parse((ROOT / "gputape" / "core" / "tensor.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Tensor")
    own = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    own |= {t.id for n in cls.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    # what Python itself puts in a class's namespace, and __hash__ (None: set beside __eq__ in the body)
    python = {"__module__", "__doc__", "__weakref__", "__dict__", "__firstlineno__", "__static_attributes__",
              "__qualname__", "__annotations__", "__hash__", "_data", "_id"}  # fmt: skip
    return {n for n in vars(gt.Tensor) if n not in own} - python


def test_tensor_declares_every_operator_and_method_gputape_ops_installs():
    installed, declared = _installed_on_tensor(), set(_tensor_declarations())
    assert installed, "gputape.ops installs Tensor's operators"
    assert not installed - declared, (
        f"declare these in Tensor's TYPE_CHECKING block (gputape/core/tensor.py): {sorted(installed - declared)}"
    )
    assert not declared - installed, f"declared but not installed on Tensor: {sorted(declared - installed)}"


@pytest.mark.parametrize("name", sorted(_tensor_declarations()))
def test_each_tensor_declaration_matches_the_installed_attribute(name):
    """Names, kinds and defaults as the attribute has them (a declaration may leave out trailing
    parameters with defaults that only gputape passes, as __getitem__'s nlead)."""
    f = _tensor_declarations()[name]
    runtime = vars(gt.Tensor)[name]
    is_property = any(isinstance(d, ast.Name) and d.id == "property" for d in f.decorator_list)
    assert isinstance(runtime, property) == is_property, f"Tensor.{name}: property or method, as declared"
    if is_property:
        return
    declared = _declared_shape(f)
    actual = _shape(_call_params(runtime, True))
    assert actual[: len(declared)] == declared, f"Tensor.{name}: declared {declared}, installed {actual}"
    extra = actual[len(declared) :]
    assert all(not required for _, _, required in extra), f"Tensor.{name}: undeclared required parameters {extra}"


def test_comparisons_take_their_operands_by_name_and_count():
    """The comparison closures take (x) or (x, y) as UnaryOp/BinaryOp declare: a wrong count is
    Python's TypeError naming the function, not a failure inside numpy."""
    x = gt.constant([1.0, 2.0])
    assert gt.equal(x=x, y=1.0).numpy().tolist() == [True, False]
    assert gt.isnan(x=x).numpy().tolist() == [False, False]
    with pytest.raises(TypeError, match="equal"):
        gt.equal(x)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="isnan"):
        gt.isnan(x, x)  # type: ignore[call-arg]


# -- mypy ------------------------------------------------------------------------------------

USER_PROGRAM = '''\
"""A user's program: what mypy must infer, and the mistakes it must report (each marked E: and its code)."""
from typing import assert_type

import numpy as np

import gputape as gt
import gputape.tf as tf

x = gt.constant([1.0, 2.0])
w = gt.Variable(np.ones(2, "float32"))
assert_type(gt.exp(x), gt.Tensor)
assert_type(tf.exp(x), tf.Tensor)
assert_type(gt.add(x, y=w), gt.Tensor)
assert_type(gt.equal(x, 1.0), gt.Tensor)
assert_type(x @ w, gt.Tensor)
assert_type(x + 1, gt.Tensor)
assert_type(2.0 * x, gt.Tensor)
assert_type(-x, gt.Tensor)
assert_type(x == w, gt.Tensor)
assert_type(x[0], gt.Tensor)
assert_type(x.T, gt.Tensor)
assert_type(x.sum(axis=0), gt.Tensor)
assert_type(x.reshape(2, 1), gt.Tensor)
with gt.GradientTape() as tape:
    loss = gt.sum(gt.tanh(x * w))
assert_type(tape, gt.GradientTape)
grad = tape.gradient(loss, w)
bad: int = gt.exp(w)  # E: assignment
gt.exp(x, w)  # E: call-arg
gt.add(x)  # E: call-arg
x.sum(axes=0)  # E: call-arg
'''


def _mypy_errors(out: str) -> dict[str, list[tuple[int, str]]]:
    errors: dict[str, list[tuple[int, str]]] = {}
    for m in re.finditer(r"^(.+?\.py):(\d+): error: .*\[([\w-]+)\]$", out, flags=re.M):
        errors.setdefault(pathlib.Path(m.group(1)).name, []).append((int(m.group(2)), m.group(3)))
    return errors


@pytest.mark.slow
def test_mypy_passes_on_gputape_examples_readme_and_a_user_program(tmp_path):
    """One mypy run (pyproject.toml's [tool.mypy]) over gputape's modules, examples/, each README
    python block and a user program: no errors but the user program's marked ones, and every
    public name typed (not Any), the generated entry points as UnaryOp/BinaryOp of their arity."""
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[typecheck]')")
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from test_readme import _BLOCKS
    finally:
        sys.path.remove(str(ROOT / "tests"))
    files = []
    for line, code, _ in _BLOCKS:
        p = tmp_path / f"readme_line_{line}.py"
        p.write_text(code)
        files.append(p)
    user = tmp_path / "user_program.py"
    user.write_text(USER_PROGRAM)
    marks = [(i, re.search(r"# E: ([\w-]+)", text)) for i, text in enumerate(USER_PROGRAM.splitlines(), 1)]
    expected = [(i, m.group(1)) for i, m in marks if m]
    # every public name revealed: its type must not be Any
    lines, where = [], {}
    for k, (path, name, obj) in enumerate(_public_names()):
        lines.append(f"from {path} import {name} as _n{k}")
        lines.append(f"reveal_type(_n{k})")
        where[len(lines)] = (path, name, obj)
    reveal = tmp_path / "reveal_public.py"
    reveal.write_text("\n".join(lines) + "\n")
    # mypy's incremental cache, kept between runs (keyed by the files' contents): a cold run takes a minute
    cache = pathlib.Path(tempfile.gettempdir()) / "gputape-mypy-cache"
    cmd = [sys.executable, "-m", "mypy", "--cache-dir", str(cache), "gputape", "examples"]
    out = subprocess.run(
        cmd + [str(p) for p in files] + [str(user), str(reveal)], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    text = out.stdout + out.stderr
    errors = _mypy_errors(text)
    assert sorted(errors.pop("user_program.py", [])) == expected, text
    assert not errors, f"mypy reports errors (see pyproject.toml's [tool.mypy]):\n{text}"
    pattern = r"reveal_public\.py:(\d+): note: Revealed type is \"(.*)\""
    revealed = {int(m.group(1)): m.group(2) for m in re.finditer(pattern, text)}
    assert len(revealed) == len(where), text[-3000:]
    untyped = [f"{p}.{n}" for ln, (p, n, _) in where.items() if revealed[ln] == "Any"]
    assert not untyped, f"mypy sees these public names as Any: {untyped}"
    for ln, (p, n, obj) in where.items():
        if _generated(obj):
            proto = _PROTOCOLS[len(_call_params(obj, False))]
            assert revealed[ln] == f"gputape.core.dispatch.{proto.__name__}", (p, n, revealed[ln])
