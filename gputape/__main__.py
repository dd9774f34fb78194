"""``python -m gputape info``: the backend, device, versions and memory pool state.

The first thing to run on a new machine, and the header of every GPU check
(``benchmarks/gpu_check.sh``): it says which device gputape will use and, when
that is the CPU, why the GPU was not taken.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import warnings
from typing import Any


def info() -> dict[str, Any]:
    """Everything ``python -m gputape info`` prints, as a dict."""
    import gputape
    from gputape.devices import backend
    from gputape.kernels import registry as kernels

    out: dict[str, Any] = {
        "gputape": gputape.__version__,
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": platform.platform(),
    }
    out.update(backend.versions())
    out["GPUTAPE_DEVICE"] = os.environ.get("GPUTAPE_DEVICE") or None
    why = backend.cuda_unavailable_reason(0)
    out["gpu"] = "available" if why is None else f"unavailable: {why}"
    try:
        with warnings.catch_warnings():
            # the fallback's warning says what the "gpu" line above already prints
            warnings.simplefilter("ignore", backend.CpuFallbackWarning)
            out["default_device"] = backend.default_device()
    except Exception as exc:  # GPUTAPE_DEVICE asks for a GPU that does not work
        out["default_device"] = f"error: {exc}"
    try:
        out["kernel_sources"] = str(kernels.kernel_dir())
    except FileNotFoundError as exc:
        out["kernel_sources"] = f"missing: {exc}"
    if why is None:
        cp = backend.cupy_module()
        n = cp.cuda.runtime.getDeviceCount()
        out["devices"] = {f"cuda:{i}": backend.device_properties(i) for i in range(n)}
        out["memory"] = {f"cuda:{i}": gputape.memory_info(f"cuda:{i}") for i in range(n)}
    out["memory"] = {**out.get("memory", {}), "cpu": gputape.memory_info("cpu")}
    return out


def _fmt_bytes(n: Any) -> str:
    if not isinstance(n, int):
        return str(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _print(d: dict[str, Any]) -> None:
    print(f"gputape {d['gputape']}")
    for key in ("python", "platform", "numpy", "cupy", "cuda_runtime", "cuda_driver", "nvrtc", "GPUTAPE_DEVICE"):
        print(f"  {key:15s} {d.get(key)}")
    print(f"  {'GPU:':15s} {d['gpu']}")
    print(f"  {'default device':15s} {d['default_device']}")
    print(f"  {'kernel sources':15s} {d['kernel_sources']}")
    for name, props in (d.get("devices") or {}).items():
        print(
            f"  {name}: {props['name']}, compute capability {props['compute_capability']}, "
            f"{props['multiprocessors']} SMs, {_fmt_bytes(props['free_memory'])} free of "
            f"{_fmt_bytes(props['total_memory'])}"
        )
    for name, mem in d["memory"].items():
        parts = ", ".join(f"{k} {_fmt_bytes(v)}" for k, v in mem.items() if k != "device")
        print(f"  memory {name}: {parts}")


def main(argv: list[str] | None = None) -> int:
    # plain text for a terminal: the module docstring is reST (``literals``), which argparse prints raw
    parser = argparse.ArgumentParser(
        prog="python -m gputape",
        description="gputape's command line. 'python -m gputape info' says which device gputape uses and why, "
        "with the versions of numpy, CuPy and CUDA and the memory pools: the first thing to run on a new machine.",
    )
    sub = parser.add_subparsers(dest="cmd", metavar="command")
    info_help = "print the backend, device, versions and memory pool state"
    p_info = sub.add_parser("info", help=info_help, description=info_help[0].upper() + info_help[1:] + ".")
    p_info.add_argument("--json", action="store_true", help="print JSON instead of text")
    names_help = "print the TensorFlow names gputape.tf has (Markdown, the README's list)"
    p_names = sub.add_parser("names", help=names_help, description=names_help[0].upper() + names_help[1:] + ".")
    p_names.add_argument("--update", metavar="README", help="rewrite that file's generated list instead of printing")
    args = parser.parse_args(argv)
    if args.cmd == "names":
        from gputape.tf import _names

        if args.update:
            print(f"{args.update}: {'updated' if _names.update(args.update) else 'already up to date'}")
        else:
            print(_names.markdown(), end="")
        return 0
    if args.cmd != "info":
        parser.print_help()
        return 2
    d = info()
    if args.json:
        print(json.dumps(d, indent=2, default=str))
    else:
        _print(d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
