"""Reading a `/ws` conversation in tests, over Starlette's TestClient (frames up to a message type, and filters) or
straight from a session's outbox."""

from __future__ import annotations

import json


def receive_until(ws, kind: str) -> list:
    """Messages (dicts) and audio frames (bytes) up to and including the first message of type `kind`."""
    frames: list = []
    while True:
        message = ws.receive()
        if message.get("bytes") is not None:
            frames.append(message["bytes"])
            continue
        frames.append(json.loads(message["text"]))
        if frames[-1]["type"] == kind:
            return frames


def of_type(frames: list, kind: str) -> list[dict]:
    """The messages of one type among `receive_until`'s frames."""
    return [f for f in frames if isinstance(f, dict) and f["type"] == kind]


async def drain(outbox) -> tuple[list[dict], list]:
    """Everything a session has queued in its `Outbox` so far: (messages as dicts, reply audio frames parsed)."""
    from voxline.server import protocol as p

    messages, audio = [], []
    while outbox._items:
        item = await outbox.get()
        data = item.data() if callable(item.data) else item.data
        if isinstance(data, bytes):
            audio.append(p.parse_reply_audio(data))
        else:
            messages.append(json.loads(data))
    return messages, audio
