"""Every path built from an image id stays inside `paths.source_images` (issue 44): an id whose name climbs out
(`..`, an absolute path) or that no file system can hold has no real image, whatever the caption file says; a link
the user put in the folder is followed."""

from __future__ import annotations

import os

import pytest

from tasks.core.images import source_image_paths

PATTERN = "{image_id:0>12}.jpg"


@pytest.fixture
def folders(tmp_path):
    inside, outside = tmp_path / "images", tmp_path / "elsewhere"
    inside.mkdir()
    outside.mkdir()
    for folder, name in ((inside, "000000000042.jpg"), (outside, "secret.jpg"), (outside, "000000000007.jpg")):
        (folder / name).write_bytes(b"jpeg")
    (inside / "000000000007.jpg").symlink_to(outside / "000000000007.jpg")
    return inside, outside


@pytest.mark.parametrize(("image_id", "found"), [
    ("42", "000000000042.jpg"),
    ("../elsewhere/secret", None),  # `..` out of the folder
    ("../../../../../../../../tmp/x", None),
    ("7", "000000000007.jpg"),  # a link the user put there: theirs
    ("/etc/hostname", None),  # an absolute name
    ("images/../../elsewhere/secret", None),  # in, then out
    ("a" * 300, None),  # longer than a file name may be: ENAMETOOLONG
    ("x/" * 3000, None),  # longer than a path may be
    ("\u202e../elsewhere/secret", None),
    ("43", None),  # inside, but no such file
    ("\u00b2", None),  # a digit to str.isdigit that int() refuses
    ("\u0664\u0662", None),  # Arabic-Indic 42: not COCO's number
    ("4\x002", None),  # a NUL byte: no file system name
    (" 42", None), ("42\n", None), ("", None),
])
def test_an_id_finds_only_a_file_inside_the_folder(folders, image_id, found):
    inside, _ = folders
    pattern = PATTERN if image_id.isdigit() else "{image_id}.jpg"  # "²" too: the lookup must not take it for a number
    (path,) = source_image_paths([image_id], inside, pattern)
    assert (path.name if path else None) == found


def test_no_folder_no_image(folders):
    assert source_image_paths(["42", "../x"], None, PATTERN) == [None, None]
    assert os.path.isfile(folders[1] / "secret.jpg")  # it was there to be read
