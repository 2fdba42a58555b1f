"""How the compiled mechanisms' helpers are compiled: once each, out of line, without reference counting."""

from __future__ import annotations

from numba import njit

out_of_line = njit(cache=True, _nrt=False)
"""A kernel's helper compiled on its own: inlined, each copy would be typed and lowered again, and the copies
were most of a kernel's compile time. Without reference counting, as it allocates nothing and its array
arguments would otherwise cost atomic increments at every call. Its callers pass whole numbers as np.int64,
not as literals (`np.int64(0)`, not `0`): numba compiles a helper once more for each literal it is given."""
