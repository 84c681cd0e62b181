"""ClauseSplitter: where a streamed reply may be cut for TTS, and where it must never be."""

from __future__ import annotations

import re

import pytest

from voxline.clauses import ClauseSplitter, speakable


def split_all(text: str, chunks: list[str] | None = None, **kwargs) -> list[str]:
    splitter = ClauseSplitter(**kwargs)
    clauses: list[str] = []
    for chunk in chunks if chunks is not None else [text]:
        clauses += splitter.feed(chunk)
    return clauses + splitter.flush()


def token_like(text: str) -> list[str]:
    """Chunks shaped like BPE tokens: a word with its leading space, punctuation and digits on their own."""
    chunks = re.findall(r" ?[^\W\d_]+| ?\d|[^\w\s]|\s", text)
    assert "".join(chunks) == text
    return chunks


SPLITS = [
    # plain sentence ends
    ("Sure. The capital of France is Paris.", ["Sure.", "The capital of France is Paris."]),
    ("Really? Yes! Good.", ["Really?", "Yes!", "Good."]),
    ("First this; then that: done.", ["First this;", "then that:", "done."]),
    ("What?! No way.", ["What?!", "No way."]),
    ("Line one\nLine two", ["Line one", "Line two"]),
    # closing quotes and brackets stay with their clause
    ('He said "stop." Then he left.', ['He said "stop."', "Then he left."]),
    ("It is big (really big.) Yes.", ["It is big (really big.)", "Yes."]),
    # commas: only once the clause is long enough
    ("Well, I think so.", ["Well, I think so."]),
    ("The weather today is mild and dry, with a breeze later.",
     ["The weather today is mild and dry,", "with a breeze later."]),
    # numbers never split
    ("Pi is about 3.14 and e is 2.72 today.", ["Pi is about 3.14 and e is 2.72 today."]),
    ("It costs 1,000 dollars or 2,500 euros in the shop.", ["It costs 1,000 dollars or 2,500 euros in the shop."]),
    ("Meet me at 10:30 tomorrow.", ["Meet me at 10:30 tomorrow."]),
    ("Version 1.2.3 is out.", ["Version 1.2.3 is out."]),
    ("It costs $3. That is cheap.", ["It costs $3.", "That is cheap."]),
    # abbreviations and initials
    ("Dr. Smith and Mr. Jones met Mrs. Brown.", ["Dr. Smith and Mr. Jones met Mrs. Brown."]),
    ("Bring fruit, e.g. apples, i.e. red ones.", ["Bring fruit, e.g. apples, i.e. red ones."]),
    ("The U.S. economy grew.", ["The U.S. economy grew."]),
    ("Wake up at 7 a.m. and rest.", ["Wake up at 7 a.m. and rest."]),
    ("Ask J. R. R. Tolkien.", ["Ask J. R. R. Tolkien."]),
    ("Cats, dogs, etc. are pets.", ["Cats, dogs, etc. are pets."]),
    ("See No. 5 on the list.", ["See No. 5 on the list."]),
    # ellipses
    ("Well... I am not sure.", ["Well... I am not sure."]),
    ("Hmm… maybe later.", ["Hmm… maybe later."]),
    # list numbering
    ("1. Preheat the oven. 2. Bake it.", ["1. Preheat the oven.", "2. Bake it."]),
    # CJK full stops need no space
    ("今天很好。明天下雨！", ["今天很好。", "明天下雨！"]),
    # nothing speakable is dropped, the rest is flushed
    ("...", []),
    ("", []),
    ("No final mark", ["No final mark"]),
]


@pytest.mark.parametrize(("text", "expected"), SPLITS, ids=[t[:30] or "empty" for t, _ in SPLITS])
def test_clauses(text, expected):
    assert split_all(text) == expected


@pytest.mark.parametrize(("text", "expected"), SPLITS, ids=[t[:30] or "empty" for t, _ in SPLITS])
def test_clauses_do_not_depend_on_how_the_text_is_chunked(text, expected):
    assert split_all(text, list(text)) == expected
    assert split_all(text, token_like(text)) == expected
    for cut in range(1, len(text)):
        assert split_all(text, [text[:cut], text[cut:]]) == expected


def test_a_clause_is_released_as_soon_as_its_end_is_certain():
    splitter = ClauseSplitter()
    assert splitter.feed("Sure") == []
    assert splitter.feed(".") == []  # could still become "Sure.com" or an ellipsis
    assert splitter.feed(" The") == ["Sure."]
    assert splitter.feed(" answer is 3") == []
    assert splitter.feed(".") == []
    assert splitter.feed("14") == []  # a decimal, not a sentence end
    assert splitter.feed(".") == []
    assert splitter.flush() == ["The answer is 3.14."]


def test_min_comma_words_is_configurable():
    assert split_all("Yes, of course.", min_comma_words=1) == ["Yes,", "of course."]
    assert split_all("Yes, of course.", min_comma_words=2) == ["Yes, of course."]


def test_flush_resets_the_splitter():
    splitter = ClauseSplitter()
    splitter.feed("Half a")
    assert splitter.flush() == ["Half a"]
    assert splitter.flush() == []
    assert splitter.feed("New one. ") == ["New one."]


@pytest.mark.parametrize(("raw", "spoken"), [
    ("**Paris** is the capital.", "Paris is the capital."),
    ("# Heading", "Heading"),
    ("- first item", "first item"),
    ("See [the docs](http://example.com) now.", "See the docs now."),
    ("Use `ls` here.", "Use ls here."),
    ("3 - 2 = 1", "3 - 2 = 1"),
])
def test_speakable_removes_markdown_only(raw, spoken):
    assert speakable(raw) == spoken


FIRST_CLAUSE_CUTS = [
    ("The moon is approximately 384,400 kilometers away.", ["The moon is approximately", "384,400 kilometers away."]),
    # the cut moves past words a fragment cannot end on
    ("I think that the answer is forty two.", ["I think that the answer", "is forty two."]),
    ("Tell me about the history of the town.", ["Tell me about the history", "of the town."]),
    ("I would ask Dr. Smith about it.", ["I would ask Dr. Smith", "about it."]),
    # a mark within the first words wins, and only the first clause is cut by count
    ("Sure. The capital of that country is Paris, I believe.",
     ["Sure.", "The capital of that country is Paris,", "I believe."]),
    # too short to cut: the whole sentence
    ("It is Paris.", ["It is Paris."]),
    ("Maybe in the morning", ["Maybe in the morning"]),
]


@pytest.mark.parametrize(("text", "expected"), FIRST_CLAUSE_CUTS, ids=[t[:30] for t, _ in FIRST_CLAUSE_CUTS])
def test_the_first_clause_can_be_cut_by_word_count(text, expected):
    assert split_all(text, first_clause_max_words=4) == expected
    assert split_all(text, token_like(text), first_clause_max_words=4) == expected
    for cut in range(1, len(text)):
        assert split_all(text, [text[:cut], text[cut:]], first_clause_max_words=4) == expected


def test_the_word_cut_waits_until_the_word_is_complete():
    splitter = ClauseSplitter(first_clause_max_words=2)
    assert splitter.feed("Paris is") == []
    assert splitter.feed(" lov") == []  # "is" is weak: the cut moves to the next word, not complete yet
    assert splitter.feed("ely") == []
    assert splitter.feed(" in") == ["Paris is lovely"]


def test_a_weak_word_run_is_cut_after_a_bounded_extension():
    assert split_all("It is the of the in a at the end.", first_clause_max_words=1)[0] == "It is the of"


def test_the_word_limit_applies_again_after_flush():
    splitter = ClauseSplitter(first_clause_max_words=3)
    assert splitter.feed("One two three four ") == ["One two three"]
    splitter.flush()
    assert splitter.feed("Five six seven eight ") == ["Five six seven"]
