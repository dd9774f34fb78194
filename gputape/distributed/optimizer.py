"""``DistributedOptimizer``: an optimizer whose ``apply_gradients`` first averages the gradients over the ranks.

>>> import gputape as gt
>>> float(gt.distributed.DistributedOptimizer(gt.optim.SGD(0.1)).learning_rate)
0.1
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..core.tape import GradientTape
from ..core.tensor import Variable
from ..optim import Optimizer
from .collectives import all_reduce


class DistributedOptimizer(Optimizer):
    """Wrap an optimizer so that ``apply_gradients`` first averages the gradients over all ranks.

    Everything else (learning rate, ``iterations``, slots, ``get_state``/
    ``set_state``, checkpoints with ``gt.save``) is the wrapped optimizer's.
    Its ``clipnorm``/``global_clipnorm`` apply to the averaged gradients;
    ``gt.clip_by_global_norm`` before ``apply_gradients`` would clip each
    rank's own gradients instead. ``op='sum'`` adds instead of averaging
    (for a loss summed, not averaged, over the global batch).

    >>> import gputape as gt
    >>> w = gt.Variable([1.0])
    >>> opt = gt.distributed.DistributedOptimizer(gt.optim.SGD(0.5))
    >>> opt.apply_gradients([(gt.constant([2.0]), w)]), w.numpy().tolist(), int(opt.iterations)
    (1, [0.0], 1)
    """

    def __init__(self, optimizer: Optimizer, op: str = "mean") -> None:
        if not isinstance(optimizer, Optimizer) or isinstance(optimizer, DistributedOptimizer):
            raise TypeError(
                f"DistributedOptimizer: wrap a gt.optim optimizer (SGD, Adam, ...), got {type(optimizer).__name__}"
            )
        if op not in ("mean", "sum"):
            raise ValueError(f"DistributedOptimizer: op must be 'mean' or 'sum', got {op!r}")
        object.__setattr__(self, "optimizer", optimizer)
        object.__setattr__(self, "op", op)

    # Reads and writes of anything else go to the wrapped optimizer, which holds all the state.
    def __getattr__(self, name: str) -> Any:
        if name == "optimizer":  # not set yet (copy, unpickling): no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.optimizer, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.optimizer, name, value)

    @property
    def slot_names(self) -> tuple[str, ...]:  # type: ignore[override]
        return self.optimizer.slot_names

    @property
    def iterations(self) -> int:  # type: ignore[override]
        return self.optimizer.iterations

    @iterations.setter
    def iterations(self, value: int) -> None:
        self.optimizer.iterations = value

    @property
    def learning_rate(self) -> float:
        return self.optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        self.optimizer.learning_rate = value

    def build(self, var_list: Iterable[Variable]) -> None:
        self.optimizer.build(var_list)

    def get_state(self) -> dict[str, Any]:
        return self.optimizer.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self.optimizer.set_state(state)

    def apply_gradients(self, grads_and_vars: Iterable[tuple[Any, Variable]]) -> int:
        pairs = list(grads_and_vars)
        for pair in pairs:
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                raise TypeError(
                    f"DistributedOptimizer.apply_gradients: expected (gradient, gt.Variable) pairs, as from "
                    f"zip(grads, model.trainable_variables); got {pair!r:.100}"
                )
        grads = all_reduce([g for g, _ in pairs], op=self.op)
        return self.optimizer.apply_gradients(zip(grads, [v for _, v in pairs]))

    def minimize(self, loss: Any, var_list: Any, tape: GradientTape | None = None) -> int:
        if callable(var_list):
            var_list = var_list()
        var_list = list(var_list)
        if tape is None:
            if not callable(loss):
                raise TypeError("DistributedOptimizer.minimize: pass loss as a callable, or the tape that recorded it")
            with GradientTape() as tape:
                value = loss()
        else:
            value = loss
        return self.apply_gradients(zip(tape.gradient(value, var_list), var_list))

    def __repr__(self) -> str:
        return f"DistributedOptimizer({self.optimizer!r}, op={self.op!r})"
