"""Sample records: one append-only JSON-lines file per caption pair holding every sample measured for it.

The image stage's cache at the paper's size (~17k pairs x 100 samples): a pair costs one file whatever n_samples is.
`<root>/<ab>/<record key>.jsonl` (`render.record_key`: the pair and everything that fixes its samples but the
sample's own values) holds a line `{"key": <render.sample_key>, "measured": {...}, "by": "<host>:<pid>"}` per sample
(`by`: the process that rendered it, for accounting across workers, never read back), appended as each batch
finishes. Every append is one `write` of whole lines, each preceded by a newline, so a write cut short (kill -9, a
full disk) leaves at most one torn line that no later append extends; a line that does not parse, or whose
measurement lacks a field of `MEASURED`, is a miss (logged once per record and process), and its sample is rendered
again; so is one whose field holds another type than a render writes (`well_typed`). A pair is rendered under
`locked` (an advisory lock on its record file), so runs sharing the records (queued experiments, Dask workers) never
render one sample twice: the second reads what the first wrote.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tasks.core.schemas import SCORE_COLUMNS, SUBJECT_COLUMNS
from tasks.core.writing import json_text

log = logging.getLogger(__name__)
MEASURED = frozenset({"nan", "max_pixel_o", "max_pixel_c", *SCORE_COLUMNS, *SUBJECT_COLUMNS})  # every sample's
_warned: set[Path] = set()


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def well_typed(measured: dict) -> bool:
    """Each `MEASURED` field holds what a render writes: `nan` a bool, the max pixels whole numbers, each score a
    number or null."""
    return (isinstance(measured["nan"], bool) and all(isinstance(measured[k], int) and _number(measured[k])
                                                      for k in ("max_pixel_o", "max_pixel_c"))
            and all(measured[k] is None or _number(measured[k]) for k in (*SCORE_COLUMNS, *SUBJECT_COLUMNS)))


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
        found, bad = {}, 0
        for line in filter(None, text.split("\n")):
            try:
                entry = json.loads(line)
                if not MEASURED <= entry["measured"].keys():
                    raise KeyError("measured")
                if not (isinstance(entry["key"], str) and well_typed(entry["measured"])):
                    raise TypeError("measured")
                found[entry["key"]] = entry["measured"]
            except (ValueError, KeyError, TypeError, AttributeError):  # torn, foreign or misshapen: a miss
                bad += 1
        if bad and self.path(record) not in _warned:
            _warned.add(self.path(record))
            log.warning("%s: %d line(s) unreadable, their samples render again", self.path(record), bad)
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
        data = memoryview("".join("\n" + json_text({"key": k, "measured": m, "by": by})
                                  for k, m in measured.items()).encode())
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
