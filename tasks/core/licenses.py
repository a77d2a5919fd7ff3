"""Model licenses: the terms each model a run used comes under, as its spec names them, else its folder's model card,
else its image backend (`generate.backend`), printed with a link by the datasheet and the dataset card.

A license is named by its Hugging Face model-card identifier (`license:` in a card's front matter), a key of
`LICENSES`; `cfgen` is the project's own license, which its models (the demo's, the toy world's) come under.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast

import yaml

OWN = "cfgen"  # the project's own models: under the license the installed distribution declares


@dataclass(frozen=True)
class License:
    """A license's name and where its text is (None: nowhere known)."""

    name: str
    url: str | None

    def markdown(self) -> str:
        return f"[{self.name}]({self.url})" if self.url else self.name


LICENSES: dict[str, License | None] = {
    "creativeml-openrail-m": License("CreativeML OpenRAIL-M",
                                     "https://huggingface.co/spaces/CompVis/stable-diffusion-license"),
    "openrail++": License("CreativeML Open RAIL++-M",
                          "https://huggingface.co/stabilityai/stable-diffusion-xl-base-1.0/blob/main/LICENSE.md"),
    "stabilityai-ai-community": License("Stability AI Community License",
                                        "https://stability.ai/community-license-agreement"),
    "mit": License("MIT", "https://opensource.org/license/mit"),
    "apache-2.0": License("Apache-2.0", "https://www.apache.org/licenses/LICENSE-2.0"),
    OWN: None,  # `own()`: read from the distribution's metadata when asked for
}
if TYPE_CHECKING:  # built from LICENSES, so a new license is one entry: to a checker, any name
    LicenseKey = str
else:
    LicenseKey = Literal[tuple(LICENSES)]  # a spec field naming one


def own() -> License:
    """The project's license (its distribution's `License-Expression`, a key of `LICENSES` lower-cased), named as its
    own models'."""
    expression = importlib.metadata.metadata("cfgen")["License-Expression"]
    known = cast(License, LICENSES[expression.lower()])  # the distribution's: a license known by name, not OWN
    return dataclasses.replace(known, name=f"{expression} (cfgen's own model)")


def named(key: str, link: str | None = None) -> License:
    """The license a card or spec names by `key`: a `LICENSES` entry, else `key` itself with `link`."""
    if key == OWN:
        return own()
    return LICENSES.get(key.lower()) or License(key, link)


def card_license(folder: Path) -> License | None:
    """The license of the model card `folder/README.md` (its YAML front matter's `license`; `other`: its
    `license_name` and `license_link`), or None without a card or a license in it."""
    card = folder / "README.md"
    if not card.is_file():
        return None
    head, marker, rest = card.read_text(encoding="utf-8").partition("---\n")
    front = yaml.safe_load(rest.partition("\n---")[0]) if marker and not head.strip() else None
    key = front.get("license") if isinstance(front, dict) else None
    if not isinstance(front, dict) or not isinstance(key, str):
        return None
    link = front.get("license_link")
    return named(front.get("license_name") or key if key == "other" else key,
                 link if isinstance(link, str) and link.startswith("https://") else None)
