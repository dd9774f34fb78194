"""Complete TensorFlow-style training programs, run with only ``import gputape.tf as tf``.

Each program is written the way a TensorFlow 2 user writes a custom
GradientTape loop (the bodies would run under ``import tensorflow as tf``),
trains something small, and asserts that it learned: the loss fell, an
accuracy was reached, or gradients equal hand-derived values.
"""

import itertools

import numpy as np
import pytest

import gputape as gt  # for GputapeWarning and gt.Function; the programs use tf alone
import gputape.tf as tf


def blobs(n=300, seed=0):
    """Three well-separated Gaussian blobs in 2-d, float32, integer labels."""
    rng = np.random.default_rng(seed)
    centers = np.array([[2.0, 0.0], [-2.0, 1.5], [0.0, -2.5]])
    y = rng.integers(0, 3, n)
    x = (centers[y] + 0.6 * rng.normal(size=(n, 2))).astype(np.float32)
    return x, y.astype(np.int64)


# 1 ---------------------------------------------------------------------------------------------
def test_program_linear_regression_with_variables_and_assign_sub():
    tf.random.set_seed(0)
    true_w, true_b = 3.0, -1.0
    x = tf.random.uniform([200, 1], minval=-1.0, maxval=1.0)
    y = true_w * x + true_b + tf.random.normal([200, 1], stddev=0.05)

    w = tf.Variable(tf.zeros([1, 1]), name="w")
    b = tf.Variable(tf.zeros([1]), name="b")
    lr = 0.5
    losses = []
    for _ in range(100):
        with tf.GradientTape() as tape:
            pred = tf.matmul(x, w) + b
            loss = tf.reduce_mean(tf.square(pred - y))
        dw, db = tape.gradient(loss, [w, b])
        w.assign_sub(lr * dw)
        b.assign_sub(lr * db)
        losses.append(float(loss))

    assert losses[-1] < 0.01 < losses[0]
    assert abs(float(w[0, 0]) - true_w) < 0.05 and abs(float(b[0]) - true_b) < 0.05


# 2 ---------------------------------------------------------------------------------------------
def test_program_logistic_regression_with_keras_sgd():
    x, y = blobs(seed=1)
    y_bin = (y == 0).astype(np.float32)[:, None]
    w = tf.Variable(tf.random.normal([2, 1], stddev=0.1, seed=1))
    b = tf.Variable(0.0)
    opt = tf.keras.optimizers.SGD(learning_rate=0.5, momentum=0.9)

    for _ in range(60):
        with tf.GradientTape() as tape:
            logits = tf.matmul(x, w) + b
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y_bin, logits=logits))
        grads = tape.gradient(loss, [w, b])
        opt.apply_gradients(zip(grads, [w, b]))

    pred = tf.cast(tf.sigmoid(tf.matmul(x, w) + b) > 0.5, tf.float32)
    accuracy = float(tf.reduce_mean(tf.cast(tf.equal(pred, y_bin), tf.float32)))
    assert accuracy > 0.97
    assert opt.iterations == 60


# 3 ---------------------------------------------------------------------------------------------
class MLP(tf.Module):
    def __init__(self, sizes, name=None):
        super().__init__(name=name)
        self.layers = []
        for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
            w = tf.Variable(tf.random.normal([n_in, n_out], stddev=np.sqrt(2.0 / n_in)), name=f"w{i}")
            b = tf.Variable(tf.zeros([n_out]), name=f"b{i}")
            self.layers.append((w, b))

    @tf.Module.with_name_scope
    def __call__(self, x):
        for i, (w, b) in enumerate(self.layers):
            x = tf.matmul(x, w) + b
            if i < len(self.layers) - 1:
                x = tf.nn.relu(x)
        return x


def test_program_tf_module_mlp_with_tf_function_and_adam():
    tf.random.set_seed(2)
    x, y = blobs(seed=2)
    model = MLP([2, 32, 3], name="mlp")
    opt = tf.optimizers.Adam(learning_rate=0.02)

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            logits = model(xb)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb, logits=logits))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    first = float(train_step(x, y))
    for _ in range(80):
        last = float(train_step(x, y))
    accuracy = float(tf.reduce_mean(tf.cast(tf.equal(tf.argmax(model(x), axis=1), y), tf.float32)))
    assert last < 0.3 * first
    assert accuracy > 0.95
    # TensorFlow names a tf.Variable's value "<name>:0"
    assert [v.name for v in model.trainable_variables] == ["w0:0", "b0:0", "w1:0", "b1:0"]


# 4 ---------------------------------------------------------------------------------------------
def test_program_keras_sequential_with_dataset_losses_and_metrics():
    tf.random.set_seed(3)
    x, y = blobs(n=400, seed=3)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(400, seed=3).batch(32)
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(2,)),
            tf.keras.layers.Dense(32, activation="relu"),
            tf.keras.layers.Dense(3),
        ]
    )
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = tf.keras.optimizers.Adam(learning_rate=0.01)
    train_loss = tf.keras.metrics.Mean(name="train_loss")
    train_acc = tf.keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")

    @tf.function
    def train_step(images, labels):
        with tf.GradientTape() as tape:
            predictions = model(images, training=True)
            loss = loss_fn(labels, predictions)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        train_loss(loss)
        train_acc(labels, predictions)

    history = []
    for _ in range(8):
        train_loss.reset_state()
        train_acc.reset_state()
        for images, labels in dataset:
            train_step(images, labels)
        history.append((float(train_loss.result()), float(train_acc.result())))

    assert history[-1][0] < history[0][0]
    assert history[-1][1] > 0.95
    assert len(model.trainable_variables) == 4


# 5 ---------------------------------------------------------------------------------------------
class Classifier(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = tf.keras.layers.Dense(64, activation="relu")
        self.dropout = tf.keras.layers.Dropout(0.2)
        self.out = tf.keras.layers.Dense(3)

    def call(self, inputs, training=False):
        return self.out(self.dropout(self.hidden(inputs), training=training))


def test_program_subclassed_model_dropout_rmsprop_and_global_norm_clipping():
    tf.random.set_seed(4)
    x, y = blobs(seed=4)
    model = Classifier()
    optimizer = tf.keras.optimizers.RMSprop(learning_rate=0.005)
    norms, losses = [], []

    @tf.function(reduce_retracing=True)
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            logits = model(xb, training=True)
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(yb, logits, from_logits=True))
        grads = tape.gradient(loss, model.trainable_variables)
        grads, norm = tf.clip_by_global_norm(grads, 1.0)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss, norm

    for _ in range(60):
        loss, norm = train_step(x, y)
        losses.append(float(loss))
        norms.append(float(norm))

    inference = model(x, training=False)
    assert np.array_equal(inference.numpy(), model(x).numpy())  # no dropout at inference
    accuracy = float(tf.reduce_mean(tf.cast(tf.argmax(inference, axis=1) == y, tf.float32)))
    assert accuracy > 0.95 and losses[-1] < losses[0]
    assert all(n >= 0 for n in norms) and norms[-1] < max(norms)
    assert model.predict(x[:10]).shape == (10, 3)


# 6 ---------------------------------------------------------------------------------------------
def test_program_gradients_match_hand_derived_values():
    x = tf.constant([1.0, 2.0, 3.0])
    w = tf.Variable([0.5, -1.0, 2.0])

    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = tf.reduce_sum(w * x**2)  # dy/dx = 2 w x ; dy/dw = x^2
        z = tf.math.log(tf.reduce_sum(tf.exp(w)))  # dz/dw = softmax(w)
    assert np.allclose(tape.gradient(y, x).numpy(), [1.0, -4.0, 12.0])
    assert np.allclose(tape.gradient(y, w).numpy(), [1.0, 4.0, 9.0])
    e = np.exp([0.5, -1.0, 2.0])
    assert np.allclose(tape.gradient(z, w).numpy(), e / e.sum())
    del tape

    # second derivative with nested tapes: d2/dx2 x^3 = 6x
    t = tf.Variable(2.0)
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            cube = t * t * t
        dcube = inner.gradient(cube, t)
    assert float(dcube) == 12.0 and float(outer.gradient(dcube, t)) == 12.0

    # a tiny regression trained by gradient descent on these gradients
    a = tf.Variable(0.0)
    for _ in range(50):
        with tf.GradientTape() as tape:
            loss = tf.square(a - 3.0)
        a.assign_sub(0.1 * tape.gradient(loss, a))  # d/da (a - 3)^2 = 2 (a - 3)
    assert abs(float(a) - 3.0) < 1e-3


# 7 ---------------------------------------------------------------------------------------------
@tf.custom_gradient
def clip_gradient(x):
    def grad(upstream):
        return tf.clip_by_value(upstream, -0.1, 0.1)

    return tf.identity(x), grad


def test_program_custom_gradient_in_a_training_loop():
    w = tf.Variable([5.0, -5.0])
    with tf.GradientTape() as tape:
        # Read the variable first: a custom_gradient function that reads variables itself must
        # take grad_fn(..., variables=...), in TensorFlow and here.
        loss = tf.reduce_sum(tf.square(clip_gradient(tf.convert_to_tensor(w))))
    assert np.allclose(tape.gradient(loss, w).numpy(), [0.1, -0.1])  # 2w = (10, -10), clipped

    for _ in range(20):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(clip_gradient(tf.convert_to_tensor(w))))
        w.assign_sub(1.0 * tape.gradient(loss, w))
    assert np.allclose(w.numpy(), [3.0, -3.0])  # exactly 0.1 per step while |2w| > 0.1


# 8 ---------------------------------------------------------------------------------------------
def test_program_explicit_watch_of_model_variables():
    tf.random.set_seed(8)
    x = np.linspace(-1, 1, 64, dtype=np.float32)[:, None]
    y = 2.0 * x + 0.5
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model(x)  # build
    opt = tf.keras.optimizers.SGD(learning_rate=0.3)
    mse = tf.keras.losses.MeanSquaredError()
    for _ in range(80):
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(model.trainable_variables)
            loss = mse(y, model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        assert all(g is not None for g in grads)
        opt.apply_gradients(zip(grads, model.trainable_variables))
    assert float(loss) < 1e-4
    kernel, bias = model.trainable_variables
    assert abs(float(kernel[0, 0]) - 2.0) < 0.01 and abs(float(bias[0]) - 0.5) < 0.01


# 9 ---------------------------------------------------------------------------------------------
def test_program_sine_regression_with_schedule_and_profiler():
    tf.random.set_seed(9)
    x = np.linspace(-3, 3, 128, dtype=np.float32)[:, None]
    y = np.sin(x)
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Dense(32, activation="tanh", input_shape=(1,)),
            tf.keras.layers.Dense(32, activation="tanh"),
            tf.keras.layers.Dense(1),
        ]
    )
    schedule = tf.keras.optimizers.schedules.ExponentialDecay(0.02, decay_steps=100, decay_rate=0.5)
    opt = tf.keras.optimizers.Adam(learning_rate=schedule)

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.keras.losses.mean_squared_error(y, model(x)))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return float(loss)

    first = step()
    for _ in range(300):
        last = step()
    assert last < 0.01 < first
    assert abs(opt.learning_rate - 0.02 * 0.5 ** (301 / 100)) < 1e-12


# 10 --------------------------------------------------------------------------------------------
def test_program_td_learning_with_stop_gradient_and_one_hot():
    """A one-step temporal-difference update, where the target must not be differentiated."""
    tf.random.set_seed(10)
    n_states, n_actions, gamma = 4, 2, 0.9
    q = tf.Variable(tf.zeros([n_states, n_actions]))
    # a chain: action 1 moves right (reward 1 at the end), action 0 stays (reward 0)
    transitions = [
        (s, a, min(s + a, n_states - 1), float(s + a >= n_states - 1 and a == 1)) for s in range(3) for a in (0, 1)
    ]
    states = tf.constant([t[0] for t in transitions])
    actions = tf.constant([t[1] for t in transitions])
    next_states = tf.constant([t[2] for t in transitions])
    rewards = tf.constant([t[3] for t in transitions])
    opt = tf.keras.optimizers.SGD(learning_rate=0.5)

    for _ in range(200):
        with tf.GradientTape() as tape:
            q_sa = tf.reduce_sum(tf.gather(q, states) * tf.one_hot(actions, n_actions), axis=1)
            target = rewards + gamma * tf.reduce_max(tf.gather(q, next_states), axis=1)
            loss = tf.reduce_mean(tf.square(tf.stop_gradient(target) - q_sa))
        opt.apply_gradients([(tape.gradient(loss, q), q)])

    values = q.numpy()
    assert np.argmax(values[:3], axis=1).tolist() == [1, 1, 1]  # it learned to move right
    assert abs(values[2, 1] - 1.0) < 0.05 and abs(values[1, 1] - gamma) < 0.05


# the namespace's TensorFlow-specific behaviour -----------------------------------------------------


def test_tf_function_both_forms_trace_once_and_replay():
    calls = []

    @tf.function
    def f(x):
        calls.append(1)  # Python side effects run while tracing only, as in TensorFlow
        return x + 1

    @tf.function(input_signature=[tf.TensorSpec(shape=[None], dtype=tf.float32)], jit_compile=True)
    def g(x):
        return x * 2

    assert float(f(tf.constant(1.0))) == 2.0 and float(f(tf.constant(2.0))) == 3.0
    assert len(calls) == 1 and f.experimental_get_tracing_count() == 1
    assert g(tf.constant([1.0, 2.0])).numpy().tolist() == [2.0, 4.0]
    assert f.__name__ == "f" and isinstance(f, gt.Function)


def test_tf_argument_names_and_defaults():
    x = tf.constant([[1.0, 5.0], [3.0, 2.0]])
    assert tf.reduce_sum(input_tensor=x, axis=0, keepdims=True).shape == (1, 2)
    assert tf.argmax(x).numpy().tolist() == [1, 0]  # TensorFlow's default axis is 0
    assert str(tf.argmax(x).dtype) == "int64"
    assert tf.matmul(x, x, transpose_a=True).numpy().tolist() == (x.numpy().T @ x.numpy()).tolist()
    assert tf.concat([x, x], axis=1).shape == (2, 4)
    assert tf.reshape(x, [-1]).shape == (4,)
    assert tf.transpose(x, perm=[1, 0]).numpy().tolist() == x.numpy().T.tolist()
    assert [t.shape for t in tf.split(tf.zeros((6, 1)), [1, -1, 2])] == [(1, 1), (3, 1), (2, 1)]
    assert tf.one_hot([1], 3, axis=0).shape == (3, 1)
    assert tf.shape(x).numpy().tolist() == [2, 2] and int(tf.rank(x)) == 2
    assert tf.where([True, False, True]).numpy().tolist() == [[0], [2]]
    assert str(tf.range(3).dtype) == "int32" and str(tf.range(1.0, 2.0, 0.5).dtype) == "float32"
    assert tf.constant(1.0, shape=[2, 2]).numpy().tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert tf.math.reduce_std(tf.constant([1.0, 3.0])).numpy().tolist() == 1.0
    assert tf.nn.softmax(tf.zeros((1, 4)), axis=-1).numpy().tolist() == [[0.25] * 4]
    assert float(tf.norm(tf.constant([3.0, 4.0]))) == 5.0
    assert tf.gather(tf.constant([[1.0, 2.0], [3.0, 4.0]]), [1], axis=1).numpy().tolist() == [[2.0], [4.0]]
    assert tf.float32 == np.float32 and tf.bool == np.bool_
    with pytest.raises(ValueError, match="labels= and logits="):
        tf.nn.sparse_softmax_cross_entropy_with_logits(logits=x)


def test_tf_data_pipeline_order_and_reshuffling():
    ds = tf.data.Dataset.from_tensor_slices(np.arange(10)).shuffle(10, seed=0).batch(5)
    first = [b.numpy().tolist() for b in ds]
    second = [b.numpy().tolist() for b in ds]
    assert sorted(first[0] + first[1]) == list(range(10)) and first != second  # reshuffled each pass
    fixed = tf.data.Dataset.from_tensor_slices(np.arange(10)).shuffle(10, seed=0, reshuffle_each_iteration=False)
    assert [int(v) for v in fixed] == [int(v) for v in fixed]
    batched_then_shuffled = tf.data.Dataset.from_tensor_slices(np.arange(6)).batch(2).shuffle(3, seed=1)
    assert sorted(b.numpy().tolist() for b in batched_then_shuffled) == [[0, 1], [2, 3], [4, 5]]
    d = tf.data.Dataset.from_tensor_slices({"x": np.ones((4, 2)), "y": np.arange(4)}).batch(3)
    assert [(b["x"].shape, b["y"].shape) for b in d] == [((3, 2), (3,)), ((1, 2), (1,))]
    assert str(next(iter(tf.data.Dataset.from_tensor_slices([1.5]))).dtype) == "float32"


def test_profiler_without_a_backend_warns_and_records_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(tf.profiler, "_backend", lambda: None)
    with pytest.warns(gt.GputapeWarning, match="not implemented"):
        tf.profiler.experimental.start(str(tmp_path / "logs"))
    _ = tf.reduce_sum(tf.ones(3))
    tf.profiler.experimental.stop()
    assert not (tmp_path / "logs").exists()
    with pytest.raises(RuntimeError, match="no profiling session"):
        tf.profiler.experimental.stop()


def test_profiler_uses_gputape_profiler_when_present(tmp_path):
    prof = tf.profiler._backend()
    if prof is None:
        pytest.skip("gputape.debug.profiler is not part of this installation")
    logdir = tmp_path / "logs"
    with tf.profiler.experimental.Profile(str(logdir)):
        with tf.GradientTape() as tape:
            v = tf.Variable([1.0, 2.0])
            loss = tf.reduce_sum(tf.exp(v))
        tape.gradient(loss, v)
    assert (logdir / "trace.json").exists() and "exp" in (logdir / "summary.txt").read_text()


def test_keras_model_refuses_fit_before_compile_and_a_functional_model_without_symbolic_tensors():
    with pytest.raises(RuntimeError, match=r"call model\.compile\(optimizer=\.\.\., loss=\.\.\.\) before fit\(\)"):
        tf.keras.Sequential([tf.keras.layers.Dense(1)]).fit(np.ones((1, 1)), np.ones((1, 1)))
    with pytest.raises(TypeError, match=r"symbolic tensors from tf\.keras\.Input"):
        tf.keras.Model(inputs=None, outputs=None)
