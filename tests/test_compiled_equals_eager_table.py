"""Every public function of the hostile-argument table, compiled and called again with other values.

A value a trace turns into a Python constant must be guarded or refused, never replayed silently
(tf.range(n), int32 indices copied outside the record, tf.random's draws were all found frozen).
Here each function of ``tests/_hostile.py`` is wrapped in ``gt.function`` with its tensor arguments
as the function's arguments, traced with the table's valid values, then called with other values
(floats scaled and shifted, integers and booleans rolled): the result must equal an eager call
with those values. A function whose eager call refuses the other values is skipped for that reason.
"""

from __future__ import annotations

import _hostile
import numpy as np
import pytest

import gputape as gt
from gputape.function import TracingError

# draws differ from call to call by design (their compiled replays are tested in test_tf_random_compiled)
_RANDOM = ("random", "dropout", "Dropout", "shuffle", "categorical", "Generator")


def _other(v: gt.Tensor) -> gt.Tensor:
    a = v.numpy()
    if a.dtype.kind in "fc":
        return gt.constant((a * 1.5 + 0.25).astype(a.dtype))
    if a.size > 1:  # integers (indices stay in range) and booleans: the same values, other places
        return gt.constant(np.roll(a.reshape(-1), 1).reshape(a.shape))
    return v


def _cases() -> list:
    out = []
    for spec in _hostile.specs():
        if any(w in spec.name for w in _RANDOM):
            continue
        tensors = [
            k
            for k, v in spec.args.items()
            if isinstance(v, gt.Tensor) and not isinstance(v, gt.Variable) and k != spec.star
        ]
        if tensors:
            out.append(pytest.param(spec, tensors, id=spec.name))
    return out


def _host(x):
    if isinstance(x, (list, tuple)):
        return [_host(e) for e in x]
    if isinstance(x, dict):
        return {k: _host(e) for k, e in x.items()}
    return x.numpy() if isinstance(x, gt.Tensor) else x


# a signature that falls back to eager says so once (a GputapeWarning); domain errors of the
# scaled values (arctanh of 1.75) are NaN in both runs
@pytest.mark.filterwarnings("ignore::gputape.core._errors.GputapeWarning")
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("spec, tensors", _cases())
def test_a_compiled_call_with_other_values_equals_the_eager_call(spec, tensors):
    other = {k: (_other(v) if k in tensors else v) for k, v in spec.args.items()}
    if all(other[k] is spec.args[k] for k in tensors):
        pytest.skip("no tensor argument has another value to take")
    try:
        want = _host(_hostile._call(spec, other))
    except Exception as e:  # the other values are not valid for this function: nothing to compare
        pytest.skip(f"eager call refuses the other values: {type(e).__name__}")

    def body(*ts):
        return _hostile._call(spec, {**spec.args, **dict(zip(tensors, ts))})

    f = gt.function(body)
    try:
        f(*[spec.args[k] for k in tensors])
    except TracingError as e:  # refused at trace time, by design (not replayed silently)
        pytest.skip(f"refused while tracing: {e}")
    got = _host(f(*[other[k] for k in tensors]))
    _same(got, want)


def _same(got, want) -> None:
    if isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            _same(g, w)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys()
        for k in want:
            _same(got[k], want[k])
    else:
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
