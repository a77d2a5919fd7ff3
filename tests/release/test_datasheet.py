"""Datasheet + dataset card: subject table, human share, sections filled from the run, no paths/secrets, card YAML."""

from __future__ import annotations

import re

import polars as pl
import pytest

from tasks.config import load_params
from tasks.core.licenses import LICENSES, named
from tasks.core.specs import ModelSpec
from tasks.release import card, markdown
from tasks.release.datasheet import SECTIONS, Sources, altered_subjects, human_share, render_datasheet
from tasks.release.params import DatasheetParams, ExportParams
from tasks.release.provenance import license_of, model_licenses
from tests.conftest import ROOT

SWAPS = [("c0", "Man", "woman"), ("c1", "man", "Woman"), ("c2", "dog", "cat"), ("c3", "cat", "dog"),
         ("c4", "bus", "car"), ("c5", "car", "bus"), ("c6", "dog", "cat"), ("c7", "Man", "boy"), ("c8", "tree", "pole")]
FUNNEL = {"captions in": 1000, "with a noun": 990, "with a candidate": 812, "with C_c": 640,
          "pairs with an accepted image pair": 411, "final": 407}
METRICS = {"similarity": {"rows_in": 714, "rows_out": 360, "rejects": {"above_window": 40, "below_window": 314}},
           "selection": {"rows_in": 640, "rows_out": 411, "rejects": {"no_sample_passed": 229}}}
PARAMS = {"profile": "demo", "candidates": {"model": {"id": "/home/someone/models/tiny/mlm"}, "top_k": 10},
          "generate": {"guidance_scale": [7.5, 15.0], "vae": None, "adaptive": {"enabled": False}},
          "selection": {"min_clip_dir": 0.2}, "export": {"repo_id": None, "hub_token": "hf_secret_value"},
          "sites": {"types": ["noun", "quantifier"], "max_tokens": 100},
          "relations": {"reject": ["synonym", "hyponym"]}}
MODELS = {"model_mlm": "/tmp/run/models/tiny/mlm@fp1234",
          "model_diffusion": "stable-diffusion-v1-5/stable-diffusion-v1-5@451f4fe"}
LICENSED = {"mlm": named("cfgen"), "diffusion": named("creativeml-openrail-m")}
SDXL_LICENSE = "https://huggingface.co/stabilityai/stable-diffusion-xl-base-1.0/blob/main/LICENSE.md"
BACKEND_LICENSES = {"sd1": ("CreativeML OpenRAIL-M", "https://huggingface.co/spaces/CompVis/stable-diffusion-license"),
                    "sdxl": ("CreativeML Open RAIL++-M", SDXL_LICENSE),
                    "sd3": ("Stability AI Community License", "https://stability.ai/community-license-agreement")}


def counterfactuals() -> pl.DataFrame:
    return pl.DataFrame(SWAPS, schema=["caption_id", "original_word", "substitute"], orient="row").with_columns(
        edit_type=pl.lit("noun"))


def sheet(**overrides) -> str:
    args = dict(funnel=FUNNEL, stage_metrics=METRICS, params=PARAMS, models=MODELS, licenses=LICENSED,
                table=altered_subjects(counterfactuals(), None), human_share=0.25, created="2026-03-04",
                dp=DatasheetParams(top_subjects=3))
    return render_datasheet(Sources(**{**args, **overrides}))


def test_altered_subjects_counts_case_folded_most_frequent_first_ties_alphabetical():
    table = altered_subjects(counterfactuals(), None)
    assert table.columns == ["edit_type", "original_word", "substitute", "count", "share"]
    assert table.select("original_word", "substitute", "count").rows() == [
        ("dog", "cat", 2), ("man", "woman", 2), ("bus", "car", 1), ("car", "bus", 1), ("cat", "dog", 1),
        ("man", "boy", 1), ("tree", "pole", 1)]
    assert table["share"].to_list() == pytest.approx([2 / 9, 2 / 9] + [1 / 9] * 5)


def test_altered_subjects_restricted_to_selected_pairs():
    table = altered_subjects(counterfactuals(), ["c0", "c2", "c3", "c6"])
    assert table.select("original_word", "substitute", "count").rows() == [
        ("dog", "cat", 2), ("cat", "dog", 1), ("man", "woman", 1)]
    assert table["share"].sum() == pytest.approx(1.0)
    assert altered_subjects(counterfactuals(), []).height == 0


def test_human_share_counts_either_side_weighted_by_count():
    table = altered_subjects(counterfactuals(), None)
    assert human_share(table, ("woman", "boy")) == pytest.approx(3 / 9)  # man->woman x2, man->boy
    assert human_share(table, ("Man",)) == pytest.approx(3 / 9)
    assert human_share(table, ("pole", "cat")) == pytest.approx(4 / 9)
    assert human_share(table, ()) == 0.0
    assert human_share(table.head(0), ("man",)) == 0.0


def test_datasheet_has_the_seven_sections_in_order_with_the_funnel_and_metrics():
    text = sheet()
    headings = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert headings == list(SECTIONS) == ["Motivation", "Composition", "Collection Process",
                                          "Preprocessing/Cleaning/Labeling", "Uses", "Distribution",
                                          "Maintenance"]  # Gebru et al.'s seven sections, in order
    for step, count in FUNNEL.items():
        assert re.search(rf"^\| {re.escape(step)} \| {count} \|", text, flags=re.MULTILINE), step
    assert "407 instances" in text and "2026-03-04" in text and "25.0%" in text
    for stage, reason, count in [("similarity", "below_window", 314), ("selection", "no_sample_passed", 229)]:
        assert re.search(rf"^\| {stage} \| .* \| {reason} \| {count} \|$", text, flags=re.MULTILINE)
    assert "| mlm | …/mlm@fp1234 | [Apache-2.0 (cfgen's own model)](https://www.apache.org/licenses/LICENSE-2.0) |" \
        in text
    assert "| diffusion | stable-diffusion-v1-5/stable-diffusion-v1-5@451f4fe | [CreativeML OpenRAIL-M](" in text
    assert "CC BY 4.0" in text


def test_each_section_is_its_renderers_text_of_the_same_sources():
    sources = Sources(FUNNEL, METRICS, PARAMS, MODELS, LICENSED, altered_subjects(counterfactuals(), None), 0.25,
                      "2026-03-04", DatasheetParams(top_subjects=3))
    bodies = re.split(r"^## .+\n\n", render_datasheet(sources), flags=re.MULTILINE)[1:]
    assert [body.rstrip("\n") for body in bodies] == [markdown.public(render(sources)) for render in SECTIONS.values()]


def test_datasheet_lists_every_param_and_the_top_subjects_only():
    text = sheet()
    for key in ["profile", "candidates.model.id", "candidates.top_k", "generate.guidance_scale", "generate.vae",
                "generate.adaptive.enabled", "selection.min_clip_dir", "export.repo_id", "sites.types"]:
        assert re.search(rf"^{re.escape(key)} = ", text, flags=re.MULTILINE), key
    assert "generate.guidance_scale = [7.5, 15.0]" in text and "generate.vae = null" in text
    assert "| noun | dog | cat | 2 | 22.2% |" in text and "| noun | bus | car | 1 |" in text
    assert "| car | bus |" not in text


@pytest.mark.parametrize("profile", ["demo", "paper"])
def test_datasheet_lists_the_resolved_params_of_a_real_params_file(profile):
    """What the datasheet flow passes: a whole `Params`, resolved for its profile, dumped as JSON types."""
    params = load_params(ROOT / "params.yaml", [f"profile={profile}"])
    text = sheet(params=params.model_dump(mode="json"))
    for key, value in markdown.flatten(params.model_dump(mode="json")).items():
        assert re.search(rf"^{re.escape(key)} = ", text, flags=re.MULTILINE), key
    assert f"generate.size = {params.generate.size}" in text
    assert f"candidates.model.id = {params.candidates.model.id}" in text
    assert f"paths.selected = {params.paths.selected.as_posix()}" in text
    assert ("Demo profile" in text) == (profile == "demo")


def test_datasheet_has_no_absolute_paths_or_secrets():
    text = sheet()
    assert "hf_secret_value" not in text and "export.hub_token = <redacted>" in text
    assert "sites.max_tokens = 100" in text  # a count of tokens is no credential
    assert "/home/" not in text and "/tmp/" not in text and "someone" not in text
    assert "candidates.model.id = …/mlm" in text
    assert not re.search(r"(^|[\s=|(`])(~|[A-Za-z]:)?[/\\]\w", text, flags=re.MULTILINE)


@pytest.mark.parametrize(("text", "expected"), [
    ("/a/b/c.png", "…/c.png"), ("id = ~/models/clm@x", "id = …/clm@x"),
    ("at C:\\Users\\me\\m.bin.", "at …/m.bin."),
    ("/trailing/dir/", "…/dir"), ("org/model@rev data/train-*.parquet", "org/model@rev data/train-*.parquet"),
    ("https://huggingface.co/x", "https://huggingface.co/x"), ("pkg:gt_minilm/model", "pkg:gt_minilm/model"),
])
def test_public_cuts_absolute_paths_only(text, expected):
    assert markdown.public(text) == expected


def test_demo_limitation_only_for_the_demo_profile():
    assert "Demo profile" in sheet()
    paper = sheet(params={**PARAMS, "profile": "paper"})
    assert "Demo profile" not in paper and "NLTK" in paper and "CLIP" in paper


def test_evaluation_results_are_tabled_text_first_with_the_relative_change():
    itm = {d: {"mean": 0.1, "share_negative": share} for d, share in
           zip(("delta_img_r", "delta_txt_r", "delta_img_c", "delta_txt_c"), (0.25, 0.5, None, 0.0))}
    evaluation = {"pairs": 4, "models": {
        "clip": {"all": {"image_r@10": 90.0, "image_r@1": 40.0, "text_r@1": 50.0, "text_r@10": 100.0},
                 "real": {"image_r@10": 100.0, "image_r@1": 50.0, "text_r@1": 25.0, "text_r@10": 100.0},
                 "relative": {"image_r@10": -0.1, "image_r@1": -0.2, "text_r@1": 1.0, "text_r@10": 0.0},
                 "itm": itm, "used_to_filter": True}}}
    text = sheet(evaluation=evaluation)
    assert "| Model | Set | text_r@1 | text_r@10 | image_r@1 | image_r@10 |" in text
    assert "| clip (the filter's CLIP) | all | 50.0 (+100%) | 100.0 (+0%) | 40.0 (-20%) | 90.0 (-10%) |" in text
    assert "| clip (the filter's CLIP) | real | 25.0 | 100.0 | 50.0 | 100.0 |" in text
    assert "| clip | 25% | 50% | n/a | 0% |" in text
    assert "Not evaluated in this run." in sheet()


def test_human_validation_results_in_the_labeling_section():
    table1 = [{"images": "I_o", "label": "correct", "count": 3, "share": 0.75},
              {"images": "I_o", "label": "incorrect", "count": 1, "share": 0.25},
              {"images": "I_c", "label": "correct", "count": 0, "share": None}]
    result = {"coverage": {"images": 10, "rated": 4, "share": 0.4}, "table1": table1, "fleiss_kappa": 0.4123,
              "overlap_images": 2, "validated_pairs": 1}
    text = sheet(validation=result)
    assert "4 of 10 images rated; Fleiss' kappa 0.412 on 2 images rated three times; 1 pairs validated" in text
    assert "| I_o | correct | 3 | 75.0% |" in text and "| I_c | correct | 0 | n/a |" in text
    no_ratings = {**result, "coverage": {"images": 10, "rated": 0, "share": 0.0}}
    assert "no annotations yet" in sheet(validation=no_ratings) and "no annotations yet" in sheet()


def test_collection_process_names_the_rejected_relations():
    assert "fills WordNet relates to the original word (synonym, hyponym) are dropped" in sheet()
    assert "fills WordNet relates to the original word (none) are dropped" in sheet(
        params={**PARAMS, "relations": {"reject": []}})


def test_the_edit_types_that_ran_are_tabled_and_counting_edits_carry_the_papers_warning():
    by_type = {"noun": {"sites": 9, "candidates": 30, "similar": 12, "counterfactuals": 4, "selected": 3},
               "quantifier": {"sites": 2, "candidates": 3, "similar": 2, "counterfactuals": 1, "selected": 1}}
    text = sheet(by_edit_type=by_type)
    assert "| noun | one noun swapped for a masked-LM fill (the paper's edit) | 9 | 30 | 12 | 4 | 3 |" in text
    assert "| quantifier |" in text and "| insert |" not in text
    assert "**Counting edits**" in text and "6% of its errors" in text
    assert "one edit of the types that ran (noun, quantifier)" in text
    nouns_only = sheet(params={**PARAMS, "sites": {"types": ["noun"]}}, by_edit_type={"noun": by_type["noun"]})
    assert "**Counting edits**" not in nouns_only


def test_the_judges_agreement_with_people_in_the_labeling_section():
    question = {"images": 6, "auc": 0.75, "kappa": 0.5, "threshold": 0.5, "best_threshold": 0.25, "best_kappa": 0.6}
    agreement = {"pairs_compared": 12, "images_compared": 25, "accuracy": 0.75, "cohen_kappa": 0.5,
                 "reject_precision": 0.8, "reject_recall": 0.6667, "kappa_at_best_thresholds": 0.55,
                 "questions": dict.fromkeys(("original_o", "substitute_c", "substitute_o", "original_c"), question)}
    judge = {"enabled": True, "model": "org/vlm@abc", "pairs": 20, "rows_out": 15, "agreement": agreement}
    labeling = sheet(judge=judge).split("## Preprocessing/Cleaning/Labeling")[1].split("## Uses")[0]
    assert "VLM judge (org/vlm@abc)" in labeling and "15 of 20 pairs pass" in labeling
    assert "majority verdict on 12 pairs" in labeling and "| Cohen's kappa | 0.500 |" in labeling
    assert "| Precision of its rejects | 0.800 |" in labeling and "| Recall of people's rejects | 0.667 |" in labeling
    assert "| I_c shows C_o's word | 6 | 0.750 | 0.500 | 0.5 | 0.2500 | 0.600 |" in labeling
    unlabelled = sheet(judge={**judge, "agreement": {**agreement, "pairs_compared": 0}})
    assert "its agreement is not measured" in unlabelled and "Cohen's kappa" not in unlabelled
    assert "VLM judge: off in this run" in sheet(judge={**judge, "enabled": False}) and "off in this run" in sheet()


@pytest.mark.parametrize("backend", sorted(BACKEND_LICENSES))
def test_the_datasheet_and_card_print_the_license_of_the_backend_that_ran(backend, tmp_path, monkeypatch):
    """A diffusion spec naming no license, without a model card (an empty hub cache): its backend's, linked, in the
    models table and the distribution section of the datasheet and of the card that embeds it."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    params = load_params(ROOT / "params.yaml", ["profile=paper", f"generate.backend={backend}",
                                                "generate.diffusion.id=someone/a-diffusion-model"])
    assert params.generate.diffusion.license is None
    licenses = model_licenses(params)
    name, url = BACKEND_LICENSES[backend]
    assert licenses["diffusion"] == named(params.generate.needs.license) and licenses["diffusion"].name == name
    models = {"model_mlm": "FacebookAI/roberta-base@e2da8e2", "model_diffusion": "someone/a-diffusion-model@0abc"}
    text = card.dataset_card(sheet(models=models, licenses=licenses), 407, ExportParams())
    assert f"| diffusion | someone/a-diffusion-model@0abc | [{name}]({url}) |" in text
    assert f"| mlm | FacebookAI/roberta-base@e2da8e2 | [MIT](https://opensource.org/license/mit) |" in text
    assert f"Generated images are subject to the license of the diffusion model that made them, [{name}]({url})" \
        in text
    assert all(other not in text for other, _ in BACKEND_LICENSES.values() if other != name)


def test_every_model_of_the_demo_and_paper_runs_names_a_license(tmp_path, monkeypatch):
    """The demo's models are the project's own but the sentence encoder (its packaged card: Apache-2.0); the
    paper's are named by their specs, SD v1.5 by its backend."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    demo = model_licenses(load_params(ROOT / "params.yaml", []))
    assert demo.pop("sentence_encoder") == LICENSES["apache-2.0"]
    assert demo.keys() == {"mlm", "causal_lm", "diffusion", "clip", "judge"}
    assert all(found.name == "Apache-2.0 (cfgen's own model)" for found in demo.values())
    paper = model_licenses(load_params(ROOT / "params.yaml", ["profile=paper"]))
    assert {role: found.name for role, found in paper.items()} == {
        "mlm": "MIT", "sentence_encoder": "Apache-2.0", "causal_lm": "MIT", "diffusion": "CreativeML OpenRAIL-M",
        "vae": "MIT", "clip": "MIT"}


def test_a_model_card_names_the_license_before_the_backend(tmp_path, monkeypatch):
    """README.md front matter: a known identifier, `other` with its name and link, none (the backend's), and a hub
    model's card in the local cache; a spec's own license wins over all."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    folder = tmp_path / "model"
    folder.mkdir()
    spec = ModelSpec(id=str(folder))
    for front, want in [("license: openrail++", LICENSES["openrail++"]),
                        ("license: other\nlicense_name: stabilityai-ai-community\nlicense_link: LICENSE.md",
                         LICENSES["stabilityai-ai-community"]),
                        ("license: other\nlicense_name: a-new-one\nlicense_link: https://example.org/terms",
                         named("a-new-one", "https://example.org/terms")),
                        ("language: en", LICENSES["creativeml-openrail-m"])]:
        (folder / "README.md").write_text(f"---\n{front}\n---\n# A model\n")
        assert license_of(spec, "creativeml-openrail-m") == want, front
    assert license_of(spec.model_copy(update={"license": "mit"}), "creativeml-openrail-m") == LICENSES["mit"]
    snapshot = tmp_path / "hub" / "models--someone--model" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "README.md").write_text("---\nlicense: apache-2.0\n---\n")
    (tmp_path / "hub" / "models--someone--model" / "refs").mkdir()
    (tmp_path / "hub" / "models--someone--model" / "refs" / "main").write_text("0" * 40)
    assert license_of(ModelSpec(id="someone/model"), "openrail++") == LICENSES["apache-2.0"]
    unstated = license_of(ModelSpec(id="someone/other"))
    assert unstated.url == "https://huggingface.co/someone/other" and "not stated" in unstated.name
