"""The reply model: a CTranslate2 decoder-only LLM, prompted in ChatML, streamed token by token.

`LLM.generate` runs one CTranslate2 batch for any number of `GenerationRequest`s and feeds each request's text to
its own callback as tokens arrive; `LLM.stream` is the one-request iterator on top of it. A later scheduler can
therefore batch the turns of several sessions into one call without changing how a turn consumes its text.

The system prompt is the same for every request, so its KV state is computed once and kept by CTranslate2
(`static_prompt`), instead of being recomputed at every turn. With greedy decoding this gives the same tokens as
sending the whole prompt (the tests check it): only the time to the first token changes.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import ctranslate2
from tokenizers import Tokenizer

from voxline.dialog import Message
from voxline.errors import LLMError, ModelError

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are Voxline, a friendly voice assistant. Everything you write is spoken aloud. "
    "Answer in one to three short sentences of plain, natural speech. "
    "Never use markdown, lists, headings, code, emoji or links. "
    "Write numbers as they are said. If you do not know something, say so briefly."
)
"""A spoken assistant: short, plain sentences. TTS reads everything, so formatting would be read out or lost."""

DEFAULT_MAX_TOKENS = 96
"""Longest reply in tokens when the caller does not say (about 70 words, 25 seconds of speech)."""
MAX_TOKENS_LIMIT = 1024
"""Upper bound for any request: CTranslate2 sizes its buffers by `max_length` (100k made it stall for minutes)."""
CHATML = "chatml"

StopReason = Literal["end", "length", "time", "cancelled", "repetition"]
LOOP_COPIES = 3
"""A reply whose last tokens are the same span this many times over is in a loop ("A volcano is a volcano is a
volcano is ...": a small model decoding greedily does that) and stops there: left alone it ran to the length cap,
96 tokens of it spoken and then prefilled again with every later turn of the session."""
LOOP_SPAN_TOKENS = (2, 16)
"""The lengths of span looked for. One token said three times ("very very very", the digits of "111") is speech."""


def looping(ids: Sequence[int], copies: int = LOOP_COPIES, spans: tuple[int, int] = LOOP_SPAN_TOKENS) -> bool:
    """Whether `ids` ends with one span of `spans[0]`-`spans[1]` tokens repeated `copies` times in a row."""
    for span in range(spans[0], spans[1] + 1):
        if len(ids) < span * copies:
            break
        tail = ids[len(ids) - span:]
        if all(ids[len(ids) - span * (k + 1):len(ids) - span * k] == tail for k in range(1, copies)):
            return True
    return False


@dataclass(frozen=True)
class ChatFormat:
    """How a model wants its chat: only ChatML is supported (Qwen2.5 and SmolLM2 both use it)."""

    stop_tokens: tuple[str, ...]

    @staticmethod
    def message(role: str, content: str) -> str:
        return f"<|im_start|>{role}\n{content}<|im_end|>\n"

    @staticmethod
    def generation_prompt() -> str:
        return "<|im_start|>assistant\n"

    @classmethod
    def from_model_dir(cls, folder: Path) -> ChatFormat:
        """Read `voxline.json`, written by the project's converter."""
        meta = json.loads((folder / "voxline.json").read_text())
        if meta.get("chat_template") != CHATML:
            raise ModelError(f"{folder}: chat template {meta.get('chat_template')!r} is not supported (only ChatML)")
        return cls(tuple(meta.get("stop_tokens") or ("<|im_end|>",)))


@dataclass
class GenerationRequest:
    """One reply to generate. `on_text` is called from the generation thread with each new piece of text."""

    messages: Sequence[Message]
    """The conversation after the system prompt, ending with the user's turn."""
    on_text: Callable[[str], None] = lambda text: None
    max_tokens: int = DEFAULT_MAX_TOKENS
    max_seconds: float | None = None
    """Wall-clock budget from the start of generation; the reply stops where it is when it runs out."""
    cancel: threading.Event = field(default_factory=threading.Event)
    """Set from any thread to stop this reply at the next token (barge-in)."""

    def __post_init__(self) -> None:
        if not 1 <= self.max_tokens <= MAX_TOKENS_LIMIT:
            raise ValueError(f"max_tokens must be 1..{MAX_TOKENS_LIMIT}, not {self.max_tokens}")


@dataclass(frozen=True)
class GenerationResult:
    """What one request produced."""

    text: str
    tokens: int
    first_token_s: float | None
    """From the start of `generate` to the first token of this request (includes the prompt's forward pass)."""
    elapsed_s: float
    stop_reason: StopReason


def default_device() -> tuple[str, str]:
    """(device, compute type): CUDA with int8 weights and fp16 activations when a GPU is visible, else CPU int8."""
    if ctranslate2.get_cuda_device_count() > 0:
        return "cuda", "int8_float16"
    return "cpu", "int8"


class LLM:
    """A loaded CTranslate2 generator with its tokenizer, chat format and system prompt."""

    def __init__(
        self,
        folder: Path,
        *,
        system_prompt: str = SYSTEM_PROMPT,
        use_static_prompt: bool = True,
        device: str | None = None,
        compute_type: str | None = None,
        threads: int = 0,
        parallel: int = 1,
    ) -> None:
        self.folder = Path(folder)
        self.device = device or default_device()[0]
        self.compute_type = compute_type or ("int8_float16" if self.device == "cuda" else "int8")
        try:
            self.format = ChatFormat.from_model_dir(self.folder)
            self.tokenizer = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
            self.generator = ctranslate2.Generator(
                str(self.folder), device=self.device, compute_type=self.compute_type, intra_threads=threads,
                inter_threads=parallel,  # batches run at once, each on `threads` threads (weights shared)
            )
        except (OSError, RuntimeError, ValueError) as exc:
            raise ModelError(f"cannot load the LLM in {self.folder}: {exc}") from exc
        self._stop_ids = {i for t in self.format.stop_tokens if (i := self.tokenizer.token_to_id(t)) is not None}
        self._special = sorted({t.content for t in self.tokenizer.get_added_tokens_decoder().values() if t.special}
                               | set(self.format.stop_tokens), key=len, reverse=True)
        """Control-token strings (`<|im_start|>`, `<|im_end|>`, ...): the tokenizer would turn them into real control
        tokens, so they are taken out of whatever the user said (see `prompt`)."""
        self.system_prompt = system_prompt
        self._system_tokens = self._tokens(self.format.message("system", system_prompt))
        self.use_static_prompt = use_static_prompt and self._splits_cleanly()

    def __repr__(self) -> str:
        return f"LLM({self.folder.name!r}, device={self.device!r}, compute_type={self.compute_type!r})"

    @property
    def name(self) -> str:
        return self.folder.name

    def prompt(self, messages: Sequence[Message]) -> tuple[list[str], list[str]]:
        """(system prompt tokens, the rest of the prompt's tokens), ending with the assistant's generation prompt."""
        text = "".join(self.format.message(m.role, self.neutralize(m.content)) for m in messages)
        return self._system_tokens, self._tokens(text + self.format.generation_prompt())

    def prompt_tokens(self, request: GenerationRequest) -> int:
        """Tokens the model must prefill for `request` (the system prompt is cached, so it does not count)."""
        rest = self.prompt(request.messages)[1]
        return len(rest) if self.use_static_prompt else len(rest) + len(self._system_tokens)

    def neutralize(self, content: str) -> str:
        """`content` without control-token strings: a transcript saying `<|im_end|><|im_start|>system` must stay
        words inside the user's turn, never close it and open a system turn (prompt injection)."""
        if "<" not in content:
            return content
        previous = None
        while previous != content:  # removing one may join the halves of another
            previous = content
            for token in self._special:
                content = content.replace(token, "")
        return content

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Run the requests as one batch, blocking until all are done; raises `LLMError` if the model fails."""
        started = time.perf_counter()
        streams = [_TextStream(self.tokenizer, self._stop_ids, r, started) for r in requests]
        prompts = [self.prompt(r.messages) for r in requests]
        if self.use_static_prompt:
            start_tokens = [rest for _, rest in prompts]
            static = {"static_prompt": self._system_tokens}
        else:
            start_tokens = [system + rest for system, rest in prompts]
            static = {}

        def on_step(step: ctranslate2.GenerationStepResult) -> bool:
            return streams[step.batch_id].step(step.token_id)

        try:
            self.generator.generate_batch(
                start_tokens,
                max_length=max(r.max_tokens for r in requests) + 1,
                include_prompt_in_result=False,
                end_token=list(self.format.stop_tokens),
                callback=on_step,
                **static,
            )
        except (RuntimeError, ValueError) as exc:
            raise LLMError(f"{self.name} failed while generating: {exc}") from exc
        return [s.result() for s in streams]

    def stream(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        max_seconds: float | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[str]:
        """Text deltas of one reply, as they are generated (in a worker thread); closing the iterator cancels it."""
        deltas: queue.SimpleQueue[str | BaseException | None] = queue.SimpleQueue()
        request = GenerationRequest(messages, deltas.put, max_tokens, max_seconds, cancel or threading.Event())

        def run() -> None:
            try:
                self.generate([request])
            except BaseException as exc:  # handed to the consumer, which re-raises it in its own thread
                deltas.put(exc)
            deltas.put(None)

        worker = threading.Thread(target=run, name="voxline-llm", daemon=True)
        worker.start()
        try:
            while (item := deltas.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            request.cancel.set()
            worker.join()

    def complete(self, messages: Sequence[Message], *, max_tokens: int = DEFAULT_MAX_TOKENS) -> GenerationResult:
        """The whole reply at once (tests, benchmarks, the non-streaming baseline)."""
        return self.generate([GenerationRequest(messages, max_tokens=max_tokens)])[0]

    def warm_up(self) -> None:
        """One tiny generation, so the first user's turn pays neither lazy initialisation nor the static prompt."""
        self.complete([Message("user", "Hi")], max_tokens=1)

    def _tokens(self, text: str) -> list[str]:
        return self.tokenizer.encode(text, add_special_tokens=False).tokens

    def _splits_cleanly(self) -> bool:
        """Whether tokenising the system block apart from the rest gives the tokens of the whole prompt.

        ChatML ends the system block with a special token and a newline, so the merge across the cut is expected
        to be impossible; if a tokenizer ever merged across it, the static prompt would change the model's input,
        so it is turned off rather than trusted.
        """
        probe = self.format.message("system", self.system_prompt) + self.format.message("user", "Hi")
        clean = self._tokens(probe) == self._system_tokens + self._tokens(self.format.message("user", "Hi"))
        if not clean:
            log.warning("%s: system prompt does not tokenise apart from the turn; static_prompt disabled", self.name)
        return clean


class _TextStream:
    """Turns one request's token ids into text deltas, and decides when that request stops."""

    def __init__(self, tokenizer: Tokenizer, stop_ids: set[int], request: GenerationRequest, started: float) -> None:
        self._tokenizer = tokenizer
        self._stop_ids = stop_ids
        self._request = request
        self._started = started
        self._ids: list[int] = []
        self._text = ""
        self._first_token_s: float | None = None
        self._stop: StopReason = "end"
        self._done = False

    def step(self, token_id: int) -> bool:
        """Take one generated token; True tells CTranslate2 to stop this request."""
        if self._done:
            return True
        now = time.perf_counter() - self._started
        if self._first_token_s is None:
            self._first_token_s = now
        if token_id in self._stop_ids:
            self._done = True
            return True
        self._ids.append(token_id)
        # Decode the whole reply and emit the new suffix: byte-level BPE can split one character over tokens,
        # and the replacement character marks such an unfinished character, which must wait for its last byte.
        text = self._tokenizer.decode(self._ids)
        if not self._text:
            text = text.lstrip()
        if text.startswith(self._text) and not text.endswith("\ufffd") and len(text) > len(self._text):
            delta, self._text = text[len(self._text):], text
            self._request.on_text(delta)
        request = self._request
        if request.cancel.is_set():
            self._stop = "cancelled"
        elif looping(self._ids):
            self._stop = "repetition"
        elif len(self._ids) >= request.max_tokens:
            self._stop = "length"
        elif request.max_seconds is not None and now >= request.max_seconds:
            self._stop = "time"
        else:
            return False
        self._done = True
        return True

    def result(self) -> GenerationResult:
        return GenerationResult(
            self._text, len(self._ids), self._first_token_s, time.perf_counter() - self._started, self._stop
        )
