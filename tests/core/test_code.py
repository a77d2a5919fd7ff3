"""Code identity of a cached unit (`code.identity`): it follows what the unit executes, through imports of imports,
and the versions of the libraries it calls; comments, docstrings, formatting and param definitions are not code it
runs. Every test edits real source files (a copy of the project) or puts a real distribution on sys.path."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tasks.core import code, source
from tasks.core.specs import ModelSpec
from tasks.image import render
from tasks.image.params import BACKEND_NEEDS, GenerateParams
from tasks.stages import stage
from tasks.toyworld import truth

RETURN_ROWS = "    return torch.stack([x[:, 0], torch.where(mask, x[:, 0], x[:, 1])], 1).flatten(0, 1)"  # share_rows's
SAMPLE = (*stage("generate").entries, BACKEND_NEEDS["sd1"].entry)  # an SD v1 sample's render and measurement


def sample_identity() -> code.Identity:
    return code.identity(*SAMPLE)


def replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_a_sample_follows_the_functions_it_runs_and_only_those():
    parts = sample_identity().parts
    # sd1.SD1 -> p2p.install -> P2PAttnProcessor -> share_rows; render -> scoring -> schemas
    assert {"tasks.image.p2p:share_rows", "tasks.image.p2p:P2PAttnProcessor", "tasks.image.sampling:render",
            "tasks.image.backends.sd1:SD1", "tasks.image.backends.sd1:load_diffusion",
            "tasks.image.scoring:ClipScorer", "tasks.core.schemas:SCORE_COLUMNS"} <= parts.keys()
    assert "tasks.image.sampling:plan_sample" not in parts  # the seeds are values of the key, not its code
    assert not any(name.startswith(("tasks.image.backends.sdxl:", "tasks.image.backends.sd3:", "tasks.image.joint_p2p:",
                                    "tasks.image.sampling:flow_steps", "tasks.image.params:")) for name in parts)
    assert "tasks.image.sampling:ancestral_steps" in parts  # sd1's steps, reached through SD1.steps
    generate = "tasks.image.params:GenerateParams"
    assert code.identity(generate).parts == {generate: "param definition"}
    assert not any(name.startswith(("tasks.text.", "tasks.release.", "tasks.core.params:", "tasks.image.params:"))
                   for name in parts)
    assert {"torch", "diffusers", "transformers", "open_clip_torch"} <= sample_identity().libraries.keys()


def test_a_renamed_entry_fails_loudly(project_copy):
    """An entry names its code by `module:name`; once that name is gone, no key covering no code comes out."""
    assert "tasks.image.render:canonical" in SAMPLE
    replace(project_copy / "tasks/image/render.py", "def canonical(", "def canonical_render(")
    with pytest.raises(ValueError, match="render defines no canonical"):
        sample_identity()


def test_comments_docstrings_formatting_and_param_definitions_change_nothing(project_copy):
    base = sample_identity().key
    p2p, params = project_copy / "tasks/image/p2p.py", project_copy / "tasks/core/params.py"
    replace(p2p, '"""`x` (queries, keys or values) with each', '"""Queries, keys or values `x`, with every')
    replace(p2p, RETURN_ROWS, f"\n\n{RETURN_ROWS}  # o rows as they are")
    replace(p2p, "Prompt-to-Prompt attention sharing", "Prompt-to-Prompt (Hertz et al.) attention sharing")
    replace(params, "assembles only the sections", "assembles just the sections")
    replace(project_copy / "tasks/removal/params.py", "class RemovalMasksParams(Section):",
            "class RemovalMasksParams(Section):  # a comment\n    extra_knob: int = 3")
    replace(project_copy / "tasks/image/params.py", '"caption pairs per Prefect task',
            '"mean caption pairs per Prefect task')
    assert sample_identity().key == base


def test_an_edit_the_sampler_executes_changes_it_and_reverting_restores_it(project_copy):
    base = sample_identity().key
    p2p = project_copy / "tasks/image/p2p.py"
    original = p2p.read_text()
    replace(p2p, "    mask = shared.view(-1, *([1] * (x.ndim - 2)))",
            "    mask = shared.view(-1, *([1] * (x.ndim - 2))).bool()")
    assert sample_identity().key != base
    p2p.write_text(original)
    assert sample_identity().key == base
    replace(project_copy / "tasks/core/schemas.py", '"sim_image_image", "clip_dir")',
            '"sim_image_image", "clip_dir", )')  # formatting only: same tuple
    assert sample_identity().key == base
    replace(project_copy / "tasks/core/schemas.py", '"clip_dir", )', '"clip_dir", "extra")')
    assert sample_identity().key != base


def unit_code(backend: str) -> tuple[str, str]:
    """The code keys of a `backend` sample and of its truth, as `render.sample_unit` and `truth.unit` build them (a
    pinned revision: nothing fetched)."""
    params = GenerateParams(backend=backend, diffusion=ModelSpec(id="org/model", revision="0" * 40), vae=None)
    return render.sample_unit(params, stage("generate").code).code, truth.unit(params).code


OWN_CODE = {  # per backend: an edit to code only its samples run
    "sd1": ("backends/sd1.py", "[uncond, uncond, cond_o, cond_c]", "[uncond, uncond, cond_c, cond_o]"),
    "sdxl": ("backends/sdxl.py", "states[0], pooled[0] = 0, 0", "states[0], pooled[0] = 0, 1"),
    "sd3": ("joint_p2p.py", "for x in (query, key, value))", "for x in (query, key))"),
}


@pytest.mark.parametrize("edited", sorted(OWN_CODE))
def test_a_sample_keys_its_own_backends_code_and_no_other_backends(project_copy, edited):
    """A backend change re-renders; another backend's code, or its declaration, does not."""
    assert OWN_CODE.keys() == BACKEND_NEEDS.keys()
    base = {name: unit_code(name) for name in BACKEND_NEEDS}
    assert len({key for keys in base.values() for key in keys}) == 2 * len(base)
    path = project_copy / "tasks/image" / OWN_CODE[edited][0]
    replace(path, *OWN_CODE[edited][1:])
    source.IMPORTED.pop(path, None)  # as a fresh process, which imports the edited file (its key: what it runs)
    assert {name: tuple(map(str.__ne__, unit_code(name), base[name])) for name in base} == {
        name: (name == edited,) * 2 for name in base}
    edited_keys = {name: unit_code(name) for name in base}
    replace(project_copy / "tasks/image/params.py", "h100_rows_per_second=SDXL_1024_H100_ROWS_PER_SECOND",
            "h100_rows_per_second=2 * SDXL_1024_H100_ROWS_PER_SECOND")
    assert {name: unit_code(name) for name in base} == edited_keys


def test_an_edit_to_the_code_the_clip_backends_share_rekeys_each(project_copy):
    """`backends/clip.py` (`ClipBackend`, which every backend derives from) is in every backend's keys."""
    base = {name: unit_code(name) for name in BACKEND_NEEDS}
    path = project_copy / "tasks/image/backends/clip.py"
    replace(path, "count_o > tokenizer.model_max_length", "count_o >= tokenizer.model_max_length")
    source.IMPORTED.pop(path, None)
    assert {name: tuple(map(str.__ne__, unit_code(name), base[name])) for name in base} == {
        name: (True, True) for name in base}


def test_an_edit_elsewhere_changes_nothing(project_copy):
    base = sample_identity().key
    replace(project_copy / "tasks/text/candidates.py", "def run(", "def unused():\n    return 1\n\n\ndef run(")
    replace(project_copy / "tasks/image/sampling.py", "rng = random.Random(seed)", "rng = random.Random(seed + 1)")
    assert sample_identity().key == base


def installed(site: Path, name: str, version: str) -> None:
    """`name` `version` found first on the path (`site` prepended by the caller), as an upgrade is."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_another_installed_library_version_changes_it(tmp_path, monkeypatch):
    base = sample_identity()
    installed(tmp_path / "site", "diffusers", "99.0.0")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    upgraded = sample_identity()
    assert upgraded.libraries["diffusers"] == "99.0.0" != base.libraries["diffusers"]
    assert upgraded.key != base.key
    assert {k: v for k, v in upgraded.imported.items() if k != "diffusers"} == \
        {k: v for k, v in base.imported.items() if k != "diffusers"}


def test_a_library_reached_only_through_another_counts(tmp_path, monkeypatch):
    """torchvision runs open_clip's preprocessing; no project module imports it by name."""
    base = sample_identity()
    assert "torchvision" in base.libraries and "torchvision" not in base.imported
    assert {"tokenizers", "safetensors", "ftfy"} <= base.libraries.keys()
    installed(tmp_path / "site", "torchvision", "99.0.0")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    upgraded = sample_identity()
    assert upgraded.libraries["torchvision"] == "99.0.0" and upgraded.key != base.key


def test_only_libraries_that_can_compute_an_output_are_keyed(tmp_path, monkeypatch):
    """A newer TLS bundle or console library (reached through the hub client and the CLI libraries) changes no key;
    accelerate, which diffusers loads every weight through when installed though it does not require it, does."""
    base = sample_identity()
    assert not {"certifi", "rich", "requests", "tqdm"} & base.libraries.keys() and "accelerate" in base.libraries
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    installed(tmp_path / "site", "certifi", "2099.1.1")
    installed(tmp_path / "site", "rich", "99.0.0")
    assert sample_identity().key == base.key
    installed(tmp_path / "site", "accelerate", "99.0.0")
    assert sample_identity().key != base.key


def test_the_installation_is_read_once_per_state_and_again_when_it_changes(tmp_path, monkeypatch):
    """A later process reads the distributions from the cache file of the installation's state, not from their
    metadata; an upgrade in a folder already on the path is another state."""
    from tasks.core import environment

    monkeypatch.setattr(environment, "CACHE", tmp_path / "cache")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    installed(tmp_path / "site", "diffusers", "99.0.0")
    environment.installed.cache_clear()
    assert sample_identity().libraries["diffusers"] == "99.0.0"
    assert len(list((tmp_path / "cache").glob("distributions-*.json"))) == 1
    environment.installed.cache_clear()  # as a new process starts

    def unread():
        raise AssertionError("the metadata was read again")

    with monkeypatch.context() as m:
        m.setattr(environment.importlib.metadata, "distributions", unread)
        assert sample_identity().libraries["diffusers"] == "99.0.0"
    shutil.rmtree(tmp_path / "site" / "diffusers-99.0.0.dist-info")
    installed(tmp_path / "site", "diffusers", "100.0.0")
    assert sample_identity().libraries["diffusers"] == "100.0.0"


def test_log_and_exception_texts_change_nothing_their_code_does(project_copy):
    base = sample_identity().key
    render, p2p = project_copy / "tasks/image/render.py", project_copy / "tasks/image/p2p.py"
    replace(render, '"CUDA out of memory: batch_samples halved to %d"', '"OOM: now %d samples a batch"')
    replace(p2p, '"P2PAttnProcessor supports plain SD attention layers only"', 'f"unsupported layer {attn}"')
    assert sample_identity().key == base
    replace(render, "self.size //= 2", "self.size //= 3")
    assert sample_identity().key != base


def test_a_statement_in_the_p2p_processors_call_changes_it(project_copy):
    base = sample_identity().key
    replace(project_copy / "tasks/image/p2p.py", "        residual = hidden_states\n",
            "        residual = hidden_states\n        hidden_states = hidden_states * 1\n")
    assert sample_identity().key != base


def test_the_nltk_data_a_stage_reads_is_keyed_by_content(tmp_path, monkeypatch):
    import nltk

    sites = code.identity(*stage("sites").entries)
    assert set(sites.data) == {"tokenizers/punkt_tab/english", "taggers/averaged_perceptron_tagger_eng",
                               "corpora/wordnet"}  # a delete's adjective must not be a noun-only word
    assert code.identity(*stage("relations").entries).data.keys() == {"corpora/wordnet"}
    assert not sample_identity().data
    copy = tmp_path / "nltk_data"
    for name in sites.data:
        shutil.copytree(nltk.data.find(name).path, copy / name)
    monkeypatch.setattr(nltk.data, "path", [str(copy), *nltk.data.path])
    assert code.identity(*stage("sites").entries).key == sites.key  # the same bytes elsewhere
    weights = next((copy / "taggers/averaged_perceptron_tagger_eng").glob("*weights*"))
    weights.write_bytes(weights.read_bytes() + b" ")
    assert code.identity(*stage("sites").entries).key != sites.key


def test_a_process_keys_the_code_it_imported_not_the_file_edited_since(project_copy, monkeypatch):
    """A long-lived process (a Dask worker) after a `git pull`: its key stays the code it runs."""
    p2p = project_copy / "tasks/image/p2p.py"
    base = sample_identity().key
    monkeypatch.setitem(source.IMPORTED, p2p, p2p.read_bytes())  # as `source.record_imports` records an import
    replace(p2p, "        residual = hidden_states\n", "        residual = hidden_states * 1\n")
    assert sample_identity().key == base
    monkeypatch.delitem(source.IMPORTED, p2p)  # a fresh process imports the edited file
    assert sample_identity().key != base


@pytest.mark.parametrize("name", ["candidates", "perplexity", "similarity"])
def test_caption_stages_key_their_own_model_library(name):
    assert "transformers" in code.identity(*stage(name).entries).libraries or \
        "sentence-transformers" in code.identity(*stage(name).entries).libraries
