// Named in-domain settings of the browser pipeline, with units in the names. Override any of them with
// `startVoxline({settings: {...}})`; the demo page also reads `?vx.NAME=value` from its URL.

/** @typedef {typeof DEFAULTS} Settings */
export const DEFAULTS = Object.freeze({
  sampleRate: 16000,
  /** Seconds of audio the capture ring keeps; the longest utterance the ASR can still read back. */
  ringSeconds: 60,

  // Silero VAD (512-sample frames, 32 ms).
  vadStartProb: 0.5,
  vadStopProb: 0.35,
  /** Voiced audio needed before a turn starts (four 32 ms frames): a click is shorter. A one-word command is not
   * much longer: through the page's audio path, synthetic voices' "stop", "mute", "back" are voiced for four to
   * six frames, and at 0.15 s (five frames) the page heard no turn for 16 of 72 clean ones (README, "When a turn
   * starts"). */
  minSpeechSecs: 0.12,
  /** Unvoiced gap that does not break the onset of a turn (see endpointer.js): a word's stop consonant ("mu|te")
   * reads as one or two unvoiced frames; a click and the next one come further apart. 0: the voiced audio must be
   * one unbroken run (the design before). */
  onsetGapSecs: 0.1,
  /** Silero streams whose frames are offset by 1/N of a frame, for the start of a turn (endpointer.js): 2, the
   * larger of two streams half a frame apart (one more Silero run per frame, ~0.4 ms); 1, one stream (the design
   * before). How many frames of a short word are voiced depends on where the frame boundaries fall in it. */
  vadOnsetPhases: 2,
  /** Audio kept before the detected start, so the first phoneme is not clipped. */
  preRollSecs: 0.3,

  // Endpointing: smart-turn decides early, the silence hangover is the fallback.
  /** Silence after which smart-turn is asked whether the speaker is done. */
  turnCheckSecs: 0.2,
  /** smart-turn waits at most this long for the pause's speculative decode to finish (they share the CPU). */
  turnCheckMaxWaitMs: 400,
  /** smart-turn in a worker of its own, so the voice detector reads on while it runs (off: in the listening
   * worker, which then stops for each run: the design before, for side-by-side benchmarks). */
  turnWorker: true,
  /** smart-turn's P(complete) above which the turn ends (it is only trusted when confident). */
  turnCompleteProb: 0.7,
  /** Silence before smart-turn may end a turn, whatever it says: people pause 150-500 ms in the middle of a
   * sentence, and smart-turn calls most such pauses complete (it did for 64 % of those in recorded prompts of a
   * human speaker and 83 % of those between synthetic phrases, at 0.7: README, "Where a turn ends"). Above the top
   * of that range with a margin: the detector measures a 0.5 s pause as 0.5-0.55 s of silence (its end of speech
   * lags the last word, and the voice coming back is seen a frame or two late), and at 0.5 s smart-turn, when it
   * answered in time, ended a turn inside 36-43 % of the utterances whose longest pause was 0.5 s. */
  turnCompleteMinSilenceSecs: 0.6,
  /** Silence after which a complete command acts: one that no longer command could change (see
   * `completeByMeaning`). Counted in whole 32 ms frames: 0.12 s is four (0.15 s, the design before, five). Its
   * decode, started at the pause (~60 ms after the last word), answers ~100 ms later with the encoder's cached tail,
   * so a wait of five frames had become what a command waited for (README, "When a command acts"). What may still
   * follow such a command does not change it ("pause the music" … "for a moment"); a speaker who goes on with
   * another request is heard as the turn goes on (see voxline.js `#goneOn`). */
  commandSilenceSecs: 0.12,
  /** A command is complete when no longer command of the grammar would do something else: "pause" (… "the music"
   * pauses all the same), "mute", "next" act after `commandSilenceSecs`; "stop" (… "the timer"), "turn on the
   * lights" (… "in the kitchen") wait for `prefixCommandSilenceSecs` (voxline.intents.could_change). Off: the design
   * before, complete only when no longer command starts with the same words at all. */
  completeByMeaning: true,
  /** A pause the detector heard long enough for a command (`commandSilenceSecs`, `prefixCommandSilenceSecs`)
   * decides by what was said before it even when its decode answers after the speaker went on (a busy machine):
   * the command acts then, and what followed is read as voxline.js `#goneOn` says, as on a quiet machine. Off: the
   * design before, which dropped that decode, so the whole turn was decided at its end (on two loaded cores "skip
   * this song" … "and set a timer for ten minutes" went to the server as one question). */
  latePauseDecodes: true,
  /** Silence after which a command that more words could still change ("turn the volume down" … "to 30", "stop" …
   * "the timer") acts without waiting for the hangover: longer than the pauses people make inside a sentence
   * (150-500 ms), since what would change the command is exactly what follows such a pause. */
  prefixCommandSilenceSecs: 0.55,
  /** A command that could go on acts as soon as smart-turn calls the pause complete at `prefixTurnCompleteProb` or
   * more, without waiting for `prefixCommandSilenceSecs` (what the speaker adds after it still amends it: voxline.js
   * `#goneOn`). Off (measured, not adopted: README, "When a command acts"): it waits for that silence whatever
   * smart-turn says. */
  prefixOnTurnComplete: false,
  /** smart-turn's P(complete) from which a command that could go on acts on its word (`prefixOnTurnComplete`). */
  prefixTurnCompleteProb: 0.9,
  /** Silence that ends a turn whatever smart-turn says (pipecat's default stop_secs is 0.8). */
  hangoverSecs: 0.7,
  /** A turn never runs longer than this; the ASR window is 30 s. */
  maxTurnSecs: 28,

  // Loading.
  /** On a visit that finds onnxruntime's wasm in a cache, read the models only once it is compiled, so that the
   * workers start their runtimes (the longest step of a returning visit: README, "Page load") while the models are
   * read, instead of the models' reads slowing the runtime's own read down (a downloaded runtime shares the link
   * with the models as before); false: both at once (the design before, for side-by-side benchmarks). */
  runtimeFirst: true,

  // Whisper.
  /** wasm threads of the ASR worker (when cross-origin isolated); the listening worker always has one. */
  asrThreads: 2,
  /** Seconds of silence appended to the utterance in the encoder window (fewer loops; MODELS.md). */
  windowPadSecs: 6,
  /** Smallest encoder window. */
  minWindowSecs: 8,
  /** Partial transcripts while the user speaks, at most this often. */
  partialEverySecs: 0.6,
  /** Speech before the first partial transcript. Most commands are shorter: a partial still running when one ends
   * would hold up its final decode (an encoder run cannot be stopped), for a caption nobody reads. */
  firstPartialSecs: 1.5,
  /** Token budget: ceil(tokensPerSec × speech seconds) + tokenSlack. */
  tokensPerSec: 3.5,
  tokenSlack: 4,
  /** Drafted tokens checked per decoder run, at most (whisper.js, "Drafts"): an earlier decode of the same
   * utterance (a partial) proposes what comes next, and one run checks them all, for barely more than one token's
   * cost; 0: one token per run (the design before, for side-by-side benchmarks). */
  draftTokens: 6,
  /** Compute only the speech part of the smallest window in the encoder (its *head*, the audio and
   * `encoderTailMarginSecs` more) and read the silent rest from a cache made once per page (whisper.js, "The
   * encoder's silent tail"); false: the whole window every time (the design before, for side-by-side benchmarks). */
  encoderTail: true,
  /** Audio after the speech that the head still computes: the positions just after speech attend to it most.
   * Less lost commands on synthetic voices, 0.5 s most (`voxline bench readings`, configurations `tail-margin-*`;
   * README, "The encoder's silent tail"). */
  encoderTailMarginSecs: 2.0,

  // Local intents (zero round trips).
  /** Transcript confidence below which a local match is not trusted and the turn goes to the server. It is also the
   * floor of the gate below which the turn's audio goes with it: the server announces its own re-recognition gate in
   * `welcome` (`asr_confidence_gate`), and the audio goes below whichever is higher (link.js `wantsAudio`). */
  localIntentMinConfidence: 0.5,
  /** Grammar-aware decoding: beside the free decode, a decode constrained to the grammar's sentences gives the
   * command reading and its command confidence (off: the free transcript and its word confidence decide). */
  grammarDecode: true,
  /** A command reading whose log-likelihood is more than this below the free transcript's is no reading at all. */
  grammarMaxMarginNats: 6,
  /** Hypotheses the grammar-constrained search keeps per step (each costs one decoder step). */
  grammarBeam: 3,
  /** Decoder steps the constrained search may spend beyond the free decode, at most. */
  grammarMaxSteps: 16,
  /** When the constrained search finds nothing from the first token of the free transcript the grammar refuses, it
   * starts again from each earlier token ("Time for 1 hour" → "Timer for 1 hour"; see whisper.js). */
  grammarBacktrack: true,
  /** A command reading that leaves out what may be the start of one of its words, heard as a word of its own
   * ("Okay, in pause." read "okay pause", which may be "unpause": `CommandGraph.dropsAMisheardStart`), is dropped;
   * off: kept. */
  misheardStartGuard: true,
  /** Utterances up to this long, heard with word confidence below `commandPromptBelowConfidence` and not as a
   * confident command, are decoded once more prompted with the grammar's commands (see whisper.js). */
  commandPromptMaxSecs: 3,
  commandPromptBelowConfidence: 0.7,
  /** That prompt lists the skill files' own first sentences of each intent ("Stop. What time is it. Turn off the
   * light. ..."); off: the word graph's shortest sentences, alphabetically (the design before), which grow odd as
   * a skill pack grows ("Its dark", "Audio off"). */
  commandPromptFromSkills: true,
  /** The command confidence is the calibrated probability that a reading is what was said (whisper.js,
   * `COMMAND_CONFIDENCE_MODEL`); off: the design before (spelled × exp(½ · margin), with its gate 0.35). */
  calibratedCommandConfidence: true,
  /** Its coefficients (`{bias, spelled, margin, freeConfidence, wordRatio, agreement?}`); null: whisper.js
   * `COMMAND_CONFIDENCE_MODEL`. For benchmarks of one fit beside another (`voxline bench readings`). */
  commandConfidenceModel: null,
  /** Command confidence (see whisper.js) from which the device acts on a command reading by itself. Chosen on the
   * tuning set's cross-validated sweep (`voxline bench readings --noise-snr-db 10 --fit`, 1130 clips): the lowest
   * gate whose out-of-domain accepts stay under 2 % (1.4 %); there it acts rightly on 83 % of commands (one-word
   * 70 %), with 27 wrong actions. Its meaning moves with the model: 0.85 was the gate of the model before
   * `agreement` (README, "How the command path decides"). A free transcript still needs `localIntentMinConfidence`. */
  commandMinConfidence: 0.75,
  /** Confidence from which the decode at a pause (all the speech so far, with the grammar's help) acts on a command
   * without waiting for the turn to end, once the silence its kind waits for has passed (grammar-aware
   * endpointing: `commandSilenceSecs`, `prefixCommandSilenceSecs`); a question waits for the end of the turn. */
  pauseIntentMinConfidence: 0.5,
  /** At a pause, a partial decode still running that already has all the speech becomes the final one, instead
   * of a new decode queued behind it (off: the previous design, for side-by-side benchmarks). */
  promotePartials: true,
  /** Speculative turns: a transcript heard at a pause that neither the cache nor the grammar answers, with word
   * confidence from `speculativeMinConfidence`, goes to the server at once; the server answers it but holds the
   * answer until the turn ends with the same transcript (then it is confirmed, else cancelled without a sound).
   * The LLM starts while the page still waits to be sure the user has finished. */
  speculativeTurns: true,
  speculativeMinConfidence: 0.78,
  /** Speech that starts before anything of the server's answer is audible holds the answer instead of cancelling
   * it: a cough or a stray word does not lose a command the server is still resolving (turn.js). Off: any speech
   * over a pending answer barges in on it, the design before. */
  holdSilentAnswers: true,
  /** Most entries the IndexedDB intent cache keeps; past that the least recently used go. */
  intentCacheMaxEntries: 500,

  // Reconnecting to the backend after the connection drops: exponential backoff with jitter, capped.
  /** Wait before the first reconnect attempt; it doubles with each attempt that fails. */
  reconnectFirstMs: 500,
  /** The wait between attempts never grows past this. */
  reconnectMaxMs: 10000,
  /** Fraction of each wait drawn at random (0 none, 1 all), so that pages dropped together do not return together. */
  reconnectJitter: 0.5,

  /** Use the full 30 s window for every decode (the slower baseline `voxline bench asr` compares against). */
  fullWindow: false,
});

/** @param {Partial<Settings>} overrides */
export function resolveSettings(overrides = {}) {
  const unknown = Object.keys(overrides).filter((k) => !(k in DEFAULTS));
  if (unknown.length) throw new Error(`unknown Voxline setting(s): ${unknown.join(', ')}`);
  return Object.freeze({ ...DEFAULTS, ...overrides });
}

/** Settings given in a page URL as `?vx.hangoverSecs=0.5&vx.fullWindow=1` (an object setting as JSON). */
export function settingsFromQuery(search) {
  const params = new URLSearchParams(search);
  /** @type {Record<string, number|boolean|object>} */
  const out = {};
  for (const [key, raw] of params) {
    if (!key.startsWith('vx.')) continue;
    const name = key.slice(3);
    if (typeof DEFAULTS[name] === 'boolean') out[name] = raw === '1' || raw === 'true';
    else if (DEFAULTS[name] === null) out[name] = objectSetting(name, raw);
    else out[name] = Number(raw);
  }
  return out;
}

/** An object setting from a URL (JSON), or an error that names it. */
function objectSetting(name, raw) {
  let value;
  try {
    value = JSON.parse(raw);
  } catch (error) {
    throw new Error(`Voxline setting vx.${name} must be JSON (an object, or null): ${error.message}`);
  }
  if (value !== null && (typeof value !== 'object' || Array.isArray(value))) {
    throw new Error(`Voxline setting vx.${name} must be a JSON object or null, got ${raw}`);
  }
  return value;
}
