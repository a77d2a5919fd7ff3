"""Export: published schema + provenance join, sharding, exact `load_dataset` round trip, determinism, gated push."""

from __future__ import annotations

import logging

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from PIL import Image

from tasks.config import load_params
from tasks.core import schemas
from tasks.core.errors import UserError
from tasks.release import card, datasheet, export
from tasks.release.params import ExportParams
from tasks.release.provenance import model_licenses
from tests.conftest import ROOT

MODELS = {"model_mlm": "FacebookAI/roberta-base@e2da8e2", "model_diffusion": "stable-diffusion-v1-5@451f4fe"}
IDS = ["p3", "p0", "p4", "p1", "p2"]  # deliberately unsorted
SENTINEL = "hf_SENTINEL_do_not_leak_0123456789"


@pytest.fixture
def images_dir(tmp_path):
    """Random 6x5 RGB PNGs, two per pair, under `ab/<id>_{o,c}.png`."""
    root = tmp_path / "images"
    rng = np.random.default_rng(0)
    for caption_id in IDS:
        for side in "oc":
            (root / "ab").mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (5, 6, 3), dtype=np.uint8)).save(root / f"ab/{caption_id}_{side}.png")
    return root


def selected_frame(ids: list[str] = IDS) -> pl.DataFrame:
    rows = [{"caption_id": c, "image_id": f"img{c}", "caption": f"a dog on {c}", "counterfactual": f"a cat on {c}",
             "edit_type": "noun", "original_word": "dog", "substitute": f"cat{c}", "sample": 0, "seed": 10 + i,
             "p2p_fraction": 0.5, "guidance_scale": 7.5 + i, "sim_text_image_o": 0.3,
             "sim_text_image_c": 0.31, "sim_image_image": 0.8, "clip_dir": 0.2 + i / 10, "truncated_o": False,
             "truncated_c": False, "tokens_misaligned": False, "tried": 1 + i % 2, "image_o": f"ab/{c}_o.png",
             "image_c": f"ab/{c}_c.png"} for i, c in enumerate(ids)]
    return pl.DataFrame(rows, schema=schemas.SELECTED)


def counterfactual_frame(ids: list[str] = IDS) -> pl.DataFrame:
    """One row per id plus one caption that was never selected, in reverse order."""
    rows = [{"caption_id": c, "image_id": f"img{c}", "caption": f"a dog on {c}", "counterfactual": f"a cat on {c}",
             "edit_type": "noun", "position": 1, "start": 2, "end": 5, "original_word": "dog", "substitute": f"cat{c}",
             "mlm_score": 0.1 * i, "similarity": 0.85, "perplexity": 20.0 + i} for i, c in enumerate(ids + ["px"])]
    return pl.DataFrame(rows[::-1], schema=schemas.COUNTERFACTUALS)


@pytest.fixture
def rows():
    return export.dataset_rows(selected_frame(), counterfactual_frame(), MODELS)


def load(out_dir, tmp_path):
    import datasets

    return datasets.load_dataset(str(out_dir), split="train", cache_dir=str(tmp_path / "hf-cache"))


def test_dataset_rows_schema_order_and_join(rows):
    assert rows.columns == [*export.SCHEMA, "model_mlm", "model_diffusion"]
    assert rows.columns[:5] == ["id", "image_0", "image_1", "caption_0", "caption_1"]
    assert rows["id"].to_list() == sorted(IDS)
    for row in rows.iter_rows(named=True):
        c = row["id"]
        assert (row["image_0"], row["image_1"]) == (f"ab/{c}_o.png", f"ab/{c}_c.png")
        assert (row["caption_0"], row["caption_1"], row["substitute"]) == (f"a dog on {c}", f"a cat on {c}", f"cat{c}")
        assert row["seed"] == 10 + IDS.index(c) and row["perplexity"] == 20.0 + IDS.index(c)
        assert (row["model_mlm"], row["model_diffusion"]) == tuple(MODELS.values())


def test_dataset_rows_refuses_unstored_images_unknown_pairs_and_bad_model_names():
    unstored = selected_frame().with_columns(image_c=pl.when(pl.col("caption_id") == "p1").then(None)
                                             .otherwise(pl.col("image_c")))
    with pytest.raises(ValueError, match="regenerate"):
        export.dataset_rows(unstored, counterfactual_frame(), MODELS)
    with pytest.raises(ValueError, match="p4"):
        export.dataset_rows(selected_frame(), counterfactual_frame(["p0", "p1", "p2", "p3"]), MODELS)
    with pytest.raises(ValueError, match="model_<role>"):
        export.dataset_rows(selected_frame(), counterfactual_frame(), {"mlm": "x@y"})


def test_shards_respect_shard_rows_and_stale_shards_go(rows, images_dir, tmp_path):
    out = tmp_path / "ds"
    (out / "data").mkdir(parents=True)
    (out / "data" / "train-00000-of-00001.parquet").write_bytes(b"stale")
    shards = export.write_dataset({"train": rows}, images_dir, out, ExportParams(shard_rows=2))
    assert [p.name for p in shards] == [f"train-{i:05d}-of-00003.parquet" for i in range(3)]
    assert sorted(p.name for p in (out / "data").iterdir()) == [p.name for p in shards]
    assert [pq.read_metadata(p).num_rows for p in shards] == [2, 2, 1]

    shards = export.write_dataset({"train": rows}, images_dir, out, ExportParams(shard_rows=5))
    assert [p.name for p in (out / "data").iterdir()] == ["train-00000-of-00001.parquet"] == [p.name for p in shards]


def test_load_dataset_round_trips_every_row_and_pixel(rows, images_dir, tmp_path):
    out = tmp_path / "ds"
    export.write_dataset({"train": rows}, images_dir, out, ExportParams(shard_rows=2))
    loaded = load(out, tmp_path)
    assert loaded.column_names == rows.columns and loaded.num_rows == rows.height
    for expected, got in zip(rows.iter_rows(named=True), loaded):
        for column, value in expected.items():
            if column in export.IMAGE_COLUMNS:
                with Image.open(images_dir / value) as source:
                    assert np.array_equal(np.asarray(got[column]), np.asarray(source))
                    assert got[column].mode == source.mode
            else:
                assert got[column] == value and type(got[column]) is type(value)
    raw = pq.read_table(sorted((out / "data").iterdir())[0]).column("image_0").to_pylist()
    assert raw[0] == {"bytes": (images_dir / rows["image_0"][0]).read_bytes(), "path": rows["image_0"][0]}


def test_rewrite_is_byte_identical(rows, images_dir, tmp_path):
    first = export.write_dataset({"train": rows}, images_dir, tmp_path / "a", ExportParams(shard_rows=3))
    before = [p.read_bytes() for p in first]
    again = export.write_dataset({"train": rows}, images_dir, tmp_path / "a", ExportParams(shard_rows=3))
    other = export.write_dataset({"train": rows}, images_dir, tmp_path / "b", ExportParams(shard_rows=3))
    assert [p.read_bytes() for p in again] == before == [p.read_bytes() for p in other]


class FakeHfApi:
    """Records every call instead of talking to the Hub."""

    calls: list[tuple[str, tuple, dict]] = []

    def __init__(self, **kwargs):
        self.calls.append(("init", (), kwargs))

    def create_repo(self, *args, **kwargs):
        self.calls.append(("create_repo", args, kwargs))
        return f"https://huggingface.co/datasets/{args[0]}"

    def upload_folder(self, *args, **kwargs):
        self.calls.append(("upload_folder", args, kwargs))


@pytest.fixture
def fake_hub(monkeypatch):
    monkeypatch.setattr(FakeHfApi, "calls", [])
    monkeypatch.setattr(export.huggingface_hub, "HfApi", FakeHfApi)
    return FakeHfApi


def test_no_push_without_a_repo_id_and_a_repo_id_without_a_token_is_one_line(fake_hub, tmp_path):
    assert export.push_if_configured(tmp_path, ExportParams(repo_id=None), {"HF_TOKEN": SENTINEL}) is None
    for environ in ({}, {"HF_TOKEN": ""}):
        with pytest.raises(UserError, match="export.repo_id is me/cf but HF_TOKEN is not set"):
            export.push_if_configured(tmp_path, ExportParams(repo_id="me/cf"), environ)
    assert fake_hub.calls == []


def test_push_uses_the_token_but_never_writes_or_logs_it(fake_hub, rows, images_dir, tmp_path, monkeypatch,
                                                         caplog, capsys):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("HF_TOKEN", SENTINEL)
    out, reports = tmp_path / "ds", tmp_path / "reports"
    everything = load_params(ROOT / "params.yaml", ["export.repo_id=me/cf", "export.private=false"])
    params = everything.export
    export.write_dataset({"train": rows}, images_dir, out, params)
    table = datasheet.altered_subjects(counterfactual_frame(), None)
    md = datasheet.render_datasheet(datasheet.Sources({"captions": 5}, {}, everything.model_dump(mode="json"), MODELS,
                                                      model_licenses(everything), table, 0.0, "2026-01-01",
                                                      everything.datasheet))
    reports.mkdir()
    (reports / "datasheet.md").write_text(md)
    (out / "README.md").write_text(card.dataset_card(md, rows.height, params))

    assert export.push_if_configured(out, params) == "https://huggingface.co/datasets/me/cf"
    (init, _, init_kwargs), (create, create_args, create_kwargs), (upload, _, upload_kwargs) = fake_hub.calls
    assert (init, create, upload) == ("init", "create_repo", "upload_folder")
    assert init_kwargs == {"token": SENTINEL}
    assert create_args == ("me/cf",)
    assert create_kwargs == {"repo_type": "dataset", "private": False, "exist_ok": True}
    assert upload_kwargs["folder_path"] == str(out) and upload_kwargs["repo_type"] == "dataset"

    for path in [*out.rglob("*"), *reports.rglob("*")]:
        assert not path.is_file() or SENTINEL.encode() not in path.read_bytes(), path
    captured = capsys.readouterr()
    assert SENTINEL not in caplog.text + captured.out + captured.err
    assert "me/cf" in caplog.text


def test_dataset_rows_carry_the_judges_answers_and_verdict_null_where_it_did_not_judge():
    judged = pl.DataFrame([{"caption_id": c, **dict.fromkeys(schemas.JUDGE_COLUMNS, 0.25 * i), "judge_pass": i % 2 == 0,
                            "judge_reason": None if i % 2 == 0 else "judge_original_missing", "people_pass": None}
                           for i, c in enumerate(["p0", "p1", "p2"])], schema=schemas.JUDGED)
    rows = export.dataset_rows(selected_frame(), counterfactual_frame(), MODELS, judged)
    assert rows.columns == [*export.SCHEMA, "model_mlm", "model_diffusion"]
    by_id = {row["id"]: row for row in rows.iter_rows(named=True)}
    assert [by_id[c]["judge_pass"] for c in ("p0", "p1", "p2", "p3", "p4")] == [True, False, True, None, None]
    assert by_id["p2"]["judge_substitute_o"] == 0.5 and by_id["p3"]["judge_original_o"] is None
    assert rows.filter(pl.col("judge_pass"))["id"].to_list() == ["p0", "p2"]  # the `judged` config
    unjudged = export.dataset_rows(selected_frame(), counterfactual_frame(), MODELS)
    assert unjudged.columns == rows.columns and unjudged["judge_pass"].null_count() == len(IDS)
    assert export.features(rows)["judge_pass"].dtype == "bool"


def test_a_run_that_fails_mid_export_leaves_the_last_complete_shards(rows, images_dir, tmp_path, monkeypatch):
    """The folder is replaced as a whole: an export stopped after two of its shards leaves the earlier export's
    shards, exactly, and the next export leaves its own and nothing staged."""
    out = tmp_path / "ds"
    first = export.write_dataset({"train": rows}, images_dir, out, ExportParams(shard_rows=3))
    before = {p.name: p.read_bytes() for p in first}
    real, calls = export.embedded, []

    def failing(part, folder):
        calls.append(part.height)
        if len(calls) == 3:
            raise OSError("disk full")
        return real(part, folder)

    monkeypatch.setattr(export, "embedded", failing)
    with pytest.raises(OSError, match="disk full"):
        export.write_dataset({"train": rows}, images_dir, out, ExportParams(shard_rows=1))
    assert {p.name: p.read_bytes() for p in (out / "data").iterdir()} == before
    monkeypatch.setattr(export, "embedded", real)
    again = export.write_dataset({"train": rows}, images_dir, out, ExportParams(shard_rows=1))
    assert sorted(p.name for p in (out / "data").iterdir()) == sorted(p.name for p in again)
    assert sorted(p.name for p in out.iterdir()) == [".data.lock", "data"]
