"""Requests said as wanting, suggesting or needing something ("can i have it louder", "how about the next track"),
a clause of purpose or time after a command ("turn it down so i can think"), and forms of other varieties of English
(issue 13, the eighth round). The sentences here are my own, written for these tests; none is a line of an
evaluation set."""

from __future__ import annotations

import pytest

from voxline.intents import Grammar, builtin_grammar, compile_documents, recognize


@pytest.fixture(scope="module")
def grammar() -> Grammar:
    return builtin_grammar()


def tiny(asides: dict) -> Grammar:
    document = {
        "language": "en",
        "intents": {"m.down": {"sentences": ["turn it down"]}, "m.stop": {"sentences": ["stop the music"]}},
        "skip_words": ["please", "so"],
        "asides": {"after_starts": ["so", "while"], "not_with": ["can", "you", "while", "tv"], **asides},
    }
    return Grammar.from_dict(compile_documents([document]))


def test_a_clause_of_purpose_after_a_command_may_say_what_the_speaker_can_do():
    before = tiny({})
    assert recognize("turn it down so i can think", before) is None  # "can" made every clause none
    grammar = tiny({"subordinators": ["so", "while"], "subordinate_allows": ["can", "while"]})
    assert recognize("turn it down so i can think", grammar).intent == "m.down"
    assert recognize("stop the music while i take a call", grammar).intent == "m.stop"
    # the clause is still no question to the assistant, nor about another device
    assert recognize("turn it down so you can hear me", grammar) is None
    assert recognize("turn it down so i can watch the tv", grammar) is None
    # only a clause after the command; and only one opened by a subordinator
    assert recognize("so i can think turn it down", grammar) is None
    assert recognize("turn it down i can think", grammar) is None


@pytest.mark.parametrize(("text", "intent", "slots"), [
    # wanting, suggesting, needing
    ("how about the next song", "media.next", {}),
    ("what about the previous track", "media.previous", {}),
    ("let's have the volume at forty", "media.volume_set", {"level": 40}),
    ("any chance of a timer for five minutes", "timer.set", {"seconds": 300}),
    ("i'm gonna need a timer for two minutes", "timer.set", {"seconds": 120}),
    ("i'm going to need you to mute it", "media.mute", {}),
    ("let's hear the last song again", "media.previous", {}),
    ("i want the last track back", "media.previous", {}),
    # purpose and time after the command
    ("turn it down so i can hear myself think", "media.volume_down", {}),
    ("switch the lights on in the garage so i can find my keys", "lights.on", {"area": "garage"}),
    ("mute the music while i'm on this call", "media.mute", {}),
    ("stop the music because i'm heading out", "media.stop", {}),
    # how completely, how long
    ("turn the music off for the night", "media.stop", {}),
    ("stop the podcast entirely", "media.stop", {}),
    ("mute it for the moment", "media.mute", {}),
    # other varieties of English
    ("kindly switch off the bedroom light", "lights.off", {"area": "bedroom"}),
    ("on the light in the kitchen", "lights.on", {"area": "kitchen"}),
    ("off the lights for the garage", "lights.off", {"area": "garage"}),
    ("can skip this song or not", "media.next", {}),
    ("reduce the volume small", "media.volume_down", {}),
    ("next song yaar", "media.next", {}),
    # the assistant's own talk, the clock, the mute
    ("you can stop there", "assistant.stop", {}),
    ("stop reading it out", "assistant.stop", {}),
    ("no more chatter", "assistant.stop", {}),
    ("have you the time on you", "clock.time", {}),
    ("play chess club radio", "media.play", {"query": "chess club radio"}),
    ("set a timer for an hour and a quarter", "timer.set", {"seconds": 4500}),
    ("timer for three quarters of an hour", "timer.set", {"seconds": 2700}),
    ("give me ten minutes on the timer", "timer.set", {"seconds": 600}),
    ("could we get some more volume", "media.volume_up", {}),
    ("can i have it a little lower", "media.volume_down", {}),
    ("little bit louder", "media.volume_up", {}),
    ("i'd like the hallway lights on", "lights.on", {"area": "hallway"}),
    ("pick up the music where we left off", "media.resume", {}),
    ("keep it going from where it stopped", "media.resume", {}),
    ("off the music please", "media.stop", {}),
    ("give us the next track", "media.next", {}),
    ("is there any way to mute this", "media.mute", {}),
    ("that's fine you can stop now", "assistant.stop", {}),
    ("skip this track this one is awful", "media.next", {}),
    ("any idea what time it is", "clock.time", {}),
    ("take the podcast off pause", "media.resume", {}),
    ("remove the mute", "media.unmute", {}),
    ("make it on mute", "media.mute", {}),
])
def test_requests_of_the_eighth_round(grammar, text, intent, slots):
    match = recognize(text, grammar)
    assert match is not None and (match.intent, match.slots) == (intent, slots)


@pytest.mark.parametrize("text", [
    "how about the weather",
    "any chance of rain tomorrow",
    "let's have dinner",
    "i'm gonna need a bigger boat",
    "the kids go and play in the garden",
    "mute it so you can hear me",
    "turn the lights off so i can see if it works",
    "can you stop the tv so i can sleep",
    "what about the timer",
    # a game, a sport or an instrument is nothing to play here; a name that begins with one is
    "can you play chess",
    "i want to play the piano",
    "let's play football",
])
def test_what_only_looks_like_such_a_request_is_no_command(grammar, text):
    assert recognize(text, grammar) is None


def test_a_wildcard_may_not_be_one_of_its_excluded_values_whole(tmp_path):
    from voxline.intents import load_grammar

    path = tmp_path / "mini.yaml"
    path.write_text("language: en\nlists:\n  query: {wildcard: {max_tokens: 4, exclude_values: [chess, the piano]}}\n"
                    "intents:\n  m.play: {sentences: ['play {query}']}\n")
    grammar = load_grammar([path])
    assert recognize("play chess", grammar) is None and recognize("play the piano", grammar) is None
    assert recognize("play the piano man", grammar).slots == {"query": "the piano man"}
    assert recognize("play chess boxing", grammar).slots == {"query": "chess boxing"}


def test_a_wildcard_is_no_excluded_value_played_with_someone(tmp_path):
    from voxline.intents import load_grammar

    path = tmp_path / "mini.yaml"
    path.write_text("language: en\nlists:\n  query: {wildcard: {max_tokens: 6, exclude_values: [chess, the piano],"
                    " exclude_values_then: [with, against]}}\nintents:\n  m.play: {sentences: ['play {query}']}\n")
    grammar = load_grammar([path])
    for text in ("play chess with me", "play the piano with my sister", "play chess against the computer"):
        assert recognize(text, grammar) is None, text
    # a value that only begins with one, or has "with" further on, is still a value
    assert recognize("play chess club radio with me", grammar).slots == {"query": "chess club radio with me"}
    assert recognize("play stay with me", grammar).slots == {"query": "stay with me"}
    assert recognize("play chess", grammar) is None


def test_a_pronoun_of_the_command_may_name_a_noun_phrase_of_the_clause_before_it():
    document = {
        "language": "en",
        "intents": {"l.off": {"sentences": ["turn [the] {area} lights off"]}, "t.cancel": {"sentences": ["cancel the timer"]}},
        "lists": {"area": {"values": ["kitchen", "bedroom"]}},
        "skip_words": ["please"],
        "dislocation": {"topics": ["the", "my"], "pronouns": ["it", "them"]},
        "asides": {"not_with": ["you", "when"], "clause_verbs": ["is", "are"]},
    }
    grammar = Grammar.from_dict(compile_documents([document]))
    off = recognize("i dont need the kitchen lights turn them off", grammar)
    assert (off.intent, off.slots) == ("l.off", {"area": "kitchen"})
    assert recognize("im done with the timer cancel it please", grammar).intent == "t.cancel"
    # the clause is still an aside: no question, no condition; an area outside the antecedent still bars it
    assert recognize("did you want the kitchen lights turn them off", grammar) is None
    assert recognize("when i leave the kitchen lights turn them off", grammar) is None
    assert recognize("in the bedroom my kitchen lights turn them off", grammar) is None
    # two antecedents that give two commands: none
    assert recognize("forget the kitchen lights the bedroom lights turn them off", grammar) is None
    # a verb ends the antecedent: "the kitchen lights are" is no noun phrase
    assert recognize("the kitchen lights are annoying turn them off", grammar).slots == {"area": "kitchen"}


@pytest.mark.parametrize(("text", "intent", "slots"), [
    ("honestly i dont need the bedroom lights any more turn them off", "lights.off", {"area": "bedroom"}),
    ("we are finished with the timer you can cancel it", "timer.cancel", {}),
    ("no need for the lamp in the office now switch it off", "lights.off", {"area": "office"}),
    ("we are going to the kitchen now switch the lights on in there", "lights.on", {"area": "kitchen"}),
])
def test_a_command_that_names_its_object_in_the_clause_before_it(grammar, text, intent, slots):
    found = recognize(text, grammar)
    assert found is not None and (found.intent, found.slots) == (intent, slots)


@pytest.mark.parametrize(("text", "intent", "slots"), [
    ("play um the sunday morning playlist", "media.play", {"query": "the sunday morning playlist"}),
    ("play uh play some reggae", "media.play", {"query": "reggae"}),
    ("mute it would ya", "media.mute", {}),
    ("would you mind unpausing the radio", "media.resume", {}),
    ("would you mind telling me the time", "clock.time", {}),
    ("cancel the timer that we set", "timer.cancel", {}),
    ("set a ten minute timer for the rice", "timer.set", {"seconds": 600}),
    ("turn the music down for my dad", "media.volume_down", {}),
    ("ok come off mute now", "media.unmute", {}),
])
def test_requests_of_the_ninth_round(grammar, text, intent, slots):
    found = recognize(text, grammar)
    assert found is not None and (found.intent, found.slots) == (intent, slots)


@pytest.mark.parametrize(("text", "read"), [
    ("set a timer for the kitchen", None),  # an area is no purpose: which timer is meant is unclear
    ("i hate cancelling the timer", None),  # a statement about doing it
    ("play um", ("media.play", {})),  # the hesitation is not a name to play
])
def test_what_the_ninth_round_does_not_read(grammar, text, read):
    found = recognize(text, grammar)
    assert (found and (found.intent, found.slots)) == read, text


@pytest.mark.parametrize(("text", "intent", "slots"), [
    ("play something upbeat", "media.play", {"query": "upbeat"}),
    ("put on something by nina simone", "media.play", {"query": "nina simone"}),
    ("go on skip this one", "media.next", {}),
    ("continue the audiobook", "media.resume", {}),
    ("freeze it right there", "media.pause", {}),
    ("hold the song there", "media.pause", {}),
    ("stop playing this garbage", "media.stop", {}),
    ("jump ahead to the next track", "media.next", {}),
    ("turn it to 40 percent", "media.volume_set", {"level": 40}),
    # a clause of its own inside what would be a song's name is an aside
    ("play some reggae while we clean up", "media.play", {"query": "reggae"}),
    ("play the radio because i'm bored", "media.play", {"query": "the radio"}),
])
def test_requests_of_the_tenth_round(grammar, text, intent, slots):
    found = recognize(text, grammar)
    assert found is not None and (found.intent, found.slots) == (intent, slots)


@pytest.mark.parametrize(("text", "read"), [
    ("play something else", None),  # which other thing is not said
    ("play by the way", ("media.play", {"query": "by the way"})),  # a name may open with "by"
    ("play while my guitar gently weeps", ("media.play", {"query": "while my guitar gently weeps"})),
    ("play oh so quiet", ("media.play", {"query": "oh so quiet"})),  # "so" with no subject after it opens no clause
    ("go on", None),  # urging on, nothing asked
])
def test_what_the_tenth_round_does_not_read(grammar, text, read):
    found = recognize(text, grammar)
    assert (found and (found.intent, found.slots)) == read, text


@pytest.mark.parametrize(("text", "intent", "slots"), [
    # a suggestion is a request ("why", a question's opening, is overridden by the longer skip phrase)
    ("why don't you put the kitchen lights on", "lights.on", {"area": "kitchen"}),
    ("why not skip to the next one", "media.next", {}),
    ("how about we mute it", "media.mute", {}),
    ("what about switching the lights off", "lights.off", {}),
    ("any chance you could turn it up", "media.volume_up", {}),
    ("be a doll and stop the music", "media.stop", {}),
    ("i could do with a timer for ten minutes", "timer.set", {"seconds": 600}),
    # a word for the listener at either edge
    ("shut the lights off in the garage honey", "lights.off", {"area": "garage"}),
    ("lads turn the music down", "media.volume_down", {}),
    ("pause it for a sec babe", "media.pause", {}),
    ("thanks love can you skip this song", "media.next", {}),
])
def test_requests_of_the_eleventh_round(grammar, text, intent, slots):
    found = recognize(text, grammar)
    assert found is not None and (found.intent, found.slots) == (intent, slots)


@pytest.mark.parametrize(("text", "read"), [
    # a name may end in a word for the listener: it is played whole
    ("play whole lotta love", ("media.play", {"query": "whole lotta love"})),
    ("play rocket man", ("media.play", {"query": "rocket man"})),
    # a question that opens with "why" is still one, and a vocative alone or with a remark asks nothing
    ("why don't you ever pause it", None),
    ("why do the lights keep turning off", None),
    ("thanks guys", None),
    ("honey the lights are on", None),
])
def test_what_the_eleventh_round_does_not_read(grammar, text, read):
    found = recognize(text, grammar)
    assert (found and (found.intent, found.slots)) == read, text


def test_a_vocative_is_trimmed_only_when_the_utterance_is_no_command_with_it():
    document = {
        "language": "en",
        "intents": {"m.play": {"sentences": ["play {query}"]}, "m.down": {"sentences": ["turn it down"]}},
        "lists": {"query": {"wildcard": {"max_tokens": 6}}},
        "skip_words": ["please"],
    }
    without = Grammar.from_dict(compile_documents([document]))
    assert recognize("turn it down love", without) is None
    grammar = Grammar.from_dict(compile_documents([{**document, "vocatives": ["love"]}]))
    assert recognize("turn it down love", grammar).intent == "m.down"
    assert recognize("love turn it down please", grammar).intent == "m.down"
    assert recognize("play crazy in love", grammar).slots == {"query": "crazy in love"}
    # a skip word is trimmed first, as before
    assert recognize("play some jazz please", grammar).slots == {"query": "some jazz"}


def test_a_vocative_goes_while_a_skip_phrase_at_the_other_edge_that_the_command_needs_stays():
    document = {
        "language": "en",
        "intents": {"m.stop": {"sentences": ["can you stop"]}},
        "skip_words": ["can you"],
        "vocatives": ["love"],
    }
    grammar = Grammar.from_dict(compile_documents([document]))
    assert recognize("can you stop", grammar).intent == "m.stop"
    # the trims go one phrase at a time, the longer first ("can you", then "love"): "can you stop" was never tried
    assert recognize("can you stop love", grammar).intent == "m.stop"


@pytest.mark.parametrize(("text", "intent", "slots"), [
    # "can we have" is read as wanting while the word for the listener goes
    ("can i have it quieter love", "media.volume_down", {}),
    ("can we have the sound on mute sweetheart", "media.mute", {}),
    # the player stopped by what it is
    ("stop playing the audiobook", "media.stop", {}),
    ("turn the radio station off", "media.stop", {}),
    # mute said as a setting, the volume as a place it is put at, a timer put on
    ("go to mute", "media.mute", {}),
    ("put the tv on mute", None, None),
    ("set it at volume thirty", "media.volume_set", {"level": 30}),
    ("put on a five minute timer", "timer.set", {"seconds": 300}),
    ("can we get a timer going for twenty minutes", "timer.set", {"seconds": 1200}),
    # the previous song named by where it is
    ("i want the track before this one back", "media.previous", {}),
    # the music stopped, said twice ("that's enough", then by its pronoun)
    ("that is enough music for tonight so turn it off", "media.stop", {}),
    ("no more tunes thanks stop it", "media.stop", {}),
    # a clause of time after a command: it acts now
    ("pause the podcast until i get back from the shop", "media.pause", {}),
    ("turn the music down till the baby is asleep", "media.volume_down", {}),
    # ... but before it, "until" makes a condition, and a prohibition stays none
    ("until the kettle boils pause it", None, None),
    ("do not mute it until i say so", None, None),
    # not the time as the listener makes it (British): in the browser's word graph its opening let the constrained
    # search read questions that start the same way as the time (`voxline bench readings`, held-out C: two more
    # out-of-domain accepts)
    ("what time do you make it", None, None),
    # a moment without its "for" is a distance after a verb of motion: no skip word ("go back a second" is no
    # previous track)
    ("go back a second", None, None),
])
def test_requests_of_the_twelfth_round(grammar, text, intent, slots):
    found = recognize(text, grammar)
    assert (found and (found.intent, found.slots)) == (intent and (intent, slots))


def test_a_clause_that_says_how_things_are_is_the_reason_for_the_request_beside_it():
    document = {
        "language": "en",
        "intents": {"media.volume_down": {"sentences": ["turn it down", "its too loud"]},
                    "media.volume_up": {"sentences": ["turn it up"]},
                    "media.next": {"sentences": ["skip this song"]},
                    "lights.on": {"sentences": ["turn the lights on", "its dark"]},
                    "lights.off": {"sentences": ["turn the lights off"]}},
        "asides": {"after_starts": ["its", "so"]},
    }
    before = Grammar.from_dict(compile_documents([document]))
    assert recognize("skip this song its too loud", before) is None  # two commands in one breath
    grammar = Grammar.from_dict(compile_documents([{**document, "asides": {**document["asides"], "reasons": ["its"]}}]))
    assert recognize("skip this song its too loud", grammar).intent == "media.next"
    assert recognize("its too loud skip this song", grammar).intent == "media.next"
    assert recognize("turn it down its too loud", grammar).intent == "media.volume_down"  # said twice, as before
    # a reason that asks for another intent of the request's own family contradicts it: one was misheard
    assert recognize("turn it up its too loud", grammar) is None
    assert recognize("its dark turn the lights off", grammar) is None
    # two requests stay two
    assert recognize("skip this song so turn it down", grammar) is None


@pytest.mark.parametrize(("text", "intent", "slots"), [
    # a complaint said beside another request is its reason
    ("pause the podcast it's far too loud", "media.pause", {}),
    ("it's really loud in here mute it", "media.mute", {}),
    ("next track please i can't hear the words anyway", "media.next", {}),
    ("it's much too loud so mute it", "media.mute", {}),
    # ... and a complaint of degree alone a request
    ("it's rather loud in here", "media.volume_down", {}),
    ("the music is awfully loud", "media.volume_down", {}),
    # ... but not a question, nor another thing that is loud
    ("is the music a bit loud", None, None),
    ("the neighbours are a bit loud", None, None),
    ("turn the volume up it's a bit loud", None, None),
    # the music thrown out, the volume nudged or silenced
    ("lose the tunes", "media.stop", {}),
    ("that's enough of the music for tonight", "media.stop", {}),
    ("bin this track", "media.next", {}),  # a song thrown out is the next one, as before
    ("nudge it up a touch", "media.volume_up", {}),
    ("silence the volume", "media.mute", {}),
    # a very polite speaker, and one from Ireland
    ("i wonder if you could turn the bedroom light off", "lights.off", {"area": "bedroom"}),
    ("would you be so kind as to pause the music thank you very much", "media.pause", {}),
    ("sorry to bother you but is it possible to turn it down", "media.volume_down", {}),
    ("would you ever skip this one", "media.next", {}),
    # the previous track said again in other words; a timer put on, its length first
    ("play the last track one more time", "media.previous", {}),
    ("put a twenty minute timer on", "timer.set", {"seconds": 1200}),
    # the assistant told to stop, and why
    ("never mind it doesn't matter", "assistant.stop", {}),
    ("stop it i've heard enough", "assistant.stop", {}),
    ("it doesn't matter", None, None),
    # playing nicely is no song
    ("play quietly in your room", None, None),
    # dark to some degree, somewhere
    ("it's terribly dark in the lounge", "lights.on", {"area": "living_room"}),
    ("it's pitch black in here", "lights.on", {}),
    # free text that holds another command and a clause after it: the previous track, or a song of that name?
    ("play the previous track one more time i loved it", None, None),
    # ... a song's name with such a clause in it is no other command, and is played whole
    ("play what i've done", "media.play", {"query": "what ive done"}),
    ("play the way i am", "media.play", {"query": "the way i am"}),
])
def test_requests_of_the_thirteenth_round(grammar, text, intent, slots):
    found = recognize(text, grammar)
    assert (found and (found.intent, found.slots)) == (intent and (intent, slots))


def test_a_subject_whose_is_the_normaliser_joined_to_it_opens_a_clause_after_a_command():
    document = {
        "language": "en",
        "intents": {"timer.cancel": {"sentences": ["cancel the timer"]},
                    "lights.on": {"sentences": ["turn the lights on [in the {area}]"]},
                    "media.play": {"sentences": ["play some music"]}},
        "lists": {"area": {"values": ["kitchen", "bedroom"]}},
        "skip_words": ["and"],
        "asides": {"after_starts": ["im"], "after_subjects": ["the", "this"], "clause_verbs": ["is"]},
        "repairs": {"joiners": ["and"]},
    }
    grammar = Grammar.from_dict(compile_documents([document]))
    assert recognize("cancel the timer the cake is done", grammar).intent == "timer.cancel"  # as before
    # "the cake's done": the normaliser writes "the cakes done", a subject and no verb of `clause_verbs`
    assert recognize("cancel the timer the cake's done", grammar).intent == "timer.cancel"
    assert recognize("cancel the timer this one's finished", grammar).intent == "timer.cancel"
    # ... but a named value with its "is" joined is still the value the command could have held
    assert recognize("turn the lights on the kitchen is dark", grammar) is None
    assert recognize("turn the lights on the kitchen's dark", grammar) is None
    # ... and two words are no clause: they may be the rest of the command
    assert recognize("cancel the timer the cakes", grammar) is None
    # a command opened by a joiner is a second request, not one with an aside before it
    assert recognize("im back now play some music", grammar).intent == "media.play"
    assert recognize("cancel the timer and play some music", grammar) is None
    assert recognize("set a timer and play some music", grammar) is None


def test_a_reason_may_name_the_place_the_command_is_for():
    document = {
        "language": "en",
        "intents": {"lights.on": {"sentences": ["turn the lights on [in the {area}]"]}},
        "lists": {"area": {"values": ["kitchen", "bedroom"]}},
        "asides": {"after_starts": ["its"]},
    }
    before = Grammar.from_dict(compile_documents([document]))
    assert recognize("its dark in the kitchen turn the lights on", before) is None  # a place the command could hold
    grammar = Grammar.from_dict(compile_documents([{**document, "asides": {**document["asides"], "reasons": ["its"]}}]))
    found = recognize("its dark in the kitchen turn the lights on", grammar)
    assert (found.intent, found.slots) == ("lights.on", {"area": "kitchen"})
    assert found.text[slice(*found.spans["area"])] == "kitchen"
    found = recognize("turn the lights on its dark in the bedroom", grammar)
    assert (found.intent, found.slots) == ("lights.on", {"area": "bedroom"})
    # a place said alone is no reason; two places, or one beside the command's own, are none
    assert recognize("in the kitchen turn the lights on", grammar) is None
    assert recognize("its dark in the kitchen and the bedroom turn the lights on", grammar) is None
    assert recognize("its dark in the kitchen turn the lights on in the bedroom", grammar) is None


@pytest.mark.parametrize(("text", "intent", "slots"), [
    # a subject with its "'s" after the command: the reason for it
    ("stop the music, the dinner's ready", "media.stop", {}),
    ("mute it, my mum's on the phone", "media.mute", {}),
    ("cancel the timer the soup's ready", "timer.cancel", {}),
    ("next song, this track's awful", "media.next", {}),
    ("turn it down please, the baby's trying to sleep", "media.volume_down", {}),
    # ... not when it names what the command could have held, nor another device
    ("turn the lights on, the kitchen's dark", None, None),
    ("switch off the light the bedroom's fine", None, None),
    ("turn it down, the tv's on", None, None),
    # a subject that needs its clause ends no aside before a command ("continue the song i'm | back now")
    ("carry on with the song i'm back now", "media.resume", {}),
    ("resume the music we're home now", "media.resume", {}),
    # two requests joined, the first unfinished, stay none
    ("start a timer and play some music", None, None),
    ("put the heating on and play some jazz", None, None),
    # a volume out of ten, and "put it on" a named level
    ("put it on seven out of ten", "media.volume_set", {"level": 70}),
    ("volume 3 out of 10 please", "media.volume_set", {"level": 30}),
    ("crank it up to max", "media.volume_set", {"level": 100}),
    ("take it to half", "media.volume_set", {"level": 50}),
    # as said in Scotland
    ("can ye turn the lights off in the kitchen", "lights.off", {"area": "kitchen"}),
    ("would ye skip this one", "media.next", {}),
    ("pause it for a wee second", "media.pause", {}),
    ("turn it down a wee bit", "media.volume_down", {}),
    ("stop the music the now", "media.stop", {}),
    # the place a reason names is where the command is for
    ("i can't see a thing in the hall, put the light on", "lights.on", {"area": "hallway"}),
    ("switch the lights on please, i can barely see in the dining room", "lights.on", {"area": "dining_room"}),
    ("it's much too bright in the bedroom, turn the lights off", "lights.off", {"area": "bedroom"}),
    # ... not when it is no reason, names two places, or the command names its own
    ("in the garage turn on the lights", None, None),
    ("i can't see in the kitchen or the garage, turn the lights on", None, None),
    ("it's dark in the kitchen, turn on the light in the bedroom", None, None),
    # a reason's "i can barely" is no question ("can")
    ("turn it up, i can barely hear the radio", "media.volume_up", {}),
    # what the speaker was going to do is no request
    ("i was gonna turn the lights off but never mind", None, None),
    ("so i was like totally gonna put some music on", None, None),
])
def test_requests_of_the_fourteenth_round(grammar, text, intent, slots):
    found = recognize(text, grammar)
    assert (found and (found.intent, found.slots)) == (intent and (intent, slots))


def test_an_aside_whose_words_make_the_command_another_intent_is_no_aside():
    document = {
        "language": "en",
        "intents": {"m.play": {"sentences": ["some music"]}, "m.pause": {"sentences": ["pause [some] music"]}},
        "skip_words": ["please"],
        "asides": {"after_starts": ["its"], "not_with": ["you"], "not_before": ["dont"]},
    }
    grammar = Grammar.from_dict(compile_documents([document]))
    # "pause zz | music": "pause" with the command is another intent, with only an unknown word between them
    assert recognize("hey there pause zz some music", grammar) is None
    assert recognize("hey there pause some music", grammar).intent == "m.pause"
    # a clause whose words make no command keeps its split; a negated verb is no request of it
    assert recognize("hey there all good some music", grammar).intent == "m.play"
    assert recognize("i dont pause zz some music", grammar).intent == "m.play"


def test_a_command_said_again_with_more_is_that_one():
    document = {
        "language": "en",
        "intents": {"l.off": {"sentences": ["lights off [in the {area}]"]}},
        "lists": {"area": {"values": ["kitchen", "bedroom"]}},
    }
    grammar = Grammar.from_dict(compile_documents([document]))
    found = recognize("lights off lights off in the bedroom", grammar)
    assert (found.intent, found.slots) == ("l.off", {"area": "bedroom"})
    assert recognize("lights off in the kitchen lights off in the bedroom", grammar) is None  # two requests


def test_tags_are_trimmed_only_when_the_utterance_is_no_command_with_them():
    document = {
        "language": "en",
        "intents": {"c.time": {"sentences": ["tell me the time"]}, "m.play": {"sentences": ["play {query}"]},
                    "m.again": {"sentences": ["play it again"]}},
        "lists": {"query": {"wildcard": {"max_tokens": 4}}},
        "tags": ["there", "again"],
    }
    grammar = Grammar.from_dict(compile_documents([document]))
    assert recognize("tell me the time there", grammar).intent == "c.time"
    assert recognize("play it again", grammar).intent == "m.again"
    assert recognize("play out there", grammar).slots == {"query": "out there"}


@pytest.mark.parametrize(("text", "intent", "slots"), [
    # an aside that holds the command's verb, with a word the grammar lacks between them, is none, not the object
    ("right so pause da music for us", None, None),
    ("okay kill di music", None, None),
    # ... a clause that makes no command keeps its split
    ("the baby's finally asleep, turn it down", "media.volume_down", {}),
    # a command said again, the second time with where
    ("lights on, lights on in the kitchen", "lights.on", {"area": "kitchen"}),
    ("turn the lights off, turn off the lights in the garage", "lights.off", {"area": "garage"}),
    ("lights on in the kitchen, lights on in the garage", None, None),
    # ... or in other words
    ("skip it, next song", "media.next", {}),
    ("lights on please, switch on the kitchen light", "lights.on", {"area": "kitchen"}),
    ("turn it up, turn it down", None, None),
    ("mute it, unmute it", None, None),
    # tags: Irish and Scottish "there", "again", Singapore "lah"
    ("turn the big light off there", "lights.off", {}),
    ("mute the sound again", "media.mute", {}),
    ("skip this one lah", "media.next", {}),
    ("play hello there", "media.play", {"query": "hello there"}),
    # very formal frames and a worry about the bother
    ("might i trouble you to pause the music", "media.pause", {}),
    ("would you be so good as to turn the lights on in the study", "lights.on", {"area": "office"}),
    ("turn the volume down if it's no bother", "media.volume_down", {}),
    # "no, make it" corrects a value
    ("set a timer for five minutes, no, make it eight minutes", "timer.set", {"seconds": 480}),
    # "i am" binds what follows as "i'm" does ("continue the music, i am | back now")
    ("carry on with the music, i am back now", "media.resume", {}),
    # "us" for whom, a named level before "volume"
    ("play us some reggae", "media.play", {"query": "reggae"}),
    ("bring it to half volume", "media.volume_set", {"level": 50}),
    ("switch to the next track", "media.next", {}),
    ("mmh, pause the music", "media.pause", {}),
])
def test_requests_of_the_fifteenth_round(grammar, text, intent, slots):
    found = recognize(text, grammar)
    assert (found and (found.intent, found.slots)) == (intent and (intent, slots))


def test_a_stammered_start_of_a_word_is_left_out():
    document = {
        "language": "en",
        "intents": {"t.cancel": {"sentences": ["cancel the timer"]}, "m.play": {"sentences": ["play {query}"]},
                    "m.up": {"sentences": ["turn it up"]}},
        "lists": {"query": {"wildcard": {"max_tokens": 4}}},
    }
    grammar = Grammar.from_dict(compile_documents([document]))
    assert recognize("c- cancel the timer", grammar).intent == "t.cancel"
    assert recognize("ca cancel the timer", grammar).intent == "t.cancel"
    # a word of the grammar stays, as does a letter before a word it does not begin, or before itself
    assert recognize("play up upbeat", grammar).slots == {"query": "up upbeat"}
    assert recognize("play b b king", grammar).slots == {"query": "b b king"}
    assert recognize("play k pop", grammar).slots == {"query": "k pop"}
    assert recognize("play 1 15", grammar).slots == {"query": "1 15"}
    # ... and a longer start is a word
    assert recognize("canc cancel the timer", grammar) is None


def test_a_duration_in_a_persons_clause_after_a_command_is_the_clauses():
    document = {
        "language": "en",
        "intents": {"m.pause": {"sentences": ["pause the music"]}, "m.volume_up": {"sentences": ["turn it up"]},
                    "m.volume_set": {"sentences": ["volume {level}"]},
                    "t.set": {"sentences": ["timer for {seconds}"]},
                    "t.cancel": {"sentences": ["cancel the timer"]}},
        "lists": {"level": {"number": {"min": 0, "max": 100}}, "seconds": {"duration": {"min": 1, "max": 3600}}},
        "asides": {"after_starts": ["ill", "because"], "not_with": ["you"]},
    }
    before = Grammar.from_dict(compile_documents([document]))
    assert recognize("pause the music ill be back in two minutes", before) is None
    document["asides"]["after_persons"] = ["ill"]
    grammar = Grammar.from_dict(compile_documents([document]))
    assert recognize("pause the music ill be back in two minutes", grammar).intent == "m.pause"
    # not when another command of the family takes the number (a level said: the step is not what was asked; a
    # timer's length), nor in a clause that opens with no person, nor before the command
    assert recognize("turn it up ill want it at fifty", grammar) is None
    assert recognize("cancel the timer ill need five minutes", grammar) is None
    assert recognize("pause the music because in two minutes", grammar) is None
    assert recognize("ill be back in two minutes pause the music", grammar) is None


def test_a_command_of_one_word_may_follow_a_subjects_clause():
    document = {
        "language": "en",
        "intents": {"m.next": {"sentences": ["skip"]}, "m.play": {"sentences": ["music", "play {query}"]}},
        "lists": {"query": {"wildcard": {"max_tokens": 4}}},
        "skip_words": ["ugh"],
        "asides": {"after_subjects": ["this", "my"], "clause_verbs": ["is", "keeps"], "not_with": ["you"]},
    }
    grammar = Grammar.from_dict(compile_documents([document]))
    assert recognize("ugh this song is dull skip", grammar).intent == "m.next"
    # a clause with no subject of its own is none; a command whose free text may be the clause's object too
    assert recognize("ill go skip", grammar) is None
    assert recognize("my neighbour keeps playing loud music", grammar) is None
    # ... which bars only a command after the clause: one before a clause of its own stays ("music | ill dance")
    assert recognize("music ill dance", Grammar.from_dict(compile_documents([{
        **document, "asides": {**document["asides"], "after_starts": ["ill"]}}]))).intent == "m.play"


@pytest.mark.parametrize(("text", "intent", "slots"), [
    # the device's own names, endearments, Canadian "eh", Scots "gonnae"
    ("computer, switch the garage light on", "lights.on", {"area": "garage"}),
    ("speaker, how late is it", "clock.time", {}),
    ("turn the volume up a bit, hun", "media.volume_up", {}),
    ("pause the tunes there, eh", "media.pause", {}),
    ("gonnae skip this one", "media.next", {}),
    ("play the computer song", "media.play", {"query": "the computer song"}),
    # a stammer, a duration in the speaker's own clause, a clause and one word
    ("p- pause the music", "media.pause", {}),
    ("m- m- mute it", "media.mute", {}),
    ("stop the music, i've got a meeting in five minutes", "media.stop", {}),
    ("mute it, i'll be on a call for ten minutes", "media.mute", {}),
    ("cancel the timer, i'll need another in two minutes", None, None),
    ("this track is awful, next", "media.next", {}),
    ("the kids keep playing music", None, None),
    # "already" in a reason after the command
    ("turn off the timer, the eggs are done already", "timer.cancel", {}),
    ("i switched off the kitchen light already", None, None),
    # learners' forms without an article, a pause made, the volume kept at a level, the sound put back
    ("switch on light in kitchen", "lights.on", {"area": "kitchen"}),
    ("start timer five minutes", "timer.set", {"seconds": 300}),
    ("do a pause with the song", "media.pause", {}),
    ("leave the volume at thirty", "media.volume_set", {"level": 30}),
    ("bring back the sound", "media.unmute", {}),
    ("shut off sound", "media.mute", {}),
    ("kill that din", "media.stop", {}),
    ("put the lights on in the parlor", "lights.on", {"area": "living_room"}),
    ("stop, i didn't mean to bother you", "assistant.stop", {}),
])
def test_requests_of_the_sixteenth_round(grammar, text, intent, slots):
    found = recognize(text, grammar)
    assert (found and (found.intent, found.slots)) == (intent and (intent, slots))


def test_free_text_that_holds_another_command_before_a_subjects_clause_is_ambiguous():
    document = {
        "language": "en",
        "intents": {"m.previous": {"sentences": ["play the last song again"]},
                    "m.play": {"sentences": ["play {query}"]}},
        "lists": {"query": {"wildcard": {"max_tokens": 10}}},
        "asides": {"after_subjects": ["the", "my"], "clause_verbs": ["is", "loved"], "not_with": ["you"]},
    }
    grammar = Grammar.from_dict(compile_documents([document]))
    # the previous track with a reason, or a song of that name: neither
    assert recognize("play the last song again the kids loved it", grammar) is None
    assert recognize("play the last song again my son is dancing", grammar) is None
    # free text with no other command in it is played whole
    assert recognize("play the kids loved it", grammar).slots == {"query": "the kids loved it"}


def test_a_subjects_clause_may_leave_out_its_is():
    document = {
        "language": "en",
        "intents": {"m.pause": {"sentences": ["pause it"]}, "m.play": {"sentences": ["play {query}"]}},
        "lists": {"query": {"wildcard": {"max_tokens": 6}}},
        "asides": {"after_subjects": ["the", "my"], "clause_verbs": ["is"], "not_with": ["you"]},
    }
    grammar = Grammar.from_dict(compile_documents([document]))
    assert recognize("pause it my phone ringing", grammar).intent == "m.pause"
    assert recognize("pause it the baby crying again", grammar).intent == "m.pause"
    assert recognize("pause it my sister called", grammar).intent == "m.pause"
    # ... after a noun of two words, as a recogniser may write one
    assert recognize("pause it the head teachers coming", grammar).intent == "m.pause"
    assert recognize("pause it the car alarm going off", grammar).intent == "m.pause"
    # a noun in -ing is no verb after a noun, nor is a short word in -ing or -ed
    assert recognize("pause it my phone", grammar) is None
    assert recognize("pause it the morning news", grammar) is None
    assert recognize("pause it the car king", grammar) is None
    assert recognize("pause it the sofa bed", grammar) is None


@pytest.mark.parametrize(("text", "intent", "slots"), [
    # learners' comparatives with "more" and "less", "stop to", "pass to", "volume on", "and half", a question in a
    # statement's word order
    ("could you make the music more loud", "media.volume_up", {}),
    ("a little less loud please", "media.volume_down", {}),
    ("make it more quiet", "media.volume_down", {}),
    ("stop to play the music please", "media.stop", {}),
    ("pass to the next track", "media.next", {}),
    ("put volume on forty", "media.volume_set", {"level": 40}),
    ("timer two hours and half", "timer.set", {"seconds": 9000}),
    ("what time it is please", "clock.time", {}),
    # ... but not a question as the object of someone's verb
    ("he knows what time it is", None, None),
    ("i don't care what time it is", None, None),
    # a couple of units, particles of other Englishes, giving in, an Irish "good man"
    ("timer for a couple of hours", "timer.set", {"seconds": 7200}),
    ("skip this one na", "media.next", {}),
    ("turn off the kitchen light po", "lights.off", {"area": "kitchen"}),
    ("ja, turn it down", "media.volume_down", {}),
    ("fine, skip it", "media.next", {}),
    ("mute it, whatever", "media.mute", {}),
    ("pause the music there, good man", "media.pause", {}),
    ("illuminate the garage", "lights.on", {"area": "garage"}),
    ("that'll be all for today", "assistant.stop", {}),
    ("shush, nobody asked", "assistant.stop", {}),
    # a game played with someone is no song; a song with "with" in its name still is
    ("let's play dominoes with grandad", None, None),
    ("play draughts against me", None, None),
    ("play come away with me", "media.play", {"query": "come away with me"}),
    # another command before a subject's clause, and a subject's clause without its "is"
    ("play the previous track again, my daughter loved it", None, None),
    ("turn it down, the baby sleeping", "media.volume_down", {}),
    # the track before, once more
    ("replay the track before once more", "media.previous", {}),
])
def test_requests_of_the_seventeenth_round(grammar, text, intent, slots):
    found = recognize(text, grammar)
    assert (found and (found.intent, found.slots)) == (intent and (intent, slots))


def test_words_said_before_one_of_the_devices_names_were_for_someone_else():
    document = {
        "language": "en",
        "intents": {"m.pause": {"sentences": ["pause [the music]"]}, "l.off": {"sentences": ["lights off"]},
                    "m.down": {"sentences": ["turn [the] speaker down"]}},
        "skip_words": ["hey"],
        "names": {"words": ["speaker", "hey computer"], "not_after": ["the"], "not_with": ["if"]},
    }
    grammar = Grammar.from_dict(compile_documents([document]))
    assert recognize("okay class eyes on me speaker pause the music", grammar).intent == "m.pause"
    assert recognize("hang on mum hey computer lights off", grammar).intent == "l.off"
    # not when the words before hold a command (two requests) or say when, nor a name after a determiner (a noun)
    assert recognize("lights off speaker pause", grammar) is None
    assert recognize("if the baby wakes up speaker pause the music", grammar) is None
    assert recognize("i said the speaker pause", grammar) is None
    # nor when two names ask different things
    assert recognize("okay speaker pause hey computer lights off", grammar) is None
    # ... and without names nothing before a command is left out
    document.pop("names")
    assert recognize("okay class eyes on me speaker pause the music", Grammar.from_dict(
        compile_documents([document]))) is None
