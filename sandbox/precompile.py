"""Compile every target's cached numba kernels into NUMBA_CACHE_DIR once, while the sandbox image is built.

A container's root is read-only and its scratch is fresh, so without this every job would compile the
mechanism again (seconds). Running each target's baselines on its shipped workload through the worker also
proves the image works before it is tagged: a failure here fails the build.
"""

from __future__ import annotations

import sys

import targets

from .job import Job
from .worker import run


def main() -> None:
    for name in targets.names():
        target = targets.load(name)
        config = target.default_config()
        instances = tuple(target.instances(config.pop("workload"), config))
        jobs = [Job(name, source, instances) for source in target.baselines().values()]
        jobs += [Job(name, "", instances, builtin=builtin) for builtin in target.builtin_baselines()]
        for job in jobs:
            result = run(job)
            if result.status != "ok":
                sys.exit(f"{name} {job.builtin or 'baseline'}: {result.status}: {result.message}")
        print(f"{name}: {len(jobs)} baselines ran; kernels cached")


if __name__ == "__main__":
    main()
