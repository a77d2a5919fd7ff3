"""`load_params` on real params files: both profiles, unknown keys, override rules, checks, cache-key fields."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tasks.config import CHECKED_BY_DVC, ParamsError, literal_overrides, load_params
from tasks.core.fields import keyed_dump
from tasks.core.params import PROFILES, Params
from tasks.core.specs import ClipSpec, ItmSpec, model_specs
from tests.conftest import ROOT


@pytest.fixture
def raw() -> dict:
    """The project's params.yaml, to edit and write back."""
    return yaml.safe_load((ROOT / "params.yaml").read_text())


def write(tmp_path: Path, raw: dict) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def error(path: Path, *overrides: str) -> str:
    """The one-line message `load_params` fails with."""
    with pytest.raises(ParamsError) as caught:
        load_params(path, overrides)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_the_project_params_load_for_both_profiles():
    demo = load_params(ROOT / "params.yaml")
    paper = load_params(ROOT / "params.yaml", ["profile=paper"])
    assert isinstance(demo, Params) and (demo.profile, paper.profile) == ("demo", "paper")
    assert (demo.generate.size, paper.generate.size) == (32, 512)
    assert demo.generate.vae is None and paper.generate.vae.revision
    assert paper.candidates.model.id == "FacebookAI/roberta-base" and paper.generate.clip.revision is None
    clips = {key: spec.dtype for key, spec in model_specs(paper) if isinstance(spec, (ClipSpec, ItmSpec))}
    assert {"generate.clip", "removal_selection.clip", "saliency.model", "evaluate.models.clip_b32"} <= clips.keys()
    assert set(clips.values()) == {"float32"}  # a 16-bit CLIP_dir flips thresholds and rankings
    assert demo.paths.samples == Path("data/interim/samples.parquet")


def test_a_missing_file_and_a_malformed_override_are_params_errors(tmp_path, raw):
    assert error(tmp_path / "nope.yaml") == f"params file {tmp_path / 'nope.yaml'} not found"
    assert "'similarity.upper'" in error(write(tmp_path, raw), "similarity.upper")


@pytest.mark.parametrize("edit, overrides, expected", [
    (lambda raw: raw.update(selectoin=raw.pop("selection")), [], "unknown key 'selectoin' (did you mean 'selection'?)"),
    (lambda raw: raw["similarity"].update(uper=raw["similarity"].pop("upper")), [],
     "unknown key 'similarity.uper' (did you mean 'similarity.upper'?)"),
    (lambda raw: None, ["simlarity.upper=0.9"], "unknown key 'simlarity' (did you mean 'similarity'?)"),
    (lambda raw: None, ["generate.diffusion.idd=x"], "unknown key 'generate.diffusion.idd' (did you mean "
                                                     "'generate.diffusion.id'?)"),
    (lambda raw: None, ["generate.top_k_images=2"], "unknown key 'generate.top_k_images'"),
], ids=["section", "key", "override", "override-through-branches", "removed-key"])
def test_an_unknown_key_names_the_nearest_valid_one(tmp_path, raw, edit, overrides, expected):
    edit(raw)
    message = error(write(tmp_path, raw), *overrides)
    assert message.startswith(expected)


@pytest.mark.parametrize("profile", PROFILES)
def test_an_override_of_a_profile_mapping_sets_every_profile(tmp_path, raw, profile):
    params = load_params(write(tmp_path, raw), [f"profile={profile}", "generate.steps=5"])
    assert params.generate.steps == 5


@pytest.mark.parametrize("profile", PROFILES)
def test_an_override_through_a_profile_mapping_edits_every_branch(tmp_path, raw, profile):
    params = load_params(write(tmp_path, raw), ["generate.diffusion.id=org/other", f"profile={profile}"])
    assert params.generate.diffusion.id == "org/other"
    assert params.generate.diffusion.revision == raw["generate"]["diffusion"][profile].get("revision")


@pytest.mark.parametrize("profile", PROFILES)
def test_an_override_naming_a_profile_edits_that_branch_only(tmp_path, raw, profile):
    params = load_params(write(tmp_path, raw), ["generate.diffusion.paper.id=org/other", "generate.steps.paper=7",
                                                f"profile={profile}"])
    expected = ("org/other", 7) if profile == "paper" else ("models/demo/diffusion", raw["generate"]["steps"]["demo"])
    assert (params.generate.diffusion.id, params.generate.steps) == expected


def test_an_override_cannot_descend_into_a_scalar_or_leave_a_profile_without_a_value(tmp_path, raw):
    path = write(tmp_path, raw)
    assert error(path, "generate.seed.paper=1").startswith("generate.seed:")
    raw["generate"]["steps"] = {"paper": 100}
    assert error(write(tmp_path, raw)) == "generate.steps: no value for profile 'demo'"


@pytest.mark.parametrize("override, key", [
    ("sites.noun_tags=[NN, XX]", "sites.noun_tags[1]: 'XX' is not a Penn Treebank POS tag"),
    ("sites.types=[noun, verb]", "sites.types[1]: Input should be 'noun', 'lexical', 'quantifier', 'insert', "
                                 "'delete' or 'swap'"),
    ("candidates.keep_tags=[nn]", "candidates.keep_tags[0]: 'nn' is not a Penn Treebank POS tag"),
    ("selection.min_clip_dir=1.5", "selection.min_clip_dir:"),
    ("selection.min_image_image=-1.5", "selection.min_image_image:"),
    ("generate.size=36", "generate.size: Input should be a multiple of 8"),
    ("similarity.lower=0.91", "similarity.upper: must be > lower (0.91)"),
    ("similarity.lower=0.95", "similarity.upper: must be > lower (0.95)"),
    ("similarity.upper=1.5", "similarity.upper:"),
    ("generate.p2p_fraction=[0.9, 0.1]", "generate.p2p_fraction: needs lo <= hi"),
    ("profile=gpu", "profile: must be one of demo, paper"),
    ("generate.subject_prompt=a {word} {0}", "generate.subject_prompt: {0} is not one of {word}"),
    ('inpaint.prompt="{nope}"', "inpaint.prompt: {nope} is not one of {caption}, {removed}"),
    ('judge.templates.noun="{word} {x}"', "judge.templates.noun: {x} is not one of {word}"),
    ('paths.source_image_name="{image_id[0]}"', "paths.source_image_name: {image_id[0]} is not one of {image_id}"),
    ('removal_selection.prompt="{name:{x}}"', "removal_selection.prompt: not a template over name"),
    ('generate.subject_prompt="{word"', "generate.subject_prompt: expected '}'"),
    ("candidates.top_k=100000000000000000000", "candidates.top_k: 100000000000000000000 is beyond ±2**32"),
    ("perplexity.batch_tokens=99999999999", "perplexity.batch_tokens: 99999999999 is beyond"),
    ("generate.p2p_layers=[1, 4294967296]", "generate.p2p_layers: 4294967296 is beyond ±2**32"),  # a list: each
    ("evaluate.ks=[1, -4294967296]", "evaluate.ks: -4294967296 is beyond ±2**32"),  # entry bounded like a scalar
    ("engine.torch_threads=100000", "engine.torch_threads: Input should be less than or equal to 1024"),
    ("generate.steps=5000", "generate.steps: Input should be less than or equal to 1000"),
    ("candidates.model.device=garbage", "candidates.model.device: String should match pattern"),
    ("removal_selection.test_share=0.95", "removal_selection.test_share: validation_share + test_share is 1.05"),
])
def test_an_invalid_value_is_a_one_line_error_naming_its_key(tmp_path, raw, override, key):
    assert error(write(tmp_path, raw), override).startswith(key)


def test_the_paper_profile_needs_every_hub_model_pinned(tmp_path, raw):
    path = write(tmp_path, raw)
    assert error(path, "profile=paper", "candidates.model.paper.revision=null") == (
        "candidates.model: hub model FacebookAI/roberta-base has no pinned revision (the paper profile needs one)")
    unpinned = "candidates.model={id: FacebookAI/roberta-base}"
    assert load_params(path, [unpinned]).candidates.model.revision is None  # demo: allowed
    local = load_params(path, ["profile=paper", f"candidates.model={{id: {tmp_path}}}", "similarity.model.id=pkg:m/x",
                               "generate.vae=null"])
    assert local.candidates.model.id == str(tmp_path) and local.generate.vae is None


def test_keyed_dump_leaves_out_what_never_changes_a_cached_unit(tmp_path, raw):
    path = write(tmp_path, raw)
    generate = load_params(path).generate
    keyed = keyed_dump(generate)
    assert not {"batch_samples", "clip_batch_size", "black_threshold", "n_samples", "adaptive"} & set(keyed)
    assert keyed["steps"] == raw["generate"]["steps"]["demo"] and keyed["diffusion"]["id"] == "models/demo/diffusion"
    assert keyed["vae"] is None
    assert keyed_dump(load_params(path, ["generate.batch_samples=1", "generate.n_samples=9"]).generate) == keyed
    assert keyed_dump(load_params(path, ["generate.steps=3"]).generate) != keyed
    assert keyed_dump(load_params(path).engine) == {}
    assert "batch_size" not in keyed_dump(load_params(path).similarity)
    placed = ["generate.diffusion.device=cuda:0", "generate.diffusion.dtype=float16", "generate.clip.device=cpu",
              "evaluate.models.clip.device=cpu"]  # placement is keyed as resolved where a model runs
    assert keyed_dump(load_params(path, placed).generate) == keyed
    assert keyed_dump(load_params(path, placed).evaluate) == keyed_dump(load_params(path).evaluate)
    assert not {"device", "dtype"} & set(keyed_dump(load_params(path).evaluate)["models"]["clip"])


def test_perplexity_weighs_exactly_the_edit_types_that_run(tmp_path, raw):
    path = write(tmp_path, raw)
    assert load_params(path, ["sites.types=[noun]"]).perplexity.type_shares == {"noun": 1.0}  # sites.types alone
    assert load_params(path, ["sites.types=[noun, delete]", "perplexity.type_shares={noun: 3}"]
                       ).perplexity.type_shares == {"noun": 3.0, "delete": 1.0}  # unset: 1
    assert error(path, "sites.types=[noun, delete]", "perplexity.type_shares={noun: 3, lexical: 2}") == (
        "perplexity.type_shares: 'lexical' does not run (sites.types: noun, delete): add it there or drop its weight")
    assert load_params(path, ["perplexity.type_shares.lexical=2"]).perplexity.type_shares == {
        "noun": 1.0, "lexical": 2.0, "quantifier": 1.0, "insert": 1.0, "delete": 1.0, "swap": 1.0}
    assert error(path, "perplexity.type_shares={noun: 1, delete: 0}").startswith("perplexity.type_shares.delete:")
    paper = load_params(path, ["profile=paper"])
    assert paper.sites.types == ("noun",) and paper.perplexity.type_shares == {"noun": 1.0}  # the paper's method
    explicit = ["perplexity.type_shares={noun: 1, lexical: 1, quantifier: 1, insert: 1, delete: 1}"]
    assert keyed_dump(load_params(path, explicit).perplexity) == keyed_dump(load_params(path).perplexity)


@pytest.mark.parametrize("override", [
    "generate.seed=-1", "mixtures.seed=-5", "gallery.seed=-1", "synthetic_coco.seed=-1", "tiny_models.seed=-2",
    "validation.seed=-1", "evaluate.seed=4294967296", "removal_selection.seed=-1", "export.repo_id=not a repo",
    "export.repo_id=owner/name/extra", "export.repo_id=../etc", "export.repo_id=owner/"])
def test_a_seed_no_generator_takes_or_a_malformed_repo_id_is_one_line_naming_it(tmp_path, raw, override):
    key = override.split("=")[0]
    assert error(write(tmp_path, raw), override).startswith(f"{key}:")


def test_a_seed_or_repo_id_in_range_loads(tmp_path, raw):
    params = load_params(write(tmp_path, raw), ["generate.seed=4294967295", "export.repo_id=my-org/coco_cf.v2"])
    assert (params.generate.seed, params.export.repo_id) == (2**32 - 1, "my-org/coco_cf.v2")


@pytest.mark.parametrize("override", ["similarity.upper=true", "generate.steps=yes", "paths.source_images=false"])
def test_a_yaml_boolean_is_no_number_or_path(tmp_path, raw, override):
    key, value = override.split("=")
    *section, name = key.split(".")
    message = error(write(tmp_path, raw), override)
    assert message.startswith(f"{'.'.join(section)}: {name} is {'true' if value in ('true', 'yes') else 'false'} "
                              "(a YAML boolean), expected")
    assert load_params(write(tmp_path, raw), ["export.private=false"]).export.private is False


def test_the_saliency_model_needs_a_pin_only_when_enabled(tmp_path, raw):
    path = write(tmp_path, raw)
    assert load_params(path, ["profile=paper"]).saliency.model.revision is None
    assert error(path, "profile=paper", "saliency.enabled=true") == (
        "saliency.model: hub model openai/clip-vit-base-patch32 has no pinned revision (the paper profile needs one)")


def test_truth_needs_the_toy_worlds_models(tmp_path, raw):
    path = write(tmp_path, raw)
    assert load_params(path, ["profile=demo"]).truth.enabled
    assert error(path, "profile=demo", "tiny_models.toy_world=null").startswith(
        "truth.enabled needs the toy world's models (tiny_models.toy_world)")
    assert not load_params(path, ["profile=demo", "tiny_models.toy_world=null", "truth.enabled=false"]).truth.enabled


def test_a_command_assembles_the_sections_it_reads_and_validates_every_other(tmp_path, raw, monkeypatch):
    """`load_params(..., sections)`: the shared sections and the named ones; every other section, in the file or an
    override, is validated too (a typo anywhere stops a command before any work), except in a command DVC runs
    (`CHECKED_BY_DVC`: its `params` stage validated the whole file first), which imports no other section's module; the
    file's other top-level keys must still be sections; the loaded sections' cross-section rules hold (perplexity's
    weights follow `sites.types`, truth refuses random models); pickled as a worker gets it, the same params with the
    same root."""
    probe = ("import sys\nfrom tasks.config import load_params\np = load_params(sections=('relations',))\n"
             "print(p.sections, sorted(m for m in sys.modules if m.startswith('tasks.') and m.endswith('.params')))")
    shown = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                           env={**os.environ, CHECKED_BY_DVC: "relations"})
    assert shown.stdout.split("\n")[0] == "('relations',) ['tasks.core.params', 'tasks.text.params']", shown.stderr
    path = write(tmp_path, raw)
    (tmp_path / "typo").mkdir()
    typo = write(tmp_path / "typo", {**raw, "export": {**raw["export"], "reop_id": "x"}})
    for file, overrides, message in ((path, ["perplexity.type_shares={lexicl: 2}"], "'lexicl' is not an edit type"),
                                     (path, ["generate.steps=many"], "generate.steps"),
                                     (typo, [], "unknown key 'export.reop_id' \\(did you mean 'export.repo_id'")):
        with pytest.raises(ParamsError, match=message):
            load_params(file, overrides, ("relations",))
    monkeypatch.setenv(CHECKED_BY_DVC, "relations")
    assert load_params(typo, [], ("relations",)).sections == ("relations",)
    monkeypatch.delenv(CHECKED_BY_DVC)
    path = write(tmp_path, {**raw, "sitez": {}})
    with pytest.raises(ParamsError, match="unknown key 'sitez' \\(did you mean 'sites'\\?\\)"):
        load_params(path, [], ("relations",))
    path = write(tmp_path, raw)
    both = load_params(path, ["sites.types=[noun, swap]"], ("perplexity", "sites"))
    assert both.perplexity.type_shares == {"noun": 1.0, "swap": 1.0} and not hasattr(both, "generate")
    with pytest.raises(ParamsError, match="truth.enabled needs the toy world"):
        load_params(path, ["tiny_models.toy_world=null"], ("truth", "tiny_models"))
    shipped = pickle.loads(pickle.dumps(both))
    assert shipped == both and type(shipped).__name__ == "Params" and shipped.root == both.root
    assert shipped.sections == ("sites", "perplexity")  # the file's order


def test_the_judge_model_needs_a_pin_only_when_enabled_and_a_threshold_per_question(tmp_path, raw):
    path = write(tmp_path, raw)
    paper = load_params(path, ["profile=paper"])
    assert not paper.judge.enabled and "judge.model" not in dict(paper.running_models())
    assert error(path, "profile=paper", "judge.enabled=true") == (
        "judge.model: hub model Qwen/Qwen2.5-VL-7B-Instruct has no pinned revision (the paper profile needs one)")
    pinned = load_params(path, ["profile=paper", "judge.enabled=true", f"judge.model.paper.revision={'a' * 40}"])
    assert dict(pinned.running_models())["judge.model"].revision == "a" * 40
    assert error(path, "judge.thresholds={original_o: 0.5}").startswith("judge.thresholds: needs exactly "
                                                                       "one threshold per question")
    assert error(path, "judge.thresholds.original_o=1.5").startswith("judge.thresholds.original_o:")
    assert error(path, "judge.templates.noun=Is there one?").startswith("judge.templates: the template "
                                                                        "of noun has no {word}")
    assert "thresholds" not in keyed_dump(load_params(path).judge)  # applied after the cache


def test_params_yaml_survives_dvcs_round_trip(tmp_path):
    """`dvc exp run -S` rewrites params.yaml with DVC's own YAML serializer, then reads it back."""
    from dvc.utils.serialize import load_yaml, modify_yaml

    path = tmp_path / "params.yaml"
    path.write_text((ROOT / "params.yaml").read_text())
    with modify_yaml(path) as data:
        data["similarity"]["upper"] = 0.9
    expected = yaml.safe_load((ROOT / "params.yaml").read_text())
    expected["similarity"]["upper"] = 0.9
    assert load_yaml(path) == expected
    assert load_params(path, []).similarity.upper == 0.9


def test_a_reranking_cross_encoder_needs_a_bi_encoder(tmp_path, raw):
    path = write(tmp_path, raw)
    assert (load_params(path).evaluate.rerank_k, load_params(path, ["profile=paper"]).evaluate.rerank_k) == (None, 20)
    assert {"rerank_k", "rerank_with"} <= set(keyed_dump(load_params(path).evaluate))  # they change results
    assert error(path, "evaluate.rerank_with=vilt") == (
        "evaluate: rerank_with: 'vilt' is not a bi-encoder of evaluate.models (clip, hf_clip)")
    raw["evaluate"]["models"]["demo"] = {"vilt": raw["evaluate"]["models"]["demo"]["vilt"]}
    path = write(tmp_path, raw)
    assert load_params(path).evaluate.first_stage(load_params(path).evaluate.models["vilt"]) is None  # every pair
    assert error(path, "evaluate.rerank_k=20").startswith(
        "evaluate: rerank_k: the cross-encoders of evaluate.models re-rank a bi-encoder's top rerank_k and there is "
        "none")


def leaves(node: object, at: tuple[str, ...] = ()) -> list[tuple[str, object]]:
    """(dotted key, value) of every scalar or list in a params mapping, profile branches included."""
    if isinstance(node, dict) and node:
        return [leaf for key, value in node.items() for leaf in leaves(value, (*at, str(key)))]
    return [(".".join(at), node)]


def hydra(value: object) -> str:
    """`value` in the Hydra override grammar `dvc exp run -S` parses."""
    if isinstance(value, str):
        return "'" + value.replace("'", "\\'") + "'"  # a backslash is literal unless it precedes a quote
    if isinstance(value, list):
        return "[" + ",".join(map(hydra, value)) + "]"
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    return repr(value)


def test_dvc_set_param_takes_every_key_of_params_yaml(tmp_path, raw):
    """`dvc exp run -S KEY=VALUE` (DVC's own Hydra override code) on every key, profile branches and lists
    included, leaves a params.yaml that loads to the same params; and a changed branch or list takes effect."""
    from dvc.utils.hydra import apply_overrides

    path = write(tmp_path, raw)
    before = {profile: load_params(path, [f"profile={profile}"]) for profile in PROFILES}
    keys = leaves(raw)
    assert len(keys) > 150 and {"generate.steps.demo", "sites.types.paper", "evaluate.ks"} <= dict(keys).keys()
    apply_overrides(path, [f"{key}={hydra(value)}" for key, value in keys])
    assert {profile: load_params(path, [f"profile={profile}"]) for profile in PROFILES} == before
    apply_overrides(path, ["generate.steps.demo=2", "sites.types.demo=[noun,lexical]",
                           "+perplexity.type_shares.lexical=3"])
    changed = load_params(path)
    assert (changed.generate.steps, changed.sites.types) == (2, ("noun", "lexical"))
    assert changed.perplexity.type_shares == {"noun": 1.0, "lexical": 3.0}
    assert "'lexical' does not run" in error(path, "profile=paper")  # the paper runs nouns only: a weight for
    paper = load_params(path, ["profile=paper", "perplexity.type_shares=null"])  # lexical would do nothing there
    assert paper.generate.steps == before["paper"].generate.steps


def test_relative_model_paths_point_into_the_project_wherever_they_are_used(tmp_path, raw, monkeypatch):
    """Two copies of a project, each loaded in its own folder, used in a third directory (a Dask worker's): each spec
    loads from its own copy, pickled too, while the fingerprint and every dump (so every cache key) are the same."""

    from tasks.core.fingerprints import fingerprint

    spec = raw["generate"]["diffusion"]["demo"]
    loaded = []
    for copy in ("a", "b"):
        (tmp_path / copy / spec["id"]).mkdir(parents=True)
        (tmp_path / copy / spec["id"] / "weights.bin").write_bytes(b"same bytes")
        monkeypatch.chdir(tmp_path / copy)
        loaded.append(load_params(write(tmp_path / copy, raw)))
    monkeypatch.chdir(tmp_path)
    a, b = (pickle.loads(pickle.dumps(p.generate.diffusion)) for p in loaded)  # as shipped to a worker
    assert a.local() == str(tmp_path / "a" / spec["id"]) and b.local() == str(tmp_path / "b" / spec["id"])
    assert loaded[0].root == tmp_path / "a"
    assert fingerprint(a) == fingerprint(b) and a.model_dump() == b.model_dump() == {**a.model_dump(), "id": spec["id"]}
    assert keyed_dump(loaded[0].generate) == keyed_dump(loaded[1].generate)
    hub = loaded[0].generate.clip.model_copy(update={"id": "org/model"})
    assert hub.local() == "org/model"  # no such folder: a hub id, as written


def test_a_malformed_override_and_a_misspelt_edit_type_are_one_line_each(tmp_path, raw):
    path = write(tmp_path, raw)
    assert error(path, "sites.types=[noun") == ("override 'sites.types=[noun': the value is not valid YAML (expected "
                                                "',' or ']', but got '<stream end>')")
    assert "'lexicl' is not an edit type (one of noun, lexical, quantifier, insert, delete, swap)" in error(
        path, "perplexity.type_shares={lexicl: 2}")
    assert error(path, "perplexity.type_shares={lexical: 2}", "sites.types=[noun]") == (
        "perplexity.type_shares: 'lexical' does not run (sites.types: noun): add it there or drop its weight")


BOMB = "".join(f"l{i}: &l{i} {{{', '.join([f'k{j}: *l{i - 1}' for j in range(9)])}}}\n" for i in range(1, 12))


@pytest.mark.parametrize(("text", "message"), [
    ("l0: &l0 {a: 1}\n" + BOMB, "alias \\*l0: aliases are refused"),  # 9^11 mappings if expanded
    ("profile: demo\nprofile: paper\n", "key 'profile' is given twice"),
    ("generate:\n  steps: 3\ngenerate:\n  seed: 1\n", "key 'generate' is given twice"),  # would drop a section
    ("zz: {types: [noun], types: [swap]}\n", "key 'types' is given twice"),  # nested
])
def test_a_yaml_alias_or_a_key_given_twice_is_one_line_at_once(tmp_path, raw, text, message):
    """A nested alias expands exponentially (a bomb) and a repeated key silently replaces the first: both refused,
    in a file or an override's value."""
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False) + text)
    assert re.search(message, error(path))
    assert "aliases are refused" in error(write(tmp_path, raw), "generate.guidance_scale=[&a 5, *a]")


def test_a_params_file_that_is_not_utf8_text_or_not_a_file_is_one_line(tmp_path, raw):
    path = tmp_path / "params.yaml"
    path.write_bytes(yaml.safe_dump(raw).encode("utf-16"))
    assert error(path) == f"params file {path} is not UTF-8 text"
    assert error(tmp_path) == f"params file {tmp_path} is not a regular file"


@pytest.mark.parametrize("source", ["#x.tsv", "/tmp/a: b.tsv", "yes", "[1]", "~", "3.0"])
def test_a_source_given_on_the_command_line_is_that_path_not_yaml(tmp_path, raw, source):
    """`cfgen run/serve --source` and the deployment pass paths as literal overrides: YAML would read a comment, a
    mapping, a boolean, a list, null or a number."""
    params = load_params(write(tmp_path, raw), literal_overrides({"paths.captions_source": source, "profile": None}))
    assert params.paths.captions_source == Path(source)
