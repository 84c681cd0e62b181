"""`voxline bench turn`: time to first reply audio, on the server and in the browser.

Server: a real `voxline serve` (uvicorn, loopback) and a real WebSocket client; each question is sent the way the
page sends a finished utterance (`turn.start` with a confident transcript), and the clock runs from that send to the
first reply audio frame received. The baseline, in the same run and alternating question by question, is the
non-streaming pipeline: the whole reply from the same LLM, then TTS of all of it.

Browser (`--browser N`): N spoken questions (hibari) through Chromium's fake microphone; TTFA is end of speech →
`voxline:reply-audio` on the capture clock.
"""

from __future__ import annotations

import asyncio
import json
import time

from voxline.bench.stats import ratio, summary

QUESTIONS = [
    "What is the capital of France?", "How far away is the moon?", "Why is the sky blue?",
    "Who wrote Romeo and Juliet?", "What should I cook tonight?", "How many legs does a spider have?",
    "Tell me a fun fact about octopuses.", "What is the tallest mountain in the world?", "How do I boil an egg?",
    "What year did people first land on the moon?", "Why do cats purr?", "What is the speed of light?",
    "How do airplanes fly?", "What is a good name for a dog?", "Why do leaves change colour in autumn?",
    "How long does it take to walk a mile?", "What is the largest ocean?", "Can you recommend a short book?",
    "How does a rainbow form?", "What is the boiling point of water?", "Why is the ocean salty?",
    "How many planets are in the solar system?",
]


async def _one_turn(url: str, question: str, turn_id: int) -> dict:
    import websockets

    async with websockets.connect(url, max_size=None) as ws:
        await ws.send(json.dumps({"type": "hello", "v": 1, "lang": "en"}))
        json.loads(await ws.recv())
        sent = time.perf_counter()
        await ws.send(json.dumps({"type": "turn.start", "turn_id": turn_id, "transcript": question,
                                  "confidence": 0.95}))
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


def server_run(llm: str, count: int) -> dict:
    from voxline import paths
    from voxline.bench.browser import ServerThread
    from voxline.config import Settings
    from voxline.server.session import Engines

    settings = Settings.from_env(llm_model=llm)
    questions = (QUESTIONS * (count // len(QUESTIONS) + 1))[:count]
    streamed, baseline, samples = [], [], []
    with ServerThread(settings) as server:
        engines = Engines.load(settings, paths.model_dir)  # the baseline's own copy, same models
        url = server.url.replace("http", "ws") + "/ws"
        for i, question in enumerate(questions):
            row = asyncio.run(_one_turn(url, question, 1))
            streamed.append(row)
            baseline.append(_baseline_ms(engines, question))
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
        "samples": samples,
    }


def browser_run(llm: str, count: int) -> dict:
    from voxline.bench.spoken import match, render, run_configs

    questions = QUESTIONS[:count]
    placed, runs = run_configs(render([q.rstrip("?.").lower() for q in questions]), {"voxline": ""}, 1,
                               llm=llm, gap_s=9.0)
    ttfa, end, missed = [], [], 0
    for events in runs["voxline"]:
        for truth in placed:
            audio = match(events, "reply-audio", truth, after=0.0, within=8.0, where=lambda e: e.get("first", False))
            turn_end = match(events, "speech-end", truth)
            if audio is None:
                missed += 1
                continue
            ttfa.append(1000 * (audio["audio_t"] - truth.end_s))
            if turn_end:
                end.append(1000 * (turn_end["audio_t"] - truth.end_s))
    return {"questions": len(placed), "browser_ttfa_ms": summary(ttfa), "eos_to_turn_end_ms": summary(end),
            "missed": missed}


def main(args) -> int:
    started = time.monotonic()
    report = {"benchmark": "turn", "server": server_run(args.llm, args.questions)}
    if args.browser:
        report["browser"] = browser_run(args.llm, args.browser)
    report["wall_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(report, indent=1))
    return 0
