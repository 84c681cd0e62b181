"""The decoding lexicon: one language's grammar as a word graph that a speech recogniser can be constrained to.

The browser's Whisper decodes freely and, where the free transcript is not a command, once more constrained to
the sentences of the grammar (`web/voxline/grammar-decode.js`); the two readings' likelihoods decide whether the
user said a command. This module turns a language's template trie into the graph that decoder walks.

Layout (JSON-able, compact): ``{"format", "version", "lang", "start", "root", "tail", "nodes"}``; ``start`` is
where a sentence begins (skip words first, then as ``root``, where the templates begin), and ``tail`` where skip
words after a complete command are read (every node marked ``e`` goes on as ``tail`` does); ``nodes`` is a list,
each node a dict with any of

- ``w``: ``{word: [node, ...]}``, the words that may come next (several targets: the graph is nondeterministic);
- ``e``: 1 when a command may end here;
- ``f``: 1 when free text (a wildcard slot) goes on from here: any words, and a command may end after them;
- ``c``: ``[[entry, return], ...]``, slot calls: the slot's own sub-graph is entered at ``entry`` and, at any of
  its nodes marked ``r``, the walk goes on at ``return``. A slot's sub-graph is built once and shared by every
  template that uses the slot (calls do not nest);
- ``r``: 1 on a sub-graph node where a slot value is complete;
- ``i``: on a node where commands end, their intent names (a decoder prompt shows one short command of each).

``prompt`` (optional) lists commands, as words, for a decoder prompt in the skill author's order
(`prompt_commands`); without it the page picks the graph's shortest sentences. ``no_command_openings`` (optional)
lists, as words, the language's openings of an utterance that is no command ("why", "dont"): where the free
transcript opens with one, the page looks for no command reading (one would leave the opening out: "stop the music"
for "don't stop the music"). ``misheard_starts`` (optional) maps each word that a `sound_alike`'s letters make into
another word of the grammar ("pause": "unpause") to the phrases heard for those letters ("and", "in"): a command
reading that leaves out such a phrase just before the word reads the opposite command ("Okay, in pause." read
"okay pause"), and the page drops it.

Slot sub-graphs spell their values: a closed list its synonyms; a number its digits and English words; a
duration the common spoken forms ("ten minutes", "an hour and a half", "90 seconds"), each one kept only if the
engine's own parser reads it as a value within the slot's range. Skip words loop at both edges of a sentence.

Which way its errors go: the graph is a proposal, never a decision. Whatever the page acts on is matched again by
`recognize`, so the graph may be too lenient (free text accepts any words, even where the wildcard would refuse
them) without ever causing a wrong action; where it is too strict (a rare duration form, a number past
`MAX_SPELLED_NUMBER`) the free decode decides as it did before.
"""

from __future__ import annotations

from typing import Any

from voxline.intents import numbers
from voxline.intents.expression import SlotRef
from voxline.intents.grammar import Grammar, LanguageGrammar
from voxline.intents.normalize import normalize
from voxline.intents.slots import DurationRange, NumberRange, SlotList, ValueList, Wildcard
from voxline.intents.trie import TrieNode

LEXICON_FORMAT = 1
"""Layout version of the graph; the browser refuses any other."""

MAX_SPELLED_NUMBER = 999
"""Numbers up to this are spelled in English words as well as digits; larger ones only in digits."""
MAX_LISTED_NUMBERS = 2000
"""A number slot with a wider range lists only its first this many values (the free decode covers the rest)."""
DURATION_AMOUNTS = tuple(range(1, 121))
"""Amounts in front of a duration unit ("ninety seconds", "45 minutes", "2 hours")."""
DURATION_UNITS = (("second", 1), ("minute", 60), ("hour", 3600))
PROMPT_ROUNDS = 4
"""Templates per intent that give a sentence to the decoder prompt (`prompt_commands`); the page keeps as many of
them as fit its prompt's tokens."""
ARTICLES = frozenset({"the", "a", "an"})

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
         "seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def decoding_lexicon(grammar: Grammar, lang: str = "en") -> dict[str, Any]:
    """The word graph of `lang`'s commands in `grammar` (layout in the module docstring)."""
    return _Builder(grammar.language(lang)).build(grammar.version)


def english_words(value: int) -> list[str]:
    """`value` (0..999) in English words: 42 → ["forty", "two"], 105 → ["one", "hundred", "and", "five"]."""
    if value < 20:
        return [_ONES[value]]
    if value < 100:
        tens, ones = divmod(value, 10)
        return [_TENS[tens]] + ([_ONES[ones]] if ones else [])
    hundreds, rest = divmod(value, 100)
    return [_ONES[hundreds], "hundred"] + (["and", *english_words(rest)] if rest else [])


def number_forms(low: float, high: float, lang: str) -> list[tuple[str, ...]]:
    """Token sequences that say each whole number of low..high, every one read back by the engine's parser."""
    forms: list[tuple[str, ...]] = []
    first = int(max(0, -(-low // 1)))
    for value in range(first, min(int(high), first + MAX_LISTED_NUMBERS - 1) + 1):
        candidates = [(str(value),)]
        if lang == "en" and value <= MAX_SPELLED_NUMBER:
            words = english_words(value)
            candidates += [tuple(words), tuple(w for w in words if w != "and")]
            if 100 <= value < 200:
                candidates.append(("a", *words[1:]))
        forms += [c for c in dict.fromkeys(candidates) if numbers.parse_number(c, lang) == value]
    return forms


def duration_forms(low: float, high: float, lang: str) -> list[tuple[str, ...]]:
    """Common spoken durations within low..high seconds, every one read back by the engine's parser."""
    if lang != "en":
        return []
    candidates: list[tuple[str, ...]] = []
    for unit, _ in DURATION_UNITS:
        for amount in DURATION_AMOUNTS:
            noun = unit if amount == 1 else unit + "s"
            candidates += [(str(amount), noun), (*english_words(amount), noun)]
        article = "an" if unit == "hour" else "a"
        candidates += [(article, unit), ("one", unit), ("half", "an", unit), ("a", "half", unit),
                       (article, unit, "and", "a", "half"), ("a", "quarter", "of", "an", unit),
                       ("quarter", "of", "an", unit), ("a", "couple", "of", unit + "s")]
        for amount in range(1, 11):
            candidates += [(*english_words(amount), "and", "a", "half", unit + "s"),
                           (str(amount), "and", "a", "half", unit + "s")]
    for big, small in (("hour", "minutes"), ("minute", "seconds")):
        for amount in range(1, 4):
            head = (*english_words(amount), big if amount == 1 else big + "s")
            for part in (5, 10, 15, 20, 30, 45):
                candidates += [(*head, "and", *english_words(part), small), (*head, *english_words(part), small),
                               (*head, "and", str(part), small)]
    forms = []
    for candidate in dict.fromkeys(candidates):
        seconds = numbers.parse_duration(candidate, lang)
        if seconds is not None and low <= seconds <= high:
            forms.append(candidate)
    return forms


def misheard_starts(language: LanguageGrammar) -> dict[str, list[list[str]]]:
    """The grammar's words that the letters of a `sound_alike` make into another of its words, each with the phrases
    a recogniser hears for those letters: "pause" ("unpause") with "and", "in", ... A command reading that leaves
    out such a phrase just before the word reads the opposite command (see `CommandGraph.dropsAMisheardStart` in
    the browser)."""
    found: dict[str, set[tuple[str, ...]]] = {}
    for word in language.words:
        for phrase, letters in language.sound_alike.items():
            if letters + word in language.words:
                found.setdefault(word, set()).add(phrase)
    return {word: [list(phrase) for phrase in sorted(phrases)] for word, phrases in sorted(found.items())}


class _Builder:
    """Turns one language's trie into the flat node list, one sub-graph per slot list."""

    def __init__(self, language: LanguageGrammar) -> None:
        self.language = language
        self.nodes: list[dict[str, Any]] = []
        self.ids: dict[int, int] = {}  # id(TrieNode) → node index
        self.sub_graphs: dict[str, int] = {}  # slot list name → entry node

    def build(self, version: str) -> dict[str, Any]:
        start = self._new()
        skip_tail = self._new(end=True)
        # Fillers may also stand inside a sentence; the graph takes them only at its edges, as skip words (too
        # strict there, which the free decode covers). Vocatives too ("turn it off love"): the matcher decides
        # whether one is part of a name.
        for phrase in dict.fromkeys(self.language.skip_words + self.language.fillers + self.language.vocatives):
            self._path(start, phrase, start)
            self._path(skip_tail, phrase, skip_tail)
        root = self._visit(self.language.trie.root)
        self._link(start, root)
        nodes, index = _merged(self.nodes, keep=(start, root, skip_tail))
        return {"format": LEXICON_FORMAT, "version": version, "lang": self.language.lang, "start": index[start],
                "root": index[root], "tail": index[skip_tail], "nodes": nodes,
                "prompt": prompt_commands(self.language),
                "no_command_openings": [list(opening) for opening in self.language.no_command_openings],
                "misheard_starts": misheard_starts(self.language)}

    def _new(self, *, end: bool = False) -> int:
        self.nodes.append({"e": 1} if end else {})
        return len(self.nodes) - 1

    def _edge(self, source: int, word: str, target: int) -> None:
        targets = self.nodes[source].setdefault("w", {}).setdefault(word, [])
        if target not in targets:
            targets.append(target)

    def _path(self, source: int, words: tuple[str, ...], target: int) -> None:
        """Words from `source` to `target` through fresh intermediate nodes (prefixes shared by the caller's trie)."""
        node = source
        for word in words[:-1]:
            step = self._new()
            self._edge(node, word, step)
            node = step
        self._edge(node, words[-1], target)

    def _link(self, source: int, target: int) -> None:
        """Let `source` go on as `target` does (an empty skip prefix): copy its edges and flags."""
        for word, targets in self.nodes[target].get("w", {}).items():
            for t in targets:
                self._edge(source, word, t)
        for key in ("e", "f"):
            if self.nodes[target].get(key):
                self.nodes[source][key] = 1
        for call in self.nodes[target].get("c", []):
            self.nodes[source].setdefault("c", []).append(list(call))

    def _visit(self, trie_node: TrieNode) -> int:
        known = self.ids.get(id(trie_node))
        if known is not None:
            return known
        index = self.ids[id(trie_node)] = self._new(end=bool(trie_node.ends))
        if trie_node.ends:
            self.nodes[index]["i"] = sorted({self.language.templates[end.template].intent for end in trie_node.ends})
        for word, child in sorted(trie_node.words.items()):
            self._edge(index, word, self._visit(child))
        for slot, child in sorted(trie_node.slots.items(), key=lambda item: (item[0].name, item[0].list_name)):
            target = self._visit(child)
            slot_list = self.language.lists[slot.list_name]
            if isinstance(slot_list, Wildcard):
                self.nodes[index]["f"] = 1
                continue
            entry = self._sub_graph(slot, slot_list)
            if entry is not None:
                self.nodes[index].setdefault("c", []).append([entry, target])
        return index

    def _sub_graph(self, slot: SlotRef, slot_list: SlotList) -> int | None:
        if slot.list_name in self.sub_graphs:
            return self.sub_graphs[slot.list_name]
        forms = _forms(slot_list, self.language.lang)
        if not forms:
            return None
        entry = self._new()
        trie: dict[tuple[str, ...], int] = {(): entry}
        for form in forms:
            for length in range(1, len(form) + 1):
                prefix = form[:length]
                if prefix not in trie:
                    trie[prefix] = self._new()
                    self._edge(trie[prefix[:-1]], prefix[-1], trie[prefix])
            self.nodes[trie[form]]["r"] = 1
        self.sub_graphs[slot.list_name] = entry
        return entry


def prompt_commands(language: LanguageGrammar, rounds: int = PROMPT_ROUNDS) -> list[list[str]]:
    """Commands to prompt a decoder with, in the skill author's order: first the shortest slot-free sentence (with
    its articles: "stop the music", not "stop music") of each intent's first template (templates are written
    canonical first: "play", "pause", "stop the music"), then of each intent's second template, and so on for
    `rounds` rounds; no sentence twice."""
    def plain(expansion: tuple) -> tuple[int, bool, int]:  # shortest; an article counts for nothing, is preferred,
        articles = sum(word in ARTICLES for word in expansion)  # but never the last word
        return len(expansion) - articles, expansion[-1] in ARTICLES, -articles

    per_intent = [[min((e for e in t.expansions if all(isinstance(x, str) for x in e)), key=plain, default=None)
                   for t in intent.templates] for intent in language.intents.values()]
    out: list[list[str]] = []
    for round_ in range(rounds):
        for sentences in per_intent:
            sentence = sentences[round_] if round_ < len(sentences) else None
            if sentence and list(sentence) not in out:
                out.append(list(sentence))
    return out


def _merged(nodes: list[dict[str, Any]], keep: tuple[int, ...]) -> tuple[list[dict[str, Any]], list[int]]:
    """The same graph with nodes whose futures are identical stored once, and where each old node went.

    The template trie shares prefixes only; its many equal tails ("... the music", "... in the {area}") become one
    node each, so the graph stays small as templates are added. Two nodes are merged when their flags and their
    edges (word → targets, slot calls) are equal after their targets' merging, found bottom-up. The nodes in `keep`
    (start, root, tail) stay as they are; every cycle of the graph (the skip-word loops) passes through them.
    """
    classes: dict[tuple, int] = {}  # a node's signature (its targets as classes) → its class
    class_of: dict[int, int] = {}
    for node in keep:
        class_of[node] = classes.setdefault(("keep", node), len(classes))
    on_path: set[int] = set()

    def klass(node: int) -> int:
        known = class_of.get(node)
        if known is not None:
            return known
        if node in on_path:
            raise ValueError(f"the word graph has a cycle through node {node} that does not pass {keep}")
        on_path.add(node)
        spec = nodes[node]
        signature = (
            tuple(repr(spec.get(flag)) for flag in ("e", "f", "r", "i")),
            tuple((word, tuple(sorted({klass(t) for t in targets})))
                  for word, targets in sorted(spec.get("w", {}).items())),
            tuple(sorted({(klass(entry), klass(back)) for entry, back in spec.get("c", [])})),
        )
        on_path.discard(node)
        found = class_of[node] = classes.setdefault(signature, len(classes))
        return found

    first: dict[int, int] = {}  # class → the first node of it, in the old order
    for node in range(len(nodes)):
        first.setdefault(klass(node), node)
    order = {k: position for position, k in enumerate(sorted(first, key=first.__getitem__))}
    index = [order[class_of[node]] for node in range(len(nodes))]
    merged = []
    for k in sorted(first, key=first.__getitem__):
        spec = nodes[first[k]]
        copy = {flag: spec[flag] for flag in ("e", "f", "r", "i") if flag in spec}
        if "w" in spec:
            copy["w"] = {word: sorted({index[t] for t in targets}) for word, targets in spec["w"].items()}
        if "c" in spec:
            copy["c"] = [list(call) for call in sorted({(index[entry], index[back]) for entry, back in spec["c"]})]
        merged.append(copy)
    return merged, index


def _forms(slot_list: SlotList, lang: str) -> list[tuple[str, ...]]:
    if isinstance(slot_list, ValueList):
        return [tuple(normalize(s).split(" ")) for entry in slot_list.values for s in entry.synonyms]
    if isinstance(slot_list, NumberRange):
        return number_forms(slot_list.min, slot_list.max, lang)
    if isinstance(slot_list, DurationRange):
        return duration_forms(slot_list.min, slot_list.max, lang)
    return []
