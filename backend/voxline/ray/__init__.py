"""Scale-out: the LLM, TTS and server re-recognition as Ray Serve deployments, behind the interfaces a Session uses.

`voxline serve --engine ray` keeps the Starlette front (WebSockets, protocol, grammar, clause splitting) in its own
process and runs the models as three Ray Serve applications, each with its own replicas, resources and autoscaling
(`Settings.ray_llm`, `ray_tts`, `ray_asr`). Without `--ray-address` a local Ray instance is started, so the same
command works on a laptop. Only this package imports Ray, and only when it is used (`pip install voxline[ray]`).

Where batching happens: inside each LLM replica. One CTranslate2 `generate_batch` call needs every prompt of the
batch in one process, so each `LLMWorker` runs its own `TurnScheduler` in front of its model. The front forwards
each request's ASR confidence and the user's tier, so the priority lanes mean what they mean in the embedded
server, per replica. With several replicas, Serve's router sends each request to the replica with fewer ongoing
requests (power of two choices) and every replica batches what it receives: a free model starts a request at once,
and what reaches it while the model is busy is batched by lane when it frees (work-conserving, see scheduler.py); a
replica accepts up to its scheduler's `queue_limit` plus one full batch, so Serve never holds back what could join.

Streaming: `LLMWorker.generate` is an async generator; the front reads it through `handle.options(stream=True)`
and hands each text delta to the turn as it arrives, so the first clause is spoken as early as in the embedded
server. A barge-in cancels the streaming response; the replica sees `asyncio.CancelledError` in the generator and
stops the request at its next token.

Failure: a replica lost mid-reply (killed, its node gone) ends the turn with `error {code: "llm_failed"}` and the
apology, and the session goes on; Serve starts a replacement. The reply is retried on another (or the restarted)
replica only when no token has reached the front yet: whatever the user was already sent cannot be taken back,
and a second answer glued onto half of the first would not make sense. TTS and re-recognition are retried once
the same way (a clause or an utterance is produced whole, so a retry can never repeat anything). A replica that
hangs without dying is cut off by `STREAM_STALL_S`, so no failure leaves a session waiting.

Modules: spec.py (a deployment's replicas and resources), replicas.py (the workers Serve runs), apps.py (the
Serve applications and their config builders), cluster.py (starting or joining Ray), front.py (the Session's
scheduler, TTS and ASR over the deployments, and `load_engines`).
"""

from voxline.ray.apps import ASR_APP, LLM_APP, TTS_APP, asr_app, llm_app, tts_app
from voxline.ray.cluster import RayCluster
from voxline.ray.front import RayTurnScheduler, RemoteASR, RemoteLLM, RemoteTTS, load_engines
from voxline.ray.replicas import ASRWorker, LLMWorker, ReplyEnd, TTSWorker, WorkerFailure
from voxline.ray.spec import WorkerSpec

__all__ = ["ASR_APP", "ASRWorker", "LLM_APP", "LLMWorker", "RayCluster", "RayTurnScheduler", "RemoteASR",
           "RemoteLLM", "RemoteTTS", "ReplyEnd", "TTSWorker", "TTS_APP", "WorkerFailure", "WorkerSpec", "asr_app",
           "llm_app", "load_engines", "tts_app"]
