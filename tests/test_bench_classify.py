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
