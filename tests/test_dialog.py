"""Dialog history bounds, and cutting a reply to what the user heard."""

from __future__ import annotations

import pytest

from voxline.dialog import DialogHistory, Message, SpokenClause, heard_text

CLAUSES = [SpokenClause("The capital of France is Paris.", 2000.0),
           SpokenClause("It is on the Seine.", 1000.0),
           SpokenClause("Many people visit it.", 1200.0)]


@pytest.mark.parametrize(("played_ms", "heard"), [
    (0.0, ""),
    (100.0, ""),  # less than one word's share of the first clause
    (1000.0, "The capital of"),  # half of six words
    (2000.0, "The capital of France is Paris."),
    (2500.0, "The capital of France is Paris. It is"),
    (3000.0, "The capital of France is Paris. It is on the Seine."),
    (99_999.0, "The capital of France is Paris. It is on the Seine. Many people visit it."),
])
def test_heard_text_follows_the_audio_position(played_ms, heard):
    assert heard_text(CLAUSES, played_ms) == heard


def test_heard_text_of_nothing_synthesized_is_empty():
    assert heard_text([], 5000.0) == ""


def test_history_renders_exchanges_then_the_new_turn():
    history = DialogHistory()
    history.add("hi", "Hello there.")
    assert history.messages("how are you") == [
        Message("user", "hi"), Message("assistant", "Hello there."), Message("user", "how are you"),
    ]


def test_a_reply_heard_not_at_all_leaves_no_assistant_message():
    history = DialogHistory()
    history.add("tell me a story", "")
    assert history.messages("never mind") == [Message("user", "tell me a story"), Message("user", "never mind")]


def test_history_keeps_the_latest_exchanges():
    history = DialogHistory(max_exchanges=2)
    for i in range(5):
        history.add(f"q{i}", f"a{i}")
    assert [e.user for e in history.exchanges] == ["q3", "q4"]


def test_history_drops_old_exchanges_over_the_character_budget_but_keeps_the_last():
    history = DialogHistory(max_exchanges=10, max_chars=50)
    history.add("short", "one")
    history.add("x" * 30, "y" * 30)
    assert [e.user for e in history.exchanges] == ["x" * 30]


def test_amend_last_replaces_only_the_reply():
    history = DialogHistory()
    history.add("q", "a long answer")
    history.amend_last("a long")
    assert history.exchanges[-1].user == "q"
    assert history.exchanges[-1].assistant == "a long"
