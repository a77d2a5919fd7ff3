"""Edit types declared once each (`tasks.core.edits`): every stage looks a type up, its text behaviours are the
functions its declaration names, each keyed by the steps that run it alone, and a new type is its class, its module
and its params. Key tests edit real source files (a copy of the project)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tasks.core import code, edits
from tasks.core.edits import EDIT_TYPES, behaviours
from tasks.stages import stage
from tests.conftest import NLTK_DATA, ROOT

FUNCTIONS = ("sites", "check_fill", "rewrite", "defects")


def defined(name: str) -> set[str]:
    tree = ast.parse((ROOT / "tasks/text/edits" / f"{name}.py").read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")}


def test_each_type_is_one_module_defining_the_behaviours_its_declaration_names():
    assert sorted(p.stem for p in (ROOT / "tasks/text/edits").glob("[!_]*.py")) == sorted(EDIT_TYPES)
    for name, kind in EDIT_TYPES.items():
        declared = {f for f in FUNCTIONS if edits.behaviour(name, f) in behaviours(f)}
        assert declared == defined(name), name
        assert declared >= {"sites", "check_fill" if kind.masked else "rewrite"}
        assert set(kind.rejects) <= set(kind.defects)


def test_defects_return_exactly_the_names_declared():
    from tasks.text.edits import function

    rows = {"quantifier": ("Two dogs run.", 0, 3, "Two", "A", "A dogs run."),
            "insert": ("A dog runs.", 2, 2, "", "big ", "A big dog runs."),
            "delete": ("A big dog runs.", 2, 6, "big ", "", "A dog runs."),
            "swap": ("A dog on a couch.", 2, 16, "dog on a couch", "couch on a dog", "A couch on a dog.")}
    for name, (caption, start, end, original, substitute, candidate) in rows.items():
        row = {"caption": caption, "start": start, "end": end, "original_word": original, "substitute": substitute,
               "candidate": candidate, "edit_type": name}
        assert set(function(name, "defects")(row, ("lot",), ("one", "two", "three"))) == set(EDIT_TYPES[name].defects)


def identity(*names: str) -> str:
    return code.identity(*(entry for name in names for entry in stage(name).entries)).key


def replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_a_behaviour_edit_rekeys_the_step_running_it_and_a_description_nothing(project_copy):
    base = {name: identity(name) for name in ("sites", "candidates", "relations", "generate")}
    replace(project_copy / "tasks/core/edits.py", "one noun swapped for a masked-LM fill",
            "one noun exchanged for a masked-LM fill")  # the datasheet's words: no code
    assert {name: identity(name) for name in base} == base
    replace(project_copy / "tasks/text/edits/swap.py", 'SWAP_BARRIERS = ("CC", ",", ".", ":", ',
            'SWAP_BARRIERS = ("CC", ",", ".", ')
    assert {name: identity(name) == key for name, key in base.items()} == {
        "sites": False, "candidates": True, "relations": True, "generate": True}
    replace(project_copy / "tasks/text/edits/delete.py", 'return [""], None', 'return [" "], None')
    assert identity("candidates") != base["candidates"] and identity("relations") == base["relations"]
    replace(project_copy / "tasks/core/edits.py", 'name, masked, subjects = "swap", False, True',
            'name, masked, subjects = "swap", False, False')  # the both-subjects check: what a sample measures
    assert identity("generate") != base["generate"]


NEW_TYPE = '''
class Determiner(Edit):
    """the definite article made demonstrative"""

    name, masked = "determiner", False

'''
NEW_MODULE = '''
from tasks.text.words import Site


def sites(tokens, params):
    yield from ((i, t.start, t.end) for i, t in enumerate(tokens) if t.text.lower() == "the")


def rewrite(site, params):
    return ["this"], None
'''
PROBE = '''
import polars as pl
from tasks.config import load_params
from tasks.text import candidates, sites
params = load_params("params.yaml", ["sites.types=[determiner, noun]"], sections=("sites", "candidates"))
found, _ = sites.run(pl.DataFrame({"caption_id": ["1"], "image_id": ["9"], "caption": ["A dog on the couch."]}),
                     params.sites)
rows, rejects = candidates.run(found.filter(pl.col("edit_type") == "determiner"), params.candidates, None)
print(rows["candidate"].to_list(), sorted(set(found["edit_type"])))
'''


def test_a_new_edit_type_is_its_class_its_module_and_its_params(tmp_path):
    """The recipe the README gives, run: a class in `tasks/core/edits.py`, a module in `tasks/text/edits/`, and
    `sites.types` naming it; sites and candidates run it with nothing else touched."""
    project = tmp_path / "project"
    for name in ("tasks", "flows"):  # the manifest checks the flows its declarations name
        shutil.copytree(ROOT / name, project / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "params.yaml", project)
    edits = project / "tasks/core/edits.py"
    listed = "(Noun, Lexical, Quantifier, Insert, Delete, Swap)}"  # its line in EDIT_TYPES
    text = edits.read_text().replace(listed, listed.replace("Swap)", "Swap, Determiner)"))
    edits.write_text(text.replace("\n\nEDIT_TYPES: ", NEW_TYPE.rstrip() + "\n\n\nEDIT_TYPES: "))
    (project / "tasks/text/edits/determiner.py").write_text(textwrap.dedent(NEW_MODULE))
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=project, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(project), "NLTK_DATA": str(NLTK_DATA)})
    expected = ["['A dog on this couch.'] ['determiner', 'noun']"]
    assert out.stdout.strip().splitlines()[-1:] == expected, out.stderr[-3000:]


@pytest.mark.parametrize(("span", "name", "word"), [(" a dog ", "quantifier", "a dog"), (" an apple", "noun", "apple"),
                                                ("an old ", "delete", "old"), ("a", "noun", "a")])
def test_edited_word_keeps_a_counts_article_and_drops_an_agreeing_one(span, name, word):
    assert edits.edited_word(span, name) == word
