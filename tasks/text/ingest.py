"""Ingest: MS-COCO caption JSON or `caption_id<TAB>caption` TSV -> `captions(caption_id, image_id, caption)`.

Invariants: every input record (a non-blank TSV line, a COCO annotation) ends up in exactly one of (captions,
rejects), so one bad record never costs the good ones; kept captions are byte-for-byte as given; a kept id is valid
UTF-8, stripped of surrounding whitespace and BOMs, non-empty, unique, printable (no control or format character:
a file name, a URL and a log line are made of it). A leading UTF-8 BOM is dropped, never part of an id.
A TSV whose first line is exactly the header `caption_id<TAB>caption` has it skipped (anywhere else, or spelled
otherwise, such a line is a caption). Only a file that cannot be read as records at all (empty: nothing but
whitespace and a BOM, or a TSV with only its header; a TSV none of whose lines is an id, a tab and a caption in
UTF-8, e.g. a parquet file; not JSON; JSON without an `annotations` list) is a one-line
`MalformedInput` naming the file (and the line, for JSON syntax errors). A COCO file whose `annotations` list is empty
is zero rows.

A reject row says where it came from: `file` (the source path as given) and `line` (TSV: the 1-based line number;
COCO: the 1-based index of the annotation in `annotations`), and why, as `reason`:
  non_utf8            the id or caption is not valid UTF-8 (stored with U+FFFD replacements)
  empty_id            the caption id is empty after stripping whitespace
  empty_caption       the caption is empty or whitespace only
  unprintable_id      the id holds a control or format character (NUL, ESC, a zero-width or bidi mark, ...)
  control_character   the caption holds a control character that is not Unicode White_Space (NUL, ESC, DEL,
                      U+001C-U+001F, ...) or a bidi control, which would reach terminals, prompts and the gallery
  duplicate_id        the id was already kept (the first kept occurrence wins)
  no_tab              TSV line without a tab; `caption_id` is the whole line, `caption` is null
  extra_tab           TSV line with a second tab (a third column?); `caption` is all after the first
  not_an_object       COCO annotation that is not a JSON object
  missing_image_id    COCO annotation without `image_id`
  bad_image_id        COCO `image_id` not an int or a non-empty string (null, bool, float, list, dict, "")
  caption_not_string  COCO `caption` missing or not a string; `caption` is null
COCO ids are `{image_id}_{k}`, k counting the image's annotations in file order, rejected ones included.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import polars as pl

from tasks.core import schemas
from tasks.core.errors import UserError

SCHEMA, REJECTS_SCHEMA = schemas.CAPTIONS, schemas.CAPTIONS_REJECTS
TSV_HEADER = b"caption_id\tcaption"  # skipped when it is a TSV's first line
BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")
WHITE_SPACE = "\t\n\v\f\r\x85"  # the control characters Unicode counts as White_Space (not U+001C-U+001F)
FORMAT_REASONS = {"no_tab", "extra_tab", "non_utf8", "unprintable_id"}  # a TSV of only these is not a caption TSV

# (line, caption_id, caption, reason found while parsing); ids and captions still raw (bytes, or str from JSON).
Record = tuple[int, bytes | str | None, bytes | str | None, str | None]


class MalformedInput(UserError):
    """The file cannot be read as records at all; a one-line message naming the file (and line where known)."""


def _image_id(caption_id: str) -> str:
    """COCO-style ids are `{image_id}_{k}`; any other id is its own image."""
    head, sep, tail = caption_id.rpartition("_")
    return head if sep and tail.isdigit() else caption_id


def _tsv_bytes(path: Path) -> bytes:
    """The file as UTF-8 bytes without a BOM: a UTF-16 file with its BOM (a spreadsheet's "Unicode text") is
    re-encoded, other bytes are kept as they are (a line that is not UTF-8 is a `non_utf8` reject)."""
    data = path.read_bytes()
    if not data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.removeprefix(codecs.BOM_UTF8)
    try:
        return data.decode("utf-16").encode("utf-8", "surrogateescape")
    except UnicodeError as err:
        detail = cast(UnicodeDecodeError, err).reason  # what decoding raises
        raise MalformedInput(f"{path}: starts with a UTF-16 byte order mark but is not UTF-16 ({detail})") from None


def _read_tsv(path: Path) -> Iterator[Record]:
    """Lines end at LF (CRLF as well): a lone CR, a form feed or U+2028 inside a caption is the caption's."""
    lines = [line.removesuffix(b"\r") for line in _tsv_bytes(path).split(b"\n")]
    header = lines[:1] == [TSV_HEADER]
    if not any(raw.strip() for raw in lines[header:]):
        raise MalformedInput(f"{path}: no captions ({'only a header line' if header else 'empty file'})")
    for line_no, raw in enumerate(lines[header:], start=1 + header):
        if raw.strip():
            caption_id, sep, caption = raw.partition(b"\t")
            reason = "extra_tab" if b"\t" in caption and caption.strip() else None
            yield (line_no, caption_id, caption, reason) if sep else (line_no, raw, None, "no_tab")


def _coco_image_id(ann: object) -> tuple[str | None, str | None]:
    """(image_id as text, None) or (None, reason)."""
    if not isinstance(ann, dict):
        return None, "not_an_object"
    if "image_id" not in ann:
        return None, "missing_image_id"
    value = ann["image_id"]
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value), None
    if isinstance(value, str) and value.strip():
        return value.strip(), None
    return None, "bad_image_id"


def _read_coco_json(path: Path) -> Iterator[Record]:
    text = path.read_bytes().decode("utf-8", "surrogateescape").removeprefix("\ufeff")
    if not text.strip():
        raise MalformedInput(f"{path}: no captions (empty file)")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise MalformedInput(f"{path}:{err.lineno}: invalid JSON ({err.msg})") from err
    except (ValueError, RecursionError) as err:  # an int over Python's digit limit, nesting too deep
        raise MalformedInput(f"{path}: invalid JSON ({err})") from err
    if not isinstance(doc, dict) or not isinstance(doc.get("annotations"), list):
        raise MalformedInput(f"{path}:1: not a COCO captions file (no 'annotations' list)")
    seen: dict[str, int] = {}
    for index, ann in enumerate(doc["annotations"], start=1):
        image_id, reason = _coco_image_id(ann)
        caption = ann.get("caption") if isinstance(ann, dict) else None
        caption = caption if isinstance(caption, str) else None
        caption_id = None
        if image_id is not None:
            k = seen[image_id] = seen.get(image_id, -1) + 1
            caption_id = f"{image_id}_{k}"
        yield index, caption_id, caption, reason or (None if caption is not None else "caption_not_string")


def _decode(raw: bytes | str | None) -> tuple[str | None, bool]:
    """Text that is safe to store, and whether the input was valid UTF-8."""
    if isinstance(raw, bytes):
        try:
            return raw.decode("utf-8"), True
        except UnicodeDecodeError:
            return raw.decode("utf-8", "replace"), False
    if raw is not None and any(0xD800 <= ord(ch) <= 0xDFFF for ch in raw):  # undecodable JSON bytes, lone escapes
        try:
            return raw.encode("utf-8", "surrogateescape").decode("utf-8", "replace"), False
        except UnicodeEncodeError:
            return raw.encode("utf-8", "replace").decode("utf-8"), False
    return raw, True


def _controlled(caption: str) -> bool:
    return bool(BIDI_CONTROLS.search(caption)) or any(unicodedata.category(ch) == "Cc" and ch not in WHITE_SPACE
                                                      for ch in caption)


def read_captions(path: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(captions, rejects) from a `.json` COCO file or a TSV; the first kept occurrence of an id wins."""
    file = os.fspath(path)
    path = Path(path)
    records = _read_coco_json(path) if path.suffix.lower() == ".json" else _read_tsv(path)
    kept: list[dict[str, Any]] = []
    rejects: list[dict[str, Any]] = []
    seen: set[str | None] = set()
    for line, raw_id, raw_caption, reason in records:
        caption_id, id_ok = _decode(raw_id)
        caption, caption_ok = _decode(raw_caption)
        if reason is None:  # parsed whole: an id and a caption
            caption_id, caption = cast(str, caption_id).strip().strip("\ufeff").strip(), cast(str, caption)
            reason = ("non_utf8" if not (id_ok and caption_ok) else "empty_id" if not caption_id
                      else "unprintable_id" if not caption_id.isprintable()
                      else "empty_caption" if not caption.strip() else "control_character" if _controlled(caption)
                      else "duplicate_id" if caption_id in seen else None)
        if reason is None:
            seen.add(caption_id)
            kept.append({"caption_id": caption_id, "image_id": _image_id(cast(str, caption_id)), "caption": caption})
        else:
            rejects.append({"file": file, "line": line, "caption_id": caption_id, "caption": caption, "reason": reason})
    if not kept and path.suffix.lower() != ".json" and {r["reason"] for r in rejects} <= FORMAT_REASONS:
        found = ", ".join(sorted({r["reason"] for r in rejects}))
        raise MalformedInput(f"{path}: none of its {len(rejects)} lines is `caption_id<TAB>caption` in UTF-8 "
                             f"({found}): not a caption TSV")
    return pl.DataFrame(kept, schema=SCHEMA), pl.DataFrame(rejects, schema=REJECTS_SCHEMA)
