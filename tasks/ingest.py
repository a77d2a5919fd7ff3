"""Ingest: MS-COCO caption JSON or `caption_id<TAB>caption` TSV -> `captions(caption_id, image_id, caption)`.

Invariants: every input caption ends up in exactly one of (captions, rejects); captions are kept byte-for-byte as
given; a malformed file (bad JSON, a TSV line without a tab) is a `MalformedInput` naming the file and line.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

SCHEMA = {"caption_id": pl.String, "image_id": pl.String, "caption": pl.String}
REJECTS_SCHEMA = {"caption_id": pl.String, "line": pl.Int64, "caption": pl.String, "reason": pl.String}


class MalformedInput(ValueError):
    """The file cannot be parsed at all; names the file and line."""


def _image_id(caption_id: str) -> str:
    """COCO-style ids are `{image_id}_{k}`; any other id is its own image."""
    head, sep, tail = caption_id.rpartition("_")
    return head if sep and tail.isdigit() else caption_id


def _read_tsv(path: Path) -> list[dict]:
    rows = []
    for line_no, raw in enumerate(path.read_bytes().splitlines(), start=1):
        if not raw.strip():
            continue
        caption_id, sep, caption = raw.partition(b"\t")
        if not sep:
            raise MalformedInput(f"{path}:{line_no}: expected 'caption_id<TAB>caption', found no tab")
        rows.append({"caption_id": caption_id.strip(), "line": line_no, "raw": caption})
    return rows


def _read_coco_json(path: Path) -> list[dict]:
    text = path.read_bytes().decode("utf-8", "surrogateescape")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise MalformedInput(f"{path}:{err.lineno}: invalid JSON ({err.msg})") from err
    if not isinstance(doc, dict) or not isinstance(doc.get("annotations"), list):
        raise MalformedInput(f"{path}:1: not a COCO captions file (no 'annotations' list)")
    seen: dict[str, int] = {}
    rows = []
    for index, ann in enumerate(doc["annotations"]):
        if not isinstance(ann, dict) or "image_id" not in ann or not isinstance(ann.get("caption"), str):
            raise MalformedInput(f"{path}:annotations[{index}]: needs 'image_id' and a string 'caption'")
        image_id = str(ann["image_id"])
        k = seen[image_id] = seen.get(image_id, -1) + 1
        rows.append({"caption_id": f"{image_id}_{k}", "line": index + 1, "raw": ann["caption"]})
    return rows


def _decode(raw: bytes | str) -> tuple[str, bool]:
    """Text that is safe to store, and whether the input was valid UTF-8."""
    if isinstance(raw, bytes):
        try:
            return raw.decode("utf-8"), True
        except UnicodeDecodeError:
            return raw.decode("utf-8", "replace"), False
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in raw):  # undecodable JSON bytes, or lone surrogate escapes
        try:
            return raw.encode("utf-8", "surrogateescape").decode("utf-8", "replace"), False
        except UnicodeEncodeError:
            return raw.encode("utf-8", "replace").decode("utf-8"), False
    return raw, True


def read_captions(path: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(captions, rejects) from a `.json` COCO file or a TSV; the first occurrence of a duplicate id wins."""
    path = Path(path)
    rows = _read_coco_json(path) if path.suffix == ".json" else _read_tsv(path)
    kept, rejects, seen = [], [], set()
    for row in rows:
        caption_id, id_ok = _decode(row["caption_id"])
        caption, caption_ok = _decode(row["raw"])
        reason = ("non_utf8" if not (id_ok and caption_ok) else "empty_caption" if not caption.strip()
                  else "duplicate_id" if caption_id in seen else None)
        if reason is None:
            seen.add(caption_id)
            kept.append({"caption_id": caption_id, "image_id": _image_id(caption_id), "caption": caption})
        else:
            rejects.append({"caption_id": caption_id, "line": row["line"], "caption": caption, "reason": reason})
    return pl.DataFrame(kept, schema=SCHEMA), pl.DataFrame(rejects, schema=REJECTS_SCHEMA)
