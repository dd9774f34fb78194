"""gt.Module: finding Variables and sub-modules, order, identity de-duplication, names."""

import numpy as np
import pytest
from numpy.testing import assert_allclose

import gputape as gt


class Block(gt.Module):
    def __init__(self, n, name=None):
        super().__init__(name=name)
        self.w = gt.Variable(np.full((n,), 1.0), name=f"{self.name}/w")
        self.stats = gt.Variable(np.zeros(n), trainable=False, name=f"{self.name}/stats")


class Net(gt.Module):
    def __init__(self):
        super().__init__()
        self.first = Block(2, name="first")
        self.blocks = [Block(3, name="b0"), Block(4, name="b1")]
        self.pair = (gt.Variable(1.0, name="p0"), {"deep": gt.Variable(2.0, name="p1")})
        self.table = {"z": gt.Variable(3.0, name="z"), "a": gt.Variable(4.0, name="a")}
        self.scale = 0.5  # plain attributes are ignored
        self.tensor = gt.constant([1.0])  # so are tensors that are not Variables


def test_collects_in_tf_module_order_attributes_sorted_own_before_submodules():
    # tf.Module's _flatten_module: attributes sorted by name, dict entries by key (nest.flatten),
    # this module's own leaves first, then each sub-module's in the order they were found
    net = Net()
    assert [v.name for v in net.trainable_variables] == ["p0", "p1", "a", "z", "b0/w", "b1/w", "first/w"]
    assert [v.name for v in net.non_trainable_variables] == ["b0/stats", "b1/stats", "first/stats"]
    assert len(net.variables) == 10
    assert [p for p, _ in net.named_variables()] == [
        "pair/0",
        "pair/1/deep",
        "table/a",
        "table/z",
        "blocks/0/stats",
        "blocks/0/w",
        "blocks/1/stats",
        "blocks/1/w",
        "first/stats",
        "first/w",
    ]


def test_order_is_stable_between_reads_and_instances():
    a, b = Net(), Net()
    assert [p for p, _ in a.named_variables()] == [p for p, _ in b.named_variables()]
    assert [id(v) for v in a.variables] == [id(v) for v in a.variables]


def test_variables_are_tuples_as_in_tf_module():
    net = Net()
    extra = gt.Variable(0.0, name="extra")
    assert isinstance(net.trainable_variables, tuple) and isinstance(net.variables, tuple)
    combined = net.trainable_variables + (extra,)
    assert combined[-1] is extra and len(net.trainable_variables) == 7
    assert isinstance(net.submodules, tuple)


def test_shared_variables_and_modules_are_listed_once():
    m = gt.Module(name="m")
    shared = gt.Variable([1.0, 2.0], name="shared")
    sub = gt.Module(name="sub")
    sub.v = shared
    m.a = shared
    m.b = [shared, shared]
    m.sub1 = sub
    m.sub2 = sub
    assert m.variables == [shared] or (len(m.variables) == 1 and m.variables[0] is shared)
    assert [s.name for s in m.submodules] == ["sub"]


def test_cycles_do_not_loop():
    parent = gt.Module(name="parent")
    child = gt.Module(name="child")
    parent.child = child
    child.parent = parent  # back-reference
    child.v = gt.Variable(1.0)
    lst = [gt.Variable(2.0)]
    lst.append(lst)  # a list containing itself
    parent.lst = lst
    assert len(parent.variables) == 2
    assert [m.name for m in parent.submodules] == ["child"]
    assert [m.name for m in child.submodules] == ["parent"]


def test_submodules_direct_ones_first_in_sorted_attribute_order():
    net = Net()
    net.first.inner = gt.Module(name="inner")
    assert [m.name for m in net.submodules] == ["b0", "b1", "first", "inner"]


def test_names_default_to_snake_case_class_name():
    class MyFancyModel(gt.Module):
        pass

    assert MyFancyModel().name == "my_fancy_model"
    assert gt.Module(name="x").name == "x"
    assert "MyFancyModel" in repr(MyFancyModel())


def test_subclass_without_super_init_still_works():
    class Lazy(gt.Module):
        def __init__(self):
            self.v = gt.Variable(1.0)

    m = Lazy()
    assert m.name == "lazy" and len(m.trainable_variables) == 1


def test_tape_watches_module_variables_and_gradients_match_hand_derivation():
    class Affine(gt.Module):
        def __init__(self):
            super().__init__()
            self.w = gt.Variable(np.array([[1.0, -1.0], [2.0, 0.5]]))
            self.b = gt.Variable(np.array([0.1, -0.2]))

        def __call__(self, x):
            return x @ self.w + self.b

    m = Affine()
    x = np.array([[1.0, 2.0], [3.0, -1.0]])
    with gt.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(m.trainable_variables)
        loss = gt.sum(m(x) ** 2)
    db, dw = tape.gradient(loss, m.trainable_variables)  # sorted by attribute name: b, w
    y = x @ m.w.numpy() + m.b.numpy()
    assert_allclose(dw.numpy(), x.T @ (2 * y))
    assert_allclose(db.numpy(), (2 * y).sum(0))


def test_name_scope_and_with_name_scope_exist_for_tf_code():
    class M(gt.Module):
        @gt.Module.with_name_scope
        def __call__(self, x):
            with self.name_scope:
                return x * 2

    assert float(M()(gt.constant(2.0))) == 4.0


@pytest.mark.parametrize("container", [list, tuple])
def test_variables_nested_in_sequences_of_dicts(container):
    m = gt.Module()
    m.items = container([{"k": gt.Variable(1.0)}, {"k": gt.Variable(2.0)}])
    assert [p for p, _ in m.named_variables()] == ["items/0/k", "items/1/k"]
