"""`voxline bench classify`'s figures: the design before the intent neighbours comes from the same verdicts."""

from __future__ import annotations

from voxline.bench.classify import DEV_PARAPHRASES, OUT_OF_DOMAIN, without_neighbours


def _rows(agreed_right: int, agreed_ood: int) -> list[dict]:
    rows = []
    for i, (text, intent, slots) in enumerate(DEV_PARAPHRASES):
        agreed = i < agreed_right
        rows.append({"text": text, "want": [intent, slots], "got": [intent, slots] if agreed else None,
                     "by": "classifier" if agreed else "none", "ms": 1.0, "reason": "agreed" if agreed else "none"})
    for i, text in enumerate(OUT_OF_DOMAIN):
        agreed = i < agreed_ood
        rows.append({"text": text, "want": None, "got": ["media.mute", {}] if agreed else None,
                     "by": "classifier" if agreed else "none", "ms": 1.0, "reason": "agreed" if agreed else "none"})
    return rows


def test_what_only_the_neighbours_accepted_counts_as_refused_without_them():
    figures = without_neighbours(_rows(agreed_right=5, agreed_ood=2))
    assert figures["intent_slots_accuracy"] == 0.0
    assert figures["false_accept_rate"] == 0.0 and figures["false_accepts"] == []
    assert len(figures["wrong"]) == len(DEV_PARAPHRASES)


def test_a_set_is_scored_per_grammar_beside_another(tmp_path):
    from voxline.bench.classify import run_set
    from voxline.intents import builtin_grammar, load_grammar

    path = tmp_path / "set.jsonl"
    path.write_text("\n".join([
        '{"text": "pause the music", "intent": "media.pause", "slots": {}, "kind": "command"}',
        '{"text": "brew me a coffee", "intent": "media.play", "slots": {}, "kind": "command"}',
        '{"text": "mute", "intent": "media.mute", "slots": {}, "kind": "one-word"}',
        '{"text": "what is a timer", "intent": null, "slots": {}, "kind": "ood"}',
    ]) + "\n")
    small = tmp_path / "small.yaml"
    small.write_text("language: en\nintents:\n  media.pause: {sentences: ['pause the music']}\n")
    report = run_set(path, {"grammar": builtin_grammar(), "baseline-grammar": load_grammar([small])}, {})
    now, before = report["grammar"], report["baseline-grammar"]
    assert (now["intent_slots_accuracy"], now["one_word_accuracy"], now["false_accept_rate"]) == (0.5, 1.0, 0.0)
    assert (before["intent_slots_accuracy"], before["one_word_accuracy"]) == (0.5, 0.0)
    assert now["commands_by_source"] == {"grammar": 2, "none": 1} and now["acted_wrongly"] == 0
    assert len(now["errors"]) == 1 and "brew me a coffee" in now["errors"][0]
