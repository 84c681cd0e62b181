"""Server resolution of paraphrased commands: the LLM as a constrained classifier in front of the chat.

When the grammar does not match an utterance, the server asks, before the LLM chats, whether it is still one of
the known intents ("I can barely hear it, raise the volume"). The route, in three steps:

1. **Rewrite.** The LLM (the chat model's own CTranslate2 generator, so no second model is loaded) is given a
   fixed prompt listing one canonical command per intent and a few examples, then the utterance, and writes one
   canonical command or ``none``, greedily. The prompt is a static prefix that CTranslate2 keeps the KV state of
   (`static_prompt`), so a call prefills only the utterance's ~10-30 tokens and decodes ~3-8.
2. **Parse.** The command is parsed by the grammar itself (`recognize`, English templates): an output that is not
   exactly one command of the grammar is ``none``; slot values come out typed and range-checked by the grammar's
   slot lists (a level of 0-100, a duration of 1 s-24 h, a known area).
3. **Accept.** Only when (a) the model's own probability of the command it wrote, exp of the sum of its tokens'
   log-probabilities, is at least `ClassifierConfig.min_command_prob` (so "none" and every other command together
   are less likely), or it is at least `agree_min_prob` and the utterance's nearest intent by meaning
   (`intent_neighbours`: sentence embeddings of the grammar's own sentences, a model of another kind) is the same
   intent, at a cosine similarity of at least `agree_min_similarity`; and (b) every slot value is grounded in the
   utterance: the same value is found in the user's words by the slot's list in the user's language
   (`grounded`), so a number or a room the model invented is refused. Precision before recall: anything else goes
   to the chat as before.

The decision functions (`parse_command`, `grounded`, `accept`) are pure and tested without a model; `LLMClassifier`
is the model-backed part. Why this route (measured with `voxline bench classify`): scoring every intent's
command with `Generator.score_batch` has no static prefix, so each of the 17 candidates re-reads the whole prompt
(17× the prefill); restricted generation over the few tokens of a canonical command costs one short decode.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from voxline.intents import Grammar, Match, normalize, recognize
from voxline.intents.grammar import LanguageGrammar
from voxline.intents.recognize import free_text_spans, misheard_word_start, slot_list_names
from voxline.intents.slots import Wildcard
from voxline.paths import model_dir
from voxline.server.intent_neighbours import IndexCache, IntentNeighbours, Neighbour

log = logging.getLogger(__name__)

NEIGHBOURS_MODEL = "minilm-l6-v2"
"""The sentence encoder of the intent neighbours (models/manifest.json)."""
NONE = "none"
"""What the model writes for an utterance that is no command."""
COMMAND_LANG = "en"
"""Canonical commands are English templates of the grammar, whatever language the user spoke."""

CANONICAL_COMMANDS: dict[str, tuple[str, ...]] = {
    "media.play": ("play music", "play <artist or song>"),
    "media.pause": ("pause the music",),
    "media.resume": ("resume the music",),
    "media.stop": ("stop the music",),
    "media.next": ("next song",),
    "media.previous": ("previous song",),
    "media.volume_up": ("volume up",),
    "media.volume_down": ("volume down",),
    "media.volume_set": ("set the volume to <0-100> percent",),
    "media.mute": ("mute",),
    "media.unmute": ("unmute",),
    "timer.set": ("set a timer for <duration>",),
    "timer.cancel": ("cancel the timer",),
    "clock.time": ("what time is it",),
    "lights.on": ("turn on the lights", "turn on the <room> lights"),
    "lights.off": ("turn off the lights", "turn off the <room> lights"),
    "assistant.stop": ("stop talking",),
}
"""The command the model writes for each default intent (each is a template of en.yaml); other intents of a
grammar are offered by their first English template."""

EXAMPLES: tuple[tuple[str, str], ...] = (
    ("could you make it a touch quieter", "volume down"),
    ("crank it up, I love this part", "volume up"),
    ("what is the volume at", NONE),
    ("hold everything, I need to take this call", "pause the music"),
    ("okay, you can start the song again", "resume the music"),
    ("throw on some Miles Davis", "play Miles Davis"),
    ("I love this song", NONE),
    ("not this one, the next", "next song"),
    ("can we hear that one again from before", "previous song"),
    ("shut the music off for good", "stop the music"),
    ("how long does a timer last", NONE),
    ("put the volume at eighty", "set the volume to 80 percent"),
    ("kill the audio", "mute"),
    ("bring back the audio", "unmute"),
    ("I need twenty five minutes on the clock for the pasta", "set a timer for 25 minutes"),
    ("what's the weather like today", NONE),
    ("forget the countdown", "cancel the timer"),
    ("got the time?", "what time is it"),
    ("darken the kitchen", "turn off the kitchen lights"),
    ("some light in the garage please", "turn on the garage lights"),
    ("my favourite music is jazz", NONE),
    ("alright, be quiet now", "stop talking"),
)
"""Few-shot examples in the static prompt (written for the prompt; none is in a test or evaluation list)."""

SYSTEM = (
    "You turn what a user says to a voice assistant into one device command, or none.\n"
    "Commands:\n{commands}\n"
    "Rooms: {rooms}.\n"
    "When the user asks for one of these actions, in any words, write its command exactly as listed, with <...> "
    "filled in from the user's words, and nothing else. Write none only when the user asks a question, chats, or "
    "talks about music, volume, timers, time or lights without asking for an action."
)


AGREE_MIN_PROB = 0.25
AGREE_MIN_SIMILARITY = 0.72
"""Calibrated with `voxline bench classify` (Qwen2.5 0.5B, its 52 development paraphrases and 60 out-of-domain
lines): below a similarity of ~0.72 the agreeing neighbours were statements about the domain ("pause is a word
with five letters" 0.69, "what does previous mean" 0.62); from it, 8 more paraphrases and no out-of-domain line."""
NEIGHBOURS_WAIT_S = 60.0
"""How long a classification waits for the neighbour index being built (seconds, once per server)."""


@dataclass(frozen=True)
class ClassifierConfig:
    """Settings of the classifier; the defaults are the calibrated ones (`voxline bench classify`)."""

    min_command_prob: float = 0.7
    """Accept a command only when the model's probability of the whole command it wrote is at least this.
    Calibrated with `voxline bench classify` (Qwen2.5 0.5B, 52 paraphrases, 60 out-of-domain): 0.5 accepted 3 of
    60 out-of-domain, 0.7 one ("what does mute mean"), 0.8 none but resolved 4 fewer paraphrases."""
    agree_min_prob: float = AGREE_MIN_PROB
    """A less likely command is still accepted when the nearest intent by meaning agrees (see the module header)."""
    agree_min_similarity: float = AGREE_MIN_SIMILARITY
    """The similarity the agreeing neighbour must reach."""
    max_command_tokens: int = 16
    """Longest command the model may write (the longest canonical one with a song name fits)."""
    max_utterance_chars: int = 300
    """Longer utterances are not commands: they go to the chat without asking the classifier."""
    max_utterance_words: int = 24
    """Same, in words."""


@dataclass(frozen=True)
class Classification:
    """The classifier's verdict on one utterance."""

    match: Match | None
    """The accepted command (intent, typed slots), or None."""
    command: str
    """What the model wrote (normalised); ``none`` when it said so or was not asked."""
    command_prob: float
    """The model's probability of `command` (0 when not asked), the words of its free-text slots left out
    (`without_free_text`)."""
    reason: str
    """``accepted``, ``agreed`` (less likely, but the nearest intent by meaning is the same), ``none``,
    ``unparsed``, ``low_probability``, ``ungrounded``, ``too_long``, ``off_domain`` (no content word of the
    commands: the model is not asked) or ``empty``."""
    elapsed_s: float = 0.0
    neighbour: Neighbour | None = None
    """The nearest intent by meaning, where it was asked."""


# --- pure decisions ------------------------------------------------------------------------------------------------


def command_lines(grammar: Grammar) -> list[str]:
    """The prompt's list of commands: the canonical ones of the default intents, then one per other intent."""
    language = grammar.language(COMMAND_LANG)
    lines: list[str] = []
    for intent in sorted(language.intents):
        if intent in CANONICAL_COMMANDS:
            lines.extend(CANONICAL_COMMANDS[intent])
        else:
            lines.append(language.intents[intent].templates[0].text)
    return lines


def room_names(grammar: Grammar) -> list[str]:
    """The spoken names of the `area` list (first synonym of each value), for the prompt."""
    area = grammar.language(COMMAND_LANG).lists.get("area")
    return [value.synonyms[0] for value in getattr(area, "values", ())]


FUNCTION_WORDS = frozenset(
    "a an the this that these those it its i me my mine you your we us our they them their he him his she her "
    "is are was were be been being am do does did have has had will would can could shall should may might must "
    "what whats who whom whose which where when why how and or but if so not no yes of for with about at by from "
    "as than then there here please just some any all to into like tell make give get let go want need know think "
    "say again really very much one ok okay now right well".split())
"""English words that say nothing about the domain: sharing only these with the grammar is no sign of a command."""
DURATION_WORDS = frozenset("second seconds minute minutes hour hours".split())


def domain_vocabulary(grammar: Grammar, lang: str = COMMAND_LANG) -> frozenset[str]:
    """The content words of `lang`'s commands: template words, list values, duration units and canonical commands."""
    language = grammar.language(lang)
    words: set[str] = set(DURATION_WORDS)
    for template in language.templates:
        for expansion in template.expansions:
            words.update(element for element in expansion if isinstance(element, str))
    for slot_list in language.lists.values():
        for entry in getattr(slot_list, "values", ()):
            for synonym in entry.synonyms:
                words.update(normalize(synonym).split())
    for commands in CANONICAL_COMMANDS.values():
        for command in commands:
            words.update(normalize(command).split())
    return frozenset(words - FUNCTION_WORDS)


OTHER_THINGS = frozenset(
    "alarm alarms tv television telly oven stove hob dishwasher blinds curtains heating heater thermostat fan "
    "kettle door doors lock car remind reminder reminders calendar shopping weather phone fridge microwave vacuum "
    "hoover laptop computer microphone mic webcam camera tablet notifications email emails messages washer "
    "dryer".split())
"""English nouns of what this assistant cannot act on (other devices and skills): "turn off my alarm" and "mute
the tv" are requests, but not for these intents, however the model rewrites them."""
OWN_THINGS = frozenset(
    "timer countdown music song songs track tracks tune light lights lamp lamps volume sound radio podcast speaker "
    "playlist album time".split())
"""What these intents act on: an utterance that names one of them too ("I need a reminder, set a timer") is asked."""


def not_a_request(utterance: str, language: LanguageGrammar) -> str | None:
    """Why `utterance` is plainly not a request to act, else ``None``: the classifier is not asked then. The kind of
    the language's no-command opening it starts with (en.yaml's `no_command_openings`: `question` "what does mute
    mean", `someone_else` "ask mum to pause it", `negated` "please don't mute yourself"; the same openings after
    which the browser reads no command), or `something_else`: it names a device or skill this assistant has not
    (English only). It errs towards asking (a request phrased oddly still reaches the model), so it only spares
    out-of-domain lines the model would sometimes have rewritten into a command. "I don't want any more music" is
    a request all the same: only the opening counts. Or `sound_alike`: it opens with what may be a grammar word
    misheard as two ("and pause" for "unpause": the language's `sound_alike`), which the grammar refuses too, since
    reading it as the command after the skip word acts on the opposite of what was said."""
    tokens = normalize(utterance).split()
    if (kind := language.no_command_kind(tokens)) is not None:
        return kind
    if misheard_word_start(tokens, language) is not None:
        return "sound_alike"
    if any(token in OTHER_THINGS for token in tokens) and not any(token in OWN_THINGS for token in tokens):
        return "something_else"
    return None


def could_be_command(utterance: str, vocabulary: frozenset[str]) -> bool:
    """Whether `utterance` shares a content word with the commands: necessary, not sufficient, for the classifier
    to be asked at all. It can only be too lenient (ask about "what does mute mean"), never too strict for a
    paraphrase that names what it acts on; one that names nothing of the domain ("make it stop") may be missed."""
    return any(word in vocabulary for word in normalize(utterance).split())


def parse_command(reply: str, grammar: Grammar) -> Match | None:
    """The grammar's reading of what the model wrote, or None for ``none`` or anything not exactly one command."""
    text = normalize(reply.strip().splitlines()[0] if reply.strip() else "")
    if not text or text == NONE:
        return None
    return recognize(text, grammar, COMMAND_LANG)


def grounded(match: Match, utterance: str, grammar: Grammar, lang: str) -> bool:
    """Whether every slot value of `match` is said in `utterance`, read by the slot's own list in `lang`.

    Values, numbers and durations: some run of the utterance's words must give the same value. Free text: its
    words must appear in the utterance in a row. A slot whose list the language lacks is not grounded."""
    if not match.slots:
        return True
    tokens = normalize(utterance).split()
    command = grammar.language(COMMAND_LANG)
    try:
        spoken = grammar.language(lang)
    except Exception:  # noqa: BLE001 - an unknown language grounds nothing
        return False
    list_names = slot_list_names(command, match.template)
    for slot, value in match.slots.items():
        slot_list = spoken.lists.get(list_names.get(slot, slot))
        if slot_list is None:
            return False
        if isinstance(slot_list, Wildcard):
            words = normalize(str(value)).split()
            if not words or not _contains(tokens, words):
                return False
            continue
        found = {found_value for i in range(len(tokens)) for _, found_value in slot_list.consume(tokens, i)}
        if value not in found:
            return False
    return True


def without_free_text(prob: float, steps: Sequence[tuple[str, float]], match: Match, grammar: Grammar) -> float:
    """The model's probability of `match`'s command with the words of its free-text slots left out: how sure it is
    of *which* command, not of how to spell a song's name ("play the beatles" against "play beatles"; the name is
    checked by `grounded` instead). `steps`: the written text after each generated token and that token's
    log-probability (`LLMClassifier.rewrite`); a token counts as the slot's when what it adds to the normalised text
    overlaps the slot's span. `prob` itself when the command has no free text or the steps do not add up to it."""
    spans = free_text_spans(match, grammar.language(COMMAND_LANG))
    if not spans or not steps or prob <= 0.0:
        return prob
    if abs(sum(lp for _, lp in steps) - math.log(prob)) > 1e-3:
        return prob  # the steps are not the sequence scored (a model that reports them otherwise)
    kept = 0.0
    before = 0
    for text, logprob in steps:
        after = len(normalize(text.strip().splitlines()[0] if text.strip() else ""))
        if not any(start < after and before < end for start, end in spans):
            kept += logprob
        before = after
    return math.exp(kept)


ACCEPTED = frozenset({"accepted", "agreed"})


def accept(match: Match | None, command_prob: float, is_grounded: bool, config: ClassifierConfig,
           neighbour: Neighbour | None = None) -> str:
    """The reason code for one verdict (one of `ACCEPTED` only when every condition holds)."""
    if match is None:
        return "unparsed"
    agrees = (neighbour is not None and neighbour.intent == match.intent
              and neighbour.similarity >= config.agree_min_similarity and command_prob >= config.agree_min_prob)
    if command_prob < config.min_command_prob and not agrees:
        return "low_probability"
    if not is_grounded:
        return "ungrounded"
    return "accepted" if command_prob >= config.min_command_prob else "agreed"


def _contains(tokens: Sequence[str], words: Sequence[str]) -> bool:
    n = len(words)
    return any(list(tokens[i:i + n]) == list(words) for i in range(len(tokens) - n + 1))


# --- the model-backed part -----------------------------------------------------------------------------------------


@dataclass
class LLMClassifier:
    """Asks a loaded `voxline.llm.LLM` (its CTranslate2 generator and tokenizer) to rewrite an utterance."""

    llm: object
    grammar: Grammar
    config: ClassifierConfig = field(default_factory=ClassifierConfig)
    neighbours: IntentNeighbours | None = None
    """The second opinion; None: the model's probability alone decides (`build_neighbours` sets it)."""

    def __post_init__(self) -> None:
        self._neighbours_built = threading.Event()
        self._neighbours_built.set()  # nothing to wait for until `defer_neighbours`
        self._vocabulary = domain_vocabulary(self.grammar)
        rooms = ", ".join(room_names(self.grammar)) or "none"
        system = SYSTEM.format(commands="\n".join(command_lines(self.grammar)), rooms=rooms)
        fmt = self.llm.format
        prefix = fmt.message("system", system) + "".join(
            fmt.message("user", said) + fmt.message("assistant", command) for said, command in EXAMPLES)
        self._static = self._tokens(prefix)

    def screen(self, utterance: str, lang: str = "en") -> Classification | None:
        """The verdict on `utterance` when it needs no model (well under a millisecond: empty, too long, no word of
        the domain, a no-command opening), else None: only `classify` can tell."""
        started = time.perf_counter()
        text = " ".join(utterance.split())
        if not text:
            return Classification(None, NONE, 0.0, "empty")
        if len(text) > self.config.max_utterance_chars or len(text.split()) > self.config.max_utterance_words:
            return Classification(None, NONE, 0.0, "too_long")
        if lang == COMMAND_LANG and not could_be_command(text, self._vocabulary):
            return Classification(None, NONE, 0.0, "off_domain", time.perf_counter() - started)
        if lang == COMMAND_LANG and (why := not_a_request(text, self.grammar.language(COMMAND_LANG))) is not None:
            return Classification(None, NONE, 0.0, why, time.perf_counter() - started)
        return None

    def classify(self, utterance: str, lang: str = "en") -> Classification:
        """The verdict on `utterance` (blocking: run it in a worker thread)."""
        started = time.perf_counter()
        if (screened := self.screen(utterance, lang)) is not None:
            return screened
        text = " ".join(utterance.split())
        reply, prob, steps = self.rewrite(text)
        match = parse_command(reply, self.grammar)
        if match is not None:
            prob = without_free_text(prob, steps, match, self.grammar)
        command = normalize(reply.strip().splitlines()[0]) if reply.strip() else NONE
        if command == NONE:
            return Classification(None, command, prob, "none", time.perf_counter() - started)
        is_grounded = match is not None and grounded(match, text, self.grammar, lang)
        # Only asked when it can change the verdict: a parsed, grounded command the model is unsure of, said in the
        # language of the neighbours' sentences (the encoder is English-only).
        unsure = (lang == COMMAND_LANG and match is not None and is_grounded
                  and self.config.agree_min_prob <= prob < self.config.min_command_prob)
        neighbour = self._nearest(text) if unsure else None
        reason = accept(match, prob, is_grounded, self.config, neighbour)
        accepted = match if reason in ACCEPTED else None
        return Classification(accepted, command, prob, reason, time.perf_counter() - started, neighbour)

    def defer_neighbours(self) -> None:
        """Classifications from now on wait (bounded) for `build_neighbours`, running or about to run elsewhere."""
        self._neighbours_built.clear()

    def build_neighbours(self, encoder_dir) -> None:
        """Embed the grammar's sentences for the second opinion, or read them from the model cache when embedded
        before (seconds the first time: call it off the event loop). A missing or broken encoder leaves the model's
        probability alone to decide, and says so in the log."""
        try:
            from voxline.sentence_encoder import SentenceEncoder

            self.neighbours = IntentNeighbours(SentenceEncoder(encoder_dir), self.grammar, COMMAND_LANG,
                                               cache=IndexCache.for_encoder(encoder_dir))
        except Exception:  # noqa: BLE001 - the classifier works without it
            log.exception("intent neighbours not used: the sentence encoder in %s could not be loaded", encoder_dir)
        finally:
            self._neighbours_built.set()

    def _nearest(self, text: str) -> Neighbour | None:
        self._neighbours_built.wait(NEIGHBOURS_WAIT_S)
        return self.neighbours.nearest(text) if self.neighbours is not None else None

    def warm_up(self) -> None:
        """Prefill and cache the static prompt (~700 tokens: seconds on a CPU) now, so that the first utterance
        that needs the classifier does not pay for it. It asks the model directly: `classify` turns most words away
        before the model (`could_be_command`), and a warm-up through it ("hello") never reached the model."""
        self.rewrite(WARM_UP_UTTERANCE)

    def rewrite(self, utterance: str) -> tuple[str, float, tuple[tuple[str, float], ...]]:
        """(what the model writes for `utterance`, its probability, and each step's text and log-probability: the
        written text so far, decoded, so that a step's words are told by what it adds), greedy, from the cached
        static prompt."""
        fmt = self.llm.format
        rest = self._tokens(fmt.message("user", self.llm.neutralize(utterance)) + fmt.generation_prompt())
        logprobs: list[tuple[int, float]] = []

        def step(result) -> bool:
            logprobs.append((result.token_id, result.log_prob))
            return False

        result = self.llm.generator.generate_batch(
            [rest], static_prompt=self._static, max_length=self.config.max_command_tokens,
            include_prompt_in_result=False, end_token=list(fmt.stop_tokens), return_scores=True,
            length_penalty=0.0, beam_size=1, callback=step,
        )[0]
        ids = result.sequences_ids[0] if result.sequences_ids else []
        reply = self.llm.tokenizer.decode(ids).strip()
        score = result.scores[0] if result.scores else -math.inf
        steps = tuple((self.llm.tokenizer.decode([i for i, _ in logprobs[:k + 1]]), lp)
                      for k, (_, lp) in enumerate(logprobs))
        return reply, math.exp(score) if score > -50 else 0.0, steps

    def _tokens(self, text: str) -> list[str]:
        return self.llm.tokenizer.encode(text, add_special_tokens=False).tokens


WARM_UP_UTTERANCE = "turn the lights on"
"""What the warm-up asks the model (any utterance: what matters is the static prompt it prefills)."""

CALIBRATED: dict[str, ClassifierConfig] = {
    "qwen2.5-0.5b-instruct-ct2": ClassifierConfig(),
}
"""The LLMs the classifier was calibrated for (`voxline bench classify`), with their settings. Another LLM is not
asked: SmolLM2 135M, tried, wrote chat or loops ("no no no ...") instead of commands, so asking it would only
add its cost to every chat turn."""


def classifier_for(engines) -> LLMClassifier | None:
    """The server's classifier, built once per `Engines` (when they load); None when the setting is off, the LLM is
    not one in `CALIBRATED`, or it is not in this process (the Ray engine's LLM runs as a deployment)."""
    if engines.settings.intent_classifier != "llm":
        return None
    cached = engines.__dict__.get("_intent_classifier")
    if cached is None:
        llm = engines.llm
        config = CALIBRATED.get(getattr(llm, "name", ""))
        usable = all(hasattr(llm, name) for name in ("generator", "tokenizer", "format", "neutralize"))
        if config is None or not usable:
            log.info("intent classifier not used: LLM %r is %s", getattr(llm, "name", llm),
                     "not calibrated for it" if usable else "not in this process")
            engines.__dict__["_intent_classifier"] = False
            return None
        try:
            cached = LLMClassifier(llm, engines.grammar, config)
        except Exception:  # a broken model must fail the chat turn with its own error, not here
            log.exception("intent classifier not used: it could not be built on LLM %r", getattr(llm, "name", llm))
            return None
        engines.__dict__["_intent_classifier"] = cached
        # The first call prefills the static prompt (~700 tokens, seconds on a CPU), and the neighbours embed the
        # grammar's sentences (seconds): do both now, beside the turn that built the classifier, rather than in
        # the first turn that needs them.
        neighbours = engines.settings.intent_neighbours
        if neighbours:
            cached.defer_neighbours()

        def warm_up() -> None:
            if neighbours:
                cached.build_neighbours(model_dir(NEIGHBOURS_MODEL))
            cached.warm_up()

        threading.Thread(target=warm_up, name="voxline-classifier-warm-up", daemon=True).start()
    return cached or None
