"""`voxline talk`: a Python client on the page's protocol (docs/protocol.md, v1), on a microphone or a file.

It talks to the server exactly as the page does, with one difference: it has no Whisper of its own, so every spoken
turn sends its audio (PCM16 at 16 kHz) with an empty transcript, confidence 0 and `want_server_asr`, and the
server recognises it. The audio streams while the user speaks (the protocol accepts frames as soon as `turn.start`
announced them), so the server holds the whole turn the moment it ends.

What comes back becomes the browser's events (DESIGN.md): `voxline:transcript`, `voxline:intent`, `voxline:reply`,
`voxline:reply-audio`, `voxline:error`, plus `voxline:ready` (connected), `voxline:speech-start`/`-end` (the
client's endpointing) and `voxline:timings` (the server's `timings` and the client's end-of-speech measures).
Each carries `t` (milliseconds since the client started) and `audio_t` (seconds of audio sent so far).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from voxline.client_audio import (
    FRAME_MS,
    FRAME_SAMPLES,
    UPLINK_RATE_HZ,
    EnergyEndpointer,
    Microphone,
    Speaker,
    list_devices,
    read_audio_file,
    write_wav,
)
from voxline.errors import (
    AudioDeviceError,
    ClientError,
    OriginNotAllowed,
    ServerUnreachable,
    TooManySessions,
    Unauthenticated,
    Unauthorized,
    UnsupportedLanguage,
    UnsupportedVersion,
    VoxlineError,
)
from voxline.server import protocol as p

DEFAULT_SERVER_URL = "ws://127.0.0.1:8000/ws"
CONNECT_TIMEOUT_S = 5.0
"""How long connecting and the hello/welcome exchange may take before the server counts as unreachable."""
TURN_TIMEOUT_S = 120.0
"""A turn that has not ended after this long never will: the server is stuck, the client gives up."""
NOT_FAILURES = frozenset({"limit_exceeded"})
"""Error codes that do not make the turn a failure (the server goes on with what it kept)."""
_FATAL_CLOSES = {
    p.CLOSE_UNAUTHORIZED: (Unauthorized, "the server requires a token: pass --token or set VOXLINE_AUTH_TOKEN"),
    p.CLOSE_UNSUPPORTED_VERSION: (UnsupportedVersion, "this client speaks protocol v1"),
    p.CLOSE_UNSUPPORTED_LANGUAGE: (UnsupportedLanguage, "choose another --lang"),
    p.CLOSE_UNAUTHENTICATED: (Unauthenticated, "the server needs a token of one of its site keys: pass --token "
                                               "(`voxline token mint --key ID`, without --origin)"),
    p.CLOSE_ORIGIN_NOT_ALLOWED: (OriginNotAllowed, "the token's site key does not serve this client"),
    p.CLOSE_TOO_MANY_SESSIONS: (TooManySessions, "close another session, or try again later"),
}


@dataclass(frozen=True, kw_only=True)
class TalkOptions:
    """What `voxline talk` was asked to do."""

    server: str = DEFAULT_SERVER_URL
    wav: Path | None = None
    """Speak this file as one turn instead of listening to the microphone."""
    text: str | None = None
    """Send a typed turn instead of speech."""
    fast: bool = False
    """Send the file as fast as possible instead of in real time."""
    input_device: str | None = None
    output_device: str | None = None
    play: bool = True
    """Play the reply audio (on `output_device`, else the default speaker when there is one)."""
    save_reply: Path | None = None
    """Write the reply audio of every turn to this WAV file (then it is not played unless --output is given)."""
    json: bool = False
    once: bool = False
    """Microphone: exit after the first turn (always so with a file, a text, or --json)."""
    lang: str = "en"
    token: str | None = None


class EventPrinter:
    """Writes events: one JSON object per line (`--json`), or a readable conversation."""

    def __init__(self, as_json: bool, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
                 audio_time: Callable[[], float] = lambda: 0.0) -> None:
        self.as_json = as_json
        self.out, self.err = out, err
        self.audio_time = audio_time
        self.started = time.perf_counter()
        self._reply_shown = 0

    def now_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000.0

    def emit(self, name: str, **detail: object) -> dict:
        event = {"name": name, **detail, "t": round(self.now_ms(), 1), "audio_t": round(self.audio_time(), 3)}
        if self.as_json:
            print(json.dumps(event, ensure_ascii=False), file=self.out, flush=True)
        else:
            self._show(name, event)
        return event

    def note(self, text: str) -> None:
        """A remark for the person at the terminal (stderr, also in JSON mode, where stdout is for events)."""
        print(text, file=self.err, flush=True)

    def _show(self, name: str, e: dict) -> None:
        say = lambda text, end="\n": print(text, end=end, file=self.out, flush=True)  # noqa: E731
        if name == "voxline:ready":
            self.note(f"connected to {e['server']} (LLM {e['models'].get('llm')}, TTS {e['models'].get('tts')})")
        elif name == "voxline:speech-start":
            self.note("… hearing you")
        elif name == "voxline:transcript":
            say(f"you: {e['text']}")
        elif name == "voxline:intent":
            slots = f" {json.dumps(e['slots'])}" if e["slots"] else ""
            say(f"intent: {e['intent']}{slots}")
        elif name == "voxline:reply":
            text = e["text"]
            if self._reply_shown == 0 and text:
                say("voxline: ", end="")
            say(text[self._reply_shown:], end="")
            self._reply_shown = len(text)
            if e["final"]:
                say("" if text else "(no answer: nothing was heard)")
                self._reply_shown = 0
        elif name == "voxline:timings":
            self.note(_describe_timings(e))
        elif name == "voxline:error":
            self.note(f"error [{e['code']}]: {e['message']}")


def _describe_timings(e: dict) -> str:
    parts = []
    if e.get("ttfa_ms") is not None:
        parts.append(f"first audio {e['ttfa_ms']:.0f} ms after the end of speech")
    server = e.get("server", {})
    for key, label in (("asr_ms", "asr"), ("llm_first_token_ms", "first token"),
                       ("first_audio_sent_ms", "first audio sent"), ("total_ms", "total")):
        if key in server:
            parts.append(f"server {label} {server[key]:.0f} ms")
    return " · ".join(parts) or "turn over"


@dataclass
class TurnProgress:
    """One turn, from `turn.start` (or `text`) to its `timings`."""

    turn_id: int
    speech_end_ms: float | None = None
    """Client clock when the end of the turn went out (`turn.audio_end`, or the `text` message)."""
    first_frame_ms: float | None = None
    first_audio_ms: float | None = None
    reply_text: str = ""
    reply_pcm: bytearray = field(default_factory=bytearray)
    failed: bool = False
    server_timings: dict = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    error: VoxlineError | None = None
    """Set when the connection broke before the turn ended."""


class VoxlineClient:
    """One connection to `/ws`: the handshake, turns, and the server's messages turned into events."""

    def __init__(self, options: TalkOptions, printer: EventPrinter) -> None:
        self.options = options
        self.printer = printer
        self.ws: ClientConnection | None = None
        self.welcome: p.Welcome | None = None
        self.turn: TurnProgress | None = None
        self.speaker: Speaker | None = None
        self.audio_s = 0.0
        """Seconds of audio sent (or captured) so far: the `audio_t` clock."""
        self.saved_pcm = bytearray()
        self._next_turn_id = 1
        self._receiver: asyncio.Task | None = None

    # ---------------------------------------------------------------------------------------------- connection

    async def connect(self) -> p.Welcome:
        url = self.options.server
        started = self.printer.now_ms()
        try:
            self.ws = await connect(url, open_timeout=CONNECT_TIMEOUT_S, compression=None,
                                    max_size=4 * p.MAX_TEXT_FRAME_BYTES)
        except InvalidURI:
            raise ClientError(f"--server {url!r} is not a WebSocket URL (ws://HOST:PORT/ws or wss://...)") from None
        except InvalidStatus as exc:
            raise ServerUnreachable(f"{url} refused the WebSocket (HTTP {exc.response.status_code}): "
                                    "is this the `/ws` of a Voxline server?") from None
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise ServerUnreachable(f"cannot connect to {url} ({reason}): is `voxline serve` running there?") from None
        hello = p.Hello(v=p.PROTOCOL_VERSION, lang=self.options.lang, token=self.options.token,
                        capabilities=p.Capabilities(opus=False, pcm16=True, sample_rate=UPLINK_RATE_HZ))
        refusal = None
        try:
            await self.ws.send(p.encode_message(hello))
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                while self.welcome is None:
                    message = _parse(await self.ws.recv())
                    if isinstance(message, p.Welcome):
                        self.welcome = message
                    elif isinstance(message, p.ErrorMessage):
                        refusal = message
        except ConnectionClosed as exc:
            raise _closed_error(exc, refusal, url) from None
        except TimeoutError:
            raise ServerUnreachable(f"{url} accepted the connection but did not answer `hello`") from None
        self._receiver = asyncio.create_task(self._receive())
        self.printer.emit("voxline:ready", load_ms=round(self.printer.now_ms() - started, 1), server=url,
                          session_id=self.welcome.session_id, models=dict(self.welcome.models))
        return self.welcome

    @property
    def reply_rate(self) -> int:
        return int(self.welcome.reply_audio.get("sample_rate", p.REPLY_AUDIO_RATE_HZ))

    async def close(self) -> None:
        if self._receiver is not None:
            self._receiver.cancel()
        if self.ws is not None:
            try:
                await self.ws.send(p.encode_message(p.Bye()))
            except ConnectionClosed:
                pass
            await self.ws.close()

    # ---------------------------------------------------------------------------------------------- turns

    async def start_audio_turn(self) -> TurnProgress:
        """`turn.start` for PCM16 audio that follows; the server re-recognises it (`want_server_asr`)."""
        turn = self._new_turn()
        await self._send(p.TurnStart(turn_id=turn.turn_id, transcript="", confidence=0.0, audio="pcm16",
                                     want_server_asr=True))
        return turn

    async def send_audio(self, turn: TurnProgress, pcm: bytes) -> None:
        await self._send_bytes(p.encode_audio_frame("pcm16", turn.turn_id, pcm))

    async def end_audio(self, turn: TurnProgress) -> None:
        turn.speech_end_ms = self.printer.now_ms()
        await self._send(p.AudioEnd(turn_id=turn.turn_id))

    async def send_text(self, text: str) -> TurnProgress:
        turn = self._new_turn()
        turn.speech_end_ms = self.printer.now_ms()
        await self._send(p.TextTurn(turn_id=turn.turn_id, text=text))
        return turn

    async def finish(self, turn: TurnProgress) -> bool:
        """Wait for the turn's `timings` and for its audio to finish playing; True when the turn did not fail."""
        try:
            async with asyncio.timeout(TURN_TIMEOUT_S):
                await turn.done.wait()
                if turn.error is None and self.speaker is not None and turn.reply_pcm:
                    await self.speaker.drained()
        except TimeoutError:
            raise ClientError(f"turn {turn.turn_id} got no answer within {TURN_TIMEOUT_S:.0f} s") from None
        if turn.error is not None:
            raise turn.error
        self.saved_pcm += turn.reply_pcm
        end = turn.speech_end_ms
        since_end = lambda t: round(t - end, 1) if t is not None and end is not None else None  # noqa: E731
        self.printer.emit("voxline:timings", turn_id=turn.turn_id, ttfa_ms=since_end(turn.first_audio_ms),
                          first_frame_ms=since_end(turn.first_frame_ms), server=turn.server_timings)
        self.turn = None
        return not turn.failed

    def _new_turn(self) -> TurnProgress:
        turn = TurnProgress(self._next_turn_id)
        self._next_turn_id += 1
        self.turn = turn
        return turn

    async def _send(self, message: p.ClientMessage) -> None:
        await self._send_bytes(p.encode_message(message))

    async def _send_bytes(self, data: str | bytes) -> None:
        try:
            await self.ws.send(data)
        except ConnectionClosed as exc:
            raise _closed_error(exc, None, self.options.server) from None

    # ---------------------------------------------------------------------------------------------- inbound

    async def _receive(self) -> None:
        try:
            async for data in self.ws:
                if isinstance(data, bytes):
                    self._on_audio(p.parse_reply_audio(data))
                else:
                    message = _parse(data)
                    if message is not None:
                        self._on_message(message)
        except ConnectionClosed as exc:
            if self.turn is not None:
                self.turn.error = _closed_error(exc, None, self.options.server)
                self.turn.done.set()

    def _on_message(self, m: p.ServerMessage) -> None:
        emit, turn = self.printer.emit, self.turn
        if isinstance(m, p.Transcript):
            emit("voxline:transcript", text=m.text, final=True, confidence=1.0, source="server", turn_id=m.turn_id)
        elif isinstance(m, p.IntentMessage):
            emit("voxline:intent", intent=m.intent, slots=m.slots, source="server", text=m.text, confidence=1.0,
                 confirmation=m.confirmation, turn_id=m.turn_id)
        elif isinstance(m, p.ReplyDelta) and turn is not None:
            turn.reply_text += m.text
            emit("voxline:reply", text=turn.reply_text, final=False, turn_id=m.turn_id)
        elif isinstance(m, p.ReplyDone):
            emit("voxline:reply", text=m.text, final=True, interrupted=m.interrupted, turn_id=m.turn_id)
        elif isinstance(m, p.Timings) and turn is not None and m.turn_id == turn.turn_id:
            turn.server_timings = {k: v for k, v in json.loads(p.encode_message(m)).items()
                                   if k not in ("type", "turn_id")}
            turn.done.set()
        elif isinstance(m, p.ErrorMessage):
            emit("voxline:error", code=m.code, message=m.message,
                 **({} if m.turn_id is None else {"turn_id": m.turn_id}))
            if turn is not None and m.turn_id == turn.turn_id and m.code not in NOT_FAILURES:
                turn.failed = True

    def _on_audio(self, frame: p.ReplyAudioFrame) -> None:
        turn = self.turn
        if turn is None or frame.turn_id != turn.turn_id:
            return
        if turn.first_frame_ms is None:
            turn.first_frame_ms = self.printer.now_ms()
            if self.speaker is None:  # nothing will play it: its arrival is the first audio
                self.first_audio_played(turn.turn_id, played=False)
        turn.reply_pcm += frame.pcm
        if self.speaker is not None:
            self.speaker.push(frame.turn_id, frame.pcm)

    def first_audio_played(self, turn_id: int, played: bool = True) -> None:
        """The first samples of a reply reached the speaker (or, with nothing to play them, arrived)."""
        turn = self.turn
        if turn is None or turn.turn_id != turn_id or turn.first_audio_ms is not None:
            return
        turn.first_audio_ms = self.printer.now_ms()
        self.printer.emit("voxline:reply-audio", first=True, played=played, turn_id=turn_id)


def _parse(data: str | bytes) -> p.ServerMessage | None:
    """A server text frame, or None for one this client does not know (a newer server's: ignored)."""
    if isinstance(data, bytes):
        return None
    try:
        return p.parse_server_message(data)
    except VoxlineError:
        return None


def _closed_error(exc: ConnectionClosed, refusal: p.ErrorMessage | None, url: str) -> VoxlineError:
    code = exc.rcvd.code if exc.rcvd is not None else None
    if code in _FATAL_CLOSES:
        error_class, hint = _FATAL_CLOSES[code]
        said = refusal.message if refusal is not None else exc.rcvd.reason or error_class.code
        return error_class(f"{url}: {said} ({hint})")
    return ServerUnreachable(f"the server at {url} closed the connection (code {code if code is not None else 'none'})")


# -------------------------------------------------------------------------------------------------- drivers


async def _talk_wav(client: VoxlineClient, options: TalkOptions) -> bool:
    samples = read_audio_file(options.wav)
    limit = int(p.MAX_TURN_AUDIO_SECONDS * UPLINK_RATE_HZ)
    if samples.size > limit:
        client.printer.note(f"{options.wav}: only the first {p.MAX_TURN_AUDIO_SECONDS:g} s are sent (one turn)")
        samples = samples[:limit]
    loop = asyncio.get_running_loop()
    turn = await client.start_audio_turn()
    client.printer.emit("voxline:speech-start", start_t=0.0)
    started = loop.time()
    for offset in range(0, samples.size, FRAME_SAMPLES):
        chunk = samples[offset:offset + FRAME_SAMPLES]
        await client.send_audio(turn, chunk.astype("<i2").tobytes())
        client.audio_s = (offset + chunk.size) / UPLINK_RATE_HZ
        if not options.fast:  # real time: as a microphone would deliver it
            await asyncio.sleep(max(0.0, started + client.audio_s - loop.time()))
    client.printer.emit("voxline:speech-end", start_t=0.0, end_t=client.audio_s, reason="end_of_file")
    await client.end_audio(turn)
    return await client.finish(turn)


async def _talk_text(client: VoxlineClient, options: TalkOptions) -> bool:
    return await client.finish(await client.send_text(options.text))


async def _talk_microphone(client: VoxlineClient, options: TalkOptions, microphone: Microphone) -> bool:
    microphone.start()
    endpointer = EnergyEndpointer()
    captured_frames = 0
    turn_start_frame = 0
    ok = True
    if not options.json:
        client.printer.note("listening: speak (Ctrl-C to quit)")
    try:
        while True:
            frame = await microphone.frames.get()
            captured_frames += 1
            client.audio_s = captured_frames * FRAME_MS / 1000
            endpoint = endpointer.feed(frame)
            if endpoint is not None and endpoint.kind == "start":
                turn = await client.start_audio_turn()
                turn_start_frame = captured_frames - len(endpoint.frames)
                client.printer.emit("voxline:speech-start", start_t=turn_start_frame * FRAME_MS / 1000)
                for pending in endpoint.frames:
                    await client.send_audio(turn, pending)
                continue
            if not endpointer.in_turn and endpoint is None:
                continue
            await client.send_audio(client.turn, frame)
            if endpoint is not None and endpoint.kind == "end":
                client.printer.emit("voxline:speech-end", start_t=turn_start_frame * FRAME_MS / 1000,
                                    end_t=client.audio_s, reason=endpoint.reason)
                turn = client.turn
                await client.end_audio(turn)
                ok = await client.finish(turn) and ok
                if options.once or options.json:
                    return ok
                # Half duplex: what the microphone heard while the reply played is not the user's next turn.
                while not microphone.frames.empty():
                    microphone.frames.get_nowait()
                endpointer = EnergyEndpointer()
    finally:
        microphone.close()


async def talk(options: TalkOptions, printer: EventPrinter | None = None, *,
               microphone: Microphone | None = None, speaker: Speaker | None = None) -> int:
    """Run the client; 0 when every turn ended well, 1 when a turn failed on the server (an `error` came back).

    `microphone` and `speaker` replace the devices the options name (anything with the same methods will do)."""
    printer = printer or EventPrinter(options.json)
    client = VoxlineClient(options, printer)
    printer.audio_time = lambda: client.audio_s
    speaker_wanted = options.play and (options.save_reply is None or options.output_device is not None)
    live = options.wav is None and options.text is None
    if live and microphone is None:
        microphone = Microphone(options.input_device, asyncio.get_running_loop())  # no device: say so first
    await client.connect()
    try:
        if speaker is not None:
            client.speaker = speaker
            speaker.on_first_sample = client.first_audio_played
        elif speaker_wanted:
            client.speaker = _open_speaker(options, client)
        if options.text is not None:
            ok = await _talk_text(client, options)
        elif options.wav is not None:
            ok = await _talk_wav(client, options)
        else:
            ok = await _talk_microphone(client, options, microphone)
    finally:
        if client.speaker is not None:
            client.speaker.close()
        await client.close()
        if options.save_reply is not None:
            write_wav(options.save_reply, bytes(client.saved_pcm), client.reply_rate)
            printer.note(f"reply audio saved to {options.save_reply}")
    return 0 if ok else 1


def _open_speaker(options: TalkOptions, client: VoxlineClient) -> Speaker | None:
    """The speaker; without one (and none asked for by name) the turn goes on silently, with a note."""
    try:
        return Speaker(options.output_device, client.reply_rate, asyncio.get_running_loop(),
                       on_first_sample=client.first_audio_played)
    except AudioDeviceError:
        if options.output_device is not None:
            raise
        client.printer.note("no audio output device: the reply is not played (--save-reply FILE.wav keeps it)")
        return None


def print_devices(as_json: bool) -> int:
    """`voxline talk --list-devices`."""
    devices = list_devices()
    if as_json:
        print(json.dumps(devices, indent=1))
        return 0
    print(f"{'#':>3}  {'in':>3} {'out':>3} {'rate':>7}  name")
    for d in devices:
        marks = " ".join(m for m, on in (("(default input)", d["default_input"]),
                                          ("(default output)", d["default_output"])) if on)
        print(f"{d['index']:>3}  {d['inputs']:>3} {d['outputs']:>3} {d['default_rate']:>7.0f}  {d['name']} {marks}")
    return 0


def run(options: TalkOptions) -> int:
    """Synchronous entry point for the CLI."""
    return asyncio.run(talk(options))

