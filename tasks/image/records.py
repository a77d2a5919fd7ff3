"""Sample records: one append-only JSON-lines file per caption pair holding every sample measured for it.

The image stage's cache at the paper's size (~17k pairs x 100 samples): a pair costs one file whatever n_samples is.
`<root>/<ab>/<record key>.jsonl` (`render.record_key`: the pair and everything that fixes its samples but the sample's
own values) holds a line `{"key": <render.sample_key>, "measured": {...}, "by": "<host>:<pid>"}` per sample (`by`:
the process that rendered it, for accounting across workers, never read back), appended as each batch finishes.
Every append is one `write` of whole lines, each preceded by a newline, so a write cut short (kill -9, a full disk)
leaves at most one torn line that no later append extends; a line that does not parse is a miss, and its sample is
rendered again. A pair is rendered under `locked` (an advisory lock on its record file), so runs sharing
the records (queued experiments, Dask workers) never render one sample twice: the second reads what the first wrote.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PairRecords:
    root: Path

    def path(self, record: str) -> Path:
        return self.root / record[:2] / f"{record}.jsonl"

    def read(self, record: str) -> dict[str, dict]:
        """Sample key -> measurement of every complete line of the pair's record ({} when there is none)."""
        try:
            text = self.path(record).read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        found = {}
        for line in text.split("\n"):
            try:
                entry = json.loads(line) if line else None
                if entry is not None:
                    found[entry["key"]] = entry["measured"]
            except (ValueError, KeyError, TypeError):  # a torn or foreign line: its sample is a miss
                continue
        return found

    @contextmanager
    def locked(self, record: str) -> Iterator[None]:
        """Hold the pair's record exclusively (other processes and threads wait), e.g. to read it, render what it
        lacks and append that."""
        path = self.path(record)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def append(self, record: str, measured: dict[str, dict]) -> None:
        """Add finished samples to the pair's record in one write."""
        path = self.path(record)
        path.parent.mkdir(parents=True, exist_ok=True)
        by = f"{socket.gethostname()}:{os.getpid()}"
        data = memoryview("".join("\n" + json.dumps({"key": k, "measured": m, "by": by})
                                  for k, m in measured.items()).encode())
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
