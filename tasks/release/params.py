"""Params sections of what a run publishes: the export, the mixtures, the gallery and the datasheet."""

from __future__ import annotations

from pydantic import Field

from tasks.core.fields import RepoId, Seed
from tasks.core.params import Section


class ExportParams(Section):
    """The `datasets` folder (parquet shards under data/) and, when `repo_id` is set and HF_TOKEN given, its push."""

    shard_rows: int = Field(500, ge=1, description="rows per parquet shard at most")
    repo_id: RepoId | None = Field(None, description="Hub dataset repo (owner/name) to push to; None never pushes")
    private: bool = True
    license: str = "cc-by-4.0"
    pretty_name: str = "COCO-Counterfactuals (regenerated)"


class MixturesParams(Section):
    """Training mixtures of real and counterfactual rows (paper App. B.4.1); needs `paths.source_images`."""

    seed: Seed = Field(0, description="draws the mixtures' rows and the train/validation split")


class GalleryParams(Section):
    """The static pair gallery (`cfgen gallery`)."""

    seed: Seed = Field(0, description="draws the rejected rows shown per stage and reason")


class DatasheetParams(Section):
    """What the generated datasheet summarises: the altered-subject table's length and the human-related nouns."""

    top_subjects: int = Field(20, ge=1, description="rows of the altered-subject table (paper Table 10)")
    human_words: tuple[str, ...] = (
        "man", "men", "woman", "women", "person", "people", "boy", "boys", "girl", "girls", "child", "children",
        "kid", "kids", "baby", "babies", "toddler", "teenager", "adult", "adults", "lady", "ladies", "guy", "guys",
        "gentleman", "gentlemen", "player", "players", "skier", "skiers", "surfer", "surfers", "skateboarder",
        "snowboarder", "rider", "riders", "cyclist", "biker", "batter", "pitcher", "catcher", "umpire", "athlete",
        "chef", "cook", "worker", "workers", "officer", "soldier", "soldiers", "doctor", "nurse", "farmer", "student",
        "students", "tourist", "tourists", "passenger", "passengers", "pedestrian", "pedestrians", "crowd", "family",
        "couple", "friends", "mother", "father", "son", "daughter", "wife", "husband", "bride", "groom",
    )
