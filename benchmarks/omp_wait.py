"""OpenMP's wait policy with other processes on the cores: the same small torch work (a convolution, a product, a
softmax, with short waits between, as a test or a stage does) in N processes at once, with OMP_WAIT_POLICY unset
(GNU OpenMP's default: idle threads spin a while, then sleep) and PASSIVE (they sleep at once; the test suite's
setting). The policy moves no result's bits, only who gets the cores.

    python -m benchmarks.omp_wait [--processes 1 2] [--steps 1500]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

WORK = """
import sys, time, torch
torch.manual_seed(0)
conv, x, w = torch.nn.Conv2d(64, 64, 3, padding=1), torch.randn(2, 64, 16, 16), torch.randn(256, 256)
with torch.inference_mode():
    for i in range(int(sys.argv[1])):
        conv(x), torch.softmax(torch.randn(64, 256) @ w, -1).sum()
        if i % 50 == 0:
            time.sleep(0.01)
"""


def wall(policy: str | None, processes: int, steps: int) -> float:
    """Seconds until all `processes` copies of the work have ended (policy None: unset)."""
    env = {key: value for key, value in os.environ.items() if key != "OMP_WAIT_POLICY"}
    env |= {"OMP_WAIT_POLICY": policy} if policy else {}
    start = time.perf_counter()
    running = [subprocess.Popen([sys.executable, "-c", WORK, str(steps)], env=env) for _ in range(processes)]
    if any(p.wait() for p in running):
        raise SystemExit("a work process failed")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=1500)
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, {args.steps} steps per process\n")
    print("| processes at once | unset s | PASSIVE s | unset / PASSIVE |\n|---|---|---|---|")
    for n in args.processes:
        unset, passive = wall(None, n, args.steps), wall("PASSIVE", n, args.steps)
        print(f"| {n} | {unset:.1f} | {passive:.1f} | {unset / passive:.1f}× |")


if __name__ == "__main__":
    main()
