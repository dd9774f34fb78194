"""What a user sees first: `python -m gputape --help` is plain text; `gputape.tf` shows only TensorFlow's names."""

from __future__ import annotations
import __future__

import re
import subprocess
import sys
import types

import pytest

import gputape.tf as tf

# reST markup that a terminal would print raw: ``literals``, roles (:class:`x`), `interpreted text`
_REST = re.compile(r"``|:\w+:`|`[^`']+`_?")


@pytest.mark.parametrize("args", [["--help"], [], ["info", "--help"]])
def test_help_is_plain_text(args):
    r = subprocess.run([sys.executable, "-m", "gputape", *args], capture_output=True, text=True, timeout=120)
    text = r.stdout + r.stderr
    assert r.returncode == (2 if not args else 0), text
    assert text.startswith("usage: python -m gputape"), text
    assert not _REST.search(text), f"reST markup in the help: {_REST.search(text).group(0)!r}\n{text}"
    assert "info" in text


def test_the_rest_pattern_sees_the_markup_the_help_used_to_print():
    assert _REST.search("``python -m gputape info``: the backend") and _REST.search("see :class:`Tensor`")
    assert not _REST.search("'python -m gputape info' says which device")


# TensorFlow 2.16's names (tensorflow.org/api_docs/python/tf) that gputape.tf provides, per namespace.
TF_NAMES = {
    "": """DType GradientTape Module Tensor TensorSpec UnconnectedGradients Variable abs add add_n argmax argmin
        argsort as_dtype bool cast clip_by_global_norm clip_by_norm clip_by_value concat config constant
        convert_to_tensor cos cosh cumsum custom_gradient data debugging device divide dtypes einsum equal exp
        expand_dims eye fill float16 float32 float64 floor function gather greater greater_equal identity int16
        int32 int64 int8 keras less less_equal linalg linspace log logical_and logical_not logical_or math matmul
        maximum minimum multiply negative newaxis nn norm not_equal one_hot ones ones_like optimizers pow print
        profiler random range rank reduce_all reduce_any reduce_logsumexp reduce_max reduce_mean reduce_min
        reduce_prod reduce_sum repeat reshape reverse roll round shape sigmoid sign signal sin sinh size sort split
        sqrt square squeeze stack stop_gradient subtract tan tanh tensordot tile transpose truediv uint8 unstack
        version where zeros zeros_like""",
    "math": """abs acos acosh add add_n argmax argmin asin asinh atan atan2 atanh ceil cos cosh cumprod cumsum divide
        divide_no_nan equal erf exp expm1 floor greater greater_equal is_finite is_inf is_nan l2_normalize less
        less_equal log log1p log_sigmoid logical_and logical_not logical_or maximum minimum multiply
        multiply_no_nan negative not_equal pow reciprocal reduce_all reduce_any reduce_logsumexp reduce_max
        reduce_mean reduce_min reduce_prod reduce_std reduce_sum reduce_variance round rsqrt sigmoid sign sin sinh
        softplus sqrt square squared_difference subtract tan tanh truediv""",
    "nn": """bias_add dropout elu gelu l2_loss l2_normalize leaky_relu log_softmax moments relu relu6 sigmoid
        sigmoid_cross_entropy_with_logits silu softmax softmax_cross_entropy_with_logits softplus
        sparse_softmax_cross_entropy_with_logits swish tanh""",
    "linalg": """adjoint band_part cholesky det diag diag_part eigh eigvalsh einsum eye inv logdet lstsq matmul
        matrix_transpose matvec norm pinv qr slogdet solve svd trace triangular_solve""",
    "random": """Generator categorical experimental get_global_generator normal set_seed stateless_categorical
        stateless_normal stateless_truncated_normal stateless_uniform truncated_normal uniform""",
    "data": "AUTOTUNE Dataset",
    "profiler": "experimental",
    "optimizers": "Adam AdamW Optimizer RMSprop SGD schedules",
    "keras": """Input KerasTensor Model Sequential activations callbacks initializers layers losses metrics
        optimizers utils""",
    "keras.callbacks": "Callback EarlyStopping History LambdaCallback ModelCheckpoint",
}
# Python control flow in tf.function (guards): tf.TensorShape and tf.autograph
TF_NAMES[""] += " TensorShape autograph"
TF_NAMES["autograph"] = "experimental"
TF_NAMES["autograph.experimental"] = "do_not_convert"

# gputape's own additions, each documented where it is defined
EXTRAS = {
    "keras": {"Functional"},  # Model(inputs, outputs)'s class, documented in gputape.tf.keras
}


def _namespace(path: str):
    ns = tf
    for part in filter(None, path.split(".")):
        ns = getattr(ns, part)
    return ns


def _public(ns) -> set[str]:
    return {n for n in dir(ns) if not n.startswith("_")}


@pytest.mark.parametrize("path", sorted(TF_NAMES))
def test_each_public_name_is_tensorflows_or_a_documented_extra(path):
    got = _public(_namespace(path))
    expected = set(TF_NAMES[path].split()) | EXTRAS.get(path, set())
    assert not got - expected, f"tf.{path or ''} shows names TensorFlow does not have: {sorted(got - expected)}"
    assert not expected - got, f"tf.{path or ''} lost names: {sorted(expected - got)}"


KERAS_MODULES = ["keras.layers", "keras.losses", "keras.metrics", "keras.optimizers", "keras.activations",
                 "keras.initializers"]  # fmt: skip


@pytest.mark.parametrize("path", ["", *sorted(TF_NAMES), *KERAS_MODULES])
def test_no_module_level_helper_leaks(path):
    """What a module imports for its own use (numpy, typing, the __future__ flag, gputape internals) stays private."""
    ns = _namespace(path)
    for name in _public(ns):
        v = getattr(ns, name)
        assert not isinstance(v, __future__._Feature), f"tf.{path}.{name}"
        assert getattr(v, "__module__", None) not in ("typing", "collections.abc"), f"tf.{path}.{name}"
        if isinstance(v, types.ModuleType):
            assert v.__name__.startswith("gputape.tf") or v.__name__ == "gputape.config", f"tf.{path}.{name}: {v}"
    for leak in ("np", "Any", "annotations", "as_tensor", "backend", "current_device", "types", "os"):
        assert not hasattr(ns, leak), f"tf.{path}.{leak}"
