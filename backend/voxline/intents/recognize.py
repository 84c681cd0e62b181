"""Matching an utterance against a grammar: `recognize` (which intent, which slots), `is_prefix` (is more coming) and
`could_change` (could more words change what it asks for).

The rules, in the order they decide:

1. The text is normalised (`normalize`) and split into tokens; every template of the language is tried against
   the whole utterance, which must be consumed entirely (a command inside a longer sentence is not a command).
   The grammar's skip words ("please", "can you") are dropped from both edges first, so that free text does not
   swallow them ("play jazz please" plays jazz); only when that remainder matches nothing is the whole utterance
   tried, so a user intent may still consist of skip words ("thank you"). The grammar's fillers ("uh", "just")
   are trimmed from the edges like skip words; inside the utterance they are dropped only when both windows
   above match nothing ("turn the, uh, volume down"): a sentence that matches with its inner words is never read
   without them, and what is left once they are gone must still be one whole command. Last, where the language
   has `asides`, an utterance that is a command and a clause beside it ("the babys asleep, turn it down") is the
   command (`_with_aside`: the clause must read as a clause of its own, not a question, a condition or a slot).
2. Among the templates that match, the most specific wins: fewest tokens taken by free text (wildcards), then
   most tokens matched literally.
3. Precision before recall: when the best candidates disagree (two intents, or one intent with different slot
   values), nothing is returned. A wrong action is worse than asking the server.
4. Ties that agree are settled by template order (intent name, then sentence index, then expansion), which does
   not depend on the order files were loaded in.

Matching uses the grammar's trie (see `trie`); ``index=False`` runs the reference linear scan over every
expanded template instead. Both give identical results; the tests check it. `MatchStats` counts the work either
one did, so tests can show that the trie's cost does not follow the number of templates.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from voxline.intents.expression import Element, SlotRef
from voxline.intents.grammar import CONFIRM_PLACEHOLDER, SPOKEN_SUFFIX, Grammar, LanguageGrammar, Template, phrase_at
from voxline.intents.normalize import normalize
from voxline.intents.slots import SlotList, SlotValue, ValueList, Wildcard
from voxline.intents.trie import TemplateEnd, TrieNode

MAX_MATCH_STEPS = 100_000
"""Guard against a pathological grammar: past this many steps one utterance is given up as unmatched."""


@dataclass(frozen=True)
class Match:
    """A recognised command."""

    intent: str
    """The intent name, e.g. ``media.volume_down``."""
    slots: dict[str, SlotValue]
    """Slot values: list values as written in the grammar, numbers as ``int``, durations in whole seconds."""
    text: str
    """The normalised utterance that `spans` index into."""
    spans: dict[str, tuple[int, int]]
    """For each slot, ``(start, end)`` character offsets of its words in `text`."""
    template: str
    """The id of the template that matched (``intent#index``)."""
    confirmation: str | None = None
    """A short spoken confirmation ("Timer set for 10 minutes."), when the intent has one."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form (spans as two-item lists), as the browser caches it."""
        return {
            "intent": self.intent,
            "slots": dict(self.slots),
            "text": self.text,
            "spans": {name: list(span) for name, span in self.spans.items()},
            "template": self.template,
            "confirmation": self.confirmation,
        }


@dataclass
class MatchStats:
    """Work done by matching, for tests and benchmarks (not wall time: counts)."""

    nodes: int = 0
    """Trie nodes entered (index) or template elements compared (linear scan)."""
    templates: int = 0
    """Expanded templates reached: complete ones at trie ends (index), every one tried (linear scan)."""


@dataclass(frozen=True)
class _Fill:
    """One slot filled during a walk."""

    name: str
    value: SlotValue
    start: int
    """First token, counted in the matched window."""
    end: int
    """One past the last token."""


@dataclass(frozen=True)
class _Candidate:
    """One complete way an expanded template matches the utterance."""

    end: TemplateEnd
    fills: tuple[_Fill, ...]
    literal_tokens: int
    wildcard_tokens: int


@dataclass
class _Walk:
    """What a matcher needs about one utterance."""

    grammar: LanguageGrammar
    tokens: list[str]
    stats: MatchStats
    steps: int = 0
    candidates: list[_Candidate] = field(default_factory=list)

    def step(self) -> None:
        self.steps += 1
        if self.steps > MAX_MATCH_STEPS:
            raise _TooManySteps


class _TooManySteps(Exception):
    """Internal: the step guard tripped."""


def recognize(
    text: str, grammar: Grammar, lang: str = "en", *, index: bool = True, stats: MatchStats | None = None
) -> Match | None:
    """The command `text` is, or ``None`` when it is not exactly one command of the grammar.

    ``index=False`` uses the linear scan instead of the trie (same results; for tests). ``stats`` collects counts.
    """
    language = grammar.language(lang)
    said = normalize(text)
    tokens = without_word_starts(said.split(" ") if said else [], language)
    # the text a match's spans index: the utterance less the stammered starts ("c cancel the timer" is read as
    # "cancel the timer")
    normalised = " ".join(tokens)
    stats = stats if stats is not None else MatchStats()

    def match(positions: list[int]) -> Match | None:
        """The command the words at `positions` are, tried window by window (see `_windows`)."""
        words = [tokens[i] for i in positions]
        for window in _windows(words, language):
            kept = [positions[i] for i in window]
            walk = _Walk(language, [tokens[i] for i in kept], stats)
            if index:
                _walk_trie(walk, language.trie.root, 0, (), 0, 0)
            else:
                _scan_linear(walk)
            if walk.candidates:
                return _choose(walk.candidates, language, normalised, tokens, kept)
        return None

    try:
        found = _read(tokens, language, match)
        if found is None and match(list(range(len(tokens)))) is None:
            # no command as a whole (one `_read` refused as ambiguous stays refused): perhaps one after a name
            found = _after_a_name(tokens, language, match)
        return found
    except _TooManySteps:
        return None


def _read(tokens: list[str], language: LanguageGrammar, match: Callable[[list[int]], Match | None]) -> Match | None:
    """The command `tokens` are as a whole utterance (`match` reads the words at positions of `tokens`): as said,
    or repaired, with a topic before it, beside an aside, or said twice; ``None`` when none, or when ambiguous."""
    whole = match(list(range(len(tokens))))
    free_texts = _free_text_words(whole, language) if whole is not None else []
    if whole is None or _hesitates_in_free_text(free_texts, language):
        repaired = _with_repair(tokens, language, match)
        if repaired is not None and (whole is None or repaired.intent == whole.intent):
            return repaired
    every = list(range(len(tokens)))

    def match_dislocated(positions: list[int]) -> Match | None:
        """The command the words at `positions` are, as said or with their topic in its pronoun's place."""
        return match(positions) or _with_dislocation(positions, tokens, language, match)

    if whole is not None and _clause_in_free_text(free_texts, language):
        beside = _with_aside(tokens, language, match_dislocated)
        if beside is not None and beside.intent == whole.intent:
            return beside  # "play some jazz | while i cook" plays jazz
    if whole is not None and free_texts and _another_command_before_a_clause(tokens, whole, language, match):
        return None  # "play the last one again | i missed the chorus": the previous track, or a song?
    return (whole or _with_dislocation(every, tokens, language, match)
            or _with_aside(tokens, language, match_dislocated) or _said_again(tokens, match))


def _after_a_name(tokens: list[str], language: LanguageGrammar, match: Callable[[list[int]], Match | None]
                  ) -> Match | None:
    """The command said after one of the device's own names inside the utterance (the skill file's `names.words`),
    the words before it said to someone else: "okay class eyes on me | speaker pause the song", "sorry one sec |
    computer lights off". Only tried when the whole utterance is no command. What follows the name is read as a
    whole utterance is (`_read`: asides, repairs, ...); the words before it are left out only when they hold no
    command (`_read` finds none, nor this after a name of their own: "turn off the lights | computer pause it" asks
    two things) and none of `names.not_with` ("if the baby wakes up | computer pause the music" is for later), and a
    name after one of `names.not_after` is a noun ("the speaker is too loud"). Two names whose commands differ give
    nothing."""
    names = language.names
    found: list[Match] = []
    for position in range(1, len(tokens) - 1):
        for name in names["words"]:
            after = position + len(name)
            if (not phrase_at(tokens, position, name) or after >= len(tokens)
                    or (tokens[position - 1],) in names["not_after"]):
                continue
            before = tokens[:position]
            if any(phrase_at(before, k, phrase) for phrase in names["not_with"] for k in range(len(before))):
                continue
            if _read(before, language, match) is not None or _after_a_name(before, language, match) is not None:
                continue

            def shifted(positions: list[int], offset: int = after) -> Match | None:
                return match([offset + p for p in positions])

            got = _read(tokens[after:], language, shifted)
            if got is not None:
                found.append(got)
    if not found or len({_meaning(m.intent, m.slots) for m in found}) != 1:
        return None
    return found[0]


MAX_WORD_START_CHARACTERS = 3
"""The longest stammered start of a word left out (`without_word_starts`): "p", "pa", "pau" of "pause"."""


def without_word_starts(tokens: list[str], language: LanguageGrammar) -> list[str]:
    """`tokens` less the starts of words a speaker stammered, as a recogniser writes them ("c- cancel the timer",
    "t- turn the lights on": the normaliser leaves "c", "t"): a token of at most `MAX_WORD_START_CHARACTERS`
    characters that no template has, before a longer word that begins with it, perhaps said again first ("m- m-
    mute it"). A word of the grammar stays ("a", "i", "up"), as does a letter said before another word or before
    itself alone ("play b b king", "k pop"), and a number ("1 15" may be a time)."""
    kept = []
    for k, token in enumerate(tokens):
        after = next((word for word in tokens[k + 1:] if word != token), "")
        if not (len(token) <= MAX_WORD_START_CHARACTERS and len(after) > len(token) and after.startswith(token)
                and token.isascii() and token.isalpha() and token not in language.words):
            kept.append(token)
    return kept


MAX_SAID_AGAIN_WORDS = 12
"""The longest utterance read as one command said twice (`_said_again`): each half is a short command."""


def _said_again(tokens: list[str], match: Callable[[list[int]], Match | None]) -> Match | None:
    """The command of an utterance that is one command said twice, in the same words or others, the second time (or
    the first) with more slots filled and the others the same: "lights on | lights on in the kitchen" asks once,
    for the kitchen, "never mind | cancel that" once. A slot said differently makes two requests ("lights on in the
    kitchen | lights on in the garage": none), as does another intent; when two splits disagree, nothing is
    returned. At most `MAX_SAID_AGAIN_WORDS` words."""
    if len(tokens) > MAX_SAID_AGAIN_WORDS:
        return None
    found: dict[tuple[str, str], Match] = {}
    for cut in range(1, len(tokens)):
        first = match(list(range(cut)))
        again = match(list(range(cut, len(tokens)))) if first is not None else None
        if again is None or first.intent != again.intent:
            continue
        fuller, other = (again, first) if len(again.slots) >= len(first.slots) else (first, again)
        if all(fuller.slots.get(name) == value for name, value in other.slots.items()):
            found.setdefault(_meaning(fuller.intent, fuller.slots), fuller)
    return next(iter(found.values())) if len(found) == 1 else None


MAX_REPARANDUM_WORDS = 4
"""The most words a speaker takes back in one repair ("turn on the kitchen | no | the bedroom lights")."""
MAX_REPAIRS = 2
"""Repairs undone in one utterance ("turn the uh turn the uh the lights on" has two)."""
MAX_REPAIR_READINGS = 24
"""The most repaired readings of one utterance matched (each a full match); past it the utterance is no command
("turn uh turn uh turn uh ...": the readings multiply with every restart)."""


def _with_repair(tokens: list[str], language: LanguageGrammar, match: Callable[[list[int]], Match | None]
                 ) -> Match | None:
    """The command of an utterance in which the speaker took words back and said them again, or said something
    else instead: a **self-repair**, *reparandum* (the words taken back), *interregnum* (hesitations and
    corrections, possibly none), *repair* (what replaces them, and the rest of the utterance): "pause the | uh |
    pause it", "turn the | uh | the lights on", "set a timer for | ten no | twelve minutes", "stop | i mean | pause
    it", "turn the | the lights on" (the recogniser often leaves the "uh" out). Only tried when the whole utterance
    is no command (or names free text with a hesitation in it, `_hesitates_in_free_text`). The utterance less the
    reparandum and the interregnum is matched as any utterance (`match`: skip words, fillers and all); a repair
    counts when

    - the reparandum is at most `MAX_REPARANDUM_WORDS` words, and neither it nor the interregnum holds one of the
      language's `repairs.joiners` ("and", "then": "stop the music and stop the timer" is two commands);
    - the reparandum and the repair start alike: with the same word (a restart: "skip this | skip this song"), or,
      after a correction word (`repairs.corrections`: "no", "i mean", "sorry"), with values of one slot list that
      is not free text ("ten no twelve", "kitchen no bedroom") or with a command taken back whole ("stop | i mean |
      pause it");
    - the words up to the interregnum are a command or the start of one (`is_prefix`): the speaker was on the way
      to one ("stop the music | stop the timer" with "the music stop" taken back is on the way to none);
    - a restart with no interregnum takes back no command of another meaning ("stop the music stop the timer" is
      two commands said one after the other, "pause pause it" one said twice).

    Up to `MAX_REPAIRS` repairs are undone, one after the other. Precision as everywhere: when two repairs read as
    commands that disagree, nothing is returned."""
    repairs = language.repairs
    edits = tuple(sorted({*language.fillers, *repairs["corrections"]}, key=lambda p: (-len(p), p)))
    found: list[Match] = []
    frontier = [list(range(len(tokens)))]
    tried: set[tuple[int, ...]] = set()
    for _ in range(MAX_REPAIRS):
        next_frontier: list[list[int]] = []
        for kept in frontier:
            for candidate in _repairs(tokens, kept, language, edits, match):
                if tuple(candidate) in tried:
                    continue
                tried.add(tuple(candidate))
                if len(tried) > MAX_REPAIR_READINGS:
                    return None  # a pathological utterance: no command is safer than a guess
                got = match(candidate)
                if got is not None:
                    found.append(got)
                else:
                    next_frontier.append(candidate)
        frontier = next_frontier
        if found:
            break
    if not found or len({_meaning(m.intent, m.slots) for m in found}) != 1:
        return None
    return found[0]


def _repairs(tokens: list[str], kept: list[int], language: LanguageGrammar, edits: tuple[tuple[str, ...], ...],
             match: Callable[[list[int]], Match | None]) -> Iterator[list[int]]:
    """`kept` less each reparandum and interregnum that `_with_repair`'s rules let a speaker take back."""
    words = [tokens[i] for i in kept]
    corrections = language.repairs["corrections"]
    joiners = language.repairs["joiners"]

    def holds(phrases: tuple[tuple[str, ...], ...], start: int, end: int) -> bool:
        return any(phrase_at(words, at, p) for at in range(start, end) for p in phrases
                   if at + len(p) <= end)

    for repair in range(1, len(words)):
        # the interregnum: hesitations and corrections right before the repair, read backwards
        between, corrected = repair, False
        while True:
            phrase = next((p for p in edits if phrase_at(words, between - len(p), p)), None)
            if phrase is None:
                break
            between -= len(phrase)
            corrected = corrected or phrase in corrections
        if holds(joiners, between, repair):
            continue
        on_the_way: bool | None = None  # the words up to the interregnum: a command or the start of one
        for length in range(1, MAX_REPARANDUM_WORDS + 1):
            start = between - length
            if start < 0 or holds(joiners, start, between):
                break
            restart = words[start] == words[repair]
            taken_back = None
            if not restart:
                if not corrected:
                    continue
                if not _same_list_starts(words, start, repair, language):
                    taken_back = match(kept[start:between])
                    if taken_back is None:
                        continue
            elif between == repair:
                taken_back = match(kept[start:between])
                if taken_back is not None:
                    again = match(kept[:start] + kept[repair:])
                    if again is None or _meaning(again.intent, again.slots) != _meaning(taken_back.intent,
                                                                                        taken_back.slots):
                        continue
            # the words up to the interregnum were on their way to a command: the speaker broke one off
            if taken_back is None:
                if on_the_way is None:
                    on_the_way = match(kept[:between]) is not None or _goes_on(
                        " ".join(words[:between]), language, lambda walk, root: _extends(walk, root, 0))
                if not on_the_way:
                    continue
            yield kept[:start] + kept[repair:]


def _same_list_starts(words: list[str], first: int, second: int, language: LanguageGrammar) -> bool:
    """Whether a value of one closed slot list (not free text) starts at both positions ("ten" and "twelve")."""
    return any(not isinstance(slot_list, Wildcard) and slot_list.consume(words, first)
               and slot_list.consume(words, second) for slot_list in language.lists.values())


def _free_text_words(found: Match, language: LanguageGrammar) -> list[list[str]]:
    """The words of each free-text slot of `found` (see `free_text_spans`)."""
    return [found.text[start:end].split(" ") for start, end in free_text_spans(found, language)]


def _hesitates_in_free_text(free_texts: list[list[str]], language: LanguageGrammar) -> bool:
    """Whether a match's free-text slot (`_free_text_words`) holds a hesitation ("play uh play some jazz" plays "uh
    play some jazz") or a correction of two words or more ("play taylor swift no wait play olivia rodrigo"; one
    word, "no", "sorry", is in many a song's name): then a repair, if the utterance has one, is the better reading."""
    hesitations = {p[0] for p in language.fillers if len(p) == 1}
    corrections = [p for p in language.repairs["corrections"] if len(p) > 1]
    return any(any(word in hesitations for word in words)
               or any(phrase_at(words, k, p) for p in corrections for k in range(len(words)))
               for words in free_texts)


def _clause_in_free_text(free_texts: list[list[str]], language: LanguageGrammar) -> bool:
    """Whether a match's free-text slot (`_free_text_words`) holds, after its first word, a clause of its own: a
    subordinator and then a subject (`asides.subordinators`, then an `after_starts` or `after_subjects` word: "play
    some jazz | while i cook", "play the beatles | because im sad"). Then the command with that clause as an aside
    (`_with_aside`), if the utterance reads so, is the better reading; a song's name that opens with one ("while my
    guitar gently weeps") is played whole."""
    asides = language.asides
    subjects = asides["after_starts"] | asides["after_subjects"]
    for words in free_texts:
        for k in range(1, len(words)):
            for phrase in asides["subordinators"]:
                after = k + len(phrase)
                if phrase_at(words, k, phrase) and _opens_with(words[after:], subjects):
                    return True
    return False


def _another_command_before_a_clause(tokens: list[str], whole: Match, language: LanguageGrammar,
                                     match: Callable[[list[int]], Match | None]) -> bool:
    """Whether an utterance that matched with free text (`whole`) also reads as a command of another intent without
    free text, followed by a clause that may be an aside after it (`asides.after_starts` or a subject's clause,
    `_subject_clause`; `_aside_values`): "play the last one again | i missed the chorus", "play the last song again
    | the kids loved it" is the previous track or a song of that name, so it is neither. A song's name with such a
    word in it ("play what ive done") reads as no other command and is played whole."""
    asides = language.asides
    for k in range(MIN_COMMAND_WORDS_AFTER_AN_ASIDE, len(tokens) - MIN_ASIDE_WORDS + 1):
        if not (_opens_with(tokens[k:], asides["after_starts"]) or _subject_clause(tokens[k:], asides)):
            continue
        before = match(list(range(k)))
        if (before is not None and before.intent != whole.intent and not free_text_spans(before, language)
                and _aside_values(tokens[k:], language, False, k) is not None):
            return True
    return False


def slot_list_names(language: LanguageGrammar, template_id: str) -> dict[str, str]:
    """Slot name → list name of the template `template_id` (a `Match.template`); empty when it has none."""
    template = language.template_by_id.get(template_id)
    if template is None:
        return {}
    return {e.name: e.list_name for expansion in template.expansions for e in expansion if isinstance(e, SlotRef)}


def free_text_spans(found: Match, language: LanguageGrammar) -> list[tuple[int, int]]:
    """The spans in `found.text` of its slots whose list is free text (a `Wildcard`: a song's name)."""
    list_names = slot_list_names(language, found.template)
    return [span for name, span in found.spans.items()
            if isinstance(language.lists.get(list_names.get(name, name)), Wildcard)]


MAX_TOPIC_WORDS = 5
"""The longest noun phrase said before a command that names it again by a pronoun ("the kitchen lights | can you
turn them on")."""
MAX_DISLOCATION_WORDS = 12
"""Longer utterances (or commands beside an aside) are not searched for a topic: a command with one is short ("the
kitchen lights can you turn them on please" has nine words), and every topic and pronoun is a match to try."""


def _with_dislocation(positions: list[int], tokens: list[str], language: LanguageGrammar,
                      match: Callable[[list[int]], Match | None]) -> Match | None:
    """The command of an utterance that names its object first and then refers to it by a pronoun, a *left
    dislocation*: "the kitchen lights | can you turn them on" is "can you turn the kitchen lights on", "the volume |
    set it to twenty five", "the time | what is it". Only tried when the whole utterance is no command, and only
    where the language defines `dislocation` (its skill file). The *topic*, the first 1 to `MAX_TOPIC_WORDS` words,
    opens with one of `dislocation.topics` (a determiner: "the", "my", "that") and is a noun phrase: no pronoun, no
    word of `asides.clause_verbs` ("the lights are on | turn them off" is a clause, not a topic) and no word of
    `asides.not_with` ("the tv | turn it down"); the topic then stands in for one of the `dislocation.pronouns` of
    the rest, and that reading is matched as any utterance (`match`: skip words, fillers and all).

    The words are those at `positions` of `tokens` (all of them, or the command beside an aside: "the kitchen
    lights turn them off | were going to bed"). Precision as everywhere: when two readings disagree (another topic
    length, another pronoun) nothing is returned; a reading whose slot would take words from both sides of the
    pronoun is no reading."""
    dislocation = language.dislocation
    words = [tokens[i] for i in positions]
    if (not dislocation["pronouns"] or not words or len(words) > MAX_DISLOCATION_WORDS
            or (words[0],) not in dislocation["topics"]):
        return None
    asides = language.asides
    found: list[Match] = []
    for length in range(1, min(MAX_TOPIC_WORDS, len(words) - 1) + 1):
        word, topic_words = words[length - 1], words[:length]
        if ((word,) in dislocation["pronouns"] or (word,) in asides["clause_verbs"]
                or any(_not_with_at(topic_words, i, asides) for i in range(length))):
            break  # a longer topic holds the same words
        topic = positions[:length]
        for k in range(length, len(words)):
            if (words[k],) not in dislocation["pronouns"]:
                continue
            got = match([*positions[length:k], *topic, *positions[k + 1:]])
            if got is not None and all(start < end for start, end in got.spans.values()):
                found.append(got)
    if not found or len({_meaning(m.intent, m.slots) for m in found}) != 1:
        return None
    return found[0]


MIN_ASIDE_WORDS = 2
"""An aside is a clause: at least this many words ("im back", "the babys sleeping")."""
MIN_COMMAND_WORDS_AFTER_AN_ASIDE = 2
"""A command after an aside has at least this many words: "ill go | next" is no command, "ugh | next" already is
(a filler), "the babys asleep | turn it down" is."""
MAX_ASIDE_UTTERANCE_WORDS = 24
"""Longer utterances are not searched for a command beside an aside (the search tries every split)."""


def _with_aside(tokens: list[str], language: LanguageGrammar, match: Callable[[list[int]], Match | None]
                ) -> Match | None:
    """The command of an utterance that is a command and a clause beside it, its **aside**: "the babys sleeping |
    turn it down", "resume the song | im back", "mute it | im on a call". Only tried when the whole
    utterance is no command, and only where the language defines `asides` (its skill file). Every split of the
    utterance into an aside and a command is tried, the shortest aside first; a split counts when

    - the command part is a command (`match`, skip words and all), and it is no longer one with the aside's word
      beside it ("dont turn | off the lights" cuts "turn off the lights");
    - the aside has `MIN_ASIDE_WORDS` or more, none of the language's `not_with` words (questions, conditions,
      someone else's words: "how do i | turn off the lights", "when i leave", "she said"; nor their "'s" forms,
      "the tv's too loud"), and no word a slot of the command's intent could take (an area, a number: "in the
      kitchen | turn on the lights" must not turn on every light), unless it is in one of the language's
      `not_values` ("i hate this one | skip it": "one" is a pronoun) or the aside is a reason that says where the
      command is for (`_with_the_reasons_value`); a named value no slot of the command takes
      is the aside's own ("pause it | im running to the loo"), a number or a duration is only in a person's own
      clause after the command ("pause it | ill be back in two minutes"; "in ten minutes | turn off the lights" is
      for later), and then bars a command of a family that takes one (`_family_takes`);
    - an aside before the command does not end with a `not_before` word ("i want you to", "dont"; a closing phrase
      of skip words left out: "great thank you | pause the music"), nor is one of the language's
      `repairs.joiners` between the two ("set a timer and | play some music" is two requests), and is followed by
      `MIN_COMMAND_WORDS_AFTER_AN_ASIDE` words or more, or by one when it is a subject's clause and the command
      takes no free text ("this song is rubbish | skip"; "my neighbour keeps playing loud | music" is none); an
      aside after the command starts with an `after_starts`
      word (a new subject: "im", "we", "because"), or with a subject and its verb (`_subject_clause`: "the phone is
      ringing") after a command of `MIN_COMMAND_WORDS_AFTER_AN_ASIDE` words or more ("stopping | the music was a
      mistake" is a statement), so it cannot be the rest of the command.

    An utterance that opens with one of the language's `no_command_openings` (and no longer skip phrase: see
    `LanguageGrammar.no_command_kind`) has no aside.

    Precision as everywhere: when two counting splits disagree, or the aside is another command itself (two
    commands in one breath), nothing is returned; except that an aside opening as one of the language's `reasons`
    ("its", "i cant") says how things are, and is the reason for the command beside it ("skip this song | its a bit
    loud" skips, "its too loud | pause it" pauses)."""
    asides = language.asides
    if not any(asides.values()) or len(tokens) > MAX_ASIDE_UTTERANCE_WORDS:
        return None
    # An utterance that opens as no command does (a question, a report, another device: the language's
    # `no_command_openings`) is not one with a clause before it either: "我刚 | 把计时器关了", "烤箱 | 定时二十分钟".
    if language.no_command_kind(tokens) is not None:
        return None
    found: list[Match] = []
    n = len(tokens)
    pronouns, joiners = language.dislocation["pronouns"], language.repairs["joiners"]
    for length in range(MIN_ASIDE_WORDS, n):
        for aside, command, first in ((list(range(length)), list(range(length, n)), True),
                                      (list(range(n - length, n)), list(range(n - length)), False)):
            words = [tokens[i] for i in aside]
            if first and (_ends_with(words, joiners) or _opens_with([tokens[i] for i in command], joiners)):
                continue  # "set a timer | and play some music": a second request joined to the first, no aside
            named = _aside_values(words, language, first, len(command))
            plain = named is not None
            refers_back = first and any((tokens[i],) in pronouns for i in command)
            if not plain and not refers_back:
                continue
            # a split that cuts a command's words ("dont turn | off the lights") is no aside and command. A skip
            # word at the aside's edge is no command's word ("great thanks | turn off the lights": "thanks turn
            # off the lights" matches, cutting nothing), nor is a subordinator that opens the clause after it
            # ("turn it down | because the baby is asleep")
            joined = [aside[-1], *command] if first else [*command, aside[0]]
            at_skip_word = (_ends_with(words, language.skip_words) if first
                            else _opens_with(words, language.skip_words))
            opens_a_clause = not first and _opens_with(words, language.asides["subordinators"])
            if not at_skip_word and not opens_a_clause and match(joined) is not None:
                continue
            got = match(command) if plain else None
            if got is not None and first and len(command) < MIN_COMMAND_WORDS_AFTER_AN_ASIDE and any(
                    isinstance(language.lists[name], Wildcard) for name in language.intents[got.intent].slot_lists):
                continue  # "my neighbour keeps playing loud | music": the clause's object, not a request
            if got is not None and _family_takes(got.intent, _counted(named, language), language):
                continue  # "turn it up | i want it at fifty": a level said, the step is not what was asked
            if got is not None and named & language.intents[got.intent].slot_lists:
                # the aside names what the command could have held: "in the kitchen | turn on the lights" is none,
                # unless it is the command's reason ("i cant see a thing in the study | turn the light on")
                got = _with_the_reasons_value(got, named, aside, command, tokens, language, match)
                if got is None:
                    continue
            if got is not None and _aside_makes_another_command(got, aside, command, first, tokens, language, match):
                got = None  # "pause di | music for me": the aside's "pause" is what was asked, not "music"
            if got is not None:
                also = match(aside)  # "its dark in here | turn the lights on" says it twice: fine
                found.extend(_requested(got, also, words, [tokens[i] for i in command], asides["reasons"]))
            elif refers_back:
                found.extend(_with_antecedent(aside, command, tokens, language, match))
    if not found or len({_meaning(m.intent, m.slots) for m in found}) != 1:
        return None
    return found[0]


MAX_ASIDE_SPAN_WORDS = 3
"""The most words of an aside tried with the command beside it (`_aside_makes_another_command`)."""


def _aside_makes_another_command(got: Match, aside: list[int], command: list[int], first: bool, tokens: list[str],
                                 language: LanguageGrammar, match: Callable[[list[int]], Match | None]) -> bool:
    """Whether a few words of the aside next to the command (up to `MAX_ASIDE_SPAN_WORDS` in a row, not opening
    with a skip word nor after a `not_before` word, with only words no template has between them and the command),
    said with the command, make a command of another intent: then the aside holds what was asked and the command
    part is its object, with words misheard or unknown to the grammar between them ("pause di | music for me",
    "switch off di | music man"), and the split would read the object alone as a command ("music" plays). A reason
    beside a command has no such words ("its too loud | pause it"), nor has a negated verb ("不想听 | 这个换一个")."""
    words = [tokens[i] for i in aside]
    known = [word in language.words for word in words]
    for start in range(len(aside)):
        if _opens_with(words[start:], language.skip_words) or _ends_with(words[:start], language.asides["not_before"]):
            continue  # a word that binds the span is no request of it ("不想 | 听", "i dont want to | hear")
        for end in range(start + 1, min(start + MAX_ASIDE_SPAN_WORDS, len(aside)) + 1):
            if any(known[end:] if first else known[:start]):
                continue  # a word of the grammar between the span and the command
            span = aside[start:end]
            found = match([*span, *command] if first else [*command, *span])
            if found is not None and found.intent != got.intent:
                return True
    return False


def _requested(command: Match, aside: Match | None, aside_words: list[str], command_words: list[str],
               reasons: Iterable[tuple[str, ...]]) -> list[Match]:
    """What a split into a command and an aside asks for: the command, and the aside's own reading when it has one.
    A part that opens as one of the language's `reasons` ("its", "i cant") says how things are; beside a request
    that asks for something else it is that request's reason, not a second one: "skip this song | its a bit loud"
    asks to skip, whichever part the split calls the command; not one of its own family (`_family`). Two requests
    ("pause it | so turn it up") stay two."""
    if aside is None:
        return [command]
    if _meaning(aside.intent, aside.slots) == _meaning(command.intent, command.slots):
        return [command, aside]
    aside_states, command_states = _opens_with(aside_words, reasons), _opens_with(command_words, reasons)
    if aside_states != command_states and _family(aside.intent) != _family(command.intent):
        return [command] if aside_states else [aside]
    return [command, aside]


MAX_VALUE_LEAD_WORDS = 2
"""The most words before a value in a reason that the command takes with it ("i cant see a thing | in the | study")."""


def _with_the_reasons_value(got: Match, named: frozenset[str], aside: list[int], command: list[int],
                            tokens: list[str], language: LanguageGrammar,
                            match: Callable[[list[int]], Match | None]) -> Match | None:
    """The command `got` with a slot value that its reason names: "i cant see a thing in the study | turn the light
    on" turns on the study's light; else None. Only when the aside opens as one of the language's `asides.reasons`
    (it says how things are, so the place it names is where the command is for; "in the kitchen | turn on the
    lights" stays none), names values of one slot list only, one value, which the command's intent takes and no
    slot of `got` holds; and the command followed by the value's words (with up to `MAX_VALUE_LEAD_WORDS` words said
    just before them, "in the") is a command of the same intent with `got`'s slots and that one more."""
    words = [tokens[i] for i in aside]
    held = {slot_list_names(language, got.template).get(name, name) for name in got.slots}
    if (not _opens_with(words, language.asides["reasons"]) or len(named) != 1
            or not named <= language.intents[got.intent].slot_lists or named & held):
        return None
    slot_list = language.lists[next(iter(named))]
    spans = [(position, end, value) for position in range(len(words))
             for end, value in slot_list.consume(words, position)]
    if len({value for _, _, value in spans}) != 1:
        return None
    position, end, value = max(spans, key=lambda span: span[1] - span[0])
    for lead in range(min(MAX_VALUE_LEAD_WORDS, position), -1, -1):
        found = match([*command, *aside[position - lead:end]])
        if (found is not None and found.intent == got.intent and len(found.slots) == len(got.slots) + 1
                and value in found.slots.values() and all(found.slots.get(k) == v for k, v in got.slots.items())
                and all(begin < finish for begin, finish in found.spans.values())):
            return found
    return None


def _counted(lists: Iterable[str], language: LanguageGrammar) -> set[str]:
    """Those of `lists` that are numbers or durations, not named values."""
    return {name for name in lists if not isinstance(language.lists[name], ValueList)}


def _family_takes(intent: str, lists: set[str], language: LanguageGrammar) -> bool:
    """Whether an intent of `intent`'s family (`_family`) has a slot of one of `lists`."""
    return bool(lists) and any(_family(other) == _family(intent) and lists & spec.slot_lists
                               for other, spec in language.intents.items())


def _family(intent: str) -> str:
    """What an intent acts on, by its name: `lights.on` and `lights.off` act on the lights, `media.volume_up`,
    `_down` and `_set` on the volume. A reason that asks for another intent of the same family contradicts the
    request beside it ("its dark in here | turn the lights off": one of the two was misheard). An intent named
    without a domain is a family of its own."""
    domain, _, action = intent.rpartition(".")
    return f"{domain}.{action.rpartition('_')[0]}" if "_" in action else domain or intent


def _with_antecedent(aside: list[int], command: list[int], tokens: list[str], language: LanguageGrammar,
                     match: Callable[[list[int]], Match | None]) -> list[Match]:
    """The readings of a command that refers by a pronoun to a noun phrase of the clause before it, its
    *antecedent*: "the hallway lights still on | turn it off" is "turn the hallway lights off", "no need for the
    timer anymore | cancel it" is "cancel the timer". (A topic said alone before the command is `_with_dislocation`'s.)

    The antecedent opens with one of `dislocation.topics`, has 2 to `MAX_TOPIC_WORDS` words and no pronoun nor
    `asides.clause_verbs` word; the clause around it must be an aside before a command (`_aside_values`: no
    `not_with` word, ...), except that the antecedent's own words may be slot values (the area the lights are in).
    The command, with the antecedent in, is no longer than `MAX_DISLOCATION_WORDS`. Every antecedent and pronoun is
    tried; the caller returns a command only when all readings agree ("the kids want the frozen soundtrack | can you
    put it on" could play "the kids" or "the frozen soundtrack": none)."""
    dislocation, asides = language.dislocation, language.asides
    words = [tokens[i] for i in aside]
    if len(command) + MAX_TOPIC_WORDS > MAX_DISLOCATION_WORDS:
        return []
    found: list[Match] = []
    for start, opener in enumerate(words):
        if (opener,) not in dislocation["topics"]:
            continue
        for end in range(start + 1, min(start + MAX_TOPIC_WORDS, len(words)) + 1):
            last = words[end - 1]
            if end > start + 1 and ((last,) in dislocation["pronouns"] or (last,) in asides["clause_verbs"]):
                break  # a longer antecedent holds the same words
            named = None if end == start + 1 else _aside_values(words, language, True, len(command),
                                                                   range(start, end))
            if named is None:
                continue
            for k, position in enumerate(command):
                if (tokens[position],) not in dislocation["pronouns"]:
                    continue
                got = match([*command[:k], *aside[start:end], *command[k + 1:]])
                if (got is not None and all(begin < finish for begin, finish in got.spans.values())
                        and not named & language.intents[got.intent].slot_lists):
                    found.append(got)
    return found


def _aside_values(words: list[str], language: LanguageGrammar, first: bool, command_words: int,
                  antecedent: range = range(0)) -> frozenset[str] | None:
    """The slot lists whose values `words` name, when they may be a clause beside a command (see `_with_aside`),
    else None; `first`: it comes before it. The caller refuses a command that takes a value of one of these lists; a
    number or a duration makes no aside at all (it may be when the command is for, which no intent here says),
    except in a clause after the command that opens with a person (`asides.after_persons`: "pause it | i'll be back
    in two minutes" says when the speaker is back; the caller refuses a command of a family that takes one). A
    command of one word may follow an aside that is a subject's clause ("this song is rubbish | skip"), no other
    ("ill go | next"). The words of an `antecedent` (see `_with_antecedent`) go into the command, so they are no
    aside's values."""
    asides = language.asides
    if len(words) < MIN_ASIDE_WORDS:
        return None
    # a closing phrase said to the listener ("great thank you | pause the music") is checked as the skip words it is
    own = _less_a_closing_phrase(words, language) if first else words
    if first and (_ends_with(own, asides["not_before"]) or command_words < MIN_COMMAND_WORDS_AFTER_AN_ASIDE and not (
            command_words == 1 and _subject_clause(words[_within_edge_words(words, language)[0]:], asides))):
        return None
    if not first and not (_opens_with(words, asides["after_starts"])
                          or (command_words >= MIN_COMMAND_WORDS_AFTER_AN_ASIDE and _subject_clause(words, asides))):
        return None
    no_value = {position + k for position in range(len(words)) for phrase in asides["not_values"]
                if phrase_at(words, position, phrase) for k in range(len(phrase))}
    # A clause of purpose or time after the command ("so i can sleep", "while i take this call") may hold words
    # that make other clauses none (a modal, its own opener): they are the clause's, not a question's.
    subordinate = not first and _opens_with(words, asides["subordinators"])
    # ... and a reason's own opening is no question ("i can barely see": "can" is the reason's)
    reason = max((len(phrase) for phrase in asides["reasons"] if phrase_at(words, 0, phrase)), default=0)
    persons = not first and _opens_with(words, asides["after_persons"])
    named: set[str] = set()
    for position in range(len(own)):
        allowed = position < reason or subordinate and (words[position],) in asides["subordinate_allows"]
        if _not_with_at(words, position, asides) and not allowed:
            return None
        if position in no_value or position in antecedent:
            continue
        # a named value with the "is" the normaliser joined to it is still that value ("the kitchens dark")
        word = words[position]
        stem = [*words[:position], word[:-1], *words[position + 1:]] if word.endswith("s") else None
        for name, slot_list in language.lists.items():
            if isinstance(slot_list, Wildcard):
                continue
            if slot_list.consume(words, position):
                if not isinstance(slot_list, ValueList) and not persons:
                    # a number or a duration may say when or how much: "in ten minutes | turn off the lights"
                    return None
                named.add(name)
            elif stem and isinstance(slot_list, ValueList) and slot_list.consume(stem, position):
                named.add(name)
    return frozenset(named)


def _less_a_closing_phrase(words: list[str], language: LanguageGrammar) -> list[str]:
    """`words` without a skip phrase of two words or more that ends them ("great thank you": "great"). Such a phrase
    is said whole, so a `not_before` or `not_with` word in it ("you", which binds to a verb after it, "i want you |
    to ...", or is someone's subject) binds nothing; a one-word skip word keeps its own `not_before` entry ("we
    never say please | turn it off")."""
    for phrase in language.skip_words:
        if 1 < len(phrase) < len(words) and phrase_at(words, len(words) - len(phrase), phrase):
            return words[:len(words) - len(phrase)]
    return words


def _opens_with(words: list[str], phrases: Iterable[tuple[str, ...]]) -> bool:
    """Whether `words` open with one of `phrases`."""
    return any(phrase_at(words, 0, phrase) for phrase in phrases)


def _ends_with(words: list[str], phrases: Iterable[tuple[str, ...]]) -> bool:
    """Whether `words` end with one of `phrases`."""
    return any(phrase_at(words, len(words) - len(phrase), phrase) for phrase in phrases)


def _not_with_at(words: list[str], position: int, asides: dict[str, frozenset[tuple[str, ...]]]) -> bool:
    """Whether one of the language's `asides.not_with` phrases starts at `position` of `words`, or the word there is
    the "'s" form of one, as the normaliser writes it ("the tv's too loud": "tvs")."""
    word = words[position]
    return (any(phrase_at(words, position, p) for p in asides["not_with"])
            or word.endswith("s") and (word[:-1],) in asides["not_with"])


SUBJECT_VERB_WINDOW = 3
"""How many words after its determiner a subject clause's verb may come ("the | baby | is | asleep")."""
MIN_VERB_FORM_CHARACTERS = 5
"""The shortest word in -ed or -ing read as a subject clause's verb after its noun ("loved", "crying"; not "bed",
"king")."""
NOUN_WORDS = 2
"""The most words of a subject clause's noun before its verb or its joined "is" (`_subject_clause`): "the | head
teachers | coming", "my | phone | ringing"."""


def _subject_clause(words: list[str], asides: dict[str, frozenset[tuple[str, ...]]]) -> bool:
    """Whether `words` open with a subject of their own and its verb: a determiner of `after_subjects`, then within
    `SUBJECT_VERB_WINDOW` words one of `clause_verbs` ("the phone is ringing", "my wife has a call"), or a noun
    whose "is" the normaliser joined to it, with more after it ("the babys sleeping", "the cakes done", "this ones
    rubbish": English morphology, like the only language that gives `after_subjects` today; a plural noun there
    reads alike, "the kids woke up", and is a clause as well), or a noun and a verb in -ed ("my daughter loved it")
    or in -ing, its "is" left out as in Singapore and by many learners ("my phone ringing", "the baby sleeping"); the
    noun may be of `NOUN_WORDS` words ("the head teachers coming").
    Without the verb, what follows a command may be the rest of it ("play music | the beatles"), so it is no
    aside."""
    if not words or (words[0],) not in asides["after_subjects"]:
        return False
    window = words[1:1 + SUBJECT_VERB_WINDOW]
    if any((word,) in asides["clause_verbs"] for word in window):
        return True
    # the noun may be of two words, as a recogniser may write one ("the head teachers coming")
    joined = any(words[k].endswith("s") for k in range(1, min(len(words) - 1, 1 + NOUN_WORDS)))
    verb_form = any(len(words[k]) >= MIN_VERB_FORM_CHARACTERS and words[k].endswith(("ed", "ing"))
                    for k in range(2, min(len(words), 2 + NOUN_WORDS)))
    return len(words) >= 3 and (joined or verb_form)


def is_prefix(text: str, grammar: Grammar, lang: str = "en") -> bool:
    """Whether the normalised `text` is a strict prefix of some longer command of the grammar.

    Used for semantic endpointing: "turn the volume" waits, since "turn the volume down to 30" may follow, while
    "pause the music" is complete. It does not say whether `text` itself is a command (ask `recognize`): a page
    dispatches early only when `recognize` matches and `is_prefix` is false. Slot checks are lenient, so it may
    answer true where no longer command exists (the page then waits for the normal end of turn), never false
    where one does. The empty text is a prefix of every command.
    """
    return _goes_on(text, grammar.language(lang), lambda walk, root: _extends(walk, root, 0))


def could_change(text: str, grammar: Grammar, lang: str = "en") -> bool:
    """Whether more words could change what `text` asks for: whether some longer command of the grammar that
    starts with `text` would mean something else than `recognize(text)` does (another intent, or other slot
    values). For text that is no command, the same as `is_prefix`.

    Semantic endpointing acts on this, not on `is_prefix`: "pause" goes on only as "pause the music", "mute" as
    "mute the sound", which pause and mute all the same, so the command acts at once; "stop" may go on as "stop the
    timer" (another intent), "turn on the lights" as "... in the kitchen" (another slot value) and "set the volume to
    fifty" as "... five" (another value of the same slot), so those wait. A slot still ahead always counts as a
    change (it adds a value); skip words ("please", "for a second") are not in the grammar's sentences, so a command
    that only they could follow is complete. It errs towards true, as `is_prefix` does: ambiguity, a longer parse
    with other slot values than the chosen one, or the step guard all say that more could change it.
    """
    match = recognize(text, grammar, lang)
    if match is None:
        return is_prefix(text, grammar, lang)
    meaning = (match.intent, json.dumps(match.slots, sort_keys=True))
    return _goes_on(text, grammar.language(lang), lambda walk, root: _changes(walk, root, 0, (), meaning))


def _goes_on(text: str, language: LanguageGrammar, search: Callable[[_Walk, TrieNode], bool]) -> bool:
    """Whether `search` finds a way on in some window of the normalised `text` (see `_windows`); the step guard
    tripping counts as one (more may come: the safe side for endpointing)."""
    normalised = normalize(text)
    tokens = normalised.split(" ") if normalised else []
    for kept in _windows(tokens, language):
        walk = _Walk(language, [tokens[i] for i in kept], MatchStats())
        try:
            if search(walk, language.trie.root):
                return True
        except _TooManySteps:
            return True
    return False


def _changes(walk: _Walk, node: TrieNode, position: int, fills: tuple[_Fill, ...], meaning: tuple[str, str]) -> bool:
    """Whether some path from `node` consumes the rest of the tokens and then goes on to a command that means
    something other than `meaning` (see `could_change`)."""
    walk.step()
    if position == len(walk.tokens):
        slots = json.dumps({fill.name: fill.value for fill in fills}, sort_keys=True)
        return any(_ahead_changes(walk, child, slots, meaning) for child in node.words.values()) or bool(node.slots)
    if any(_changes(walk, child, after, fills, meaning) for child, after in _word_children(walk, node, position)):
        return True
    if _may_read_on(walk, node, position):
        return True
    for slot, slot_child in node.slots.items():
        slot_list = walk.grammar.lists[slot.list_name]
        if slot_list.can_extend(walk.tokens, position):  # the slot's own words may go on: another value
            return True
        for end, value in slot_list.consume(walk.tokens, position):
            if _changes(walk, slot_child, end, fills + (_Fill(slot.name, value, position, end),), meaning):
                return True
    return False


def _ahead_changes(walk: _Walk, node: TrieNode, slots: str, meaning: tuple[str, str]) -> bool:
    """Whether a template that goes on through `node` (reached by more literal words) means something other than
    `meaning`: it ends there with another intent or slot values, or a slot is still ahead of it."""
    walk.step()
    if node.slots:
        return True
    if any((walk.grammar.templates[end.template].intent, slots) != meaning for end in node.ends):
        return True
    return any(_ahead_changes(walk, child, slots, meaning) for child in node.words.values())


def _windows(tokens: list[str], language: LanguageGrammar) -> Iterator[list[int]]:
    """The token positions to match, in order of trust: the utterance without skip words (or fillers) at its
    edges; then, if different, the whole utterance; then the utterance trimmed less, the more trimmed first (a skip
    phrase may end the command itself: "set a timer for a minute | please"), each edge trimmed at every point
    either edge's trimming passed; then, if different from the first, the first without any filler; then, when
    what is left is one phrase said over and over, that phrase once; last, the utterance trimmed of vocatives too,
    each edge as far as any of those trims took it, the more trimmed first (a name may end in one: "play crazy in
    love" is played whole, "turn it off love" is "turn it off")."""
    trims = _edge_trims(tokens, language, language.edge_words)
    low, high = trims[-1]
    first = list(range(low, high))
    yield first
    if (low, high) != (0, len(tokens)):
        yield list(range(len(tokens)))
    for between in reversed(trims[1:-1]):
        yield list(range(*between))
    # Each edge trimmed as far as any trim above took it, the other edge less: the trims go one phrase at a time,
    # whichever edge comes first, so "先 | 把音乐停 | 一下" is trimmed "一下" first and "把音乐停一下" (a command
    # with its "一下") would be left untried.
    tried = set(trims)
    for between in _crossed(trims, tried):
        yield list(range(*between))
    unfilled = _without_fillers(tokens, first, language.fillers)
    if unfilled and len(unfilled) != len(first):
        yield unfilled
    once = _said_once(tokens, unfilled or first)
    if once is not None:
        yield once
    if not language.vocative_words.isdisjoint(tokens):
        # crossed as above: "can i have it louder | love" keeps its "can i" (read as "i want") while the vocative
        # goes
        tried |= _crossed_edges(trims)
        for between in _crossed(_edge_trims(tokens, language, language.edge_and_vocative_words), tried):
            yield list(range(*between))


def _crossed_edges(trims: list[tuple[int, int]]) -> set[tuple[int, int]]:
    """Every window whose low edge one of `trims` reached and whose high edge one (perhaps another) reached."""
    return {(low, high) for low, _ in trims for _, high in trims if low < high}


def _crossed(trims: list[tuple[int, int]], tried: set[tuple[int, int]]) -> list[tuple[int, int]]:
    """`_crossed_edges` of `trims` not in `tried`, the more trimmed first."""
    return sorted(_crossed_edges(trims) - tried, key=lambda edges: (edges[1] - edges[0], edges))


def _within_edge_words(tokens: list[str], language: LanguageGrammar) -> tuple[int, int]:
    """Where the utterance starts and ends without the skip words (or fillers) at its edges: [low, high). A skip
    word that may be a misheard start of the next word stays (`_may_be_a_word_start`)."""
    return _edge_trims(tokens, language, language.edge_words)[-1]


def _edge_trims(tokens: list[str], language: LanguageGrammar,
                edge_words: tuple[tuple[str, ...], ...]) -> list[tuple[int, int]]:
    """[low, high) of the utterance, then after each of `edge_words` (the language's skip phrases and fillers,
    perhaps with its vocatives) trimmed from an edge, one at a time: the last is `_within_edge_words`."""
    trims = [(0, len(tokens))]
    trimmed = True
    while trimmed:
        trimmed = False
        for phrase in edge_words:
            low, high = trims[-1]
            if low + len(phrase) <= high and phrase_at(tokens, low, phrase) \
                    and not _may_be_a_word_start(tokens, low, phrase, language):
                trims.append((low + len(phrase), high))
                trimmed = True
            low, high = trims[-1]
            if low + len(phrase) <= high and phrase_at(tokens, high - len(phrase), phrase):
                trims.append((low, high - len(phrase)))
                trimmed = True
    return trims


def misheard_word_start(tokens: list[str], language: LanguageGrammar) -> str | None:
    """The grammar word an utterance may open with, heard as a skip word and the rest of the word: "unpause" for
    "and pause (the music)", else None. Skip words before it are passed over as matching passes over them (the same
    edge trimming). Matching refuses such an utterance (see `_may_be_a_word_start`); anything else that reads
    commands (the server's classifier) must refuse it too, or it acts on the opposite of what was said."""
    low, _ = _within_edge_words(tokens, language)
    for phrase, start in language.sound_alike.items():
        if phrase_at(tokens, low, phrase) and _may_be_a_word_start(tokens, low, phrase, language):
            return start + tokens[low + len(phrase)]
    return None


def _may_be_a_word_start(tokens: list[str], position: int, phrase: tuple[str, ...], language: LanguageGrammar) -> bool:
    """Whether the skip word `phrase` at `position` may be a misheard start of the next word: "and mute" for
    "unmute", "and pause" for "unpause" (the language's `sound_alike`). Skipping it would then act on the opposite
    command, so it stays, and the utterance is no command."""
    start = language.sound_alike.get(phrase)
    after = position + len(phrase)
    return start is not None and after < len(tokens) and start + tokens[after] in language.words


def _said_once(tokens: list[str], kept: list[int]) -> list[int] | None:
    """The first of `kept`'s words when they are one phrase said two or more times over ("louder louder", "skip
    it skip it"), else ``None``. People repeat a command for emphasis; the repeat adds nothing to its meaning."""
    words = [tokens[i] for i in kept]
    for length in range(1, len(words) // 2 + 1):
        if len(words) % length == 0 and words == words[:length] * (len(words) // length):
            return kept[:length]
    return None


def _without_fillers(tokens: list[str], kept: list[int], fillers: tuple[tuple[str, ...], ...]) -> list[int]:
    """`kept` less every filler phrase in it (longest phrase first at each position)."""
    out: list[int] = []
    position = 0
    while position < len(kept):
        for phrase in fillers:
            end = position + len(phrase)
            if end <= len(kept) and tuple(tokens[kept[i]] for i in range(position, end)) == phrase:
                position = end
                break
        else:
            out.append(kept[position])
            position += 1
    return out


def _readings(walk: _Walk, position: int) -> Iterator[tuple[tuple[str, ...], int]]:
    """The template words the words from `position` on may be, and where each reading ends: the word itself, and
    every phrase the language reads the words said there as (`read_as`: "my" where a template has "the", "can i
    have" where one has "i want"). Slots read the words as said."""
    yield (walk.tokens[position],), position + 1
    for said, read in walk.grammar.read_as_by_first.get(walk.tokens[position], ()):
        end = position + len(said)
        if tuple(walk.tokens[position:end]) == said:
            yield read, end


def _descend(node: TrieNode, words: tuple[str, ...]) -> TrieNode | None:
    """Where the literal `words` lead from `node`, if the trie has them."""
    for word in words:
        if (node := node.words.get(word)) is None:
            return None
    return node


def _word_children(walk: _Walk, node: TrieNode, position: int) -> list[tuple[TrieNode, int]]:
    """Where the words at `position` lead from `node` as a template's literal words (`_readings`), and the position
    after them."""
    return [(child, end) for read, end in _readings(walk, position) if (child := _descend(node, read)) is not None]


def _may_read_on(walk: _Walk, node: TrieNode, position: int) -> bool:
    """Whether the words from `position` to the end are the start of a phrase said for others (`read_as`) whose
    reading leads on from `node`: "can i" of "can i have" (read "i want"). More words may make it a command."""
    rest = tuple(walk.tokens[position:])
    return any(len(said) > len(rest) and said[: len(rest)] == rest and _descend(node, read) is not None
               for said, read in walk.grammar.read_as_by_first.get(walk.tokens[position], ()))


def _slot_options(walk: _Walk, slot: SlotRef, position: int) -> list[tuple[int, SlotValue]]:
    return walk.grammar.lists[slot.list_name].consume(walk.tokens, position)


def _is_wildcard(walk: _Walk, slot: SlotRef) -> bool:
    return isinstance(walk.grammar.lists[slot.list_name], Wildcard)


def _walk_trie(
    walk: _Walk, node: TrieNode, position: int, fills: tuple[_Fill, ...], literal: int, wildcard: int
) -> None:
    walk.step()
    walk.stats.nodes += 1
    if position == len(walk.tokens):
        for end in node.ends:
            walk.stats.templates += 1
            walk.candidates.append(_Candidate(end, fills, literal, wildcard))
        return
    for child, after in _word_children(walk, node, position):
        _walk_trie(walk, child, after, fills, literal + after - position, wildcard)
    for slot, slot_child in node.slots.items():
        is_free = _is_wildcard(walk, slot)
        for end, value in _slot_options(walk, slot, position):
            fill = _Fill(slot.name, value, position, end)
            taken = end - position if is_free else 0
            _walk_trie(walk, slot_child, end, fills + (fill,), literal, wildcard + taken)


def _scan_linear(walk: _Walk) -> None:
    for position, template in enumerate(walk.grammar.templates):
        for expansion_index, elements in enumerate(template.expansions):
            walk.stats.templates += 1
            end = TemplateEnd(position, expansion_index)
            _match_elements(walk, end, elements, 0, 0, (), 0, 0)


def _match_elements(
    walk: _Walk,
    end: TemplateEnd,
    elements: tuple[Element, ...],
    element_index: int,
    position: int,
    fills: tuple[_Fill, ...],
    literal: int,
    wildcard: int,
) -> None:
    walk.step()
    walk.stats.nodes += 1
    if element_index == len(elements):
        if position == len(walk.tokens):
            walk.candidates.append(_Candidate(end, fills, literal, wildcard))
        return
    if position == len(walk.tokens):
        return
    element = elements[element_index]
    if isinstance(element, str):
        for read, after in _readings(walk, position):
            following = element_index + len(read)
            if elements[element_index:following] == read:
                _match_elements(walk, end, elements, following, after, fills, literal + after - position, wildcard)
        return
    is_free = _is_wildcard(walk, element)
    for slot_end, value in _slot_options(walk, element, position):
        fill = _Fill(element.name, value, position, slot_end)
        taken = slot_end - position if is_free else 0
        _match_elements(walk, end, elements, element_index + 1, slot_end, fills + (fill,), literal, wildcard + taken)


def _extends(walk: _Walk, node: TrieNode, position: int) -> bool:
    """Whether some path from `node` consumes the rest of the tokens and could still go on."""
    walk.step()
    if position == len(walk.tokens):
        return node.has_continuation()
    if any(_extends(walk, child, after) for child, after in _word_children(walk, node, position)):
        return True
    if _may_read_on(walk, node, position):
        return True
    for slot, slot_child in node.slots.items():
        slot_list = walk.grammar.lists[slot.list_name]
        if slot_list.can_extend(walk.tokens, position):
            return True
        for end, _ in slot_list.consume(walk.tokens, position):
            if _extends(walk, slot_child, end):
                return True
    return False


def _choose(
    candidates: list[_Candidate], language: LanguageGrammar, text: str, tokens: list[str], kept: list[int]
) -> Match | None:
    best = min((c.wildcard_tokens, -c.literal_tokens) for c in candidates)
    top = [c for c in candidates if (c.wildcard_tokens, -c.literal_tokens) == best]
    outcomes = {_outcome(c, language) for c in top}
    if len(outcomes) != 1:
        return None
    winner = min(top, key=lambda c: _template_order(c, language))
    template = language.templates[winner.end.template]
    slots = {fill.name: fill.value for fill in winner.fills}
    starts = _token_starts(tokens)
    spans = {
        fill.name: (starts[kept[fill.start]], starts[kept[fill.end - 1]] + len(tokens[kept[fill.end - 1]]))
        for fill in winner.fills
    }
    confirmation = _confirmation(template, slots, language)
    return Match(template.intent, slots, text, spans, template.id, confirmation)


def _outcome(candidate: _Candidate, language: LanguageGrammar) -> tuple[str, str]:
    return _meaning(language.templates[candidate.end.template].intent,
                    {fill.name: fill.value for fill in candidate.fills})


def _meaning(intent: str, slots: dict[str, SlotValue]) -> tuple[str, str]:
    """What a match asks for, comparable: two readings that agree on it are the same command."""
    return intent, json.dumps(slots, sort_keys=True)


def _template_order(candidate: _Candidate, language: LanguageGrammar) -> tuple[str, int, int]:
    template: Template = language.templates[candidate.end.template]
    return template.intent, template.index, candidate.end.expansion


def _token_starts(tokens: list[str]) -> list[int]:
    starts, position = [], 0
    for token in tokens:
        starts.append(position)
        position += len(token) + 1
    return starts


def _confirmation(template: Template, slots: dict[str, SlotValue], language: LanguageGrammar) -> str | None:
    intent = language.intents[template.intent]
    slot_lists: dict[str, SlotList] = {}
    for expansion in template.expansions:
        for element in expansion:
            if isinstance(element, SlotRef):
                slot_lists[element.name] = language.lists[element.list_name]
    for text in intent.confirm:
        rendered = _render(text, slots, slot_lists, language.lang)
        if rendered is not None:
            return rendered
    return None


def _render(text: str, slots: dict[str, SlotValue], slot_lists: dict[str, SlotList], lang: str) -> str | None:
    """Fill one confirmation template, or ``None`` when it names a slot this match lacks."""
    missing = False

    def fill(found: re.Match[str]) -> str:
        nonlocal missing
        name = found.group(1)
        if name in slots:
            return _plain(slots[name])
        base = name.removesuffix(SPOKEN_SUFFIX)
        if name.endswith(SPOKEN_SUFFIX) and base in slots:
            return slot_lists[base].spoken(slots[base], lang)
        missing = True
        return ""

    rendered = CONFIRM_PLACEHOLDER.sub(fill, text)
    return None if missing else rendered


def _plain(value: SlotValue) -> str:
    """A slot value as text: whole floats without their ``.0``."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
