// The local intent engine: Voxline's Python grammar engine (`voxline.intents`) running in Pyodide, in a Worker so
// that seconds of interpreter start-up never touch the page. The engine arrives as the wheel the server builds
// from the same sources it matches with, checked against the manifest's sha256 before a byte of it is installed.
//
// Messages in:   {type: 'recognize', id, text, lang = 'en'}
//                {type: 'extend', id, documents}   user skill documents (source dicts, or compiled grammars)
//                {type: 'lexicon', id, lang = 'en'}  the grammar as a word graph for the recogniser (lexicon.py)
//                {type: 'validate', id, intent, slots, lang = 'en'}   could this grammar give that intent?
// Messages out:  {type: 'ready', grammar_version, load_ms, timings, files}       once, when it can answer; files:
//                                                                  Pyodide's, as `voxline:ready`'s (loader.js)
//                {type: 'result', id, match, prefix, couldChange, ms}            match: Match.to_dict() or null
//                {type: 'extended', id, grammar_version}
//                {type: 'lexicon', id, lexicon}                                  voxline.intents.lexicon's layout
//                {type: 'validated', id, problem}                                null, or what is wrong
//                {type: 'error', code, message}        without id: loading failed, nothing will be answered
//                {type: 'error', id, code, message}    with id: that request failed, the engine lives on
// Requests sent before 'ready' wait for it (or get the load error).
//
// Pyodide comes from its versioned URL folder (the manifest's `runtime`); its wasm and standard library, the bulk of
// it, are checked against their pinned sha256 and kept in Cache Storage (loader.js), as the models are: a returning
// visit downloads none of it, and an altered copy is refused (`runtime_corrupt`). Its wasm is compiled here, as
// onnxruntime's is on the page (`compileRuntimeFile`: from the HTTP cache where it can, so that the browser's
// compiled code is used again), and Pyodide instantiates that module.
import { compileRuntimeFile, instantiateOnce, LoadLedger, loadRuntimeFile } from './loader.js';

/** Where the unversioned runtime is, for a server whose manifest names none. */
const PYODIDE_FALLBACK_BASE = new URL('../vendor/pyodide/', import.meta.url);
const MANIFEST_URL = new URL('../intents/manifest.json', import.meta.url);
/** Pyodide's files that are read as bytes (checked and cached here), by the media type they are served as. */
const CHECKED_RUNTIME_FILES = Object.freeze({ 'python_stdlib.zip': 'application/zip' });
const PYODIDE_WASM = 'pyodide.asm.wasm';

const ERROR_CODES = Object.freeze({
  engineUnavailable: 'intents_engine_unavailable',
  manifestFailed: 'intents_manifest_failed',
  wheelCorrupt: 'intents_wheel_corrupt',
  engineFailed: 'intents_engine_failed',
  grammarInvalid: 'grammar_invalid',
  badRequest: 'bad_request',
});

class EngineError extends Error {
  /** @param {string} code one of ERROR_CODES @param {string} message */
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

// Answers JSON strings, so that no Python object (and no proxy to free) crosses into JavaScript.
const GLUE = `
import json
from voxline.intents import (Grammar, GrammarError, builtin_grammar, compile_documents, could_change, is_prefix,
                             recognize)
from voxline.intents.lexicon import decoding_lexicon
from voxline.intents.validate import intent_problem

_grammar = builtin_grammar()
_user_documents = []

def _sources(document):
    if not isinstance(document, dict):
        raise GrammarError(f"a skill document is a mapping with 'language' and 'intents', got {type(document).__name__}")
    # A compiled grammar splits back into one source document per language (compiling it again is the identity).
    if "format" in document:
        Grammar.from_dict(document)
        return [{"language": lang, **data} for lang, data in sorted(document["languages"].items())]
    return [document]

def vx_version():
    return _grammar.version

def vx_recognize(text, lang):
    try:
        match = recognize(text, _grammar, lang)
        prefix = is_prefix(text, _grammar, lang)
        changes = could_change(text, _grammar, lang) if match is not None else prefix
    except GrammarError as error:
        return json.dumps({"error": {"code": error.code, "message": error.message}})
    return json.dumps({"match": None if match is None else match.to_dict(), "prefix": prefix, "could_change": changes})

def vx_lexicon(lang):
    try:
        return json.dumps({"lexicon": decoding_lexicon(_grammar, lang)}, separators=(",", ":"))
    except GrammarError as error:
        return json.dumps({"error": {"code": error.code, "message": error.message}})

def vx_validate(intent, slots_json, lang):
    try:
        return json.dumps({"problem": intent_problem(_grammar, lang, intent, json.loads(slots_json))})
    except GrammarError as error:
        return json.dumps({"problem": error.message})

def vx_extend(documents_json):
    global _grammar
    try:
        added = [source for document in json.loads(documents_json) for source in _sources(document)]
        base = [source for document in [builtin_grammar().to_dict()] for source in _sources(document)]
        grammar = Grammar(compile_documents(base + _user_documents + added))
    except GrammarError as error:
        return json.dumps({"error": {"code": error.code, "message": error.message}})
    _user_documents.extend(added)
    _grammar = grammar
    return json.dumps({"grammar_version": grammar.version})
`;

const started = performance.now();
const engine = load();
// An unhandled rejection would be the silent hang this worker must never be: report it once, up front.
engine.catch((error) => post({ type: 'error', code: error.code ?? ERROR_CODES.engineFailed, message: error.message }));

self.onmessage = async (event) => {
  const msg = event.data ?? {};
  let py;
  try {
    py = await engine;
  } catch (error) {
    if (msg.id !== undefined) post({ type: 'error', id: msg.id, code: error.code ?? ERROR_CODES.engineFailed, message: error.message });
    return;
  }
  try {
    if (msg.type === 'recognize') recognizeOne(py, msg);
    else if (msg.type === 'extend') extend(py, msg);
    else if (msg.type === 'lexicon') lexicon(py, msg);
    else if (msg.type === 'validate') validate(py, msg);
    else throw new EngineError(ERROR_CODES.badRequest, `unknown message type ${JSON.stringify(msg.type)}`);
  } catch (error) {
    post({ type: 'error', id: msg.id, code: error.code ?? ERROR_CODES.engineFailed, message: `The intent engine failed: ${lastLine(error.message)}` });
  }
};

function post(message) {
  self.postMessage(message);
}

async function load() {
  const since = (t0) => (result) => [result, performance.now() - t0];
  const manifest = await fetchManifest();
  const ledger = new LoadLedger();
  const [[pyodide, pyodideMs], [wheel, wheelMs]] = await Promise.all([
    startPyodide(manifest.runtime, ledger).then(since(started)), fetchWheel(manifest).then(since(started))]);
  const installing = performance.now();
  try {
    const sitePackages = pyodide.runPython('import os, sysconfig; os.path.normpath(sysconfig.get_paths()["purelib"])');
    pyodide.unpackArchive(wheel.bytes, 'wheel', { extractDir: sitePackages });
    pyodide.runPython('import importlib; importlib.invalidate_caches()');
    pyodide.runPython(GLUE);
  } catch (error) {
    throw new EngineError(ERROR_CODES.engineFailed, `The intent engine would not start in Pyodide: ${lastLine(error.message)}`);
  }
  const py = {
    recognize: pyodide.globals.get('vx_recognize'),
    extend: pyodide.globals.get('vx_extend'),
    lexicon: pyodide.globals.get('vx_lexicon'),
    validate: pyodide.globals.get('vx_validate'),
    version: pyodide.globals.get('vx_version'),
  };
  const version = py.version();
  if (version !== wheel.grammarVersion) {
    throw new EngineError(ERROR_CODES.wheelCorrupt, `The intent wheel's grammar is version ${version}, but the server's manifest says ${wheel.grammarVersion}. Reload the page; if it persists, restart the server.`);
  }
  // Where the load time went, for benchmarks: Pyodide and the wheel download in parallel, then the install.
  const timings = { pyodide_ms: pyodideMs, wheel_ms: wheelMs, install_ms: performance.now() - installing };
  post({ type: 'ready', grammar_version: version, load_ms: performance.now() - started, timings, files: ledger.files });
  return py;
}

/**
 * @param {{base: string, files: Record<string, {url: string, sha256: string}>}|undefined} runtime
 * @param {LoadLedger} ledger where each checked file came from
 */
async function startPyodide(runtime, ledger) {
  const indexURL = runtime ? new URL(runtime.base, MANIFEST_URL).href : PYODIDE_FALLBACK_BASE.href;
  const pyodideUrl = new URL('pyodide.mjs', indexURL).href;
  // The checked bytes load alongside the module; an altered one rejects with its ModelLoadError code.
  const checked = runtime ? Object.keys(CHECKED_RUNTIME_FILES).map(async (name) =>
    [new URL(name, indexURL).href, { bytes: await loadRuntimeFile(runtime, name, MANIFEST_URL, ledger), type: CHECKED_RUNTIME_FILES[name] }]) : [];
  const compiled = runtime ? compileRuntimeFile(runtime, PYODIDE_WASM, MANIFEST_URL, ledger) : null;
  for (const pending of [...checked, compiled]) pending?.catch(() => {}); // awaited below; a failed import must not leave them unhandled
  let module;
  try {
    module = await import(pyodideUrl);
  } catch (error) {
    throw new EngineError(ERROR_CODES.engineUnavailable, `Pyodide could not be loaded from ${pyodideUrl} (${error.message}); local intents are off, cached and server intents still work. Check that the server's node_modules has pyodide (run \`bash scripts/setup.sh\`).`);
  }
  const served = new Map(await Promise.all(checked));
  // Pyodide takes no bytes for its wasm or stdlib: it fetches them from indexURL with the global fetch. The stdlib's
  // URL is answered from the checked bytes, the wasm's with a stand-in: Pyodide instantiates it streaming, and
  // instantiateOnce gives the checked module instead. Every other fetch goes out as usual.
  let restoreInstantiate = () => {};
  if (compiled) {
    restoreInstantiate = instantiateOnce(await compiled, 'instantiateStreaming');
    served.set(new URL(PYODIDE_WASM, indexURL).href, { bytes: new Uint8Array(8), type: 'application/wasm' });
  }
  const networkFetch = self.fetch;
  self.fetch = (input, init) => {
    const file = served.get(String(input instanceof Request ? input.url : input));
    return file ? Promise.resolve(new Response(file.bytes, { headers: { 'content-type': file.type } })) : networkFetch(input, init);
  };
  try {
    // stdout would only be noise in the page's console; errors come back as exceptions anyway.
    return await module.loadPyodide({ indexURL, stdout: () => {} });
  } catch (error) {
    throw new EngineError(ERROR_CODES.engineUnavailable, `Pyodide failed to start (${error.message}); local intents are off.`);
  } finally {
    self.fetch = networkFetch;
    restoreInstantiate();
  }
}

async function fetchManifest() {
  try {
    const response = await fetch(MANIFEST_URL, { cache: 'no-cache' });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    return await response.json();
  } catch (error) {
    throw new EngineError(ERROR_CODES.manifestFailed, `The intent engine manifest at ${MANIFEST_URL.href} could not be read (${error.message}); local intents are off until the server answers and the page reloads.`);
  }
}

/** @returns {Promise<{bytes: Uint8Array, grammarVersion: string}>} */
async function fetchWheel(manifest) {
  const url = new URL(manifest.url, MANIFEST_URL);
  let bytes;
  try {
    const response = await fetch(url);
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    bytes = new Uint8Array(await response.arrayBuffer());
  } catch (error) {
    throw new EngineError(ERROR_CODES.manifestFailed, `The intent engine wheel at ${url.href} could not be downloaded (${error.message}).`);
  }
  const actual = await sha256Hex(bytes);
  if (actual !== manifest.sha256 || bytes.length !== manifest.size) {
    throw new EngineError(ERROR_CODES.wheelCorrupt, `The intent engine wheel arrived altered (sha256 ${actual.slice(0, 12)}…, ${bytes.length} bytes; the manifest says ${String(manifest.sha256).slice(0, 12)}…, ${manifest.size} bytes); it was not installed. Reload to try again.`);
  }
  return { bytes, grammarVersion: manifest.grammar_version };
}

async function sha256Hex(bytes) {
  const digest = await crypto.subtle.digest('SHA-256', bytes);
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, '0')).join('');
}

function recognizeOne(py, msg) {
  if (typeof msg.text !== 'string') throw new EngineError(ERROR_CODES.badRequest, 'recognize needs text (a string)');
  const begun = performance.now();
  const answer = JSON.parse(py.recognize(msg.text, msg.lang ?? 'en'));
  if (answer.error) return post({ type: 'error', id: msg.id, ...answer.error });
  post({ type: 'result', id: msg.id, match: answer.match, prefix: answer.prefix, couldChange: answer.could_change,
    ms: performance.now() - begun });
}

function extend(py, msg) {
  if (!Array.isArray(msg.documents)) throw new EngineError(ERROR_CODES.badRequest, 'extend needs documents (an array)');
  const answer = JSON.parse(py.extend(JSON.stringify(msg.documents)));
  if (answer.error) return post({ type: 'error', id: msg.id, ...answer.error });
  post({ type: 'extended', id: msg.id, grammar_version: answer.grammar_version });
}

function lexicon(py, msg) {
  const answer = JSON.parse(py.lexicon(msg.lang ?? 'en'));
  if (answer.error) return post({ type: 'error', id: msg.id, ...answer.error });
  post({ type: 'lexicon', id: msg.id, lexicon: answer.lexicon });
}

function validate(py, msg) {
  if (typeof msg.intent !== 'string') throw new EngineError(ERROR_CODES.badRequest, 'validate needs intent (a string)');
  const answer = JSON.parse(py.validate(msg.intent, JSON.stringify(msg.slots ?? {}), msg.lang ?? 'en'));
  post({ type: 'validated', id: msg.id, problem: answer.problem });
}

/** A Python traceback's last line says what went wrong; the rest is noise in a page's error message. */
function lastLine(text) {
  return String(text).trim().split('\n').at(-1);
}
