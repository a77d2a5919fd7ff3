"""Params section of the human validation."""

from __future__ import annotations

from pydantic import Field

from tasks.core.fields import Seed, Unit
from tasks.core.params import Section


class ValidationParams(Section):
    """Human validation in Label Studio (paper §4.1, App. B.3): one task per generated image, its two captions in a
    seeded order; a seeded `overlap_share` of the images goes to `overlap` annotators (for Fleiss' κ), the rest to
    one."""

    seed: Seed = 0
    overlap_share: Unit = 0.1
    overlap: int = Field(3, ge=1)
    annotators: tuple[str, ...] = ("annotator1", "annotator2", "annotator3")
    url_prefix: str | None = Field(None, description="where the images are served (prefix + store path); None "
                                                     "embeds each PNG in its task as a data URI")
