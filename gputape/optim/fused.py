"""The multi-tensor optimizer: SGD (with momentum), Adam and AdamW over all parameters in one GPU launch.

``kernels/optimizers.cu`` is declared here (:data:`OPTIMIZERS`), next to the
optimizers it serves; :class:`FusedOptimizer` launches it on cupy arrays and runs
its numpy reference :func:`ref_optimizer_update` on numpy arrays. The reference
is the CPU optimizers' own code: the update rules of :mod:`gputape.optim.rules`,
which ``gt.optim.SGD``/``Adam``/``AdamW`` compute every step with, applied in place.
So there is one numpy statement of each update and the one CUDA kernel.

This module never imports cupy: it asks :mod:`gputape.devices.backend` for it.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Any

import numpy as np

from ..core.state import current_trace, defer_interrupts
from ..core.tensor import Variable
from ..devices import backend
from ..kernels import build as _kb
from . import rules as _rules

OPTIMIZERS = _kb.CudaModule(
    "optimizers", ("gt_optimizer_update_f32", "gt_optimizer_update_f64", "gt_optimizer_step_sync")
)

KINDS = {"sgd": 0, "adam": 1, "adamw": 1}
# The update each kind runs, on the CPU and as the kernel's reference (gt.optim's classes
# name the same functions: SGD.update_rule, Adam.update_rule).
RULES = {"sgd": _rules.sgd, "adam": _rules.adam, "adamw": _rules.adam}


def ref_optimizer_update(
    kind: str,
    params: list[np.ndarray],
    grads: list[np.ndarray],
    slot1: list[np.ndarray | None],
    slot2: list[np.ndarray | None],
    step: np.ndarray,
    parity: int,
    lr: np.ndarray,
    momentum: float = 0.0,
    nesterov: bool = False,
    beta_1: float = 0.9,
    beta_2: float = 0.999,
    epsilon: float = 1e-7,
    weight_decay: float = 0.0,
) -> None:
    """One optimizer update of every parameter, in place (numpy): ``optimizers.cu``'s math.

    ``step`` holds the ping-pong counter (reads ``step[parity]``, writes
    ``step[parity ^ 1] = step[parity] + 1``), ``lr`` a one-element float64
    array. Each parameter runs the update rule ``gt.optim`` computes with
    (:data:`RULES`, decoupled weight decay first), in the parameter's dtype.

    >>> import numpy as np
    >>> p = [np.array([1.0])]; st = np.zeros(2, np.int64)
    >>> ref_optimizer_update("adam", p, [np.array([5.0])], [np.zeros(1)], [np.zeros(1)], st, 0, np.array([0.1]))
    >>> round(float(p[0][0]), 4), st.tolist()
    (0.9, [0, 1])
    """
    rule = RULES[kind]
    t = int(step[parity]) + 1
    step[parity ^ 1] = t
    lr_ = float(lr[0])
    for i, (p, g) in enumerate(zip(params, grads)):
        if weight_decay:
            p -= _rules.decoupled_decay(p, lr_, weight_decay)
        m, v = slot1[i], slot2[i]
        m_new = None if m is None else np.empty_like(m)
        if rule is _rules.sgd:
            delta, add = rule(g, lr_, momentum, nesterov, m, m_new)
            if momentum:
                m[...] = m_new
        else:
            v_new = np.empty_like(v)
            delta, add = rule(g, lr_, t, beta_1, beta_2, epsilon, m, v, m_new, v_new)
            m[...] = m_new
            v[...] = v_new
        if add:
            p += delta
        else:
            p -= delta


class _Tables:
    """Device copies of (pointer table + prefix sums), cached by their content.

    cupy's pool hands the same blocks back step after step, so gradient
    pointers recur and most steps find their table here with no upload. A miss
    copies from page-locked host memory on the current stream: asynchronous,
    never a device synchronisation.
    """

    def __init__(self, size: int = 16) -> None:
        self._size = size
        self._entries: OrderedDict[tuple, tuple[Any, Any, Any]] = OrderedDict()

    def get(self, cp: Any, key: tuple, ptrs: list[int], offsets: list[int]) -> Any:
        hit = self._entries.get(key)
        if hit is not None:
            self._entries.move_to_end(key)
            return hit[0]
        host = backend.pinned_empty(len(ptrs) + len(offsets), np.int64)
        host[: len(ptrs)] = np.array(ptrs, np.uint64).view(np.int64)
        host[len(ptrs) :] = offsets
        dev = cp.empty(host.shape, cp.int64)
        stream = cp.cuda.get_current_stream()
        dev.set(host, stream=stream)
        ev = stream.record()
        self._entries[key] = (dev, host, ev)
        if len(self._entries) > self._size:
            _, (_, _, old_ev) = self._entries.popitem(last=False)
            old_ev.synchronize()  # its pinned buffer may be reused only once its copy is done
        return dev


class FusedOptimizer:
    """SGD (with momentum), Adam or AdamW updating every parameter in ONE launch per dtype.

    The step counter and the learning rate live on the parameters' device, so a
    training loop never waits for the host. :meth:`update` takes parameter
    arrays (updated in place: they are the caller's own) or Variables, and
    gradient arrays; slots (momentum/velocity) are kept here unless passed in.
    On numpy arrays the same object runs the reference
    (:func:`ref_optimizer_update`), step and learning rate in numpy.

    A Variable's published array is never written (a tape, a tensor or another
    thread may hold it: gputape's rule for every update). The kernel updates its
    parameters in place, so for a Variable it updates a copy of the value (a
    device-to-device copy into a block of CuPy's pool, stream-ordered before the
    launch), which is then swapped in with one reference store per variable,
    Ctrl-C held across the launch and the stores. The copy costs one read and one
    write of each parameter per step beside the kernel's own traffic; a kernel
    that reads ``p`` and writes a separate output would save it.

    >>> import numpy as np
    >>> opt = FusedOptimizer("adam", 0.1)
    >>> w = np.array([1.0])
    >>> opt.update([w], [np.array([5.0])])
    >>> round(float(w[0]), 4), opt.iterations
    (0.9, 1)
    """

    def __init__(
        self,
        kind: str,
        learning_rate: float = 0.001,
        *,
        momentum: float = 0.0,
        nesterov: bool = False,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        weight_decay: float | None = None,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"FusedOptimizer: kind must be one of {sorted(KINDS)}, got {kind!r}")
        self.kind = kind
        self.momentum = float(momentum)
        self.nesterov = bool(nesterov)
        self.beta_1, self.beta_2, self.epsilon = float(beta_1), float(beta_2), float(epsilon)
        if weight_decay is None:
            weight_decay = 0.004 if kind == "adamw" else 0.0  # Keras' AdamW default
        self.weight_decay = float(weight_decay)
        self._lr0 = float(learning_rate)
        self._xp: Any = None
        self._step: Any = None  # int64[2], ping-pong (see optimizers.cu)
        self._lr: Any = None  # float64[1]
        self._parity = 0
        self._slots: list[tuple[Any, Any]] | None = None
        self._tables = _Tables()

    # -- device state ------------------------------------------------------------------
    def _init_state(self, like: Any) -> None:
        xp = backend.xp_of(like)
        self._xp = xp
        if xp is np:
            self._step = np.zeros(2, np.int64)
            self._lr = np.full(1, self._lr0, np.float64)
        else:
            with like.device:
                self._step = xp.zeros(2, xp.int64)
                self._lr = xp.full(1, self._lr0, xp.float64)

    @property
    def learning_rate(self) -> float:
        """The learning rate (reading it from a GPU waits for the device)."""
        return self._lr0 if self._lr is None else float(self._lr[0])

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        self._lr0 = float(value)
        if self._lr is not None:
            self._lr.fill(self._lr0)  # a device-side fill: no synchronisation

    @property
    def iterations(self) -> int:
        """Updates applied so far (reading it from a GPU waits for the device)."""
        return 0 if self._step is None else int(self._step[self._parity])

    @iterations.setter
    def iterations(self, value: int) -> None:
        if self._step is None:
            raise RuntimeError("FusedOptimizer.iterations: set it after the first update (the device is not known yet)")
        self._step.fill(int(value))

    def slots(self) -> list[tuple[Any, Any]]:
        """``(momentum, velocity)`` per parameter (None where the kind keeps none)."""
        return list(self._slots or ())

    # -- the update --------------------------------------------------------------------
    def _arrays(self, params: list[Any]) -> list[Any]:
        out = []
        for p in params:
            if isinstance(p, Variable):
                out.append(p._data.copy())  # the update's new value: the published array is never written
            elif hasattr(p, "_data"):
                raise TypeError("FusedOptimizer.update: parameters must be Variables or arrays, not constant Tensors")
            else:
                out.append(p)
        return out

    def _make_slots(self, arrays: list[Any]) -> list[tuple[Any, Any]]:
        xp = self._xp
        need_m = self.kind != "sgd" or self.momentum != 0.0
        need_v = self.kind != "sgd"
        return [(xp.zeros_like(a) if need_m else None, xp.zeros_like(a) if need_v else None) for a in arrays]

    def update(self, params: list[Any], grads: list[Any], slots: list[tuple[Any, Any]] | None = None) -> None:
        """Apply one update to ``params`` (in place) from ``grads``; ``slots`` overrides the kept ones."""
        tr = current_trace()
        if tr is not None and tr.owned():  # inside gt.function's trace: every replay updates too
            tr.python_step(functools.partial(self._update_raw, list(params), slots=slots), tuple(grads), wrap=False)
            return
        self._update_raw(params, *grads, slots=slots)

    def _update_raw(self, params: list[Any], *grads: Any, slots: list[tuple[Any, Any]] | None = None) -> None:
        params = list(params)
        arrays = self._arrays(params)
        gs = [g._data if hasattr(g, "_data") else g for g in grads]
        if len(gs) != len(arrays):
            raise ValueError(f"FusedOptimizer.update: {len(arrays)} parameters but {len(gs)} gradients")
        if not arrays:
            return
        if self._step is None:
            self._init_state(arrays[0])
        if slots is None:
            if self._slots is None:
                self._slots = self._make_slots(arrays)
            slots = self._slots
        if len(slots) != len(arrays):
            raise ValueError(f"FusedOptimizer.update: {len(arrays)} parameters but {len(slots)} slot pairs")
        for p, g in zip(arrays, gs):
            if p.shape != g.shape:
                raise ValueError(f"FusedOptimizer.update: gradient shape {g.shape} != parameter shape {p.shape}")
        hyper = self._hyper()
        if self._xp is np:
            gs = [g if g.dtype == p.dtype else g.astype(p.dtype) for p, g in zip(arrays, gs)]
        # the launch (the slots and the step counter change) and the variables' new arrays: both or neither
        with defer_interrupts():
            if self._xp is np:
                m = [s[0] for s in slots]
                v = [s[1] for s in slots]
                ref_optimizer_update(self.kind, arrays, gs, m, v, self._step, self._parity, self._lr, **hyper)
            else:
                self._launch(arrays, gs, slots, hyper)
            for p, a in zip(params, arrays):
                if isinstance(p, Variable):
                    p._data = a
            self._parity ^= 1

    def _hyper(self) -> dict[str, Any]:
        return {
            "momentum": self.momentum,
            "nesterov": self.nesterov,
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
            "weight_decay": self.weight_decay,
        }

    # -- the form a CUDA graph holds (gputape.function) --------------------------------------
    def capture_update(self, params: list[Any], grads: list[Any], slots: list[tuple[Any, Any]]) -> list[Any]:
        """Launch the update into the stream capture under way, at parity ``self._parity``, frozen.

        A graph replays its kernels' arguments as captured, so the parity cannot flip per
        replay: the update reads ``step[p]`` and writes ``step[p ^ 1]``, and a captured
        ``gt_optimizer_step_sync`` copies the count back into ``step[p]``. Pointer tables
        are the graph's own (allocated during the capture, so their addresses are fixed),
        filled by :meth:`finish_capture` once the capture is over. Returns what the graph
        needs kept alive; pass it to :meth:`finish_capture`. The caller does not flip
        ``_parity``: after a replay both slots hold the count.
        """
        keep: list[Any] = []
        parity = self._parity
        self._launch(params, grads, slots, self._hyper(), keep)
        dev = self._step.device
        with dev:
            sync = OPTIMIZERS.function("gt_optimizer_step_sync", dev.id)
            sync((1,), (1,), (self._step, np.int32(parity)))
        return keep

    @staticmethod
    def finish_capture(keep: list[Any]) -> None:
        """Fill the pointer tables :meth:`capture_update` allocated (copies on the current stream, not
        captured: ordered after a graph still running that used the same memory; ``keep`` keeps
        the host side alive)."""
        for item in keep:
            if type(item) is tuple:
                dev, host = item
                dev.set(host, stream=backend.xp_of(dev).cuda.get_current_stream())

    def replay_update_ref(self, params: list[Any], grads: list[Any], slots: list[tuple[Any, Any]]) -> None:
        """The numpy form of one replay of :meth:`capture_update` (tests: emulated graphs)."""
        p = self._parity
        gs = [g if g.dtype == a.dtype else g.astype(a.dtype) for a, g in zip(params, grads)]
        m = [s[0] for s in slots]
        v = [s[1] for s in slots]
        with np.errstate(all="ignore"):
            ref_optimizer_update(self.kind, params, gs, m, v, self._step, p, self._lr, **self._hyper())
        self._step[p] = self._step[p ^ 1]

    def _launch(
        self, arrays: list[Any], gs: list[Any], slots: list[tuple[Any, Any]], hyper: dict, capture: list | None = None
    ) -> None:
        """The kernel launches; ``capture``: inside a stream capture (collects what must outlive it)."""
        cp = self._xp
        dev = self._step.device
        # One launch per dtype: the kernel is templated on T (mixed-precision models
        # are rare, and each group is still one launch).
        groups: dict[np.dtype, list[int]] = {}
        for i, p in enumerate(arrays):
            if p.dtype not in _kb.KERNEL_DTYPES:
                raise TypeError(f"FusedOptimizer: no kernel for parameters of dtype {p.dtype}; use float32/float64")
            if not p.flags.c_contiguous:
                raise ValueError("FusedOptimizer: parameters must be C-contiguous (the kernel updates them in place)")
            if p.device.id != dev.id:
                raise ValueError(
                    f"FusedOptimizer: parameter {i} is on cuda:{p.device.id}, the optimizer on cuda:{dev.id}"
                )
            groups.setdefault(p.dtype, []).append(i)
        with dev:
            for dt, idx in groups.items():
                ptrs: list[int] = []
                offsets = [0]
                keep = []
                for i in idx:
                    p = arrays[i]
                    g = gs[i]
                    if g.dtype != dt or not g.flags.c_contiguous:
                        g = cp.ascontiguousarray(g, dtype=dt)
                        keep.append(g)
                    m, v = slots[i]
                    ptrs += [
                        p.data.ptr,
                        g.data.ptr,
                        m.data.ptr if m is not None else 0,
                        v.data.ptr if v is not None else 0,
                    ]
                    offsets.append(offsets[-1] + p.size)
                total = offsets[-1]
                if total == 0:
                    continue
                if capture is None:
                    table = self._tables.get(cp, (dt.char, *ptrs, *offsets), ptrs, offsets)
                else:  # the graph's own table: its content is written after the capture
                    host = np.concatenate([np.array(ptrs, np.uint64).view(np.int64), np.array(offsets, np.int64)])
                    table = cp.empty(host.shape, cp.int64)
                    capture.append((table, host))
                    capture.extend(keep)
                n = len(idx)
                fn = OPTIMIZERS.function(
                    "gt_optimizer_update_f32" if dt == np.float32 else "gt_optimizer_update_f64", dev.id
                )
                grid = max(1, min((total + 255) // 256, _kb.sm_count(dev.id) * 16))
                # Every dtype group reads the same slot (step[parity]) and writes the same
                # t to the other one, so all groups use one step number per update.
                parity = self._parity
                fn(
                    (grid,),
                    (256,),
                    (
                        table[: 4 * n].view(cp.uint64),
                        table[4 * n :],
                        np.int32(n),
                        self._step,
                        np.int32(parity),
                        self._lr,
                        np.int32(KINDS[self.kind]),
                        np.float64(hyper["momentum"]),
                        np.int32(hyper["nesterov"]),
                        np.float64(hyper["beta_1"]),
                        np.float64(hyper["beta_2"]),
                        np.float64(hyper["epsilon"]),
                        np.float64(hyper["weight_decay"]),
                    ),
                )
                del keep  # the pool reuses these only after the kernel (stream order)


__all__ = ["KINDS", "OPTIMIZERS", "RULES", "FusedOptimizer", "ref_optimizer_update"]
