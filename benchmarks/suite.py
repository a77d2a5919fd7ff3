"""The last test run's timings (written by `tests/timing.py` at every run's end): the 30 slowest tests, each file's
total and each worker's busy time beside the run's wall time, to see which worker is the long pole; and the disk the
run took at its peak, with the files that were running then, to see what fills a small CI disk.

    python -m benchmarks.suite [--top 30]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from datetime import UTC, datetime

from tests.timing import TIMINGS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=30)
    top = parser.parse_args().top
    if not TIMINGS.is_file():
        raise SystemExit(f"no timings at {TIMINGS}: run the tests first (make test)")
    run = json.loads(TIMINGS.read_text())
    tests = run["tests"]
    started = datetime.fromtimestamp(run["started"], UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"run of {started}: {len(tests)} tests, wall {run['wall_s'] / 60:.1f} min, exit {run['exit']}\n")
    print(f"| {top} slowest tests | worker | s |\n|---|---|---|")
    for t in sorted(tests, key=lambda t: -t["seconds"])[:top]:
        print(f"| {t['test']} | {t['worker']} | {t['seconds']:.1f} |")
    files, workers = defaultdict(float), defaultdict(lambda: [0, 0.0])
    for t in tests:
        files[t["test"].split("::")[0]] += t["seconds"]
        workers[t["worker"]][0] += 1
        workers[t["worker"]][1] += t["seconds"]
    print(f"\n| {top} slowest files | s |\n|---|---|")
    for name, seconds in sorted(files.items(), key=lambda f: -f[1])[:top]:
        print(f"| {name} | {seconds:.0f} |")
    print("\n| worker | tests | busy min | share of wall |\n|---|---|---|---|")
    for worker, (count, seconds) in sorted(workers.items()):
        print(f"| {worker} | {count} | {seconds / 60:.1f} | {seconds / run['wall_s']:.0%} |")
    if "disk_used_at_start" in run:
        disk(tests, run["disk_used_at_start"], top)


def disk(tests: list[dict], at_start: int, top: int) -> None:
    """The disk in use above the run's start, at its peak, and each file's highest while its tests reported (both
    workers' files add up on one disk)."""
    gib = 2 ** 30
    peak = max(tests, key=lambda t: t["disk_used"])
    print(f"\ndisk: peak {(peak['disk_used'] - at_start) / gib:+.1f} GiB over the run's start, when "
          f"{peak['test']} ({peak['worker']}) ended")
    files: dict[str, int] = defaultdict(int)
    for t in tests:
        name = t["test"].split("::")[0]
        files[name] = max(files[name], t["disk_used"] - at_start)
    print(f"\n| {top} files at the most disk | GiB over start |\n|---|---|")
    for name, used in sorted(files.items(), key=lambda f: -f[1])[:top]:
        print(f"| {name} | {used / gib:+.2f} |")


if __name__ == "__main__":
    main()
