"""serl.data.jsonl: the JSON Lines reader every input file goes through."""

import pytest

from serl.data.jsonl import jsonl_objects


class Bad(ValueError):
    pass


def test_objects_with_line_numbers_blank_lines_and_crlf(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"a": 1}\r\n\n  \n{"a": 2}\n', newline="")
    assert list(jsonl_objects(p, Bad)) == [(1, {"a": 1}), (4, {"a": 2})]


def test_unicode_line_separators_inside_strings_are_text(tmp_path):
    # U+2028 and U+0085 end a line for str.splitlines(), but not in JSON Lines
    rows = [(1, {"q": "one\u2028two\x85three"}), (2, {"q": "x"})]
    p = tmp_path / "x.jsonl"
    p.write_text('{"q": "one\u2028two\x85three"}\n{"q": "x"}\n', encoding="utf-8")
    assert list(jsonl_objects(p, Bad)) == rows


@pytest.mark.parametrize(
    "text,msg",
    [
        ('{"a": 1}\n{oops\n', "x.jsonl:2: not valid JSON"),
        ("[1, 2]\n", "x.jsonl:1: expected a JSON object, got list"),
    ],
)
def test_errors_name_file_and_line_in_the_callers_class(tmp_path, text, msg):
    p = tmp_path / "x.jsonl"
    p.write_text(text)
    with pytest.raises(Bad, match=msg):
        list(jsonl_objects(p, Bad))


def test_text_given_is_read_instead_of_the_file(tmp_path):
    assert list(jsonl_objects(tmp_path / "never-read.jsonl", Bad, text='{"a": 1}')) == [(1, {"a": 1})]


@pytest.mark.parametrize(
    "data,line,col,byte",
    [
        (b'{"a": "\xff"}\n', 1, 8, "ff"),
        (b'{"a": 1}\n{"a": 2}\n\n{"b": "caf\xc3\xa9 \xe9t\xc3\xa9"}\n', 4, 14, "e9"),  # a Latin-1 byte after real UTF-8
        (b'{"a": 1}\r\n{"a": "\xc3"}\n', 2, 8, "c3"),  # a multi-byte character cut short
    ],
)
def test_not_utf8_names_the_line(tmp_path, data, line, col, byte):
    p = tmp_path / "x.jsonl"
    p.write_bytes(data)
    with pytest.raises(Bad) as e:
        list(jsonl_objects(p, Bad))
    assert str(e.value) == (
        f"{p}:{line}: not UTF-8 text (byte 0x{byte} at byte {col} of the line; save the file as UTF-8)"
    )
