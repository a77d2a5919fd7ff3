"""The Hub dataset card (the export folder's README.md): YAML front matter with the dataset's configs (`default`,
`validated`, `judged`, the training mixtures), a short intro with the mixtures' sizes, then the generated datasheet."""

from __future__ import annotations

from collections.abc import Mapping

import yaml

from tasks.release.markdown import markdown_table
from tasks.release.params import ExportParams

SIZE_CATEGORIES = ((10**3, "n<1K"), (10**4, "1K<n<10K"), (10**5, "10K<n<100K"), (10**6, "100K<n<1M"),
                   (10**7, "1M<n<10M"), (10**8, "10M<n<100M"), (10**9, "100M<n<1B"))
PAPER_MIXTURE_TRAIN = {"base": 13_928, "medium": 34_820, "all": 41_784}
DEMO_NOTICE = ("**Demo profile**: the toy world (flat shapes on a plain background, captions from a small grammar) "
               "and miniature diffusion, CLIP and text models trained on it by `cfgen toy-world train`; its VLM judge "
               "and evaluation models are random, so their answers are noise. Not COCO images: do not use it for any "
               "evaluation of real models.")  # at the top of the card and the gallery, and in the limitations


def size_category(n_rows: int) -> str:
    """The Hub's size category: n<1K, 1K<n<10K, … (a boundary value goes to the larger category)."""
    return next((name for limit, name in SIZE_CATEGORIES if n_rows < limit), "n>1B")


def _mixture_configs(sizes: Mapping[str, Mapping[str, int]]) -> tuple[list[dict], str]:
    """(Hub configs of the training mixtures, a markdown table of their sizes beside the paper's train sizes)."""
    names = sorted(sizes, key=lambda n: list(PAPER_MIXTURE_TRAIN).index(n))  # base, medium, all
    configs = [{"config_name": f"mixture_{name}", "data_files": [
        {"split": split, "path": f"mixtures/{name}/{split}-*.parquet"} for split in ("train", "validation")]}
        for name in names]
    rows = [(name, sizes[name]["train"], sizes[name]["validation"], f"{PAPER_MIXTURE_TRAIN[name]:,}") for name in names]
    sizes_table = markdown_table(("Mixture", "Train rows", "Validation rows", "Paper train rows (full scale)"),
                                 rows)
    return configs, ("Training mixtures of real and counterfactual rows (paper App. B.4.1; a caption's rows are "
                     f"always in one split):\n\n{sizes_table}")


def dataset_card(datasheet_md: str, n_rows: int, export: ExportParams,
                 mixtures: Mapping[str, Mapping[str, int]] | None = None, validated: int = 0, judged: int = 0,
                 demo: bool = False) -> str:
    """README.md of the dataset folder: Hub YAML front matter, a short intro (under its title, the demo notice when
    the demo profile made it; the training mixtures' sizes when they were built), the datasheet. The `validated`
    (people's) and `judged` (the VLM judge's) configs are listed once they hold a pair (an empty config cannot
    load)."""
    mixture_configs, mixture_table = _mixture_configs(mixtures) if mixtures else ([], "")
    configs = [{"config_name": name, "data_files": [{"split": "train", "path": f"{name}/train-*.parquet"}]}
               for name, pairs in (("validated", validated), ("judged", judged)) if pairs] + mixture_configs
    meta = {
        "license": export.license, "pretty_name": export.pretty_name, "language": ["en"],
        "task_categories": ["image-to-text", "text-to-image", "zero-shot-image-classification"],
        "size_categories": [size_category(n_rows)], "tags": ["counterfactual", "coco", "synthetic"],
        "configs": [{"config_name": "default", "data_files": [{"split": "train", "path": "data/train-*.parquet"}]},
                    *configs],
    }
    source = export.repo_id or "path/to/this/folder"
    intro = (f"# {export.pretty_name}\n\n" + (f"> {DEMO_NOTICE}\n\n" if demo else "")
             + f"{n_rows} counterfactual image-text pairs (I_o, C_o, I_c, C_c) in the COCO-Counterfactuals schema, "
             "regenerated with this project's pipeline.\n\n"
             f"```python\nfrom datasets import load_dataset\nds = load_dataset(\"{source}\", split=\"train\")\n```")
    intro += f"\n\n{mixture_table}" if mixture_table else ""
    return f"---\n{yaml.safe_dump(meta, sort_keys=False)}---\n\n{intro}\n\n{datasheet_md}"
