"""A stored image name is a name inside its folder (`tasks.core.images.stored_file`): `..`, an absolute path, a NUL
or a link out of the folder is one line, raised before anything is opened; a missing file or a link that stays inside
is not its concern."""

from __future__ import annotations

import os

import pytest

from tasks.core.errors import UserError
from tasks.core.images import name_fault, stored_file, stored_files, stored_name


@pytest.fixture
def folder(tmp_path):
    """images/ with ab/x.png, a link inside (in/x.png -> ab/x.png), a link out (out.png -> ../secret.png) and a
    folder link out (far -> ..)."""
    images = tmp_path / "images"
    (images / "ab").mkdir(parents=True)
    (images / "ab" / "x.png").write_bytes(b"png")
    (tmp_path / "secret.png").write_bytes(b"secret")
    (images / "in").mkdir()
    (images / "in" / "x.png").symlink_to("../ab/x.png")
    (images / "out.png").symlink_to(tmp_path / "secret.png")
    (images / "far").symlink_to(tmp_path)
    return images


@pytest.mark.parametrize("name", ["ab/x.png", "gone.png", "in/x.png", "a b/ü.png"])
def test_a_name_inside_its_folder_is_its_path_there(folder, name):
    assert stored_file(folder, name) == folder / name
    assert stored_name(name) == name and name_fault(name) is None


@pytest.mark.parametrize("name, says", [
    ("../secret.png", "a path, not a name"), ("ab/../../secret.png", "a path, not a name"),
    ("/etc/passwd", "an absolute path"), ("ab//x.png", "a path, not a name"), ("./ab/x.png", "a path, not a name"),
    ("ab/", "a path, not a name"), ("", "empty"), (None, "empty"), ("ab/x\0.png", "a NUL"),
])
def test_a_path_is_no_name_and_is_one_line(folder, name, says):
    with pytest.raises(UserError) as raised:
        stored_file(folder, name)
    message = str(raised.value)
    assert says in message and "\n" not in message and message.startswith(f"stored image name {name!r}")


@pytest.mark.parametrize("name", ["out.png", "far/secret.png"])
def test_a_link_out_of_the_folder_is_refused(folder, name):
    with pytest.raises(UserError, match="leads out of"):
        stored_file(folder, name)


def test_what_a_name_reaches_counts_not_the_way_there(folder):
    """`far/images/ab/x.png` leaves the folder through a link and comes back: the file it names is inside."""
    assert stored_file(folder, "far/images/ab/x.png") == folder / "far/images/ab/x.png"


def test_every_name_is_checked_before_any_is_returned(folder):
    assert stored_files(folder, ["ab/x.png", "in/x.png"]) == [folder / "ab/x.png", folder / "in/x.png"]
    with pytest.raises(UserError, match=r"'\.\./secret\.png'"):
        stored_files(folder, ["ab/x.png", "../secret.png"])


def test_a_newline_in_a_name_stays_on_one_line(folder):
    with pytest.raises(UserError) as raised:
        stored_file(folder, "../x\n.png")
    assert "\n" not in str(raised.value)


def test_the_folder_may_itself_be_a_link(tmp_path, folder):
    os.symlink(folder, tmp_path / "linked")
    assert stored_file(tmp_path / "linked", "ab/x.png") == tmp_path / "linked" / "ab/x.png"
