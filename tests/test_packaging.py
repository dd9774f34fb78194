"""The wheel ships every package of gputape/ and the CUDA sources, and an installed wheel finds them.

pyproject.toml lists the packages by hand (the .cu sources of the top-level kernels/ ship as
gputape/_kernels, which package discovery cannot express), so a package directory missing from
that list would be left out of the wheel and fail only for users who install it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # from a copy without build outputs: setuptools' build/ keeps modules that have since moved
    src = out / "src"
    junk = shutil.ignore_patterns("build", "dist", ".venv", "*.egg-info", "__pycache__", ".git", ".pytest_cache")
    shutil.copytree(ROOT, src, ignore=junk)
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-q", "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if r.returncode and ("Could not find a version" in r.stderr or "No matching distribution" in r.stderr):
        pytest.skip(f"pip cannot fetch the build backend here: {r.stderr.strip()[-300:]}")
    assert r.returncode == 0, r.stderr
    (whl,) = out.glob("gputape-*.whl")
    return whl


def test_the_wheel_holds_every_module_and_every_kernel_source(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {n for n in names if n.startswith("gputape/") and n.endswith(".py")}
    source = {p.relative_to(ROOT).as_posix() for p in (ROOT / "gputape").rglob("*.py") if "__pycache__" not in p.parts}
    assert shipped == source, (
        f"missing from the wheel: {sorted(source - shipped)} (add the package to [tool.setuptools] packages); "
        f"in the wheel but not in gputape/: {sorted(shipped - source)}"
    )
    packages = {p.parent.relative_to(ROOT).as_posix() for p in (ROOT / "gputape").rglob("__init__.py")}
    assert {n.rsplit("/", 1)[0] for n in shipped} == packages
    cu = {f"gputape/_kernels/{p.name}" for p in (ROOT / "kernels").iterdir() if p.suffix in (".cu", ".cuh")}
    assert cu and cu <= names, f"CUDA sources missing from the wheel: {sorted(cu - names)}"
    assert "gputape/py.typed" in names


def test_an_installed_wheel_finds_its_kernel_sources(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)  # a pure-Python wheel: unpacking it is installing it
    code = "import gputape.kernels.build as b; print(b.kernel_dir()); print(len(b.source('softmax_xent.cu')))"
    env = {**os.environ, "PYTHONPATH": str(site)}
    r = subprocess.run([sys.executable, "-c", code], cwd=site, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    where, size = r.stdout.split()
    assert Path(where) == site / "gputape" / "_kernels" and int(size) > 0


def test_a_checkout_finds_the_top_level_kernel_sources():
    import gputape.kernels.build as b

    if Path(b.__file__).resolve().is_relative_to(ROOT):
        assert b.kernel_dir() == ROOT / "kernels"
