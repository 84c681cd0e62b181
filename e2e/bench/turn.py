"""`voxline bench turn`: time to first reply audio, on the server and in the browser, and whether the reply was right.

Server: a real `voxline serve` (uvicorn, loopback) and a real WebSocket client; each question is sent the way the
page sends a finished utterance (`turn.start` with a confident transcript), and the clock runs from that send to the
first reply audio frame received. The baseline, in the same run and alternating question by question, is the
non-streaming pipeline: the whole reply from the same LLM, then TTS of all of it. `--baseline-server NAME=VALUE`
also asks every question of a second server with those settings, the two alternating question by question.

Browser (`--browser N`): N questions of a held-out set (`sets/questions-en.jsonl`, each with the keywords a right
answer contains) spoken by synthetic voices through Chromium's fake microphone, on the capture clock: end of speech
→ first `voxline:reply-audio`, → `speech-end` (turn over), and keyword accuracy of the turn's final
`voxline:reply`, so that a faster path that answers worse is caught. `--baseline-query` hears every page a second
time with those page settings, pages alternating, each side on its own server; the servers' speculation counters
(/metrics) are read around every page. Each page is one session, so the dialog's history grows over its questions
as it does for a user who asks several in a row (a turn that should have left no trace and did would show here).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from voxline.bench import SETS
from voxline.bench.load import QUESTIONS
from voxline.bench.stats import rate, ratio, summary


async def _one_turn(url: str, question: str, turn_id: int, speculate_s: float | None = None) -> dict:
    """One turn; `speculate_s`: sent as a speculative turn and confirmed that long after (the page's head start),
    the clock starting at the confirmation, as the user's wait does."""
    import websockets

    async with websockets.connect(url, max_size=None) as ws:
        await ws.send(json.dumps({"type": "hello", "v": 1, "lang": "en"}))
        json.loads(await ws.recv())
        start = {"type": "turn.start", "turn_id": turn_id, "transcript": question, "confidence": 0.95}
        if speculate_s is not None:
            await ws.send(json.dumps({**start, "speculative": True}))
            await asyncio.sleep(speculate_s)
            start = {"type": "turn.confirm", "turn_id": turn_id}
        sent = time.perf_counter()
        await ws.send(json.dumps(start))
        first_audio = reply = None
        while True:
            frame = await ws.recv()
            if isinstance(frame, bytes):
                first_audio = first_audio or time.perf_counter() - sent
                continue
            msg = json.loads(frame)
            if msg["type"] == "reply.done":
                reply = msg["text"]
            elif msg["type"] == "error":
                raise RuntimeError(f"{question!r}: {msg['code']}: {msg['message']}")
            elif msg["type"] == "timings":
                return {"first_audio_ms": 1000 * first_audio if first_audio else None, "reply": reply, **msg}


def _baseline_ms(engines, question: str) -> float:
    from voxline.dialog import Message

    started = time.perf_counter()
    result = engines.llm.complete([Message("user", question)], max_tokens=engines.settings.reply_max_tokens)
    engines.tts.synthesize(result.text)
    return 1000 * (time.perf_counter() - started)


def server_run(llm: str, count: int, speculate_ms: float = 0.0, baseline_server: dict | None = None,
               texts: list[str] | None = None) -> dict:
    """`texts`: the questions (default the load bench's); `baseline_server`: also every question on a second server
    with these settings, the two alternating question by question."""
    from contextlib import ExitStack

    from voxline import paths
    from voxline.config import Settings
    from voxline.server.engines import Engines

    from e2e.harness import ServerThread

    settings = Settings.from_env(llm_model=llm)
    pool = list(texts or QUESTIONS)
    questions = (pool * (count // len(pool) + 1))[:count]
    streamed, baseline, speculated, samples, other = [], [], [], [], []
    with ExitStack() as stack:
        server = stack.enter_context(ServerThread(settings))
        engines = Engines.load(settings, paths.model_dir)  # the baseline's own copy, same models
        url = server.url.replace("http", "ws") + "/ws"
        other_url = None
        if baseline_server:
            other_server = stack.enter_context(ServerThread(Settings.from_env(llm_model=llm, **baseline_server)))
            other_url = other_server.url.replace("http", "ws") + "/ws"
            for warm in (url, other_url):  # builds each server's intent classifier, whose warm-up runs beside
                asyncio.run(_one_turn(warm, WARM_UP_PARAPHRASE, 1))
            time.sleep(CLASSIFIER_WARM_UP_S)
        for i, question in enumerate(questions):
            if other_url is not None and i % 2:
                other.append(asyncio.run(_one_turn(other_url, question, 1)))
            row = asyncio.run(_one_turn(url, question, 1))
            streamed.append(row)
            if other_url is not None and not i % 2:
                other.append(asyncio.run(_one_turn(other_url, question, 1)))
            baseline.append(_baseline_ms(engines, question))
            if speculate_ms:
                speculated.append(asyncio.run(_one_turn(url, question, 1, speculate_ms / 1000)))
            if i < 3:
                samples.append({"question": question, "reply": row["reply"]})
    first = [r["first_audio_ms"] for r in streamed if r["first_audio_ms"]]
    timing_keys = ("llm_first_token_ms", "first_clause_ms", "tts_first_audio_ms", "first_audio_sent_ms")
    return {
        "llm": llm, "tts": settings.tts_model, "questions": len(questions),
        "server_first_audio_ms": summary(first),
        "non_streaming_baseline_ms": summary(baseline),
        "ratio_vs_baseline": {"p50": ratio(summary(first), summary(baseline)),
                              "p95": ratio(summary(first), summary(baseline), "p95")},
        "stages_ms": {k: summary([r[k] for r in streamed if r.get(k) is not None]) for k in timing_keys},
        **(speculation_report(first, speculated, speculate_ms) if speculate_ms else {}),
        **({"baseline_server": baseline_server_report(streamed, other, baseline_server)} if baseline_server else {}),
        "samples": samples,
    }


def baseline_server_report(ours: list[dict], theirs: list[dict], settings: dict) -> dict:
    """Today's server beside the one with `settings`, same questions: first reply audio over all of them, and over
    those the baseline's intent classifier had to ask its model about (its `classify` stage ≥
    `CLASSIFIER_ASKED_MS`; a verdict without the model takes well under a millisecond)."""
    def first(rows):
        return summary([r["first_audio_ms"] for r in rows if r["first_audio_ms"]])

    asked = [i for i, r in enumerate(theirs) if ((r.get("stages") or {}).get("classify") or 0) >= CLASSIFIER_ASKED_MS]
    ours_asked, theirs_asked = first([ours[i] for i in asked]), first([theirs[i] for i in asked])
    return {"settings": settings,
            "server_first_audio_ms": first(theirs),
            "ratio": {"p50": ratio(first(ours), first(theirs)), "p95": ratio(first(ours), first(theirs), "p95")},
            "classifier_asked": {"questions": len(asked), "server_first_audio_ms": ours_asked,
                                 "baseline_first_audio_ms": theirs_asked,
                                 "ratio": {"p50": ratio(ours_asked, theirs_asked),
                                           "p95": ratio(ours_asked, theirs_asked, "p95")}}}


def speculation_report(first: list[float], speculated: list[dict], speculate_ms: float) -> dict:
    """Speculative turns confirmed `speculate_ms` after they were sent, beside the same questions sent at once:
    confirmation → first reply audio, the wait a user has once the page has decided the turn is over."""
    after_confirm = [r["first_audio_ms"] for r in speculated if r["first_audio_ms"]]
    return {"speculative": {
        "head_start_ms": speculate_ms,
        "confirm_to_first_audio_ms": summary(after_confirm),
        "ratio_vs_sent_at_once": {"p50": ratio(summary(after_confirm), summary(first)),
                                  "p95": ratio(summary(after_confirm), summary(first), "p95")},
    }}


# --- Browser: a held-out question set, spoken, with keyword scoring. The set's format: sets/README.md. ---

DEFAULT_SET = SETS / "questions-en.jsonl"
KINDS = ("fact", "definition", "arithmetic", "how-to", "advice")
DEFAULT_VOICES = ("espeak-gb", "hibari-1")
PAGE_QUESTIONS = 12  # one Chromium run takes about three minutes
GAP_S = 12.0
"""Silence after each question: the reply starts playing and is generated (its text complete) before the next
question barges in on it. A reply that starts later is never heard (a missed turn), and one cut off sooner keeps
only what was heard, which would be scored. At 10 s, Qwen2.5 0.5B on a loaded 2-core machine missed 2 of 12."""
TAIL_S = 4.0
SPECULATIVE_TURNS = "voxline_speculative_turns_total"
"""Server counter, label `outcome`: `confirmed` (the turn did end; the early start was kept) or `cancelled`."""
SPECULATIVE_WASTED_TOKENS = "voxline_speculative_wasted_tokens_total"
"""Server counter: tokens generated for speculative turns that were cancelled."""
SPECULATION_KEYS = ("confirmed", "cancelled", "wasted_tokens")
METRICS_TIMEOUT_S = 5.0
MAX_WRONG_REPORTED = 40
WARM_UP_PARAPHRASE = "darken the living room"
"""A paraphrase the grammar misses: the turn that builds a server's intent classifier (--baseline-server)."""
CLASSIFIER_WARM_UP_S = 40.0
"""What the classifier's warm-up (its static prompt prefilled, the neighbours read) takes here, with margin."""
CLASSIFIER_ASKED_MS = 50.0
"""A `classify` stage this long means the classifier asked its model (its other verdicts take under a millisecond)."""


@dataclass(frozen=True)
class Question:
    """One line of a question set."""

    text: str
    expect: tuple[str, ...]
    """Keywords, lowercase: a reply containing any one of them (as whole words) is right."""
    kind: str


class QuestionSetError(ValueError):
    """Raised when a question set file is malformed (the message names the line)."""


def load_questions(path: Path) -> list[Question]:
    questions = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise QuestionSetError(f"{where}: not JSON ({error.msg})") from None
        if not isinstance(row, dict) or set(row) != {"text", "expect", "kind"}:
            raise QuestionSetError(f"{where}: expected an object with text, expect and kind")
        if not isinstance(row["text"], str) or not row["text"].strip():
            raise QuestionSetError(f"{where}: text must be a non-empty string")
        expect = row["expect"]
        if not isinstance(expect, list) or not expect or not all(
                isinstance(k, str) and words(k) and k == k.lower() for k in expect):  # "" would match anything
            raise QuestionSetError(f"{where}: expect must be a non-empty list of lowercase keywords")
        if row["kind"] not in KINDS:
            raise QuestionSetError(f"{where}: kind must be one of {', '.join(KINDS)}")
        questions.append(Question(row["text"], tuple(expect), row["kind"]))
    return questions


def words(text: str) -> str:
    """Lowercase words separated by single spaces: punctuation, hyphens and apostrophes split words ("fifty-six" →
    "fifty six"); inside a number a decimal point stays and a thousands comma goes ("1,000.5" → "1000.5")."""
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text.lower())
    text = re.sub(r"(?<!\d)\.|\.(?!\d)", " ", text)
    return " ".join(re.sub(r"[^\w.]+|_", " ", text).split())


def is_right(reply: str | None, expect: tuple[str, ...]) -> bool:
    """Whether `reply` contains one of the keywords as whole words ("8" is not found in "18", nor "au" in "because")."""
    if not reply:
        return False
    said = f" {words(reply)} "
    return any(f" {words(keyword)} " in said for keyword in expect)


@dataclass(frozen=True)
class Asked:
    """One question as heard in one page: where its speech sits and until when an answer counts as its own."""

    question: Question
    voice: str
    start_s: float
    end_s: float
    until_s: float
    """The next question's start: a reply that has not started playing by then is barged in on, never heard."""


def build_pages(questions: list[Question], voices: list[str],
                folder: Path) -> tuple[list, dict[tuple[str, int], Asked]]:
    """Every question in every voice, in file order, PAGE_QUESTIONS to a page WAV. Returns the pages and, per
    (page label, clip index), what was asked there."""
    from voxline.bench import audio as test_audio
    from e2e.bench.intents import ENGINE_START_S
    from e2e.bench.spoken import VOICES, Page, render_voice

    pages, asked = [], {}
    for voice_name in voices:
        for number in range(0, len(questions), PAGE_QUESTIONS):
            chunk = questions[number:number + PAGE_QUESTIONS]
            samples, placed = test_audio.compose([(q.text, render_voice(q.text, VOICES[voice_name])) for q in chunk],
                                                 lead_s=ENGINE_START_S, gap_s=GAP_S, tail_s=TAIL_S, seed=number)
            label = f"{voice_name}/{number // PAGE_QUESTIONS}"
            wav = test_audio.write_wav(folder / f"{label.replace('/', '-')}.wav", samples)
            pages.append(Page(label, wav, len(samples) / test_audio.RATE, placed))
            for index, (question, at) in enumerate(zip(chunk, placed)):
                until = placed[index + 1].start_s if index + 1 < len(placed) else at.end_s + GAP_S
                asked[(label, index)] = Asked(question, voice_name, at.start_s, at.end_s, until)
    return pages, asked


def score(asked: Asked, events: list[dict]) -> dict:
    """The outcome of one question from the page's events (`audio_t` on the capture clock).

    The answer is the first `reply-audio {first}` between the end of the question's speech and the next question;
    its text is the final `reply` of the same `turn_id` (the last partial one when the page closed before it). Reply
    audio that started inside the question (a turn ended in the middle of it) is counted apart and never taken as
    the answer. With no reply audio, the text is that of the last final reply of a turn whose speech ended within
    the question's span (a reply without sound is still scored, but the turn counts as missed).
    """
    from e2e.bench.cutoffs import CUT_MARGIN_S
    from e2e.bench.intents import turn_ends

    starts = [e for e in events if e["name"] == "reply-audio" and e.get("first")]
    audio = next((e for e in starts if asked.end_s <= e["audio_t"] < asked.until_s), None)
    early = any(asked.start_s <= e["audio_t"] < asked.end_s for e in starts)
    over = next((e for e in events if e["name"] == "speech-end" and e["audio_t"] < asked.until_s
                 and e.get("end_t", e["audio_t"]) >= asked.end_s - CUT_MARGIN_S), None)
    ends = turn_ends(events)
    heard = [e["text"] for e, end in zip(events, ends) if e["name"] == "transcript" and e.get("final")
             and asked.start_s <= end < asked.until_s]
    reply = None
    if audio is not None and audio.get("turn_id") is not None:
        own = [e for e in events if e["name"] == "reply" and e.get("turn_id") == audio["turn_id"]]
        reply = next((e for e in own if e.get("final")), own[-1] if own else None)
    elif audio is None:
        reply = next((e for e, end in reversed(list(zip(events, ends)))
                      if e["name"] == "reply" and e.get("final") and (e.get("text") or "").strip()
                      and asked.start_s <= end < asked.until_s), None)
    text = reply.get("text") if reply else None
    return {
        "text": asked.question.text, "kind": asked.question.kind, "voice": asked.voice,
        "eos_to_first_audio_ms": round(1000 * (audio["audio_t"] - asked.end_s), 1) if audio else None,
        "eos_to_turn_over_ms": round(1000 * (over["audio_t"] - asked.end_s), 1) if over else None,
        "heard": " | ".join(heard) or None, "reply": text, "right": is_right(text, asked.question.expect),
        "missed": audio is None,
        "audio_before_end": early,
    }


def figures(outcomes: list[dict]) -> dict:
    """Latency, keyword accuracy (over every question asked: a missed turn is not right) and missed turns."""
    right = sum(o["right"] for o in outcomes)
    return {
        "n": len(outcomes),
        "eos_to_first_audio_ms": summary([o["eos_to_first_audio_ms"] for o in outcomes
                                          if o["eos_to_first_audio_ms"] is not None]),
        "eos_to_turn_over_ms": summary([o["eos_to_turn_over_ms"] for o in outcomes
                                        if o["eos_to_turn_over_ms"] is not None]),
        "keyword_accuracy": rate(right, len(outcomes)), "right": right,
        "missed": sum(o["missed"] for o in outcomes),
        "audio_before_end": sum(o["audio_before_end"] for o in outcomes),
    }


def side_report(outcomes: list[dict], speculation: dict | None) -> dict:
    """One configuration: figures over all its questions, per voice, keyword accuracy per kind, and the server's
    speculation counters over its pages (null where the server has no such metric)."""
    return figures(outcomes) | {
        "by_voice": {v: figures([o for o in outcomes if o["voice"] == v])
                     for v in sorted({o["voice"] for o in outcomes})},
        "keyword_accuracy_by_kind": {k: rate(sum(o["right"] for o in outcomes if o["kind"] == k),
                                              sum(o["kind"] == k for o in outcomes))
                                     for k in KINDS if any(o["kind"] == k for o in outcomes)},
        "speculation": speculation,
    }


def compare(report: dict, ours: str, base: str) -> dict:
    """`ours` against `base`: latency ratios (below 1: faster) and the difference in keyword accuracy."""
    a, b = report[ours], report[base]
    accuracy = (round(a["keyword_accuracy"] - b["keyword_accuracy"], 4)
                if a["keyword_accuracy"] is not None and b["keyword_accuracy"] is not None else None)
    return {"of": f"{ours} / {base}",
            "first_audio_p50": ratio(a["eos_to_first_audio_ms"], b["eos_to_first_audio_ms"]),
            "first_audio_p95": ratio(a["eos_to_first_audio_ms"], b["eos_to_first_audio_ms"], "p95"),
            "turn_over_p50": ratio(a["eos_to_turn_over_ms"], b["eos_to_turn_over_ms"]),
            "keyword_accuracy_difference": accuracy,
            "missed_difference": a["missed"] - b["missed"]}


def parse_speculation(text: str) -> dict:
    """The speculation counters in a Prometheus text exposition; a key is None when its metric is absent (a
    labelled counter that exists but has never counted reads 0)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict = dict.fromkeys(SPECULATION_KEYS)
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError:
        return out
    for family in families:
        # prometheus_client names a counter's family without `_total`; other exporters keep it
        if family.name in (SPECULATIVE_TURNS, SPECULATIVE_TURNS.removesuffix("_total")):
            out["confirmed"] = out["confirmed"] or 0.0
            out["cancelled"] = out["cancelled"] or 0.0
            for sample in family.samples:
                if sample.name == SPECULATIVE_TURNS and sample.labels.get("outcome") in ("confirmed", "cancelled"):
                    out[sample.labels["outcome"]] += sample.value
        elif family.name in (SPECULATIVE_WASTED_TOKENS, SPECULATIVE_WASTED_TOKENS.removesuffix("_total")):
            out["wasted_tokens"] = sum(s.value for s in family.samples if s.name == SPECULATIVE_WASTED_TOKENS)
    return out


def read_speculation(server_url: str) -> dict:
    """The server's speculation counters now; all None when /metrics cannot be read (never an error)."""
    try:
        with urllib.request.urlopen(server_url + "/metrics", timeout=METRICS_TIMEOUT_S) as response:
            return parse_speculation(response.read().decode("utf-8", "replace"))
    except OSError:
        return dict.fromkeys(SPECULATION_KEYS)


def add_difference(total: dict | None, before: dict, after: dict) -> dict:
    """`total` plus what the counters rose by between `before` and `after`; a key stays None once it was missing on
    either side of any page (a partial sum would read as a measurement)."""
    out = {}
    for key in SPECULATION_KEYS:
        so_far = 0 if total is None else total[key]
        missing = so_far is None or before[key] is None or after[key] is None
        value = None if missing else so_far + after[key] - before[key]
        out[key] = int(value) if value is not None and float(value).is_integer() else value
    return out


def browser_configs(voices: list[str], baseline_query: str | None, baseline_server: dict | None = None) -> list:
    """Today's page, and the baseline's when a query or server settings are given; ValueError for an unknown voice
    or page setting."""
    from e2e.bench.intents import missing_baseline_settings
    from e2e.bench.spoken import VOICES, Config

    unknown = [v for v in voices if v not in VOICES]
    if unknown:
        raise ValueError(f"unknown voice(s) {', '.join(unknown)}; have {', '.join(VOICES)}")
    configs = [Config("voxline")] + ([Config("baseline", query=baseline_query or "", server=dict(baseline_server or {}))]
                                     if baseline_query or baseline_server else [])
    # The page refuses a setting it does not know: both sides would then answer nothing.
    missing = missing_baseline_settings(configs)
    if missing:
        raise ValueError(f"--baseline-query: this checkout has no {', '.join(missing)}")
    return configs


def browser_run(llm: str, count: int, *, voices: list[str] | None = None, set_path: Path = DEFAULT_SET,
                baseline_query: str | None = None, baseline_server: dict | None = None,
                progress=None) -> tuple[dict, list[dict]]:
    """The set's first `count` questions (spread evenly over the file) in every voice through the demo page, beside
    the page with `baseline_query` (and its server with `baseline_server`) when given; returns the report and every
    outcome."""
    import tempfile

    from e2e.bench.intents import limit_items
    from e2e.bench.spoken import run_pages

    voices = list(voices or DEFAULT_VOICES)
    configs = browser_configs(voices, baseline_query, baseline_server)
    questions = limit_items(load_questions(set_path), count)
    outcomes: dict[str, list[dict]] = {c.name: [] for c in configs}
    speculation: dict[str, dict | None] = {c.name: None for c in configs}
    counters_before: dict[str, tuple[str, dict]] = {}
    problems: dict[str, dict[str, int]] = {c.name: {} for c in configs}

    def before_page(config: str, server_url: str, page) -> None:
        counters_before[config] = (server_url, read_speculation(server_url))

    def on_page(config: str, page, events: list[dict], console_errors: list[str]) -> None:
        server_url, before = counters_before.pop(config)
        speculation[config] = add_difference(speculation[config], before, read_speculation(server_url))
        for index in range(len(page.placed)):
            outcomes[config].append(score(asked[(page.label, index)], events) | {"config": config})
        for line in console_errors + [f"voxline:error {e.get('code')}: {e.get('message')}"
                                      for e in events if e["name"] == "error"]:
            problems[config][line[:200]] = problems[config].get(line[:200], 0) + 1
        if progress is not None:
            progress(f"{config} {page.label}: {len(page.placed)} questions heard")

    with tempfile.TemporaryDirectory() as tmp:
        pages, asked = build_pages(questions, voices, Path(tmp))
        run_pages(pages, configs, 1, llm=llm, on_page=on_page, before_page=before_page)
    report = {"set": str(set_path), "questions": len(questions), "voices": voices,
              "speech": "synthetic voices (espeak-ng, hibari): a proxy for real speakers", "pages": len(pages),
              "configs": {c.name: {"page_query": c.query} for c in configs},
              "page_problems": {name: dict(sorted(seen.items(), key=lambda kv: -kv[1])[:10])
                                for name, seen in problems.items()}}
    for config in configs:
        report[config.name] = side_report(outcomes[config.name], speculation[config.name])
    if len(configs) > 1:
        report["voxline_vs_baseline"] = compare(report, "voxline", "baseline")
    return report, [o for name in outcomes for o in outcomes[name]]


def wrong_lines(outcomes: list[dict]) -> list[str]:
    """One line per question not answered right: config, voice, question, what the page heard (its final
    transcripts, the server's among them), the reply (or that there was none)."""
    return [f"{o['config']}\t{o['voice']}\t{o['text']!r}\theard {o.get('heard')!r}\t"
            + (f"reply {o['reply']!r}" if o["reply"] else "no reply")
            + ("\t(missed: no reply audio)" if o["missed"] else "")
            for o in outcomes if not o["right"]]


def main(args) -> int:
    from e2e.bench.intents import server_settings

    started = time.monotonic()
    voices = [v for part in args.voices for v in part.split(",") if v] if getattr(args, "voices", None) else None
    set_path = getattr(args, "set", None) or DEFAULT_SET
    baseline_server = server_settings(getattr(args, "baseline_server", None) or []) or None
    report = {"benchmark": "turn", "llm": args.llm}
    try:
        if args.browser:  # checked before the server part, which takes minutes
            load_questions(set_path)
            browser_configs(voices or list(DEFAULT_VOICES), args.baseline_query, baseline_server)
        if args.questions:
            texts = [q.text for q in load_questions(args.set)] if getattr(args, "set", None) else None
            report["server"] = server_run(args.llm, args.questions, getattr(args, "speculate_ms", 0.0),
                                          baseline_server=baseline_server, texts=texts)
        if args.browser:
            report["browser"], outcomes = browser_run(
                args.llm, args.browser, voices=voices, set_path=set_path, baseline_query=args.baseline_query,
                baseline_server=baseline_server,
                progress=lambda line: print(line, file=sys.stderr, flush=True))
            wrong = wrong_lines(outcomes)
            print(f"\n{len(wrong)} not right of {len(outcomes)} (config, voice, question, heard, reply):",
                  file=sys.stderr)
            print("\n".join(wrong[:MAX_WRONG_REPORTED]), file=sys.stderr)
    except (ValueError, FileNotFoundError) as error:
        print(f"voxline bench turn: {error}", file=sys.stderr)
        return 2
    report["wall_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(report, indent=1))
    return 0
