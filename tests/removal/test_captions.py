"""Object removal's caption edit on real COCO val2017 captions: exact edits, each reject reason, the invariant that
nothing outside the deleted spans changes (over a few hundred captions), the class-word file, and `run`'s choice."""

from __future__ import annotations

import polars as pl
import pytest
import yaml

from tasks.core import schemas
from tasks.core.errors import UserError
from tasks.removal import captions, mentions
from tasks.removal.params import RemovalCaptionsParams
from tasks.text.ingest import read_captions
from tasks.text.tagging import tag_caption
from tests.conftest import COCO_CAPTIONS, requires_coco, requires_nltk

GRAMMAR = RemovalCaptionsParams().grammar
COCO_CLASSES = (  # the 80 instance categories of COCO 2017, in category-id order
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow", "elephant",
    "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard",
    "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle",
    "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich", "orange", "broccoli",
    "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch", "potted plant", "bed", "dining table", "toilet",
    "tv", "laptop", "mouse", "remote", "keyboard", "cell phone", "microwave", "oven", "toaster", "sink",
    "refrigerator", "book", "clock", "vase", "scissors", "teddy bear", "hair drier", "toothbrush",
)
# Tokens a cut may take besides its noun phrases: connectors, `of` / possessive joiners, a verb they leave bare.
CUT_TAGS = {"CC", "IN", "TO", ",", "POS", "VBG", "VBN", "VBD"}


@pytest.fixture(scope="module")
def words() -> mentions.ClassWords:
    return mentions.load_class_words(mentions.CLASS_WORDS)


@pytest.fixture(scope="module")
def coco() -> pl.DataFrame:
    return read_captions(COCO_CAPTIONS)[0]


@pytest.fixture(scope="module")
def caption_of(coco) -> dict[str, str]:
    return dict(zip(coco["caption_id"], coco["caption"]))


# --- the class-word file ---------------------------------------------------------------------------------------------

def test_class_words_cover_exactly_the_80_coco_classes_and_no_word_names_two(words):
    assert len(COCO_CLASSES) == len(set(COCO_CLASSES)) == 80
    assert set(words) == set(COCO_CLASSES)
    raw = yaml.safe_load(mentions.CLASS_WORDS.read_text())
    owners: dict[str, set[str]] = {}
    for name, listed in raw.items():
        for word in listed:
            owners.setdefault(word, set()).add(name)
    assert {w: o for w, o in owners.items() if len(o) > 1} == {}
    for name, listed in words.items():
        assert name in listed  # a class is named by its own name
        assert all(w == w.lower() and w == " ".join(w.split()) for w in listed)
    assert {"people", "men", "women", "children", "dogs", "frisbees", "hot dogs", "dining tables", "teddy bears",
            "knives", "mice", "skis"} <= {w for listed in words.values() for w in listed}


@pytest.mark.parametrize("text, problem", [
    ("person: [man\n", "cannot read it"),
    ("- person\n- man\n", "expected a mapping"),
    ("", "expected a mapping"),
    ("person: man\n", "'person' must be a class name with a non-empty list of words"),
    ("person: []\n", "'person' must be"),
    ("person: [man, 3]\n", "'person' must be"),
    ("person: [man, Bike]\nbicycle: [bike]\n", "'bike' names both 'person' and 'bicycle'"),
])
def test_malformed_class_words_are_one_line_user_errors(tmp_path, text, problem):
    path = tmp_path / "words.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=problem) as error:
        mentions.load_class_words(path)
    assert "\n" not in str(error.value) and str(path) in str(error.value)


def test_missing_class_words_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="cannot read it"):
        mentions.load_class_words(tmp_path / "absent.yaml")


# --- matching --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("a hot dog", {"hot dog"}),  # the longer name wins over the words inside it
    ("two Hot Dogs", {"hot dog"}),
    ("a hot-dog", {"hot dog"}),
    ("a dog", {"dog"}),
    ("the teddy bear", {"teddy bear"}),
    ("a brown bear", {"bear"}),
    ("a wooden dining table", {"dining table"}),
    ("the kitchen table", {"dining table"}),
    ("the toilet seat", {"toilet"}),  # CHAIR's rule: not a chair
    ("a baby elephant", {"elephant"}),  # not a person
    ("a Frisbee", {"frisbee"}),
    ("three men", {"person"}),
    ("a biker", {"person"}),  # whole words: not a bike
    ("a category", set()),
    ("a man's dog", {"person", "dog"}),
])
def test_classes_in_matches_whole_words_longest_first(words, text, expected):
    assert mentions.classes_in(text, words) == expected


@requires_nltk
def test_noun_phrases_are_np_chunks_with_exact_spans():
    caption = "A dog and a cat curled up together on a couch."
    phrases = mentions.noun_phrases(caption, GRAMMAR)
    assert [p.text for p in phrases] == ["A dog", "a cat", "a couch"]
    assert all(caption[p.start:p.end] == p.text for p in phrases)
    assert mentions.noun_phrases("", GRAMMAR) == []


@requires_nltk
def test_mentioned_is_the_union_over_noun_phrases(words):
    assert mentions.mentioned("Man with a hot dog in a paper rapper in his hand.", GRAMMAR, words) == {
        "person", "hot dog"}
    assert mentions.mentioned("A kitchen with a bright window.", GRAMMAR, words) == set()


# --- edits of real captions ------------------------------------------------------------------------------------------

EDITS = [  # (caption id, removed, remaining, edited caption, deleted phrases)
    ("219578_1", ["cat"], ["dog"], "A dog curled up together on a couch.", ["a cat"]),  # "and a cat" goes
    ("219578_1", ["dog"], ["cat"], "A cat curled up together on a couch.", ["A dog"]),  # "A dog and" goes
    ("219578_2", ["cat"], ["dog"], "Dog napping together on the couch.", ["A cat"]),  # first letter stays upper
    ("391290_0", ["frisbee"], ["person"], "Two women playing in a field.", ["a Frisbee"]),  # "with a Frisbee"
    ("232563_0", ["umbrella"], ["person"], "A man standing in the street.", ["a umbrella"]),
    ("490171_3", ["dog"], ["person"], "A man in a wet suit riding on a surfboard.", ["a dog"]),
    ("490171_3", ["surfboard"], ["dog"], "A man in a wet suit riding with a dog.", ["a surfboard"]),
    ("148662_0", ["hot dog"], ["person"], "Man in a paper rapper in his hand.", ["a hot dog"]),
    ("223747_4", ["cat"], ["person"], "Man sleeping on a bed. ", ["a cat"]),  # "next to a cat"
    ("47112_0", ["pizza"], ["dining table"], "A dining table has wine glasses.", ["a large pizza"]),  # list: "and"
    ("47112_0", ["wine glass"], ["dining table"], "A dining table has a large pizza.", ["wine glasses"]),
    ("136355_4", ["dining table"], ["vase"], "A vase of flowers.", ["a dining table"]),
    ("92124_1", ["toilet"], ["sink"], "There is a tub, a sink in the bathroom.", ["a toilet"]),  # ", and" goes
    ("92124_2", ["toilet"], ["sink"], "Small bathroom with a shower, sink.  ", ["toilet"]),  # trailing spaces kept
    ("219578_0", ["couch"], ["cat"], "A dog and cat lying  together. ", ["an orange couch"]),  # inner spaces kept
    ("504711_0", ["cake"], ["fork"], "A fork rests on a plate.", ["a piece of cake"]),  # "of" joins the phrases
    ("3661_0", ["dining table"], ["banana"], "A bunch of bananas sitting.", ["top of a wooden table"]),
    ("177015_2", ["laptop"], ["person"], "A cat sitting on the man's lap while the man types. ", ["the laptop"]),
    ("219578_1", ["cat", "couch"], ["dog"], "A dog curled up together.", ["a cat", "a couch"]),  # two classes
]


@requires_coco
@pytest.mark.parametrize("caption_id, removed, remaining, edited, deleted", EDITS)
def test_real_caption_edits(words, caption_of, caption_id, removed, remaining, edited, deleted):
    result = captions.edit(caption_of[caption_id], removed, remaining, GRAMMAR, words)
    assert isinstance(result, captions.Edit), result
    assert (result.edited, list(result.deleted)) == (edited, deleted)
    check_invariant(caption_of[caption_id], result)


REJECTS = [
    ("148662_0", ["dog"], ["person"], "no_mention"),  # a hot dog is no dog
    ("391290_0", ["cat"], ["person"], "no_mention"),
    ("391290_0", ["frisbee"], ["dog"], "no_remaining_class"),
    ("182417_1", ["cake"], ["dining table"], "no_remaining_class"),  # the plate names no class
    ("47112_0", ["dining table"], ["pizza"], "subject_removed"),  # "Has a large pizza ..."
    ("219578_1", ["dog", "cat"], ["couch"], "subject_removed"),
    ("177015_2", ["person"], ["cat"], "subject_removed"),  # "... while the man types": a clause's subject
    ("509403_3", ["dog"], ["person"], "subject_removed"),  # "... in a yard as a dog runs around"
]


@requires_coco
@pytest.mark.parametrize("caption_id, removed, remaining, reason", REJECTS)
def test_real_caption_rejects(words, caption_of, caption_id, removed, remaining, reason):
    assert captions.edit(caption_of[caption_id], removed, remaining, GRAMMAR, words) == reason


def check_invariant(caption: str, result: captions.Edit) -> None:
    """Outside the spans every character is kept (the first letter may be upper-cased); a span holds the deleted
    phrases plus connectors and whitespace only; no space is doubled and the final punctuation stays."""
    spans = list(result.spans)
    assert spans == sorted(spans) and all(s < e for s, e in spans)
    assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:]))
    kept, cursor = "", 0
    for start, end in spans:
        kept, cursor = kept + caption[cursor:start], end
    kept += caption[cursor:]
    assert len(result.edited) == len(kept)
    changed = [i for i, (a, b) in enumerate(zip(kept, result.edited)) if a != b]
    first_letter = next((i for i, c in enumerate(kept) if c.isalpha()), None)
    if changed:
        assert changed == [first_letter] and result.edited[first_letter] == kept[first_letter].upper()
    deleted_at, cursor = [], 0  # each deleted phrase, in order, at its next occurrence inside a span
    for text in result.deleted:
        cursor = caption.index(text, cursor)
        while not any(s <= cursor and cursor + len(text) <= e for s, e in spans):
            cursor = caption.index(text, cursor + 1)
        deleted_at.append((cursor, cursor + len(text)))
        cursor += len(text)
    for token in tag_caption(caption):
        in_span = any(s <= token.start and token.end <= e for s, e in spans)
        in_deleted = any(s <= token.start and token.end <= e for s, e in deleted_at)
        assert in_span or not any(s < token.end and token.start < e for s, e in spans), (caption, token)
        if in_span and not in_deleted:
            assert token.tag in CUT_TAGS or token.text.lower() in {"next", "of"}, (caption, token)
    for pattern in ("  ", " ,", " .", ",,", ",."):
        assert result.edited.count(pattern) <= caption.count(pattern), (caption, result.edited)
    if caption.rstrip()[-1] in ".!?":
        assert result.edited.rstrip()[-1] == caption.rstrip()[-1]
    assert not result.edited[:1].isspace() or caption[:1].isspace()


@requires_coco
def test_nothing_outside_the_deleted_spans_changes_over_real_captions(words, coco):
    """Every 60th caption (~420), each class it names removed in turn, the others remaining."""
    outcomes: dict[str, int] = {}
    for caption in coco["caption"].gather_every(60).to_list():
        named = mentions.mentioned(caption, GRAMMAR, words)
        for removed in sorted(named):
            result = captions.edit(caption, [removed], sorted(named - {removed}), GRAMMAR, words)
            outcome = result if isinstance(result, str) else "edited"
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if isinstance(result, captions.Edit):
                check_invariant(caption, result)
                after = mentions.mentioned(result.edited, GRAMMAR, words)
                assert result.deleted and removed not in after and after & (named - {removed})
    assert set(outcomes) == {"edited", "subject_removed", "no_remaining_class"}
    assert outcomes["edited"] >= 100, outcomes


# --- run and gallery -------------------------------------------------------------------------------------------------

def masks_frame(rows: list[tuple[str, list[str], list[str]]]) -> pl.DataFrame:
    return pl.DataFrame([{"image_id": image, "file_name": f"{image:0>12}.jpg", "width": 640, "height": 480,
                          "category": removed[0], "decision": "alone", "removed": removed, "remaining": remaining,
                          "boxes": [[1.0, 2.0, 3.0, 4.0]] * len(removed), "area_share": 0.1}
                         for image, removed, remaining in rows], schema=schemas.REMOVAL_MASKS)


@pytest.fixture(scope="module")
def shuffled(coco) -> pl.DataFrame:
    """The captions of three real images, in reverse id order (run must sort them)."""
    return coco.filter(pl.col("image_id").is_in(["223747", "219578", "92124"])).sort("caption_id", descending=True)


@requires_coco
def test_run_keeps_the_first_caption_that_edits_in_id_order(words, shuffled):
    masks = masks_frame([("223747", ["bed"], ["person", "cat"]), ("219578", ["cat"], ["dog", "couch"]),
                         ("219578", ["dog", "cat"], ["couch"]), ("999", ["dog"], ["person"])])
    kept, rejects = captions.run(masks, shuffled, words, RemovalCaptionsParams())
    assert dict(kept.schema) == schemas.REMOVAL_CAPTIONS and dict(rejects.schema) == schemas.REMOVAL_CAPTIONS_REJECTS
    # 223747_0.._3 name no bed: the first that edits is _4; 219578_0 edits at once.
    assert kept.select("image_id", "caption_id", "edited_caption", "deleted").rows() == [
        ("223747", "223747_4", "Man sleeping next to a cat. ", ["a bed"]),
        ("219578", "219578_0", "A dog lying  together on an orange couch. ", ["cat"]),
    ]
    assert kept.drop("caption_id", "caption", "edited_caption", "deleted").rows() == masks[:2].rows()
    assert rejects.rows() == [
        ("219578", "dog", "219578_0", "A dog and cat lying  together on an orange couch. ", "removal_captions",
         "subject_removed"),  # every caption fails: the first one's reason
        ("999", "dog", None, None, "removal_captions", "no_caption"),
    ]


@requires_coco
def test_run_honours_captions_per_image_and_require_mention(words, shuffled):
    masks = masks_frame([("223747", ["bed"], ["person", "cat"]), ("92124", ["toilet"], ["sink"])])
    kept, rejects = captions.run(masks, shuffled, words, RemovalCaptionsParams(captions_per_image=2))
    assert kept.select("caption_id", "edited_caption").rows() == [
        ("223747_4", "Man sleeping next to a cat. "),  # the only one of the image that names a bed
        ("92124_0", "A bathroom with a sink net to a shower."),
        ("92124_1", "There is a tub, a sink in the bathroom."),
    ]
    assert rejects.is_empty()
    lenient = RemovalCaptionsParams(captions_per_image=2, require_mention=False)
    kept, _ = captions.run(masks[:1], shuffled, words, lenient)
    assert kept.select("caption_id", "caption", "edited_caption", "deleted").rows() == [
        ("223747_0", "a man sleeping with his cat next to him", "a man sleeping with his cat next to him", []),
        ("223747_1", "A young man and his cute cat enjoy a nap together.",
         "A young man and his cute cat enjoy a nap together.", []),
    ]


def test_run_on_empty_frames(words):
    empty = pl.DataFrame(schema=schemas.CAPTIONS)
    kept, rejects = captions.run(masks_frame([]), empty, words, RemovalCaptionsParams())
    assert kept.is_empty() and rejects.is_empty()
    assert dict(kept.schema) == schemas.REMOVAL_CAPTIONS and dict(rejects.schema) == schemas.REMOVAL_CAPTIONS_REJECTS


@requires_coco
def test_gallery_labels_every_caption_with_its_sorted_classes(words, shuffled):
    gallery = mentions.gallery(shuffled, GRAMMAR, words)
    assert dict(gallery.schema) == schemas.REMOVAL_GALLERY
    assert gallery.select("caption_id", "image_id", "caption").rows() == shuffled.rows()
    classes = dict(zip(gallery["caption_id"], gallery["classes"].to_list()))
    assert classes["219578_1"] == ["cat", "couch", "dog"]
    assert classes["223747_4"] == ["bed", "cat", "person"]
    assert classes["223747_2"] == ["person"]
    assert classes["92124_3"] == ["orange"]  # "an orange shower curtain": the colour names the fruit, as in CHAIR
