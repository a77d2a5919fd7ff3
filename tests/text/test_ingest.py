"""Ingest: COCO JSON / TSV -> (captions, rejects); ids, image ids, rejects and byte-for-byte captions."""

from __future__ import annotations

import json

import polars as pl
import pytest

from tasks.text import ingest
from tasks.text.ingest import MalformedInput, read_captions


def write(tmp_path, name: str, data: bytes | str):
    path = tmp_path / name
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    return path


def coco(annotations: list[dict], images: list[dict] | None = None) -> str:
    if images is None:
        images = [{"id": i} for i in sorted({a["image_id"] for a in annotations}, key=str)]
    return json.dumps({"images": images, "annotations": annotations}, ensure_ascii=False, indent=1)


def assert_schemas(kept: pl.DataFrame, rejects: pl.DataFrame) -> None:
    assert dict(kept.schema) == ingest.SCHEMA
    assert dict(rejects.schema) == ingest.REJECTS_SCHEMA


# --- TSV ---------------------------------------------------------------------------------------------------------


def test_tsv_ids_and_image_id_derivation(tmp_path):
    path = write(tmp_path, "c.tsv", "\n".join([
        "900001_0\tA man riding a bicycle.",
        "900001_12\tA cyclist on a road.",
        "abc\tA solo caption.",
        "x_y\tNot a COCO id.",
        "1_2_3\tNested underscores.",
        "7_\tTrailing underscore.",
    ]) + "\n")
    kept, rejects = read_captions(path)
    assert_schemas(kept, rejects)
    assert rejects.is_empty()
    assert kept["caption_id"].to_list() == ["900001_0", "900001_12", "abc", "x_y", "1_2_3", "7_"]
    assert kept["image_id"].to_list() == ["900001", "900001", "abc", "x_y", "1_2", "7_"]
    assert kept["caption"].to_list()[0] == "A man riding a bicycle."


def test_tsv_caption_kept_byte_for_byte(tmp_path):
    """Only the id is stripped; the caption (after the tab) keeps its spaces and odd characters. Lines split on
    \\n / \\r\\n only, so a lone CR, form feeds, vertical tabs, NEL and U+2028 (Unicode White_Space) stay inside
    the caption."""
    captions = {
        "s_0": "  A dog with spaces around.  ",
        "s_1": "A dog on\ra couch.",
        "s_2": "Form\x0cfeed, vertical\x0btab",
        "s_3": "NEL\u0085 and line\u2028separator and caf\u00e9 \U0001F600",
        "s_4": "trailing space ",
    }
    body = b"".join(f" {cid} \t{cap}\r\n".encode("utf-8") for cid, cap in captions.items())
    kept, rejects = read_captions(write(tmp_path, "c.tsv", body))
    assert rejects.is_empty()
    assert dict(zip(kept["caption_id"], kept["caption"])) == captions
    for cap in kept["caption"]:
        assert not cap.endswith("\r")


def test_tsv_blank_lines_are_not_captions(tmp_path):
    kept, rejects = read_captions(write(tmp_path, "c.tsv", "\n\na_0\tone\n   \n\na_1\ttwo\n\n"))
    assert kept["caption_id"].to_list() == ["a_0", "a_1"]
    assert rejects.is_empty()


def test_tsv_rejects_reasons_and_accounting(tmp_path):
    lines = [
        b"r_0\tA kept caption.",           # 1
        b"r_1\t",                           # 2 empty
        b"r_2\t   \t ",                     # 3 whitespace only
        b"r_0\tA duplicate of r_0.",        # 4 duplicate -> first wins
        b"r_3\tcaf\xe9 au lait",            # 5 latin-1 byte
        b"",                                # 6 blank: not a caption
        b"r_4\tAnother kept caption.",      # 7
        b"r_5\t\xff\xfe broken",            # 8
        b"r_4\tsecond duplicate",           # 9
    ]
    path = write(tmp_path, "c.tsv", b"\n".join(lines) + b"\n")
    kept, rejects = read_captions(path)
    assert_schemas(kept, rejects)
    assert kept.height + rejects.height == 8  # every non-blank line, nothing lost
    assert dict(zip(kept["caption_id"], kept["caption"])) == {"r_0": "A kept caption.", "r_4": "Another kept caption."}
    assert set(rejects["file"]) == {str(path)}
    assert rejects.drop("file").rows() == [
        (2, "r_1", "", "empty_caption"),
        (3, "r_2", "   \t ", "empty_caption"),
        (4, "r_0", "A duplicate of r_0.", "duplicate_id"),
        (5, "r_3", "caf\ufffd au lait", "non_utf8"),
        (8, "r_5", "\ufffd\ufffd broken", "non_utf8"),
        (9, "r_4", "second duplicate", "duplicate_id"),
    ]


def test_tsv_duplicate_of_a_rejected_caption_is_kept(tmp_path):
    """'First wins' is among kept captions: an id first seen with an empty caption is not taken."""
    kept, rejects = read_captions(write(tmp_path, "c.tsv", "d_0\t \nd_0\treal caption\n"))
    assert kept.rows() == [("d_0", "d", "real caption")]
    assert rejects["reason"].to_list() == ["empty_caption"]


def test_tsv_non_utf8_caption_id_is_rejected(tmp_path):
    """Non-UTF-8 bytes in the id field must not be silently replaced: two different broken ids would collapse into
    one (U+FFFD) id and the second be mislabelled `duplicate_id`."""
    kept, rejects = read_captions(write(tmp_path, "c.tsv", b"a\xff_0\tA dog.\na\xfe_0\tA cat.\nb_0\tA cow.\n"))
    assert kept["caption_id"].to_list() == ["b_0"]
    assert rejects["reason"].to_list() == ["non_utf8", "non_utf8"]


# --- COCO JSON ---------------------------------------------------------------------------------------------------


def test_coco_json_caption_ids_follow_file_order_per_image(tmp_path):
    # Images interleaved, annotation ids descending: k must follow the order in the file, nothing else.
    annotations = [
        {"image_id": 2, "id": 50, "caption": "two a"},
        {"image_id": 1, "id": 40, "caption": "one a"},
        {"image_id": 2, "id": 30, "caption": "two b"},
        {"image_id": 3, "id": 25, "caption": "three a"},
        {"image_id": 1, "id": 20, "caption": "one b"},
        {"image_id": 2, "id": 10, "caption": "two c"},
    ]
    kept, rejects = read_captions(write(tmp_path, "captions.json", coco(annotations)))
    assert_schemas(kept, rejects)
    assert rejects.is_empty()
    assert kept.rows() == [
        ("2_0", "2", "two a"),
        ("1_0", "1", "one a"),
        ("2_1", "2", "two b"),
        ("3_0", "3", "three a"),
        ("1_1", "1", "one b"),
        ("2_2", "2", "two c"),
    ]


def test_coco_json_caption_kept_byte_for_byte(tmp_path):
    caps = ["  Leading and trailing spaces.  ", "Tab\tinside", "Newline\ninside", "caf\u00e9 \U0001F600 \u2028"]
    kept, _ = read_captions(write(tmp_path, "c.json", coco([{"image_id": 9, "caption": c} for c in caps])))
    assert kept["caption"].to_list() == caps
    # Escaped forms decode to the same text.
    raw = '{"annotations": [{"image_id": 9, "caption": "caf\\u00e9 \\ud83d\\ude00"}]}'
    kept, rejects = read_captions(write(tmp_path, "e.json", raw))
    assert kept["caption"].to_list() == ["caf\u00e9 \U0001F600"] and rejects.is_empty()


def test_coco_json_rejects_and_accounting(tmp_path):
    body = (
        b'{"images": [{"id": 1}, {"id": 2}],\n "annotations": [\n'
        b'  {"image_id": 1, "caption": "A kept caption."},\n'
        b'  {"image_id": 2, "caption": ""},\n'
        b'  {"image_id": 1, "caption": "   "},\n'
        b'  {"image_id": 2, "caption": "caf\xe9 latin-1"},\n'
        b'  {"image_id": 1, "caption": "Another kept one."}\n]}\n'
    )
    kept, rejects = read_captions(write(tmp_path, "c.json", body))
    assert_schemas(kept, rejects)
    assert kept.height + rejects.height == 5
    # k counts every caption of the image in file order, rejected ones included.
    assert kept.rows() == [("1_0", "1", "A kept caption."), ("1_2", "1", "Another kept one.")]
    assert rejects.select("caption_id", "caption", "reason").rows() == [
        ("2_0", "", "empty_caption"),
        ("1_1", "   ", "empty_caption"),
        ("2_1", "caf\ufffd latin-1", "non_utf8"),
    ]


def test_coco_json_lone_surrogate_escape_is_rejected_not_a_crash(tmp_path):
    """`\\ud800` is valid JSON syntax but not encodable text: a `non_utf8` reject (or MalformedInput), not a crash."""
    raw = '{"annotations": [{"image_id": 1, "caption": "bad \\ud800 text"}, {"image_id": 1, "caption": "fine"}]}'
    kept, rejects = read_captions(write(tmp_path, "c.json", raw))
    assert kept.rows() == [("1_1", "1", "fine")]
    assert rejects.select("caption_id", "reason").rows() == [("1_0", "non_utf8")]


def test_malformed_json_names_file_and_line(tmp_path):
    path = write(tmp_path, "broken.json",
                 '{\n "images": [],\n "annotations": [\n  {"image_id": 1 "caption": "x"}\n]}\n')
    with pytest.raises(MalformedInput) as err:
        read_captions(path)
    assert f"{path}:4:" in str(err.value)


@pytest.mark.parametrize("doc", ['[{"image_id": 1, "caption": "x"}]', '{"images": []}', '{"annotations": {}}'])
def test_json_that_is_not_coco_is_malformed(tmp_path, doc):
    path = write(tmp_path, "x.json", doc)
    with pytest.raises(MalformedInput) as err:
        read_captions(path)
    assert str(err.value).startswith(f"{path}:1:") and "\n" not in str(err.value)


def test_coco_json_non_utf8_image_id_is_rejected_not_a_crash(tmp_path):
    """Non-UTF-8 bytes in a string `image_id` reach the id as surrogates; they must become a `non_utf8` reject."""
    body = b'{"annotations": [{"image_id": "ab\xff", "caption": "A dog."}, {"image_id": "cd", "caption": "A cat."}]}'
    kept, rejects = read_captions(write(tmp_path, "c.json", body))
    assert kept.rows() == [("cd_0", "cd", "A cat.")]
    assert rejects["reason"].to_list() == ["non_utf8"]


# --- one bad record is one reject; every good record is kept -----------------------------------------------------


def assert_accounted(kept: pl.DataFrame, rejects: pl.DataFrame, records: int) -> None:
    assert_schemas(kept, rejects)
    assert kept.height + rejects.height == records
    ids = kept["caption_id"].to_list()
    assert len(set(ids)) == len(ids) and all(i and i == i.strip() and "\ufeff" not in i for i in ids)


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_tsv_utf8_bom_is_not_part_of_the_first_id(tmp_path, newline):
    path = write(tmp_path, "c.tsv", b"\xef\xbb\xbf" + newline.join(["900001_0\tA dog.", "900001_1\tA cat."]).encode())
    kept, rejects = read_captions(path)
    assert_accounted(kept, rejects, 2)
    assert kept.rows() == [("900001_0", "900001", "A dog."), ("900001_1", "900001", "A cat.")]


def test_json_utf8_bom_is_stripped(tmp_path):
    path = write(tmp_path, "c.json", b"\xef\xbb\xbf" + coco([{"image_id": 7, "caption": "A dog."}]).encode())
    kept, rejects = read_captions(path)
    assert kept.rows() == [("7_0", "7", "A dog.")] and rejects.is_empty()


def test_tsv_ids_are_stripped_and_empty_id_is_rejected(tmp_path):
    path = write(tmp_path, "c.tsv", "\tno id at all\n a_0 \tgood one\n \u00a0 \twhitespace id\na_0\tsame id, stripped\n"
                                    "a_1\tgood two\n")
    kept, rejects = read_captions(path)
    assert_accounted(kept, rejects, 5)
    assert kept.rows() == [("a_0", "a", "good one"), ("a_1", "a", "good two")]
    assert rejects.rows() == [
        (str(path), 1, "", "no id at all", "empty_id"),
        (str(path), 3, "", "whitespace id", "empty_id"),
        (str(path), 4, "a_0", "same id, stripped", "duplicate_id"),
    ]


def test_tsv_line_without_tab_is_a_reject_between_good_lines(tmp_path):
    path = write(tmp_path, "c.tsv", b"a_0\tfirst\n\nthis line has no tab\nb\xff no tab, not utf-8\na_1\tlast\n")
    kept, rejects = read_captions(path)
    assert_accounted(kept, rejects, 4)
    assert kept["caption_id"].to_list() == ["a_0", "a_1"]
    assert rejects.rows() == [
        (str(path), 3, "this line has no tab", None, "no_tab"),
        (str(path), 4, "b\ufffd no tab, not utf-8", None, "no_tab"),
    ]


def test_coco_bad_image_ids_are_rejects_beside_good_ones(tmp_path):
    annotations = [
        {"image_id": 1, "caption": "int id"},          # 1
        {"image_id": None, "caption": "null"},         # 2
        {"image_id": [1, 2], "caption": "list"},       # 3
        {"image_id": True, "caption": "bool"},         # 4
        {"image_id": 1.0, "caption": "float"},         # 5
        {"image_id": "", "caption": "empty string"},   # 6
        {"image_id": "  ", "caption": "blank string"}, # 7
        {"image_id": {"id": 1}, "caption": "dict"},    # 8
        {"image_id": " x9 ", "caption": "str id"},     # 9
        {"image_id": 1, "caption": "int id again"},    # 10
    ]
    path = write(tmp_path, "c.json", json.dumps({"annotations": annotations}))
    kept, rejects = read_captions(path)
    assert_accounted(kept, rejects, 10)
    assert kept.rows() == [("1_0", "1", "int id"), ("x9_0", "x9", "str id"), ("1_1", "1", "int id again")]
    assert rejects.rows() == [(str(path), line, None, annotations[line - 1]["caption"], "bad_image_id")
                              for line in range(2, 9)]


def test_coco_bad_annotations_are_rejects_beside_good_ones(tmp_path):
    annotations = [
        {"image_id": 1, "caption": "good"},  # 1
        {"image_id": 1, "caption": 5},       # 2 numeric caption: 1_1 is used up
        {"image_id": 2},                     # 3 missing caption
        {"caption": "no image id"},          # 4
        "a string",                          # 5
        [1, "x"],                            # 6
        None,                                # 7
        {"image_id": 1, "caption": None},    # 8
        {"image_id": 1, "caption": "good"},  # 9 same text, its own id
    ]
    path = write(tmp_path, "c.json", json.dumps({"annotations": annotations}))
    kept, rejects = read_captions(path)
    assert_accounted(kept, rejects, 9)
    assert kept.rows() == [("1_0", "1", "good"), ("1_3", "1", "good")]
    assert rejects.rows() == [
        (str(path), 2, "1_1", None, "caption_not_string"),
        (str(path), 3, "2_0", None, "caption_not_string"),
        (str(path), 4, None, "no image id", "missing_image_id"),
        (str(path), 5, None, None, "not_an_object"),
        (str(path), 6, None, None, "not_an_object"),
        (str(path), 7, None, None, "not_an_object"),
        (str(path), 8, "1_2", None, "caption_not_string"),
    ]


def test_file_column_is_the_path_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "c.tsv", "\tx\n")
    assert read_captions("./c.tsv")[1]["file"].to_list() == ["./c.tsv"]


# --- whole-file errors and empty files ---------------------------------------------------------------------------


@pytest.mark.parametrize("body", [b"a_0\tnot json\n", b"\x00\xff\xfe binary", b'{"annotations": [', b"[" * 100_000,
                                  b'{"annotations": [{"image_id": ' + b"9" * 5000 + b', "caption": "x"}]}'])
def test_file_that_is_not_json_is_one_line_malformed_input(tmp_path, body):
    path = write(tmp_path, "captions.json", body)
    with pytest.raises(MalformedInput) as err:
        read_captions(path)
    message = str(err.value)
    assert message.startswith(f"{path}:") and "invalid JSON" in message and "\n" not in message


@pytest.mark.parametrize("name", ["c.tsv", "c.json"])
@pytest.mark.parametrize("body", [b"", b"\xef\xbb\xbf", b"\n \n"])
def test_empty_file_is_one_line_malformed_input(tmp_path, name, body):
    """Nothing to ingest is a mistake (a truncated copy, the wrong file), not a zero-row dataset."""
    path = write(tmp_path, name, body)
    with pytest.raises(MalformedInput) as err:
        read_captions(path)
    assert str(err.value) == f"{path}: no captions (empty file)"


@pytest.mark.parametrize("body", [b"caption_id\tcaption\n", b"\xef\xbb\xbfcaption_id\tcaption\r\n\n"])
def test_tsv_with_only_its_header_is_one_line_malformed_input(tmp_path, body):
    path = write(tmp_path, "c.tsv", body)
    with pytest.raises(MalformedInput, match="no captions \\(only a header line\\)"):
        read_captions(path)


def test_coco_json_without_annotations_is_zero_rows(tmp_path):
    kept, rejects = read_captions(write(tmp_path, "c.json", coco([], images=[])))
    assert_schemas(kept, rejects)
    assert kept.is_empty() and rejects.is_empty()


# --- the TSV header ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("header", ["caption_id\tcaption", "\ufeffcaption_id\tcaption"])
def test_tsv_header_on_the_first_line_is_skipped(tmp_path, header):
    path = write(tmp_path, "c.tsv", f"{header}\r\na_0\tA dog.\n\tno id\n")
    kept, rejects = read_captions(path)
    assert kept.rows() == [("a_0", "a", "A dog.")]
    assert rejects.select("line", "reason").rows() == [(3, "empty_id")]  # line numbers still count the header


@pytest.mark.parametrize("body", [
    pytest.param("a_0\tA dog.\ncaption_id\tcaption\n", id="not-the-first-line"),
    pytest.param("\ncaption_id\tcaption\na_0\tA dog.\n", id="after-a-blank-line"),
    pytest.param("Caption_ID\tcaption\na_0\tA dog.\n", id="other-case"),
    pytest.param("caption_id\tcaption \na_0\tA dog.\n", id="trailing-space"),
])
def test_a_header_like_line_anywhere_else_is_a_caption(tmp_path, body):
    kept, _ = read_captions(write(tmp_path, "c.tsv", body))
    assert kept.height == 2


@pytest.mark.parametrize(("line", "reason"), [
    (b"c_0\tA bird\x00 on a branch.", "control_character"),  # NUL
    (b"c_0\tA \x1b[31mred\x1b[0m car.", "control_character"),  # a terminal escape
    (b"c_0\tA cow\x7f.", "control_character"),  # DEL
    (b"c_0\tA cow\x1cin a field\x1f.", "control_character"),  # information separators: Python's isspace, not Unicode's
    ("c_0\tA \u202ecow\u202c.".encode(), "control_character"),  # a bidi override
    ("c_0\tA cat\u2067 on a mat.".encode(), "control_character"),  # a bidi isolate
    (b"c_0\tA horse\tcoco-val2017", "extra_tab"),  # a third column
    (b"c\x00_0\tA pig.", "unprintable_id"),
    ("c\u202e_0\tA pig.".encode(), "unprintable_id"),
    ("c\u200b_0\tA pig.".encode(), "unprintable_id"),  # zero-width space
    ("c\u00a0d_0\tA pig.".encode(), "unprintable_id"),  # a no-break space inside
    (b"c\x1b_0\tA pig.", "unprintable_id"),
])
def test_tsv_controls_in_a_caption_or_an_id_are_rejects_beside_good_lines(tmp_path, line, reason):
    """What would reach a terminal, a prompt, a file name or the gallery as an invisible or active character is a
    reject with its reason; the lines around it are kept."""
    kept, rejects = read_captions(write(tmp_path, "c.tsv", b"a_0\tA dog.\n" + line + b"\nb_0\tA cat.\n"))
    assert kept["caption_id"].to_list() == ["a_0", "b_0"]
    assert rejects.select("line", "reason").rows() == [(2, reason)]


def test_a_bom_at_any_line_start_is_not_part_of_an_id_and_soft_hyphens_and_emoji_are_text(tmp_path):
    """A file made by concatenating BOM-led files keeps every id as written; format characters inside words (a soft
    hyphen, an emoji joiner) are text."""
    body = "\ufeffa_0\tA dog.\n\ufeffb_0\tA caf\u00e9 with a soft\u00adhyphen.\nc_0\tA \U0001F468\u200d\U0001F373.\n"
    kept, rejects = read_captions(write(tmp_path, "c.tsv", body))
    assert rejects.is_empty() and kept["caption_id"].to_list() == ["a_0", "b_0", "c_0"]
    assert kept["image_id"].to_list() == ["a", "b", "c"]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_a_utf16_tsv_with_its_bom_is_read_as_text(tmp_path, encoding):
    """A spreadsheet's "Unicode text" export (UTF-16 with a byte order mark) reads as its UTF-8 twin."""
    text = "caption_id\tcaption\r\na_0\tA caf\u00e9 by a dog.\r\nb_0\tA cat.\r\n"
    data = text.encode(encoding) if encoding == "utf-16" else b"\xfe\xff" + text.encode(encoding)
    kept, rejects = read_captions(write(tmp_path, "c.tsv", data))
    assert rejects.is_empty() and kept["caption"].to_list() == ["A caf\u00e9 by a dog.", "A cat."]


@pytest.mark.parametrize("body", [b"PAR1\x15\x04\x15\x10\x00\x00\x08\x1c\n\xff\xfe\x00\tx\tyPAR1",
                                  '{"annotations": [{"image_id": 1, "caption": "A dog."}]}\n'.encode(),
                                  b"A dog on a couch.\nA cat on a mat.\n"])
def test_a_file_with_no_caption_line_is_one_line_malformed_input(tmp_path, body):
    """A parquet file, COCO JSON or bare captions given as the TSV: one error naming the file, not a reject per line."""
    with pytest.raises(MalformedInput, match="c.tsv: none of its .* lines is `caption_id<TAB>caption`"):
        read_captions(write(tmp_path, "c.tsv", body))
