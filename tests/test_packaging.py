"""The wheel ships every package of gputape/ and the CUDA sources, builds without warnings, and works installed.

pyproject.toml lists the packages by hand (the .cu sources of the top-level kernels/ ship as
gputape/_kernels, which package discovery cannot express), so a package directory missing from
that list would be left out of the wheel and fail only for users who install it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


# A warning of the build backend in pip's verbose log: a Python warning category
# ("SetuptoolsDeprecationWarning: ..."), setuptools' "!!" banner around it, or a distutils
# "warning: ..." line. pip's own "WARNING: Location ... is ignored" lines (this machine's index
# configuration) are none of these.
_BUILD_WARNING = re.compile(r"(?m)^\s*(?:\S*Warning\b|warning:|!!)|\w+Warning: ")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, str]:
    """The wheel, built as pip builds it for a user (an isolated build env), and the backend's log."""
    out = tmp_path_factory.mktemp("wheel")
    # from a copy without build outputs: setuptools' build/ keeps modules that have since moved
    src = out / "src"
    junk = shutil.ignore_patterns("build", "dist", ".venv", "*.egg-info", "__pycache__", ".git", ".pytest_cache")
    shutil.copytree(ROOT, src, ignore=junk)
    # PYTHONDONTWRITEBYTECODE makes distutils log "byte-compiling is disabled": a setting of the
    # environment running the build, not of the project
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-v", "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    if r.returncode and ("Could not find a version" in r.stderr or "No matching distribution" in r.stderr):
        pytest.skip(f"pip cannot fetch the build backend (setuptools>=77) here: {r.stderr.strip()[-300:]}")
    assert r.returncode == 0, r.stderr
    (whl,) = out.glob("gputape-*.whl")
    return whl, r.stdout + r.stderr


@pytest.fixture(scope="module")
def wheel(built) -> Path:
    return built[0]


def test_the_wheel_builds_without_warnings(built):
    _, log = built
    found = [line.strip() for line in log.splitlines() if _BUILD_WARNING.search(line)]
    assert not found, "building the wheel warns:\n" + "\n".join(found[:20])


def test_the_warning_filter_catches_what_setuptools_prints():
    # what setuptools printed for the old `license = { text = ... }` table: the filter above must see it
    old = (
        "  /tmp/env/setuptools/config/_apply_pyprojecttoml.py:82: SetuptoolsDeprecationWarning: "
        "`project.license` as a TOML table is deprecated\n  !!\n"
    )
    assert _BUILD_WARNING.search(old)
    assert not _BUILD_WARNING.search("WARNING: Location 'file:///opt/x/' is ignored: it is neither a file nor a dir")


def _metadata(wheel: Path) -> list[tuple[str, str]]:
    z = zipfile.ZipFile(wheel)
    (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
    head = z.read(meta).decode().split("\n\n", 1)[0]  # the headers; the README follows as the body
    return [tuple(line.split(": ", 1)) for line in head.splitlines() if ": " in line]  # type: ignore[misc]


def test_the_metadata_says_python_license_and_classifiers(wheel):
    meta = _metadata(wheel)
    fields = dict(meta)
    assert fields["Requires-Python"] == ">=3.11"  # numpy>=2.4 has no release for 3.10
    assert fields["License-Expression"] == "Apache-2.0"
    classifiers = [v for k, v in meta if k == "Classifier"]
    for c in (
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
        "Environment :: GPU :: NVIDIA CUDA :: 12",
        "Environment :: GPU :: NVIDIA CUDA :: 13",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "Topic :: Scientific/Engineering :: Mathematics",
    ):
        assert c in classifiers, c
    assert not [c for c in classifiers if c.startswith("License ::")]  # PEP 639: the expression replaces them
    try:
        from trove_classifiers import classifiers as known
    except ImportError:
        return  # PyPI refuses unknown classifiers at upload; checked where trove-classifiers is installed
    assert not set(classifiers) - known, f"not PyPI classifiers: {sorted(set(classifiers) - known)}"


def test_a_fresh_venv_with_the_wheel_imports_differentiates_and_reports(wheel, tmp_path):
    """pip install of the wheel into an empty venv (it fetches numpy, its one dependency), then use it."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    # the test's own pip installs into the new interpreter (pip >= 22.3): faster than bootstrapping one
    r = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if r.returncode and ("Could not find a version" in r.stderr or "No matching distribution" in r.stderr):
        pytest.skip(f"pip cannot fetch numpy here: {r.stderr.strip()[-300:]}")
    assert r.returncode == 0, r.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPUTAPE_DEVICE")}
    code = (
        "import gputape as gt\n"
        "x = gt.Variable(3.0)\n"
        "with gt.GradientTape() as tape:\n"
        "    y = x * x\n"
        "print(float(tape.gradient(y, x)), gt.__file__)\n"
    )
    r = subprocess.run([str(py), "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    grad, where = r.stdout.split()
    assert float(grad) == 6.0 and Path(where).is_relative_to(venv), r.stdout  # the installed copy, not the checkout
    r = subprocess.run(
        [str(py), "-m", "gputape", "info"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("gputape ") and "default device" in r.stdout and "_kernels" in r.stdout, r.stdout
    # only gputape and numpy (and what numpy brings: nothing) were installed
    site = {p.name.split("-")[0].lower() for p in venv.glob("lib/python*/site-packages/*.dist-info")}
    assert site == {"gputape", "numpy"}, site


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
