"""Generated code: compile straight-line source made from a declaration, as namedtuple does.

The dispatch's entry points and recorders are written out per primitive at registration
(:mod:`gputape.core.dispatch`, :mod:`gputape.core.recording`). This leaf module only compiles them so
that they behave like the package's own code in tracebacks and error messages.
"""

from __future__ import annotations

import linecache
import os
from collections.abc import Callable
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))


def generate(name: str, src: str, ns: dict[str, Any]) -> Callable[..., Any]:
    """Compile generated source ``src`` defining function ``name`` over namespace ``ns``.

    The code is filed under this package's directory (so :mod:`gputape.core._errors` counts its frames
    as gputape's own and names the public function a failing call entered through) and its
    text is registered with :mod:`linecache`, so tracebacks show the generated lines.

    >>> f = generate("twice", "def twice(x): return 2 * x", {})
    >>> f(21), f.__code__.co_filename.endswith("<generated twice>")
    (42, True)
    """
    filename = os.path.join(_HERE, f"<generated {name}>")
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    ns.setdefault("__name__", __name__)
    exec(compile(src, filename, "exec"), ns)
    fn = ns[name]
    fn.__qualname__ = name
    return fn
