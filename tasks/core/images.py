"""Images read from folders: a name resolves only inside its folder (a source image's in the user's, `file_inside`; a
stored image's in the one cfgen filled, `stored_file`), and a file that cannot be decoded whole, or is over Pillow's
pixel limit, is an `UnreadableImage` with its reject reason."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import cast

import numpy as np

from tasks.core.errors import UserError


def file_inside(folder: Path, name: str) -> Path | None:
    """`folder / name` when that is a file inside `folder`, else None: a name that climbs out (`../../tmp/x`, an
    absolute path) or that no file system can hold (too long, a NUL) names none. (A link the user put in the folder
    is theirs to follow.)"""
    root = os.path.abspath(folder)
    path = os.path.normpath(os.path.join(root, name))  # `..` resolved by name: links are not followed
    return Path(folder) / name if os.path.commonpath([root, path]) == root and os.path.isfile(path) else None


def name_fault(name: object) -> str | None:
    """Why `name` is no stored name (a relative path of plain parts: no `..`, `.` or empty part, not absolute, no
    NUL), or None when it is one."""
    if not isinstance(name, str) or not name:
        return "it is empty"
    if "\0" in name:
        return "it holds a NUL"
    if name.startswith("/"):
        return "it is an absolute path"
    return "it is a path, not a name (a `..`, `.` or empty part)" if {"", ".", ".."} & set(name.split("/")) else None


def stored_name(name: object) -> str:
    """`name` when it is a stored name (`name_fault`), else a one-line `UserError`: a table whose names are paths is not
    one cfgen wrote."""
    if fault := name_fault(name):
        raise UserError(f"stored image name {name!r} is not a name ({fault}): the table naming it is not one cfgen "
                        "wrote; rerun the stage that writes it")
    return cast(str, name)  # no fault: a str


def stored_names(names: Iterable[object]) -> list[str]:
    """`stored_name` of every name, all checked before the caller uses any."""
    return [stored_name(name) for name in names]


def stored_file(folder: Path, name: object) -> Path:
    """`folder / name` for a stored name (`stored_name`) whose file, every link followed, is inside `folder`; else a
    one-line `UserError`, raised before anything is opened. cfgen fills these folders itself and makes no link, so
    (unlike a source image's) a link out of the folder is refused."""
    root = os.path.realpath(folder)
    target = os.path.realpath(os.path.join(root, stored_name(name)))
    if os.path.commonpath([root, target]) != root:
        raise UserError(f"stored image name {name!r} leads out of {folder} (through a link, to {target}): the folder "
                        "is not one cfgen filled; rerun the stage that writes it")
    return Path(folder) / cast(str, name)  # a stored name (checked above)


def stored_files(folder: Path, names: Iterable[object]) -> list[Path]:
    """`stored_file` of every name, all checked before the caller opens any."""
    return [stored_file(folder, name) for name in names]


def source_image_paths(image_ids: Iterable[str], folder: Path | None, pattern: str) -> list[Path | None]:
    """Each image id's real image file under `folder` (`file_inside`; `pattern` formats `image_id`, an int when it is
    all digits: COCO's `{image_id:0>12}.jpg`), None where there is no folder or no such file in it."""
    if folder is None:
        return [None for _ in image_ids]

    def named(image_id: str) -> Path | None:
        try:
            return file_inside(folder, pattern.format(image_id=int(image_id) if image_id.isascii() and
                                                      image_id.isdigit() else image_id))
        except ValueError:  # a spec for ints only (`{image_id:012d}`) and an id that is no number: no such file
            return None

    return [named(i) for i in image_ids]


class UnreadableImage(UserError):
    """An image file that cannot be decoded whole; `reason` is `image_unreadable` or `image_too_large`."""

    def __init__(self, path: Path, reason: str, detail: str):
        super().__init__(f"{path}: {detail}")
        self.reason = reason


def read_rgb(path: Path) -> np.ndarray:
    """An image file's pixels as HxWx3 uint8 RGB; a file Pillow cannot decode whole (truncated, empty, not an image)
    or over Pillow's `MAX_IMAGE_PIXELS` (a decompression bomb; SD and COCO images are far below) is an
    `UnreadableImage`."""
    from PIL import Image  # here: most stages read no image, and the CLI starts without PIL

    limit = cast(int, Image.MAX_IMAGE_PIXELS)  # cfgen never lifts Pillow's limit (None)
    try:
        with warnings.catch_warnings():  # over the limit: refused below, not warned of
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as image:
                size = image.size
                pixels = None if size[0] * size[1] > limit else np.asarray(image.convert("RGB"))
    except Image.DecompressionBombError as err:  # over twice the limit: Pillow refuses it itself
        raise UnreadableImage(path, "image_too_large", str(err)) from None
    except (OSError, ValueError, SyntaxError) as err:  # SyntaxError: a broken PNG chunk
        raise UnreadableImage(path, "image_unreadable", f"not a readable image ({type(err).__name__}: "
                                                        f"{(str(err).splitlines() or [''])[0]})") from None
    if pixels is None:
        raise UnreadableImage(path, "image_too_large", f"{size[0]}x{size[1]} pixels, over Pillow's MAX_IMAGE_PIXELS "
                                                       f"({limit:,})")
    return pixels
