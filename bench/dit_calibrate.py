"""Fit the DiT cost model's constants on the calibration half of targets/dit/measurements.toml and print
them as targets/dit/pricing.py's CALIBRATION holds them (3 significant digits).

    python bench/dit_calibrate.py           # the fit, and the shipped constants beside it
"""

from __future__ import annotations

import argparse
import time

from targets.dit.fidelity import calibrate
from targets.dit.pricing import CALIBRATION


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()
    start = time.perf_counter()
    fitted = calibrate()
    print(f"fitted on the calibration half in {time.perf_counter() - start:.1f} s (shipped in brackets)")
    print(f"block_overhead_s     {fitted.block_overhead_s:.3g}  ({CALIBRATION.block_overhead_s:.3g})")
    print(f"ring_step_overhead_s {fitted.ring_step_overhead_s:.3g}  ({CALIBRATION.ring_step_overhead_s:.3g})")
    for gpu, value in fitted.efficiency.items():
        print(f"efficiency {gpu:18s} {value:.3g}  ({CALIBRATION.efficiency.get(gpu, float('nan')):.3g})")


if __name__ == "__main__":
    main()
