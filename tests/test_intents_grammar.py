"""Skill files: compiling, merging user files, versions, and the checks that keep a grammar precise."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from voxline.intents import (
    Grammar,
    GrammarError,
    builtin_grammar,
    builtin_skill_paths,
    compile_documents,
    compile_yaml,
    load_grammar,
    recognize,
)
from voxline.intents.grammar import ENGINE_REVISION, GRAMMAR_FORMAT, canonical_json, grammar_version

DESIGN_INTENTS = {
    "media.play", "media.pause", "media.resume", "media.stop", "media.next", "media.previous",
    "media.volume_up", "media.volume_down", "media.volume_set", "media.mute", "media.unmute",
    "timer.set", "timer.cancel", "clock.time", "lights.on", "lights.off", "assistant.stop",
}


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def small(**intents) -> dict:
    return {"language": "en", "intents": {name: {"sentences": s} for name, s in intents.items()}}


def test_builtin_pack_has_exactly_the_design_intents_in_each_language():
    grammar = builtin_grammar()
    assert set(grammar.languages) == {"en", "zh"}
    for language in grammar.languages.values():
        assert set(language.intents) == DESIGN_INTENTS


def test_builtin_required_slots():
    en = builtin_grammar().language("en")
    assert en.intents["timer.set"].requires == {"seconds"}
    assert en.intents["media.volume_set"].requires == {"level"}
    assert en.intents["media.play"].slot_names == {"query"}
    assert en.intents["lights.on"].slot_names == en.intents["lights.off"].slot_names == {"area"}


def test_compiled_form_is_json_and_round_trips():
    compiled = compile_yaml(builtin_skill_paths())
    assert json.loads(json.dumps(compiled)) == compiled
    assert compiled["format"] == GRAMMAR_FORMAT and compiled["engine"] == ENGINE_REVISION
    grammar = Grammar.from_dict(compiled)
    assert grammar.to_dict() == compiled
    assert Grammar.from_dict(grammar.to_dict()).version == grammar.version


def test_version_is_16_hex_of_the_canonical_json():
    grammar = builtin_grammar()
    assert len(grammar.version) == 16 and int(grammar.version, 16) >= 0
    assert grammar.version == grammar_version(grammar.to_dict())
    import hashlib

    digest = hashlib.sha256(canonical_json(grammar.to_dict()).encode()).hexdigest()
    assert grammar.version == digest[:16]


def test_version_changes_with_the_grammar():
    base = compile_documents([small(**{"a.b": ["hello"]})])
    changed = compile_documents([small(**{"a.b": ["hello there"]})])
    assert grammar_version(base) != grammar_version(changed)


def test_loading_order_of_disjoint_files_does_not_matter(tmp_path):
    first = write(tmp_path, "first.yaml", "language: en\nintents:\n  x.one: {sentences: [alpha]}\n")
    second = write(tmp_path, "second.yaml", "language: en\nintents:\n  x.two: {sentences: [beta]}\n")
    forward, backward = load_grammar([first, second]), load_grammar([second, first])
    assert forward.version == backward.version
    assert recognize("alpha", forward) == recognize("alpha", backward)


def test_key_order_inside_a_file_does_not_matter():
    one = {"language": "en", "intents": {"x.a": {"sentences": ["a"]}, "x.b": {"sentences": ["b"]}}}
    two = {"intents": {"x.b": {"sentences": ["b"]}, "x.a": {"sentences": ["a"]}}, "language": "en"}
    assert compile_documents([one]) == compile_documents([two])


def test_user_file_adds_an_intent_and_extends_builtin_ones(tmp_path):
    user = write(
        tmp_path,
        "mine.yaml",
        """
        language: en
        lists:
          area:
            values:
              - value: attic
                synonyms: [attic, loft]
              - value: kitchen
                synonyms: [cookhouse]
        intents:
          home.coffee:
            confirm: Brewing.
            sentences: ["(make|brew) [me] [a] coffee"]
          media.pause:
            sentences: ["hold it"]
        """,
    )
    grammar = load_grammar([*builtin_skill_paths(), user])
    coffee = recognize("brew me a coffee", grammar)
    assert coffee is not None and coffee.intent == "home.coffee" and coffee.confirmation == "Brewing."
    assert recognize("hold it", grammar).intent == "media.pause"
    assert recognize("pause the music", grammar).intent == "media.pause"  # the built-in sentences stay
    attic = recognize("turn on the loft lights", grammar)
    assert (attic.intent, attic.slots) == ("lights.on", {"area": "attic"})
    assert recognize("turn on the cookhouse lights", grammar).slots == {"area": "kitchen"}
    assert recognize("turn on the kitchen lights", grammar).slots == {"area": "kitchen"}
    assert grammar.version != builtin_grammar().version


def test_user_file_can_replace_an_intent(tmp_path):
    user = write(tmp_path, "mine.yaml", "language: en\nintents:\n  media.pause: {replace: true, sentences: [freeze frame]}\n")
    grammar = load_grammar([*builtin_skill_paths(), user])
    assert recognize("freeze frame", grammar).intent == "media.pause"
    assert recognize("pause the music", grammar) is None


def test_user_file_in_json_needs_no_yaml(tmp_path):
    user = tmp_path / "mine.json"
    user.write_text(json.dumps(small(**{"home.coffee": ["coffee time"]})), encoding="utf-8")
    grammar = load_grammar([user])
    assert recognize("coffee time", grammar).intent == "home.coffee"


def test_later_confirmation_and_rule_win():
    grammar = Grammar.from_dict(
        compile_documents(
            [
                {"language": "en", "rules": {"w": "hi"}, "intents": {"x.y": {"sentences": ["<w>"], "confirm": "One."}}},
                {"language": "en", "rules": {"w": "hello"}, "intents": {"x.y": {"confirm": "Two."}}},
            ]
        )
    )
    assert recognize("hi", grammar) is None
    assert recognize("hello", grammar).confirmation == "Two."


def test_template_ids_count_sentences_in_load_order():
    grammar = Grammar.from_dict(compile_documents([small(**{"x.y": ["a", "b"]}), small(**{"x.y": ["c"]})]))
    assert [t.id for t in grammar.language("en").templates] == ["x.y#0", "x.y#1", "x.y#2"]
    assert recognize("c", grammar).template == "x.y#2"


def test_regional_language_tags_fall_back():
    grammar = builtin_grammar()
    assert grammar.language("en-GB") is grammar.language("en")
    assert grammar.language("zh_CN") is grammar.language("zh")
    with pytest.raises(GrammarError, match="no grammar for language"):
        grammar.language("fr")


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"intents": {}}, "'language' is required"),
        ({"language": "en", "intent": {}}, "unknown key"),
        ({"language": "en", "intents": {"x.y": {"sentence": ["a"]}}}, "unknown key"),
        ({"language": "en", "intents": {"x.y": {"sentences": "a"}}}, "expected a list"),
        ({"language": "en", "intents": {"x.y": {"sentences": ["go to {place}"]}}}, "unknown list"),
        ({"language": "en", "intents": {"x.y": {"sentences": ["(a|b"]}}}, "not closed"),
        ({"language": "en", "intents": {"x.y": {"sentences": ["[a]"]}}}, "empty utterance"),
        (
            {
                "language": "en",
                "lists": {"seconds": {"duration": {"min": 1, "max": 60}}},
                "intents": {"timer.set": {"requires": ["seconds"], "sentences": ["set a timer [for {seconds}]"]}},
            },
            "lacks required slot",
        ),
        (
            {
                "language": "en",
                "lists": {"q": {"wildcard": {}}},
                "intents": {"x.y": {"sentences": ["{q} please"]}},
            },
            "must follow a literal word",
        ),
        (
            {
                "language": "en",
                "lists": {"q": {"wildcard": {}}},
                "intents": {"x.y": {"sentences": ["[play] {q}"]}},
            },
            "must follow a literal word",
        ),
        (
            {
                "language": "en",
                "lists": {"n": {"number": {"min": 0, "max": 9}}},
                "intents": {"x.y": {"sentences": ["{n} and {n}"]}},
            },
            "twice",
        ),
        ({"language": "en", "intents": {"x.y": {"sentences": ["a"], "confirm": "Set {level}."}}}, "unknown slot"),
        ({"language": "en", "lists": {"n": {"number": {"min": 0}}}}, "min and max"),
        ({"language": "en", "lists": {"n": {"colour": {}}}}, "unknown list kind"),
        ({"language": "en", "skip_words": ["?"]}, "normalises to nothing"),
    ],
)
def test_invalid_documents_fail_at_compile_time(document, message):
    with pytest.raises(GrammarError, match=message):
        compile_documents([document])


def test_compiled_dict_of_another_format_is_refused():
    with pytest.raises(GrammarError, match="format"):
        Grammar.from_dict({"format": 999, "languages": {}})


def test_yaml_without_pyyaml_says_what_to_do(tmp_path, monkeypatch):
    import sys

    path = write(tmp_path, "x.yaml", "language: en\n")
    monkeypatch.setitem(sys.modules, "yaml", None)
    with pytest.raises(GrammarError, match="PyYAML"):
        compile_yaml([path])


def test_yaml_errors_in_templates_name_the_template(tmp_path):
    path = write(tmp_path, "x.yaml", 'language: en\nintents:\n  x.y:\n    sentences: ["turn (it down"]\n')
    with pytest.raises(GrammarError, match=r"x\.y#0 'turn \(it down'"):
        compile_yaml([path])


def test_the_format_example_in_the_module_docstring_compiles():
    import textwrap

    import yaml

    from voxline.intents import grammar

    doc = grammar.__doc__
    example = yaml.safe_load(textwrap.dedent(doc[doc.index("    language: en") : doc.index("Template syntax")]))
    match = recognize("set the sound to 40%", Grammar.from_dict(compile_documents([example])))
    assert (match.intent, match.slots) == ("media.volume_set", {"level": 40})
