"""The gallery's files on disk (`reports/gallery/`): static, self-contained, published so a killed build leaves
every image the data.js in place shows.

`index.html`, `app.js` and `style.css` come from `tasks/release/site/`; `data.js` sets `window.GALLERY` (a script,
not JSON: a page opened from the file system may not fetch files). Images are copied once, by content: a selected
PNG keeps its pixel-addressed name (`store`), and its thumbnail is named after it, so a rerun with unchanged
selection writes no image (one missing or corrupt is written again). Every file is written atomically, and an image
enters the site before the data.js showing it and leaves only after one that no longer does (`publish_site`).
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from pathlib import Path

from PIL import Image

from tasks.core.images import stored_file, stored_name
from tasks.core.publication import STORED_PNG, prune
from tasks.core.writing import json_text, write_file

SITE = Path(__file__).with_name("site")
THUMB = 192  # thumbnail side, pixels (never larger than the image)
COPIES = re.compile(rf"{STORED_PNG.pattern}|[0-9a-f]{{2}}/\.[^/]+\.tmp")  # images/, thumbs/: PNGs, temporaries


def intact(path: Path) -> bool:
    """`path` is a whole image file: there, and every chunk's checksum right (no pixel is decoded)."""
    try:
        with Image.open(path) as image:
            image.verify()
    except Exception:  # PIL reports a missing, truncated or garbled file with several error types
        return False
    return True


def publish_image(read: Callable[[str], bytes], relative: str, site: Path) -> dict[str, str]:
    """Copy a content-addressed PNG (`read(relative)` gives its bytes) and its thumbnail into `site`, each atomically,
    unless both are there intact; their paths in the site. `relative` is a stored name (`stored_name`), checked
    before anything is read or written."""
    full, thumb = Path("images", stored_name(relative)), Path("thumbs", relative)
    if not (intact(site / full) and intact(site / thumb)):
        png = read(relative)
        write_file(site / full, lambda temporary: temporary.write_bytes(png))
        with Image.open(io.BytesIO(png)) as image:
            image.thumbnail((THUMB, THUMB))
            write_file(site / thumb, lambda temporary: image.save(temporary, format="PNG"))
    return {"full": full.as_posix(), "thumb": thumb.as_posix()}


def from_store(store: Path) -> Callable[[str], bytes]:
    """A stored PNG's bytes by its name (`stored_file`: inside `store`)."""
    return lambda relative: stored_file(store, relative).read_bytes()


def write_if_changed(path: Path, content: bytes) -> None:
    """Write `content` to `path` unless it already holds exactly that (a rerun touches no unchanged file)."""
    if not path.is_file() or path.read_bytes() != content:
        write_file(path, lambda temporary: temporary.write_bytes(content))


def write_site(site: Path, data: dict, figures: list[Path]) -> None:
    """The static files, the data script and the run's figures; images already published stay."""
    (site / "figures").mkdir(parents=True, exist_ok=True)
    for asset in sorted(SITE.iterdir()):
        write_if_changed(site / asset.name, asset.read_bytes())
    for figure in figures:
        write_if_changed(site / "figures" / figure.name, figure.read_bytes())
    text = json_text({**data, "figures": [f"figures/{f.name}" for f in figures]}, sort_keys=True,
                     separators=(",", ":"))
    write_if_changed(site / "data.js", f"window.GALLERY = {text};\n".encode())


def publish_site(site: Path, data: dict, figures: list[Path]) -> None:
    """Write the site (`write_site`: data.js names the images its cards show, all already in `site`), then remove
    every other file cfgen writes under `images/` and `thumbs/` (`COPIES`: a new selection's leftovers, a killed
    build's temporaries); a file of any other name stays."""
    write_site(site, data, figures)
    used = {card[key][size] for card in (*data["pairs"], *data["removal"])
            for key in ("image_o", "image_c", "image_0", "image_1") if key in card for size in ("full", "thumb")}
    for folder in ("images", "thumbs"):
        prune(site / folder, {path.removeprefix(f"{folder}/") for path in used if path.startswith(f"{folder}/")},
              COPIES)
