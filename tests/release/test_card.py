"""The Hub dataset card: size categories, front matter that `datasets` loads, the validated and mixture configs."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import yaml
from PIL import Image

from tasks.release import card, export
from tasks.release.params import ExportParams
from tests.release.test_datasheet import sheet


@pytest.mark.parametrize(("n", "category"), [
    (0, "n<1K"), (999, "n<1K"), (1000, "1K<n<10K"), (9999, "1K<n<10K"), (10_000, "10K<n<100K"),
    (999_999, "100K<n<1M"), (1_000_000, "1M<n<10M"), (10**9, "n>1B"),
])
def test_size_category_boundaries(n, category):
    assert card.size_category(n) == category
    front = yaml.safe_load(card.dataset_card("# Datasheet\n", n, ExportParams()).split("---\n")[1])
    assert front["size_categories"] == [category]


def test_card_front_matter_and_load_dataset_with_the_card(tmp_path):
    import datasets

    image = tmp_path / "images" / "x_o.png"
    image.parent.mkdir()
    Image.fromarray(np.full((4, 4, 3), 7, dtype=np.uint8)).save(image)
    values = {"id": "c0", "image_0": "x_o.png", "image_1": "x_o.png", "caption_0": "a dog", "caption_1": "a cat",
              "image_id": "1", "edit_type": "noun", "original_word": "dog", "substitute": "cat", "position": 1,
              "seed": 3}
    rows = pl.DataFrame([{name: values.get(name, 0.5) for name in export.SCHEMA}], schema=export.SCHEMA)
    out = tmp_path / "ds"
    export.write_dataset({"train": rows}, image.parent, out, ExportParams())
    params = ExportParams(repo_id="me/cf", license="cc-by-4.0")
    export.write_dataset({"train": rows}, image.parent, out, ExportParams(), folder="validated")
    text = card.dataset_card(sheet(), rows.height, params, validated=1)
    (out / "README.md").write_text(text)

    assert text.startswith("---\n")
    front = yaml.safe_load(text.split("---\n")[1])
    assert front["license"] == "cc-by-4.0" and front["pretty_name"] == params.pretty_name
    assert front["language"] == ["en"] and "image-to-text" in front["task_categories"]
    assert front["configs"] == [
        {"config_name": "default", "data_files": [{"split": "train", "path": "data/train-*.parquet"}]},
        {"config_name": "validated", "data_files": [{"split": "train", "path": "validated/train-*.parquet"}]}]
    assert "## Motivation" in text and 'load_dataset("me/cf"' in text
    assert "> **Demo profile**" not in text
    demo = card.dataset_card(sheet(), rows.height, params, demo=True)
    title, notice = demo.split("---\n", 2)[2].strip().split("\n\n")[:2]  # the notice right under the title
    assert title == f"# {params.pretty_name}" and notice.startswith("> **Demo profile**: the toy world")

    loaded = datasets.load_dataset(str(out), cache_dir=str(tmp_path / "hf-cache"))
    assert list(loaded) == ["train"] and loaded["train"][0]["caption_1"] == "a cat"
    assert np.asarray(loaded["train"][0]["image_0"]).max() == 7
    assert datasets.load_dataset(str(out), "validated", cache_dir=str(tmp_path / "hf-cache"))["train"].num_rows == 1
    no_validated = yaml.safe_load(card.dataset_card(sheet(), 1, params).split("---\n")[1])
    assert [c["config_name"] for c in no_validated["configs"]] == ["default"]  # an empty config cannot load
    export.write_dataset({"train": rows}, image.parent, out, ExportParams(), folder="judged")
    (out / "README.md").write_text(card.dataset_card(sheet(), rows.height, params, validated=1, judged=1))
    front = yaml.safe_load((out / "README.md").read_text().split("---\n")[1])
    assert [c["config_name"] for c in front["configs"]] == ["default", "validated", "judged"]
    assert datasets.load_dataset(str(out), "judged", cache_dir=str(tmp_path / "hf-cache"))["train"].num_rows == 1


def test_the_card_lists_the_mixtures_as_configs_with_their_sizes():
    sizes = {"all": {"train": 40, "validation": 10}, "base": {"train": 16, "validation": 4},
             "medium": {"train": 32, "validation": 8}}
    text = card.dataset_card("# Datasheet\n", 20, ExportParams(), sizes)
    front = yaml.safe_load(text.split("---\n")[1])
    assert [c["config_name"] for c in front["configs"]] == [
        "default", "mixture_base", "mixture_medium", "mixture_all"]
    assert front["configs"][3]["data_files"] == [{"split": "train", "path": "mixtures/all/train-*.parquet"},
                                                 {"split": "validation", "path": "mixtures/all/validation-*.parquet"}]
    assert "| base | 16 | 4 | 13,928 |" in text and "| all | 40 | 10 | 41,784 |" in text
