"""A numpy-backed stand-in for cupy, so placement decisions and transfer counts run on a CPU machine.

``FakeCupy`` plays cupy with one GPU, ``cuda:0``, whose arrays are ``FakeArray``: an ndarray
subclass that computes with numpy but keeps cupy's manners: it refuses host numpy arrays in
its ufuncs (cupy raises TypeError), refuses implicit conversion to numpy, and copies to the
host only through ``.get()``. Installed as ``gputape.devices.backend._cupy`` (the one cupy seam),
it makes the backend's real code paths place, copy and count. It runs no CUDA kernels, so
tests using it turn gputape's fused-kernel paths off (see ``tests/test_placement.py``).
"""

from __future__ import annotations

import types

import numpy as np


class _Dev:
    def __init__(self, i: int = 0) -> None:
        self.id = i

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def synchronize(self) -> None:
        pass


def _fake(r):
    if isinstance(r, FakeArray):
        return r
    if isinstance(r, np.ndarray):
        return r.view(FakeArray)
    if isinstance(r, np.generic):
        return np.asarray(r).view(FakeArray)  # cupy gives 0-d arrays, not scalars
    if isinstance(r, tuple):
        return tuple(_fake(x) for x in r)
    if isinstance(r, list):
        return [_fake(x) for x in r]
    return r


def _host(x):
    return x.view(np.ndarray) if isinstance(x, FakeArray) else x


class FakeArray(np.ndarray):
    """An array on the fake GPU: numpy math, cupy's manners (no host arrays mixed in, ``.get()``)."""

    @property
    def device(self):
        return _Dev(0)

    def get(self) -> np.ndarray:
        return np.array(self.view(np.ndarray), copy=True)

    def __array_ufunc__(self, ufunc, method, *inputs, **kw):
        outs = kw.get("out", ())
        for x in (*inputs, *outs):
            if type(x) is np.ndarray:
                raise TypeError(f"Unsupported type {type(x)} (fake cupy: a host array in a device op)")
        if outs:
            kw["out"] = tuple(_host(o) for o in outs)
        r = getattr(ufunc, method)(*[_host(x) for x in inputs], **kw)
        if outs:
            return outs[0] if len(outs) == 1 else outs
        return _fake(r)

    def __array__(self, dtype=None, copy=None):
        # as cupy: no implicit conversion to numpy
        raise TypeError("Implicit conversion to a NumPy array is not allowed (fake cupy); use .get()")


class _Wrapped:
    def __init__(self, f):
        self._f = f

    def __call__(self, *args, **kw):
        return _fake(self._f(*args, **kw))

    def __getattr__(self, name):
        return getattr(self._f, name)


class FakeCupy(types.ModuleType):
    ndarray = FakeArray

    def __init__(self) -> None:
        super().__init__("fakecupy")
        runtime = types.SimpleNamespace(driverGetVersion=lambda: 12000, getDeviceCount=lambda: 1)
        self.cuda = types.SimpleNamespace(Device=_Dev, runtime=runtime)
        self.__version__ = "0.fake"

    def asarray(self, a, dtype=None, order=None):
        if isinstance(a, FakeArray) and (dtype is None or a.dtype == np.dtype(dtype)):
            return a
        return np.array(_host(a), dtype=dtype, copy=True).view(FakeArray)

    def array(self, a, dtype=None, copy=True, order=None):
        return np.array(_host(a), dtype=dtype, copy=True).view(FakeArray)

    def __getattr__(self, name):
        v = getattr(np, name)
        if callable(v) and not isinstance(v, type):
            return _Wrapped(v)
        return v
