"""Grammars: YAML skill files compiled into one JSON-able dict, and the `Grammar` the engine matches against.

YAML is read only on the server or at build time (`compile_yaml`); the engine itself loads the compiled dict
(`Grammar.from_dict`), so it runs where PyYAML is missing, such as Pyodide in the browser.

Source file format (one language per file; later files extend or override earlier ones)::

    language: en
    skip_words: [please, can you]        # dropped from both edges of an utterance before matching
    fillers: [uh, um, just]              # dropped anywhere, but only when the utterance matches nothing otherwise
    vocatives: [love, guys]              # words for the listener, dropped from the edges like skip words but only
                                         # when the utterance is no command with them: a name may end in one
                                         # ("play crazy in love" plays "crazy in love"; "turn it off love")
    tags: [there, again]                 # words a speaker ends a request with that add nothing ("tell me the time
                                         # there", "unmute it again"): compiled into the vocatives, trimmed as they
                                         # are ("play it again" may be a template, "play out there" a name)
    sound_alike: {and: un}               # a word a recogniser may hear for a word's start ("and mute" for
                                         # "unmute"): not skipped where that start and the next word are a word
                                         # (a skip word), nor left out of a command reading (the lexicon)
    read_as: {my: the, can i have: i want}  # words that may stand where a template has others ("set my volume
                                         # to 5", "can i have the volume at 5"); a slot's value keeps them as said
    no_command_openings:                 # an utterance that opens so is no command: a recogniser's reading may
      question: [why, how do]            # not leave these words out, and the server's classifier refuses it,
      negated: [dont]                    # giving its kind (`no_command_kind`); none may open a template (a
      statement: ["(he|she) (paused|muted)"]  # bare list is of the kind `no_command`); alternatives are written
                                         # out at compile time; a longer skip phrase that opens the utterance
                                         # overrides one ("why dont you" is a request, "why" a question)
    asides:                              # a clause beside a command ("the baby's asleep, turn it down"):
      after_starts: [i, because]         # how one after the command starts
      after_persons: [i, we]             # ... when it is someone's own clause, whose durations are its own
      after_subjects: [the, my]          # ... or a subject's determiner, when a `clause_verbs` word follows
      clause_verbs: [is, are]            #   within three words ("the phone is ringing", "the baby's asleep")
      not_with: [how, if, said]          # words that make a clause no aside (a question, a condition, a quote)
      not_before: [to, and]              # words that may not end one right before the command
      not_values: [this one]             # phrases whose words are no slot's value there ("one" is a pronoun)
      subordinators: [so, while]         # what opens a clause of purpose or time after a command ("mute it so
      subordinate_allows: [can, while]   # i can talk"): there these `not_with` words are part of the clause
      reasons: [its, i cant]             # how a clause opens that says how things are: a reason, not a request
    repairs:                             # a speaker taking back what they just said ("pause the uh pause it",
      corrections: ["no", i mean]        # "five no ten minutes"): words that take it back (fillers hesitate)
      joiners: [and, then]               # words that add a second command rather than repair the first
    dislocation:                         # the object named first, then by a pronoun ("the lights | turn them on"):
      topics: [the, my]                  # words a topic opens with
      pronouns: [it, them]               # words of the command that stand for it
    names:                               # the device's own names: what is said before one was for someone else
      words: [computer]                  # ("okay class, eyes on me. computer, pause the song")
      not_after: [the, my]               # words after which one is a noun ("the computer is slow")
      not_with: [if, when]               # words before it that make what follows for later ("if he calls")
    rules:
      volume: "(volume|sound)"           # reusable expressions, referenced as <volume>
    lists:
      area:                              # a closed list; a bare string is its own value and synonym
        values: [kitchen, {value: living_room, synonyms: [living room, lounge]}]
      level: {number: {min: 0, max: 100}}
      seconds: {duration: {min: 1, max: 86400}}
      query: {wildcard: {max_tokens: 8, exclude_first: [with, it], exclude_values: [chess],
                         exclude_values_then: [with]}}
    intents:
      media.volume_set:
        requires: [level]                # every template must fill these slots (checked at load)
        confirm: ["Volume {level}."]     # the first whose placeholders the match fills is used
        sentences:
          - "set the <volume> to {level} [percent|%]"
          - "i want the <volume> at {level}"

Template syntax is in the `expression` module. Quote templates in YAML: it reads a plain value that starts with
``[`` or ``{`` as a list or a mapping. A skill file may also be JSON with the same layout, which needs no PyYAML
(and `compile_documents` takes parsed documents directly, in the browser too).

Merging, file by file in order: a new intent is added; an existing one gets the new sentences appended (all of
them replaced with ``replace: true``), its ``confirm`` replaced when given and its ``requires`` extended. Two
``values`` lists of one name merge (a repeated value gains the new synonyms) unless the later says
``replace: true``; any other list, and a rule, is replaced by the later definition. Skip words, fillers, no-command
openings and the words of ``asides`` accumulate; a later ``sound_alike`` or ``read_as`` entry for the
same words replaces the earlier one.

The compiled dict is canonical (sorted keys, sorted ``requires`` and ``skip_words``), so its `version` (the first
16 hex digits of the sha256 of its canonical JSON) changes exactly when the grammar or the engine revision does:
caches key their entries on it. Files that define disjoint intents compile to the same dict in any order.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from voxline.intents.errors import GrammarError
from voxline.intents.expression import Element, Sequence, SlotRef, expand, parse_template
from voxline.intents.normalize import normalize
from voxline.intents.slots import SlotList, Wildcard, slot_list_from_dict
from voxline.intents.trie import TemplateEnd, TemplateTrie

GRAMMAR_FORMAT = 1
"""Layout of the compiled dict; a loader refuses any other."""

ENGINE_REVISION = 18
"""Bumped whenever matching semantics change, so that the grammar version (and every cache) moves with it.
2: fillers (dropped anywhere, tried last). 3: asides (a clause beside a command, tried after everything else).
4: `read_as` (a word that may stand for a template's word); windows that keep some of the edges' skip words.
5: an aside after a command may open with a subject of its own (`after_subjects`, `clause_verbs`).
6: an utterance's edges are trimmed of skip words and fillers longest first across both.
7: an utterance that opens with a no-command opening has no aside (`recognize._with_aside`).
8: self-repairs: words a speaker took back are left out (`recognize._with_repair`, the skill file's `repairs`).
9: left dislocation: an object named before the command stands for its pronoun (`recognize._with_dislocation`);
an aside's `not_values` ("this one") hold no slot value.
10: `read_as` phrases: words of an utterance that stand where templates have other words ("can i have" for
"i want"), not only one word for one; an aside after a command opened by a subordinator ("so", "while") may hold
the `subordinate_allows` words ("so i can sleep").
11: a pronoun of a command may name a noun phrase of the clause before it, its antecedent ("no need for the timer
anymore | cancel it": `recognize._with_antecedent`).
12: a skip word at an aside's edge cuts no command ("great thanks | turn off the lights"), and a closing phrase of
skip words that ends an aside before a command ("great thank you | pause the music") is not checked as its words;
an area (a named value) in an aside bars only a command whose intent takes areas ("pause it | i'm off to the loo");
a correction of two words or more in free text tries a repair ("play the beatles no wait play the stones"), and a
subordinator with a subject in free text an aside ("play some jazz | while i cook").
13: `vocatives`: words for the listener, trimmed from the edges only when the utterance is no command with them
("turn the lights off love"; "play crazy in love" is played whole).
14: an aside that opens as one of the skill file's `asides.reasons` ("it's", "i can't") says how things are: read
as a command of its own it is the reason for the command beside it, not a second request ("skip this song, it's a
bit loud" skips; "turn it down, it's too loud" as before), unless it asks for another intent of the request's own
family (`recognize._family`: "it's dark, turn the lights off" stays none); free text that holds a command of
another intent and then a clause that may be an aside after it ("play the last one again | i missed the chorus")
makes the utterance ambiguous (`recognize._another_command_before_a_clause`).
15: a subject clause after a command may be a determiner and a word in "s" with more after it, the normaliser
having joined its "is" ("turn off the timer | the cake's done", "skip it | this one's rubbish"); no aside before a
command with one of `repairs.joiners` between the two ("set a timer and | play some music" is two requests); a
reason may name the value of a slot its command lacks ("i can't see a thing in the study | turn the light on":
`recognize._with_the_reasons_value`), and a reason's opening phrase ("i can barely") is exempt from `not_with`.
16: an aside some of whose words, said with the command, make a command of another intent is no aside ("pause di |
music for me": `recognize._aside_makes_another_command`); a command said twice, once with more slots, is the fuller
one ("lights off | lights off in the bedroom": `recognize._said_again`); `tags` trimmed as vocatives are.
17: a stammered start of a word is left out ("c- cancel the timer": `recognize.without_word_starts`); a duration in
an aside after the command that opens with a person (`asides.after_persons`: "pause it | i'll be back in two
minutes") is that clause's, barring only a command that takes one; a command of one word may follow an aside that
is a subject's clause ("this song is rubbish | skip").
18: durations of "a couple of" units and "and half" ("one hour and half"); a wildcard's `exclude_values_then` (a game
played with someone: "play chess with me"); a subject clause may be a noun (of up to two words) and a verb in -ed
or -ing ("my phone ringing", "my daughter loved it"); free text that holds a command of another intent before a
subject's clause is ambiguous too ("play the last song again | the kids loved it"); the words before one of the
device's `names` are left out when they hold no command ("okay class eyes on me | speaker pause the song":
`recognize._after_a_name`)."""

SKILLS_DIR = Path(__file__).with_name("skills")
COMPILED_BUILTIN_PATH = SKILLS_DIR / "builtin.json"
"""The compiled built-in skill pack; only the wheel ships it (the source tree compiles the YAML instead)."""

VERSION_HEX_DIGITS = 16

CONFIRM_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
"""A placeholder in a confirmation: ``{slot}`` is the value, ``{slot_spoken}`` its spoken form."""
SPOKEN_SUFFIX = "_spoken"
_DOCUMENT_KEYS = frozenset({"language", "intents", "lists", "rules", "skip_words", "fillers", "vocatives", "tags",
                            "sound_alike", "read_as",
                            "asides", "no_command_openings", "repairs", "dislocation", "names"})
_ASIDE_KEYS = ("after_starts", "after_persons", "after_subjects", "clause_verbs", "not_with", "not_before",
               "not_values", "subordinators", "subordinate_allows", "reasons")
_REPAIR_KEYS = ("corrections", "joiners")
_DISLOCATION_KEYS = ("topics", "pronouns")
_NAME_KEYS = ("words", "not_after", "not_with")
NO_COMMAND_KIND = "no_command"
"""The kind of a no-command opening given in a bare list."""
OPENING_KIND = re.compile(r"[a-z][a-z0-9_]{0,31}")
_INTENT_KEYS = frozenset({"sentences", "confirm", "requires", "replace"})


@dataclass(frozen=True)
class Template:
    """One sentence template of an intent, with every token sequence it stands for."""

    id: str
    """``intent#index``, the index counting the intent's sentences in load order."""
    intent: str
    index: int
    text: str
    """As written in the grammar."""
    expansions: tuple[tuple[Element, ...], ...]


@dataclass(frozen=True)
class Intent:
    """An intent of one language: its templates and what a match of it carries."""

    name: str
    templates: tuple[Template, ...]
    confirm: tuple[str, ...]
    """Spoken confirmation templates with ``{slot}`` / ``{slot_spoken}`` placeholders, in order of preference."""
    requires: frozenset[str]
    """Slots every template fills."""
    slot_names: frozenset[str]
    """Every slot some template may fill."""
    slot_lists: frozenset[str]
    """Every list some template's slot takes its value from."""


def phrase_at(words: Sequence[str], position: int, phrase: tuple[str, ...]) -> bool:
    """Whether `phrase` (normalised words) is said at `position` of `words` (never, at a position before the first
    word). The one check of a phrase at a place that the grammar and the matcher (`voxline.intents.recognize`) share."""
    return position >= 0 and tuple(words[position:position + len(phrase)]) == phrase


class LanguageGrammar:
    """The loaded grammar of one language, with its index."""

    def __init__(self, lang: str, data: Mapping[str, Any]) -> None:
        self.lang = lang
        self.lists: dict[str, SlotList] = {
            name: slot_list_from_dict(name, spec, lang) for name, spec in sorted(data["lists"].items())
        }
        self.rules: dict[str, Sequence] = {name: parse_template(text) for name, text in data["rules"].items()}
        self.skip_words: tuple[tuple[str, ...], ...] = tuple(
            sorted({tuple(normalize(phrase).split(" ")) for phrase in data["skip_words"]}, key=lambda p: (-len(p), p))
        )
        if ("",) in self.skip_words:
            raise GrammarError(f"{lang}: a skip word normalises to nothing")
        self.fillers: tuple[tuple[str, ...], ...] = tuple(
            sorted({tuple(normalize(phrase).split(" ")) for phrase in data.get("fillers", [])},
                   key=lambda p: (-len(p), p))
        )
        """Phrases dropped wherever they stand, longest first; see `recognize` for when."""
        if ("",) in self.fillers:
            raise GrammarError(f"{lang}: a filler normalises to nothing")
        self.edge_words: tuple[tuple[str, ...], ...] = tuple(
            sorted(set(self.skip_words) | set(self.fillers), key=lambda p: (-len(p), p)))
        """Skip words and fillers together, longest first: what is trimmed from an utterance's edges. Longest
        first across both, so that a filler is not cut short by a skip word it begins with ("那个" by "那")."""
        self.vocatives: tuple[tuple[str, ...], ...] = tuple(
            sorted({tuple(normalize(phrase).split(" ")) for phrase in data.get("vocatives", [])},
                   key=lambda p: (-len(p), p)))
        """Words for the listener ("love", "guys"), and the skill file's `tags` ("there", "again"), trimmed from the
        edges only when the utterance is no command with them (see `recognize._windows`)."""
        if ("",) in self.vocatives:
            raise GrammarError(f"{lang}: a vocative normalises to nothing")
        self.vocative_words: frozenset[str] = frozenset(word for phrase in self.vocatives for word in phrase)
        """Every word of the vocatives: an utterance with none of them is not trimmed of one (no work for it)."""
        self.edge_and_vocative_words: tuple[tuple[str, ...], ...] = tuple(
            sorted(set(self.edge_words) | set(self.vocatives), key=lambda p: (-len(p), p)))
        """`edge_words` and `vocatives` together, longest first: the edges trimmed when nothing matched within
        `edge_words`."""
        self.sound_alike: dict[tuple[str, ...], str] = {
            tuple(normalize(phrase).split(" ")): normalize(start)
            for phrase, start in data.get("sound_alike", {}).items()}
        """Skip words a recogniser may hear for the start of a word ("and" for "un"); see `recognize`."""
        self.read_as: dict[tuple[str, ...], tuple[str, ...]] = {}
        """Words of an utterance that may stand where templates have others ("my" where one has "the", "can i have"
        where one has "i want"): matched as either, never changed in a slot's value (checked below: read as words
        some template has)."""
        for phrase, as_phrase in sorted(data.get("read_as", {}).items()):
            said, read = tuple(normalize(phrase).split(" ")), tuple(normalize(as_phrase).split(" "))
            if "" in said or "" in read or said == read:
                raise GrammarError(f"{lang}: read_as {phrase!r}: {as_phrase!r} must be two different phrases")
            self.read_as[said] = read
        self.read_as_by_first: dict[str, tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]] = {}
        """`read_as` by the first word said, for the matcher."""
        for said, read in self.read_as.items():
            self.read_as_by_first[said[0]] = (*self.read_as_by_first.get(said[0], ()), (said, read))
        self.no_command_kinds: dict[tuple[str, ...], str] = {}
        """Openings of an utterance that is no command ("why", "dont"), each with its kind ("question", "negated"):
        a recogniser's command reading may not drop them (`voxline.intents.lexicon`), the server's classifier
        refuses such an utterance without asking its model; checked below to open no template."""
        for kind, phrases in sorted(_opening_kinds(data.get("no_command_openings"), lang).items()):
            for phrase in phrases:
                opening = tuple(normalize(phrase).split(" "))
                if self.no_command_kinds.setdefault(opening, kind) != kind:
                    raise GrammarError(f"{lang}: the no-command opening {phrase!r} is of two kinds, "
                                       f"{self.no_command_kinds[opening]} and {kind}")
        self.no_command_openings: tuple[tuple[str, ...], ...] = tuple(sorted(self.no_command_kinds))
        self.asides = _phrase_sets(data.get("asides", {}), _ASIDE_KEYS)
        """What tells a clause beside a command from part of it (see `recognize`); empty: no asides."""
        repairs = data.get("repairs", {})
        self.repairs: dict[str, tuple[tuple[str, ...], ...]] = {
            key: tuple(sorted({tuple(normalize(phrase).split(" ")) for phrase in repairs.get(key, [])},
                              key=lambda p: (-len(p), p)))
            for key in _REPAIR_KEYS}
        """What takes back the words before it, and what joins a second command (see `recognize._with_repair`),
        longest first; empty: no repairs."""
        if any(("",) in phrases for phrases in self.repairs.values()):
            raise GrammarError(f"{lang}: a repairs phrase normalises to nothing")
        self.dislocation = _phrase_sets(data.get("dislocation", {}), _DISLOCATION_KEYS)
        """Words a topic named before a command opens with, and the pronouns that stand for it in the command (see
        `recognize._with_dislocation`); no pronouns: no dislocation."""
        if any(len(words) != 1 for words in self.dislocation["pronouns"] | self.dislocation["topics"]):
            raise GrammarError(f"{lang}: dislocation topics and pronouns are single words")
        self.names = _phrase_sets(data.get("names", {}), _NAME_KEYS)
        """The device's own names, the words after which one is a noun, and the words that, said before one, make
        the command after it for later (see `recognize._after_a_name`); no words: what is said before a name is
        never left out."""
        self.intents: dict[str, Intent] = {}
        templates: list[Template] = []
        for name, spec in sorted(data["intents"].items()):
            intent = self._load_intent(name, spec, start=len(templates))
            self.intents[name] = intent
            templates.extend(intent.templates)
        self.templates: tuple[Template, ...] = tuple(templates)
        self.template_by_id: dict[str, Template] = {template.id: template for template in self.templates}
        self.trie = TemplateTrie()
        for position, template in enumerate(self.templates):
            for expansion_index, elements in enumerate(template.expansions):
                self.trie.add(elements, TemplateEnd(position, expansion_index))
        self.words: frozenset[str] = frozenset(
            element for template in self.templates for expansion in template.expansions for element in expansion
            if isinstance(element, str))
        """Every literal word of the templates."""
        unread = sorted(" ".join(said) for said, read in self.read_as.items() if not self.words.issuperset(read))
        if unread:
            raise GrammarError(f"{lang}: read_as reads {unread} as words no template has")
        for opening in self.no_command_openings:
            node = self.trie.root
            for word in opening:
                next_node = node.words.get(word)
                if next_node is None:
                    break
                node = next_node
            else:
                raise GrammarError(f"{lang}: the no-command opening {' '.join(opening)!r} opens a template")

    def no_command_kind(self, tokens: Sequence[str]) -> str | None:
        """The kind of the longest no-command opening that `tokens` (normalised words) open with, else None. A
        longer skip phrase that opens them overrides it: "why dont you | turn it off" is a suggestion, not a
        question ("why")."""
        for length in range(min(len(tokens), max(map(len, self.no_command_kinds), default=0)), 0, -1):
            if (kind := self.no_command_kinds.get(tuple(tokens[:length]))) is not None:
                if any(len(phrase) > length and phrase_at(tokens, 0, phrase) for phrase in self.skip_words):
                    return None
                return kind
        return None

    def _load_intent(self, name: str, spec: Mapping[str, Any], start: int) -> Intent:
        requires = frozenset(spec["requires"])
        templates = []
        slot_names: set[str] = set()
        for index, text in enumerate(spec["sentences"]):
            where = f"{self.lang} {name}#{index} {text!r}"
            try:
                expansions = tuple(expand(parse_template(text), self.rules))
            except GrammarError as error:
                raise GrammarError(f"{where}: {error.message}") from error
            for elements in expansions:
                slot_names.update(self._check_expansion(where, elements, requires))
            templates.append(Template(f"{name}#{index}", name, index, text, expansions))
        for text in spec["confirm"]:
            for placeholder in CONFIRM_PLACEHOLDER.findall(text):
                if placeholder not in slot_names and placeholder.removesuffix(SPOKEN_SUFFIX) not in slot_names:
                    raise GrammarError(f"{self.lang} {name}: confirmation {text!r} names unknown slot {placeholder!r}")
        slot_lists = frozenset(element.list_name for template in templates for expansion in template.expansions
                               for element in expansion if isinstance(element, SlotRef))
        return Intent(name, tuple(templates), tuple(spec["confirm"]), requires, frozenset(slot_names), slot_lists)

    def _check_expansion(self, where: str, elements: tuple[Element, ...], requires: frozenset[str]) -> set[str]:
        if not elements:
            raise GrammarError(f"{where}: a template must not match the empty utterance")
        names: list[str] = []
        for position, element in enumerate(elements):
            if not isinstance(element, SlotRef):
                continue
            if element.list_name not in self.lists:
                raise GrammarError(f"{where}: unknown list {{{element.list_name}}}")
            anchored = position > 0 and isinstance(elements[position - 1], str)
            if isinstance(self.lists[element.list_name], Wildcard) and not anchored:
                raise GrammarError(f"{where}: free text {{{element.name}}} must follow a literal word")
            names.append(element.name)
        if len(names) != len(set(names)):
            raise GrammarError(f"{where}: a slot appears twice in one sentence")
        missing = requires - set(names)
        if missing:
            raise GrammarError(f"{where}: some wording lacks required slot(s) {sorted(missing)}")
        return set(names)


class Grammar:
    """A loaded grammar: one `LanguageGrammar` per language, and the version of the whole."""

    def __init__(self, compiled: Mapping[str, Any]) -> None:
        self._compiled = _canonical(compiled)
        self.version = grammar_version(self._compiled)
        self.languages: dict[str, LanguageGrammar] = {
            lang: LanguageGrammar(lang, data) for lang, data in sorted(self._compiled["languages"].items())
        }

    @classmethod
    def from_dict(cls, compiled: Mapping[str, Any]) -> Grammar:
        """Load a compiled grammar (the output of `compile_yaml` or `compile_documents`, or its JSON)."""
        return cls(compiled)

    def to_dict(self) -> dict[str, Any]:
        """The canonical compiled form (a fresh copy, JSON-able)."""
        return json.loads(canonical_json(self._compiled))

    def language(self, lang: str) -> LanguageGrammar:
        """The grammar of `lang`; a regional tag falls back to its base language ("en-GB" → "en")."""
        for candidate in (lang, lang.replace("_", "-").split("-")[0].lower()):
            if candidate in self.languages:
                return self.languages[candidate]
        raise GrammarError(f"no grammar for language {lang!r} (have {sorted(self.languages)})")

    def __repr__(self) -> str:
        sizes = ", ".join(f"{lang}: {len(g.templates)} templates" for lang, g in self.languages.items())
        return f"Grammar(version={self.version!r}, {sizes})"


def canonical_json(compiled: Mapping[str, Any]) -> str:
    """The one JSON spelling of a compiled grammar that its version hashes."""
    return json.dumps(compiled, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def grammar_version(compiled: Mapping[str, Any]) -> str:
    """First 16 hex digits of the sha256 of the canonical JSON."""
    return hashlib.sha256(canonical_json(compiled).encode("utf-8")).hexdigest()[:VERSION_HEX_DIGITS]


def compile_documents(documents: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Merge source documents (parsed YAML or JSON), in order, into one checked, canonical compiled dict."""
    languages: dict[str, dict[str, Any]] = {}
    for number, document in enumerate(documents):
        _merge_document(languages, document, f"document {number}")
    compiled = _canonical({"format": GRAMMAR_FORMAT, "engine": ENGINE_REVISION, "languages": languages})
    Grammar(compiled)  # loading checks every template, list and rule, so a bad file fails here, at build time
    return compiled


def compile_yaml(paths: Iterable[str | Path]) -> dict[str, Any]:
    """Read skill files (``.yaml``/``.yml`` with PyYAML, ``.json`` without) and compile them, in order."""
    return compile_documents(read_document(Path(path)) for path in paths)


def read_document(path: Path) -> Mapping[str, Any]:
    """Parse one skill file."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        document = json.loads(text)
    else:
        try:
            import yaml
        except ImportError as error:
            raise GrammarError(
                f"{path}: PyYAML is needed to read YAML skill files; compile them to JSON with compile_yaml() "
                "on the server"
            ) from error
        document = yaml.safe_load(text)
    if not isinstance(document, Mapping):
        raise GrammarError(f"{path}: a skill file is a mapping with 'language' and 'intents'")
    return document


def builtin_skill_paths() -> list[Path]:
    """The built-in skill pack's YAML files, in a fixed order."""
    return sorted(SKILLS_DIR.glob("*.yaml"))


def load_grammar(paths: Iterable[str | Path] | None = None) -> Grammar:
    """Load skill files in order (later ones extend earlier ones); with no paths, the built-in pack.

    To add your own intents on top of the built-in ones: ``load_grammar([*builtin_skill_paths(), "mine.yaml"])``.
    """
    if paths is None:
        return builtin_grammar()
    return Grammar(compile_yaml(paths))


@functools.lru_cache(maxsize=1)
def builtin_grammar() -> Grammar:
    """The built-in skill pack, from the compiled JSON where it is shipped (the wheel), else from the YAML."""
    if COMPILED_BUILTIN_PATH.is_file():
        return Grammar(json.loads(COMPILED_BUILTIN_PATH.read_text(encoding="utf-8")))
    return Grammar(compile_yaml(builtin_skill_paths()))


# --- compiling source documents --------------------------------------------------------------------------------


def _merge_document(languages: dict[str, dict[str, Any]], document: Mapping[str, Any], where: str) -> None:
    unknown = set(document) - _DOCUMENT_KEYS
    if unknown:
        raise GrammarError(f"{where}: unknown key(s) {sorted(unknown)}")
    lang = document.get("language")
    if not isinstance(lang, str) or not lang:
        raise GrammarError(f"{where}: 'language' is required (en, zh, ...)")
    where = f"{where} ({lang})"
    target = languages.setdefault(lang, {"intents": {}, "lists": {}, "rules": {}, "skip_words": [], "fillers": []})
    for name, spec in _mapping(document.get("intents"), f"{where} intents").items():
        _merge_intent(target["intents"], str(name), _mapping(spec, f"{where} intent {name}"), f"{where} {name}")
    for name, spec in _mapping(document.get("lists"), f"{where} lists").items():
        _merge_list(target["lists"], str(name), _mapping(spec, f"{where} list {name}"), f"{where} list {name}")
    for name, text in _mapping(document.get("rules"), f"{where} rules").items():
        target["rules"][str(name)] = _string(text, f"{where} rule {name}")
    target["skip_words"].extend(_strings(document.get("skip_words", []), f"{where} skip_words"))
    target.setdefault("fillers", []).extend(_strings(document.get("fillers", []), f"{where} fillers"))
    for key in ("vocatives", "tags"):  # a tag is trimmed as a vocative is: one list in the compiled dict
        if key in document:
            target.setdefault("vocatives", []).extend(_strings(document[key], f"{where} {key}"))
    if "no_command_openings" in document:
        for kind, phrases in _opening_kinds(document["no_command_openings"], where).items():
            target.setdefault("no_command_openings", {}).setdefault(kind, []).extend(phrases)
    for phrase, start in _mapping(document.get("sound_alike"), f"{where} sound_alike").items():
        target.setdefault("sound_alike", {})[str(phrase)] = _string(start, f"{where} sound_alike {phrase}")
    for word, as_word in _mapping(document.get("read_as"), f"{where} read_as").items():
        target.setdefault("read_as", {})[str(word)] = _string(as_word, f"{where} read_as {word}")
    # word lists by key that accumulate: what tells an aside, what makes a repair
    for section, keys in (("asides", _ASIDE_KEYS), ("repairs", _REPAIR_KEYS), ("dislocation", _DISLOCATION_KEYS),
                          ("names", _NAME_KEYS)):
        given = _mapping(document.get(section), f"{where} {section}")
        unknown = set(given) - set(keys)
        if unknown:
            raise GrammarError(f"{where} {section}: unknown key(s) {sorted(unknown)}")
        for key, phrases in given.items():
            target.setdefault(section, {}).setdefault(key, []).extend(_strings(phrases, f"{where} {section} {key}"))


def _merge_intent(intents: dict[str, Any], name: str, spec: Mapping[str, Any], where: str) -> None:
    unknown = set(spec) - _INTENT_KEYS
    if unknown:
        raise GrammarError(f"{where}: unknown key(s) {sorted(unknown)}")
    sentences = _strings(spec.get("sentences", []), f"{where} sentences")
    confirm = spec.get("confirm")
    confirm_list = None if confirm is None else _strings([confirm] if isinstance(confirm, str) else confirm, where)
    requires = _strings(spec.get("requires", []), f"{where} requires")
    existing = intents.get(name)
    if existing is None or spec.get("replace", False):
        intents[name] = {"sentences": sentences, "confirm": confirm_list or [], "requires": requires}
        return
    existing["sentences"] = existing["sentences"] + sentences
    if confirm_list is not None:
        existing["confirm"] = confirm_list
    existing["requires"] = sorted(set(existing["requires"]) | set(requires))


def _merge_list(lists: dict[str, Any], name: str, spec: Mapping[str, Any], where: str) -> None:
    compiled = _compile_list(spec, where)
    existing = lists.get(name)
    if existing is None or spec.get("replace", False) or existing["kind"] != "values" or compiled["kind"] != "values":
        lists[name] = compiled
        return
    merged = {entry["value"]: list(entry["synonyms"]) for entry in existing["values"]}
    for entry in compiled["values"]:
        synonyms = merged.setdefault(entry["value"], [])
        synonyms.extend(s for s in entry["synonyms"] if s not in synonyms)
    existing["values"] = [{"value": value, "synonyms": synonyms} for value, synonyms in merged.items()]


def _compile_list(spec: Mapping[str, Any], where: str) -> dict[str, Any]:
    body = {key: value for key, value in spec.items() if key != "replace"}
    if "kind" in body:
        return dict(body)
    if len(body) != 1:
        raise GrammarError(f"{where}: expected exactly one of values, number, duration, wildcard")
    (kind, options), = body.items()
    if kind == "values":
        if not isinstance(options, list):
            raise GrammarError(f"{where}: 'values' is a list")
        return {"kind": "values", "values": [_compile_value(entry, where) for entry in options]}
    if kind in ("number", "duration"):
        options = _mapping(options, where)
        if "min" not in options or "max" not in options:
            raise GrammarError(f"{where}: a {kind} list needs min and max")
        compiled = {"kind": kind, "min": options["min"], "max": options["max"]}
        if kind == "number":
            compiled["integer"] = bool(options.get("integer", True))
        return compiled
    if kind == "wildcard":
        options = _mapping(options, where)
        return {
            "kind": "wildcard",
            "max_tokens": int(options.get("max_tokens", 8)),
            "exclude_first": sorted(set(_strings(options.get("exclude_first", []), where))),
            **({"exclude_values": sorted(set(_strings(options["exclude_values"], where)))}
               if options.get("exclude_values") else {}),
            **({"exclude_values_then": sorted(set(_strings(options["exclude_values_then"], where)))}
               if options.get("exclude_values_then") else {}),
        }
    raise GrammarError(f"{where}: unknown list kind {kind!r} (values, number, duration or wildcard)")


def _compile_value(entry: Any, where: str) -> dict[str, Any]:
    if isinstance(entry, (str, int, float)) and not isinstance(entry, bool):
        return {"value": entry, "synonyms": [str(entry)]}
    entry = _mapping(entry, where)
    if "value" not in entry:
        raise GrammarError(f"{where}: a list entry needs a 'value'")
    synonyms = entry.get("synonyms", [str(entry["value"])])
    return {"value": entry["value"], "synonyms": _strings([synonyms] if isinstance(synonyms, str) else synonyms, where)}


def _canonical(compiled: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(compiled, Mapping) or compiled.get("format") != GRAMMAR_FORMAT:
        raise GrammarError(f"not a compiled grammar of format {GRAMMAR_FORMAT}")
    languages = {}
    for lang, data in _mapping(compiled.get("languages"), "languages").items():
        intents = {
            name: {
                "sentences": list(spec.get("sentences", [])),
                "confirm": list(spec.get("confirm", [])),
                "requires": sorted(set(spec.get("requires", []))),
            }
            for name, spec in _mapping(data.get("intents"), f"{lang} intents").items()
        }
        languages[lang] = {
            "intents": intents,
            "lists": dict(_mapping(data.get("lists"), f"{lang} lists")),
            "rules": dict(_mapping(data.get("rules"), f"{lang} rules")),
            "skip_words": sorted(set(data.get("skip_words", []))),
            "fillers": sorted(set(data.get("fillers", []))),
            **({"vocatives": sorted(set(data["vocatives"]))} if data.get("vocatives") else {}),
            **({"sound_alike": dict(_mapping(data["sound_alike"], f"{lang} sound_alike"))}
               if data.get("sound_alike") else {}),
            **({"read_as": dict(_mapping(data["read_as"], f"{lang} read_as"))} if data.get("read_as") else {}),
            **({"no_command_openings": {kind: sorted(set(_expanded_openings(phrases, f"{lang} {kind}")))
                                        for kind, phrases in
                                        sorted(_opening_kinds(data["no_command_openings"], lang).items())}}
               if data.get("no_command_openings") else {}),
            **{section: {key: sorted(set(_strings(phrases, f"{lang} {section} {key}")))
                         for key, phrases in sorted(_mapping(data[section], f"{lang} {section}").items())}
               for section in ("asides", "repairs", "dislocation", "names") if data.get(section)},
        }
    return json.loads(canonical_json({"format": GRAMMAR_FORMAT, "engine": ENGINE_REVISION, "languages": languages}))


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise GrammarError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _phrase_sets(section: Mapping[str, Any], keys: Sequence[str]) -> dict[str, frozenset[tuple[str, ...]]]:
    """A compiled section of word lists by key (`asides`, `dislocation`): each key's phrases as normalised words."""
    return {key: frozenset(tuple(normalize(phrase).split(" ")) for phrase in section.get(key, [])) for key in keys}


def _opening_kinds(value: Any, where: str) -> dict[str, list[str]]:
    """``no_command_openings``: kind → phrases (a bare list is of the kind ``no_command``); empty when absent."""
    if value is None:
        return {}
    if isinstance(value, list):
        return {NO_COMMAND_KIND: _strings(value, f"{where} no_command_openings")}
    kinds = {}
    for kind, phrases in _mapping(value, f"{where} no_command_openings").items():
        if not isinstance(kind, str) or not OPENING_KIND.fullmatch(kind):
            raise GrammarError(f"{where} no_command_openings: {kind!r} is no kind (a name such as question)")
        kinds[kind] = _strings(phrases, f"{where} no_command_openings {kind}")
    return kinds


def _expanded_openings(phrases: list[str], where: str) -> list[str]:
    """No-command openings with the alternatives of template syntax written out ("(he|she) (paused|muted)" is four
    openings); a plain phrase stays as written. Openings take no slots nor rules."""
    out = []
    for phrase in phrases:
        if not any(character in phrase for character in "()[]|"):
            out.append(phrase)
            continue
        try:
            expansions = expand(parse_template(phrase), {})
        except GrammarError as error:
            raise GrammarError(f"{where} no_command_openings {phrase!r}: {error.message}") from error
        for words in expansions:
            if not words or not all(isinstance(word, str) for word in words):
                raise GrammarError(f"{where} no_command_openings {phrase!r}: an opening is words only")
            out.append(" ".join(words))
    return out


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise GrammarError(f"{where}: expected text, got {value!r}")
    return value


def _strings(values: Any, where: str) -> list[str]:
    if not isinstance(values, list):
        raise GrammarError(f"{where}: expected a list of text, got {values!r}")
    return [_string(value, where) for value in values]
