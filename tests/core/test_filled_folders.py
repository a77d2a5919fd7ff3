"""A folder cfgen fills is one cfgen made (`tasks.core.publication`): a folder holding a file cfgen does not write
there is refused in one line before anything changes, and nothing is pruned that cfgen did not write."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.core.errors import UserError
from tasks.core.publication import STORED_PNG, check_filled, held_folder, prune, publish_folder, replaced_folder
from tasks.image import store
from tests.flows.test_cli import assert_one_error, cfgen, one_row_parquet
from tests.flows.test_faults import tree

USER_FILES = {"user_notes.txt": b"my notes", "sub/keep.txt": b"keep me", "holiday.png": b"\x89PNG a holiday"}


def user_folder(folder):
    """`folder` holding a cfgen PNG beside the user's own files."""
    store.write_png(folder, np.zeros((4, 4, 3), np.uint8))
    for name, content in USER_FILES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(content)
    return tree(folder)


def staged_png(tmp_path):
    staged = tmp_path / ".images.staging"
    return staged, store.write_png(staged, np.ones((4, 4, 3), np.uint8))


def test_publishing_into_a_folder_cfgen_did_not_fill_is_one_line_and_changes_nothing(tmp_path):
    before = user_folder(tmp_path / "images")
    staged, png = staged_png(tmp_path)
    with pytest.raises(UserError) as raised:
        publish_folder(staged, tmp_path / "images", lambda: pytest.fail("the table was written"), STORED_PNG)
    message = str(raised.value)
    assert "\n" not in message and "holds 3 file(s) cfgen does not write there" in message
    assert "'holiday.png'" in message and "nothing was changed" in message
    assert tree(tmp_path / "images") == before and (staged / png).is_file()


def test_a_held_or_replaced_folder_is_refused_before_anything_is_built(tmp_path):
    before = user_folder(tmp_path / "images")
    with pytest.raises(UserError, match="not a folder cfgen filled"), \
            held_folder(tmp_path / "images", tmp_path / "images.parquet", STORED_PNG):
        pytest.fail("built into a folder cfgen did not fill")
    with pytest.raises(UserError, match="not a folder cfgen filled"), replaced_folder(tmp_path / "images", STORED_PNG):
        pytest.fail("built into a folder cfgen did not fill")
    assert tree(tmp_path / "images") == before
    assert not (tmp_path / ".images.staging").exists() and not (tmp_path / ".images.table").exists()


def test_a_folder_of_cfgen_files_alone_is_published_into_without_its_marker(tmp_path):
    """A DVC checkout of the folder (no marker beside it): its files are all cfgen's, so it is accepted and pruned."""
    old = store.write_png(tmp_path / "images", np.zeros((4, 4, 3), np.uint8))
    staged, png = staged_png(tmp_path)
    assert publish_folder(staged, tmp_path / "images", lambda: "table", STORED_PNG) == "table"
    assert sorted(tree(tmp_path / "images")) == [png] and old != png


def test_a_link_in_the_folder_is_refused_unless_named_as_cfgen_names_its_files(tmp_path):
    """A folder link (`ab` -> elsewhere) would be written through: refused; a link named like a PNG is replaced."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "images").mkdir()
    staged, png = staged_png(tmp_path)
    (tmp_path / "images" / png[:2]).symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(UserError, match=f"first: '{png[:2]}'"):
        publish_folder(staged, tmp_path / "images", lambda: None, STORED_PNG)
    (tmp_path / "images" / png[:2]).unlink()
    (tmp_path / "images" / png[:2]).mkdir()
    (tmp_path / "images" / png).symlink_to(tmp_path / "elsewhere" / "x.png")
    publish_folder(staged, tmp_path / "images", lambda: None, STORED_PNG)
    assert not (tmp_path / "images" / png).is_symlink() and list((tmp_path / "elsewhere").iterdir()) == []


def test_prune_removes_only_the_files_cfgen_writes_there(tmp_path):
    """A file the user drops in while a run publishes (after the check) is never pruned."""
    before = user_folder(tmp_path / "images")
    prune(tmp_path / "images", set(), STORED_PNG)
    assert tree(tmp_path / "images") == {name: content for name, content in before.items() if name in USER_FILES}
    check_filled(tmp_path / "absent", STORED_PNG)  # nothing there: nothing foreign


def test_the_gallery_prunes_only_its_own_copies(tmp_path):
    """A file of the user's under the site's images/ stays; a stale copy and a killed build's temporary go."""
    from tasks.release.gallery_site import publish_site

    site = tmp_path / "site"
    stale = store.write_png(site / "images", np.zeros((4, 4, 3), np.uint8))
    (site / "images" / stale).with_name(f".{stale.split('/')[1]}.tmp").write_bytes(b"half")
    (site / "images" / "mine.jpg").write_bytes(b"the user's")
    publish_site(site, {"pairs": [], "removal": []}, [])
    assert tree(site / "images") == {"mine.jpg": b"the user's"}


def test_the_selection_command_refuses_a_folder_cfgen_did_not_fill_in_one_line(tmp_path):
    """`cfgen selection … --selected-images DIR` on the user's folder: one line before any server or render, and
    user_notes.txt, sub/keep.txt and holiday.png are all still there."""
    from tasks.core.schemas import SAMPLES

    before = user_folder(tmp_path / "mine")
    one_row_parquet(tmp_path / "samples.parquet", SAMPLES)
    result = cfgen(tmp_path, "selection", "samples.parquet", "selected.parquet", "--selected-images", "mine")
    assert_one_error(result, "mine holds 3 file(s) cfgen does not write there", "'holiday.png'")
    assert tree(tmp_path / "mine") == before and not (tmp_path / "selected.parquet").exists()
