"""The decoding lexicon (`voxline.intents.lexicon`) walked by the browser's `CommandGraph` (node), on the real
built-in grammar: every command the engine matches is a sentence of the graph; questions are not."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from voxline.intents import builtin_grammar, recognize
from voxline.intents.lexicon import (
    LEXICON_FORMAT, decoding_lexicon, duration_forms, english_words, number_forms,
)
from voxline.intents.numbers import parse_duration, parse_number

WEB = Path(__file__).resolve().parents[1] / "web" / "voxline"

COMMANDS = [
    "pause the music", "stop", "mute", "next", "skip this song", "turn the volume down a little",
    "set a timer for ten minutes", "set a timer for 10 minutes", "set a timer for an hour and a half",
    "volume to thirty five percent", "volume to 35 %", "switch off the kitchen lights", "turn on the lights",
    "what time is it", "play some jazz", "please pause the music", "pause the music please", "cancel the timer",
]
NOT_COMMANDS = ["what is the capital of france", "tell me a joke", "how tall is mount everest"]


def _walk(lexicon: dict, sentences: list[str]) -> list[str]:
    node = shutil.which("node")
    assert node, "node is required (the README's setup installs the project on Node 20)"
    script = (
        f"import {{ CommandGraph }} from {json.dumps((WEB / 'grammar-decode.js').as_uri())};\n"
        "import fs from 'fs';\n"
        "const { lexicon, sentences } = JSON.parse(fs.readFileSync(0, 'utf8'));\n"
        "const graph = new CommandGraph(lexicon);\n"
        "const out = sentences.map((text) => {\n"
        "  let state = graph.start();\n"
        "  for (const token of text.split(/(?= )/)) { state = graph.feed(state, token); if (!state) return 'refused'; }\n"
        "  return graph.complete(state) ? 'complete' : 'partial';\n"
        "});\n"
        "console.log(JSON.stringify(out));\n"
    )
    result = subprocess.run([node, "--input-type=module", "-e", script], input=json.dumps(
        {"lexicon": lexicon, "sentences": sentences}), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def lexicon() -> dict:
    return decoding_lexicon(builtin_grammar(), "en")


def test_the_lexicon_has_the_layout_the_browser_reads(lexicon):
    assert lexicon["format"] == LEXICON_FORMAT
    assert lexicon["version"] == builtin_grammar().version
    assert 0 <= lexicon["start"] < len(lexicon["nodes"]) and 0 <= lexicon["tail"] < len(lexicon["nodes"])
    assert len(json.dumps(lexicon)) < 200_000, "the graph travels to a worker on every page load"
    assert ["and"] in lexicon["misheard_starts"]["pause"] and ["in"] in lexicon["misheard_starts"]["mute"]


def test_nodes_with_the_same_future_are_stored_once_and_the_graph_reads_the_same(monkeypatch):
    from voxline.intents import lexicon as module
    from voxline.intents.expression import SlotRef

    grammar = builtin_grammar()
    merged = decoding_lexicon(grammar, "en")
    monkeypatch.setattr(module, "_merged", lambda nodes, keep: (nodes, list(range(len(nodes)))))
    whole = decoding_lexicon(grammar, "en")
    assert len(merged["nodes"]) * 10 < len(whole["nodes"])
    # Sentences of every template (slot-free expansions, every 7th), their prefixes and a few strays.
    language = grammar.language("en")
    expansions = [e for t in language.templates for e in t.expansions if not any(isinstance(x, SlotRef) for x in e)]
    sentences = [" ".join(e) for e in expansions[::7]] + COMMANDS + NOT_COMMANDS
    sentences += [" ".join(s.split()[:k]) for s in sentences[::3] for k in range(1, len(s.split()))]
    sentences += [f"{s} please" for s in COMMANDS] + [f"okay {s}" for s in COMMANDS] + ["music off the", "the the"]
    assert len(sentences) > 300
    assert _walk(merged, sentences) == _walk(whole, sentences)


def test_every_command_the_engine_matches_is_a_sentence_of_the_graph(lexicon):
    grammar = builtin_grammar()
    assert all(recognize(text, grammar) is not None for text in COMMANDS)
    assert _walk(lexicon, COMMANDS) == ["complete"] * len(COMMANDS)


def test_a_word_for_the_listener_may_stand_at_either_edge_of_a_command(lexicon):
    sentences = ["turn the volume down a little love", "guys pause the music", "turn the volume down a little dude"]
    assert _walk(lexicon, sentences) == ["complete"] * len(sentences)
    assert _walk(lexicon, ["pause the music love it"]) != ["complete"]


def test_questions_are_refused_or_left_incomplete(lexicon):
    assert "complete" not in _walk(lexicon, NOT_COMMANDS)


def test_a_prefix_of_a_command_is_partial(lexicon):
    assert _walk(lexicon, ["turn the volume", "set a timer for"]) == ["partial", "partial"]


def test_number_forms_are_read_back_by_the_engine_and_cover_digits_and_words():
    forms = number_forms(0, 100, "en")
    assert ("35",) in forms and ("thirty", "five") in forms and ("a", "hundred") in forms
    assert all(parse_number(form, "en") is not None for form in forms)
    assert english_words(105) == ["one", "hundred", "and", "five"]


def test_duration_forms_are_read_back_within_the_range():
    forms = duration_forms(1, 600, "en")
    assert ("ten", "minutes") in forms and ("90", "seconds") in forms
    assert ("an", "hour") not in forms, "3600 s is outside 1..600"
    assert all(1 <= parse_duration(form, "en") <= 600 for form in forms)


def test_the_prompt_commands_are_the_skill_authors_first_sentences(lexicon):
    prompt = [" ".join(words) for words in lexicon["prompt"]]
    grammar = builtin_grammar()
    language = grammar.language("en")
    # One of each intent's first template first (intents with a slot in every sentence have none), in skill order.
    slot_free = [name for name, intent in language.intents.items()
                 if any(all(isinstance(x, str) for x in e) for e in intent.templates[0].expansions)]
    firsts = [recognize(text, grammar).intent for text in prompt[: len(slot_free)]]
    assert firsts == slot_free
    assert "stop the music" in prompt and "cancel the timer" in prompt and "stop music" not in prompt
    assert len(set(prompt)) == len(prompt)
    assert all(words[-1] not in ("the", "a", "an") for words in lexicon["prompt"])
    assert all(recognize(text, grammar) is not None for text in prompt)
