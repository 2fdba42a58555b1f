"""How the compiled mechanisms are compiled: a kernel as the one entry point Python calls, with its array
types spelled out; its helpers once each, out of line, without reference counting."""

from __future__ import annotations

from numba import njit, types

out_of_line = njit(cache=True, _nrt=False)
"""A kernel's helper compiled on its own: inlined, each copy would be typed and lowered again, and the copies
were most of a kernel's compile time. Without reference counting, as it allocates nothing and its array
arguments would otherwise cost atomic increments at every call. A small one (a heap's push and pop) costs
nothing at run time: LLVM inlines it into the kernel's code. Its callers pass whole numbers as np.int64, not
as literals (`np.int64(0)`, not `0`): numba compiles a helper once more for each literal it is given."""

F64, I64, FLAGS = types.float64[::1], types.int64[::1], types.boolean[::1]
F64_2D, I64_2D, FLAGS_2D = types.float64[:, ::1], types.int64[:, ::1], types.boolean[:, ::1]
"""The arrays a kernel's signature names (C-contiguous, as numpy allocates them). A kernel is called from
Python with arrays Python allocated: compiled code that allocates nothing compiles faster, and code that
calls another compiled function compiles that function's code once more into its own."""
