"""The default executor: sandbox jobs side by side in threads of this process (each sandbox isolates its
own job; the threads only wait on it)."""

from __future__ import annotations

from concurrent.futures import Executor, ThreadPoolExecutor


def local_pool(workers: int) -> Executor:
    """`workers` sandbox jobs side by side on this machine."""
    return ThreadPoolExecutor(max_workers=workers)
