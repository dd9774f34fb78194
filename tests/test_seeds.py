"""Seeds, TensorFlow's model (issue 26, deliverable 1).

A global seed plus op seeds: after ``tf.random.set_seed`` / ``gt.random.seed`` /
``tf.keras.utils.set_random_seed`` every random thing (initializers, Dropout,
``Dataset.shuffle`` and ``DataLoader(shuffle=True)`` without a seed, ``fit(shuffle=True)``,
the random ops) is the same in every process. The expectations are tf.random.set_seed's
documented ones; the numbers themselves are numpy's Philox, not TensorFlow's.
"""

import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gputape as gt
import gputape.tf as tf

# One seeded program touching every random source; prints the final weights' bytes as hex.
PROGRAM = textwrap.dedent(
    """
    import sys
    import numpy as np
    import gputape as gt
    import gputape.tf as tf

    how, seed = sys.argv[1], int(sys.argv[2])
    {"keras": tf.keras.utils.set_random_seed, "tf": tf.random.set_seed, "gt": gt.random.seed}[how](seed)
    x = tf.random.normal([48, 4])
    y = tf.random.uniform([48], 0, 2, dtype="int32")
    model = tf.keras.Sequential(
        [tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dropout(0.5), tf.keras.layers.Dense(2)]
    )
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.SGD(0.1)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(48).batch(16)
    loader = gt.data.DataLoader(x.numpy(), y.numpy(), batch_size=16, shuffle=True)

    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    for _ in range(2):
        for xb, yb in ds:
            step(xb, yb)
        for xb, yb in loader:
            step(xb, yb)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss=loss_fn)
    model.fit(x, y, epochs=2, batch_size=16, shuffle=True, verbose=0)
    noise = tf.random.Generator.from_seed(seed).normal([2]).numpy().tobytes()
    print((b"".join(v.numpy().tobytes() for v in model.trainable_variables) + noise).hex())
    """
)


def _run(how: str, seed: int) -> str:
    out = subprocess.run([sys.executable, "-c", PROGRAM, how, str(seed)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.parametrize("how", ["keras", "tf", "gt"])
def test_one_seeded_program_gives_the_same_weights_in_two_processes(how):
    first, second = _run(how, 7), _run(how, 7)
    assert first == second
    if how == "tf":
        assert _run(how, 8) != first  # and the seed matters


# -- tf.random.set_seed's documented rules, in one process -------------------------------------


def test_global_seed_alone_gives_each_op_its_own_reproducible_stream():
    tf.random.set_seed(1234)
    a1, a2 = tf.random.uniform([2]).numpy(), tf.random.uniform([2]).numpy()
    tf.random.set_seed(1234)
    assert (a1 == tf.random.uniform([2]).numpy()).all() and (a2 == tf.random.uniform([2]).numpy()).all()
    assert (a1 != a2).all()


def test_an_op_seed_continues_its_stream_until_set_seed():
    # "A1, A2" in tf.random.set_seed's docs: repeated calls with one op seed differ, set_seed resets them.
    tf.random.set_seed(1234)
    a1, a2 = tf.random.uniform([1], seed=1).numpy(), tf.random.uniform([1], seed=1).numpy()
    assert a1 != a2
    tf.random.set_seed(1234)
    assert a1 == tf.random.uniform([1], seed=1).numpy()
    assert a2 == tf.random.uniform([1], seed=1).numpy()


def test_an_op_seed_without_a_global_seed_is_deterministic():
    gt.random.seed(None)
    a = tf.random.normal([3], seed=5).numpy()
    gt.random.seed(None)
    assert (a == tf.random.normal([3], seed=5).numpy()).all()
    tf.random.set_seed(2)
    assert (a != tf.random.normal([3], seed=5).numpy()).all()  # the global seed takes part


def test_an_ops_numbers_do_not_depend_on_an_earlier_ops_size():
    tf.random.set_seed(0)
    tf.random.normal([5])
    a = tf.random.normal([3]).numpy()
    tf.random.set_seed(0)
    tf.random.normal([500])
    assert (a == tf.random.normal([3]).numpy()).all()


def test_get_seed_and_clearing():
    gt.random.seed(9)
    assert gt.random.get_seed() == 9
    gt.random.seed(None)
    assert gt.random.get_seed() is None
    with pytest.raises(TypeError, match="seed"):
        gt.random.seed(1.5)
    with pytest.raises(ValueError, match="seed"):
        gt.random.seed(-1)


def test_dataset_shuffle_without_a_seed_follows_the_global_seed():
    def orders():
        ds = tf.data.Dataset.from_tensor_slices(np.arange(20)).shuffle(20)
        return [[int(v) for v in ds] for _ in range(2)]

    tf.random.set_seed(3)
    first = orders()
    tf.random.set_seed(3)
    assert orders() == first
    assert first[0] != first[1]  # reshuffled each iteration
    assert sorted(first[0]) == list(range(20))


def test_dataloader_shuffle_without_a_seed_follows_the_global_seed():
    def orders():
        loader = gt.data.DataLoader(np.arange(12), batch_size=12, shuffle=True)
        return [loader_batch.numpy().tolist() for _ in range(2) for loader_batch in loader]

    gt.random.seed(4)
    first = orders()
    gt.random.seed(4)
    assert orders() == first and first[0] != first[1]


def test_initializers_and_dropout_follow_the_global_seed():
    def draw():
        w = gt.nn.initializers.GlorotUniform()((4, 3))
        m = tf.nn.dropout(tf.ones((1, 16)), 0.5).numpy()
        d = tf.keras.layers.Dropout(0.5)(tf.ones((1, 16)), training=True).numpy()
        return w, m, d

    tf.random.set_seed(11)
    first = draw()
    tf.random.set_seed(11)
    assert all((a == b).all() for a, b in zip(first, draw()))


def test_keras_set_random_seed_seeds_python_and_numpy_too():
    tf.keras.utils.set_random_seed(5)
    a = (random.random(), np.random.rand(), tf.random.normal([2]).numpy().tolist())
    tf.keras.utils.set_random_seed(5)
    assert a == (random.random(), np.random.rand(), tf.random.normal([2]).numpy().tolist())
    assert gt.random.get_seed() == 5
    with pytest.raises(ValueError, match="seed must be an integer"):
        tf.keras.utils.set_random_seed(1.5)


# -- tf.random.Generator and the stateless ops --------------------------------------------------


def test_generator_from_seed_is_reproducible_and_independent_of_the_global_seed():
    tf.random.set_seed(1)
    a = tf.random.Generator.from_seed(3).normal([4]).numpy()
    tf.random.set_seed(2)
    g = tf.random.Generator.from_seed(3)
    assert (a == g.normal([4]).numpy()).all()
    assert (a != g.normal([4]).numpy()).all()  # the generator's own state advances
    g.reset_from_seed(3)
    assert (a == g.normal([4]).numpy()).all()


def test_generator_split_and_draws():
    g = tf.random.Generator.from_seed(0)
    c1, c2 = g.split(2)
    assert (c1.uniform([8]).numpy() != c2.uniform([8]).numpy()).all()
    ints = g.uniform([100], minval=3, maxval=6, dtype="int32").numpy()
    assert set(ints.tolist()) <= {3, 4, 5} and ints.dtype == np.int32
    assert g.make_seeds(4).shape == (2, 4)
    assert tf.random.Generator.from_non_deterministic_state().normal([2, 3]).shape == (2, 3)
    assert abs(tf.random.Generator.from_seed(1).truncated_normal([500]).numpy()).max() <= 2


def test_stateless_ops_depend_only_on_their_seed():
    tf.random.set_seed(1)
    a = tf.random.stateless_normal([5], seed=[1, 2]).numpy()
    tf.random.normal([3])  # no state to disturb
    tf.random.set_seed(99)
    assert (a == tf.random.stateless_normal([5], seed=[1, 2]).numpy()).all()
    assert (a != tf.random.stateless_normal([5], seed=[1, 3]).numpy()).all()
    u = tf.random.stateless_uniform([1000], seed=[4, 5], minval=-1.0, maxval=1.0).numpy()
    assert u.min() >= -1 and u.max() < 1 and u.dtype == np.float32
    c = tf.random.stateless_categorical([[0.0, 0.0, -1e9]], 50, seed=[1, 1])
    assert c.shape == (1, 50) and set(c.numpy().ravel().tolist()) <= {0, 1}
    same = tf.random.stateless_categorical([[0.0, 0.0]], 20, seed=[1, 1]).numpy()
    assert (same == tf.random.stateless_categorical([[0.0, 0.0]], 20, seed=[1, 1]).numpy()).all()
    with pytest.raises(ValueError, match=r"seed must be a shape \[2\] integer tensor"):
        tf.random.stateless_normal([2], seed=[1, 2, 3])
    assert tf.random.experimental.stateless_split([1, 2], num=3).shape == (3, 2)


def test_categorical_draws_from_the_softmax():
    tf.random.set_seed(0)
    c = tf.random.categorical(tf.math.log([[0.25, 0.75]]), 4000).numpy()
    assert c.dtype == np.int64 and abs(c.mean() - 0.75) < 0.03
