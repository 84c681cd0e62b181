"""The index: the trie gives exactly the linear scan's results, and its cost does not follow the template count."""

from __future__ import annotations

import pytest

from voxline.intents import Grammar, MatchStats, builtin_grammar, compile_documents, recognize
from voxline.intents.expression import SlotRef
from voxline.intents.trie import TemplateEnd, TemplateTrie

EXTRA_TEMPLATES = 2000
SAMPLES = {"en": {"number": "thirty", "duration": "ten minutes", "wildcard": "jazz"},
           "zh": {"number": "三十", "duration": "十分钟", "wildcard": "稻香"}}
OUT_OF_DOMAIN = {
    "en": ["what's the tallest mountain", "turn the volume", "set a timer", "who paused the war", "play with the dog",
           "word17 alpha", "word17 alpha beta gamma", "turn it down please now", "set a timer for ten apples"],
    "zh": ["珠穆朗玛峰有多高", "打开", "音量调到", "设一个计时器", "今天天气怎么样"],
}


SPREAD = 600
"""Expanded sentences of the built-in pack compared beside each template's first (`spread_sentences`): the linear
scan visits every expansion for every sentence, so comparing them all grows with the square of the grammar (353 s
of a CI run for one language at 44,000 expansions)."""


def rendered_sentences(grammar: Grammar, lang: str, every: int = 1, first_only: bool = False) -> list[str]:
    """One sentence per expanded template (every `every`-th; or each template's first), slots filled with sample
    values."""
    language = grammar.language(lang)
    joiner = "" if lang == "zh" else " "
    sentences = []
    for template in language.templates:
        for elements in template.expansions:
            words = []
            for element in elements:
                if isinstance(element, SlotRef):
                    slot_list = language.lists[element.list_name]
                    if slot_list.kind == "values":
                        words.append(slot_list.values[0].synonyms[0])
                    else:
                        words.append(SAMPLES[lang][slot_list.kind])
                else:
                    words.append(element)
            sentences.append(joiner.join(words))
            if first_only:
                break
    return sentences[::every]


def spread_sentences(grammar: Grammar, lang: str, count: int = SPREAD) -> list[str]:
    """Every template's first sentence, and `count` more spread evenly over all expansions."""
    everything = rendered_sentences(grammar, lang)
    spread = [everything[i * len(everything) // count] for i in range(min(count, len(everything)))]
    return list(dict.fromkeys(rendered_sentences(grammar, lang, first_only=True) + spread))


@pytest.fixture(scope="module")
def bulky() -> Grammar:
    """The built-in pack plus 2,000 templates in 100 more intents."""
    extra = {
        f"bulk.intent{i}": {"sentences": [f"word{i * 20 + j} alpha (beta|gamma) [{{area}}]" for j in range(20)]}
        for i in range(EXTRA_TEMPLATES // 20)
    }
    compiled = builtin_grammar().to_dict()
    documents = [
        {"language": lang, **{k: v for k, v in data.items() if k != "intents"},
         "intents": {name: {"sentences": spec["sentences"], "confirm": spec["confirm"], "requires": spec["requires"]}
                     for name, spec in data["intents"].items()}}
        for lang, data in compiled["languages"].items()
    ]
    lists = {"area": {"values": ["attic"]}}
    return Grammar.from_dict(compile_documents([*documents, {"language": "en", "lists": lists, "intents": extra}]))


def test_bulky_grammar_has_the_extra_templates(bulky):
    assert len(bulky.language("en").templates) == len(builtin_grammar().language("en").templates) + EXTRA_TEMPLATES


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_index_and_linear_scan_agree_on_the_builtin_pack(lang):
    grammar = builtin_grammar()
    for text in spread_sentences(grammar, lang) + OUT_OF_DOMAIN[lang]:
        assert recognize(text, grammar, lang, index=True) == recognize(text, grammar, lang, index=False), text


def test_index_and_linear_scan_agree_on_the_bulky_grammar(bulky):
    sentences = rendered_sentences(bulky, "en", every=80) + OUT_OF_DOMAIN["en"] + ["word17 alpha beta attic"]
    for text in sentences:
        assert recognize(text, bulky, index=True) == recognize(text, bulky, index=False), text
    assert recognize("word17 alpha beta attic", bulky).intent == "bulk.intent0"


@pytest.mark.parametrize(
    "text", ["pause the music", "turn the kitchen lights on", "set a timer for an hour and a half", "what's the time"]
)
def test_index_cost_does_not_grow_with_templates(bulky, text):
    small_stats, bulky_stats, linear_stats = MatchStats(), MatchStats(), MatchStats()
    expected = recognize(text, builtin_grammar(), stats=small_stats)
    assert recognize(text, bulky, stats=bulky_stats) == expected
    assert recognize(text, bulky, index=False, stats=linear_stats) == expected
    assert bulky_stats.nodes == small_stats.nodes
    assert bulky_stats.nodes < 100
    assert linear_stats.templates >= EXTRA_TEMPLATES * 2  # every expansion is visited without the index


def test_trie_shares_prefixes():
    trie = TemplateTrie()
    trie.add(("turn", "it", "down"), TemplateEnd(0, 0))
    trie.add(("turn", "it", "up"), TemplateEnd(1, 0))
    trie.add(("turn", SlotRef("area", "area")), TemplateEnd(2, 0))
    assert trie.size == 6  # root, turn, it, down, up, {area}
    turn = trie.root.words["turn"]
    assert set(turn.words["it"].words) == {"down", "up"}
    assert turn.slots[SlotRef("area", "area")].ends == [TemplateEnd(2, 0)]
    assert turn.words["it"].has_continuation() and not turn.words["it"].words["up"].has_continuation()
