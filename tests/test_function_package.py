"""gputape.function is a package of modules by concern; its former single-module names still resolve."""

import pathlib
import sys

import pytest

import gputape as gt

fn_mod = sys.modules["gputape.function"]  # the package (gt.function is the decorator)
ROOT = pathlib.Path(__file__).resolve().parents[1]

# every name code outside gputape/function reaches through gputape.function
REACHED = [
    "Function",
    "function",
    "TensorSpec",
    "TracingError",
    "InputSignatureError",
    "FUSE_BACKWARD",
    "CAPTURE_GEMM",
    "fused_kernel_source",
    "compose",
    "_Trace",
    "_GraphRunner",
    "_EmulatedGraphs",
    "_CudaGraphs",
    "_step_name",
]


def test_gt_function_is_the_decorator_and_the_package_keeps_its_names():
    assert gt.function is fn_mod.function and callable(gt.function)
    missing = [n for n in REACHED if not hasattr(fn_mod, n)]
    assert not missing, missing
    # the public classes say where users import them from
    for cls in (fn_mod.Function, fn_mod.TensorSpec, fn_mod.TracingError, fn_mod.InputSignatureError):
        assert cls.__module__ == "gputape.function", cls


def test_switches_patched_on_the_package_take_effect(monkeypatch):
    monkeypatch.setattr(fn_mod, "FUSE_BACKWARD", False)
    monkeypatch.setattr(fn_mod, "CAPTURE_GEMM", False)
    f = gt.function(lambda x: x * 2.0)
    assert f.fuse is False and f.capture_gemm is False
    monkeypatch.setattr(fn_mod, "FUSE_BACKWARD", True)
    monkeypatch.setattr(fn_mod, "CAPTURE_GEMM", True)
    f = gt.function(lambda x: x * 2.0)
    assert f.fuse is True and f.capture_gemm is True
    assert gt.function(lambda x: x, fuse=False, capture_gemm=False).fuse is False


def test_every_subpackage_ships_in_the_wheel():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.relative_to(ROOT).parent.parts) for p in (ROOT / "gputape").rglob("__init__.py")}
    assert found <= listed, f"add {sorted(found - listed)} to [tool.setuptools] packages in pyproject.toml"
