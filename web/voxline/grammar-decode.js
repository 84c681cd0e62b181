// Grammar-aware decoding: the grammar's word graph (`voxline.intents.lexicon`, built by the Python engine) walked
// one Whisper token at a time, so that the decoder can be held to sentences that are commands.
//
// A state is where a partial transcript can be in the graph: a set of (node, return node) pairs (the graph is
// nondeterministic, and a slot's sub-graph returns to the template that called it), plus the letters of the word
// not yet finished. Token text is folded as `normalize.js` folds a transcript (case, apostrophes deleted, `%` its
// own word, any other punctuation or space a word break), so " Pause", "pause" and "PAUSE." walk alike.
//
// An utterance whose free transcript opens as no command does ("why ...", "don't ...": the lexicon's
// `no_command_openings`) gets no command reading: a search would find one by leaving the opening out ("stop the
// music" for "don't stop the music"), and the grammar engine, which refuses the whole, would accept that.
//
// Which way its errors go: the graph is lenient (free text takes any words), so a reading it accepts is only a
// candidate; the page acts on it only if the grammar engine matches it too. A token it refuses is one no command
// of the graph can contain; then the free transcript decides, as without this module.

import { normalize } from './normalize.js';

export const LEXICON_FORMAT = 1;
/** The absorbing state of free text (a wildcard slot): any words, and a command may end. */
const FREE = -2;
const NO_RETURN = -1;
const APOSTROPHES = new Set(["'", '\u2018', '\u2019', '\u02bc']);
const WORD_CHAR = /[\p{L}\p{N}\p{M}]/u;

/**
 * @typedef {{w?: Record<string, number[]>, e?: 1, f?: 1, c?: [number, number][], r?: 1}} LexiconNode
 * @typedef {{format: number, version: string, lang: string, start: number, root: number, tail: number,
 *   nodes: LexiconNode[]}} Lexicon
 * @typedef {{pairs: [number, number][], word: string}} GraphState  pairs: (node, return node) after closure
 */

export class CommandGraph {
  /** @param {Lexicon} lexicon */
  constructor(lexicon) {
    if (lexicon?.format !== LEXICON_FORMAT || !Array.isArray(lexicon.nodes)) {
      throw new Error(`decoding lexicon format ${lexicon?.format} is not ${LEXICON_FORMAT}`);
    }
    this.version = lexicon.version;
    this.nodes = lexicon.nodes;
    this.tail = lexicon.tail;
    this.root = lexicon.root ?? lexicon.start;
    /** Commands for a decoder prompt in the skill author's order (`voxline.intents.lexicon.prompt_commands`), as
     * words; null when the lexicon has none. */
    this.prompt = Array.isArray(lexicon.prompt) ? lexicon.prompt : null;
    /** Openings of an utterance that is no command, as words (see the header); none in an older lexicon. */
    this.noCommandOpenings = Array.isArray(lexicon.no_command_openings) ? lexicon.no_command_openings : [];
    /** Words that the letters of a sound-alike make into another word ("pause": "unpause"), each with the phrases
     * heard for those letters (["and"], ["in"]); none in an older lexicon. */
    this.misheardStarts = new Map(lexicon.misheard_starts && typeof lexicon.misheard_starts === 'object'
      ? Object.entries(lexicon.misheard_starts) : []);
    /** Each node's words, sorted, for prefix checks by binary search. */
    this.sortedWords = this.nodes.map((n) => Object.keys(n.w ?? {}).sort());
    this.initial = { pairs: this.#closure([[lexicon.start, NO_RETURN]]), word: '' };
  }

  /** The state before any token. */
  start() {
    return this.initial;
  }

  /**
   * The state after `text` (a token's text), or null when no command of the graph goes that way.
   * @param {GraphState} state
   * @param {string} text
   * @returns {GraphState|null}
   */
  feed(state, text) {
    if (text.includes('\ufffd')) return null; // a token that is part of a multi-byte character: never a command's
    let { pairs, word } = state;
    for (const ch of text.normalize('NFKC').toLowerCase()) {
      if (APOSTROPHES.has(ch)) continue;
      if (WORD_CHAR.test(ch)) {
        word += ch;
        if (!this.#canStart(pairs, word)) return null;
        continue;
      }
      if (word) {
        pairs = this.#step(pairs, word);
        word = '';
        if (!pairs.length) return null;
      }
      if (ch === '%') {
        pairs = this.#step(pairs, '%');
        if (!pairs.length) return null;
      }
    }
    return { pairs, word };
  }

  /** Whether `text` (a transcript) opens as no command does, by the lexicon's `no_command_openings`. */
  opensAsNoCommand(text) {
    if (!this.noCommandOpenings.length) return false;
    const words = normalize(text).split(' ');
    return this.noCommandOpenings.some((opening) => opening.every((word, i) => words[i] === word));
  }

  /**
   * Whether the command reading `reading` leaves out a phrase that `free` (the free transcript) has just before a
   * word whose start it may be (`misheardStarts`): "Okay, in pause." read as "okay pause" may be "okay, unpause",
   * the opposite command. Such a reading is dropped: no command rather than the wrong one. Each such word of the
   * reading is compared, occurrence by occurrence, with the same word of the free transcript.
   */
  dropsAMisheardStart(free, reading) {
    if (!this.misheardStarts.size) return false;
    const heard = normalize(free).split(' ');
    const read = normalize(reading).split(' ');
    const at = (words, word) => words.flatMap((w, k) => (w === word ? [k] : []));
    const ends = (words, end, phrase) => end >= phrase.length
      && phrase.every((w, k) => words[end - phrase.length + k] === w);
    for (const [word, phrases] of this.misheardStarts) {
      const inHeard = at(heard, word);
      const inRead = at(read, word);
      for (let n = 0; n < Math.min(inHeard.length, inRead.length); n++) {
        const [i, j] = [inHeard[n], inRead[n]];
        if (phrases.some((phrase) => ends(heard, i, phrase) && !ends(read, j, phrase))) return true;
      }
    }
    return false;
  }

  /** Whether a command may end in `state` (its unfinished word finished). */
  complete(state) {
    const pairs = state.word ? this.#step(state.pairs, state.word) : state.pairs;
    return pairs.some(([node, ret]) => node === FREE || (ret === NO_RETURN && this.nodes[node].e === 1));
  }

  /**
   * Short commands of the graph to show Whisper in a decoder prompt: first the shortest of each intent, then
   * others, at most one per first word, fewest words first. Slots, free text and skip words are left out.
   * @returns {string[][]} each a sentence as its words
   */
  shortCommands({ maxWords = 3 } = {}) {
    const perIntent = [];
    const others = [];
    const intents = new Set();
    const firstWords = new Set();
    let frontier = [[[this.root], []]];
    for (let depth = 1; depth <= maxWords; depth++) {
      const next = [];
      for (const [nodes, words] of frontier) {
        const options = new Map();
        for (const node of nodes) {
          for (const [word, targets] of Object.entries(this.nodes[node].w ?? {})) {
            if (!options.has(word)) options.set(word, new Set());
            for (const t of targets) options.get(word).add(t);
          }
        }
        for (const [word, targets] of [...options].sort(([a], [b]) => (a < b ? -1 : 1))) {
          const sentence = [...words, word];
          const ends = [...targets].filter((t) => this.nodes[t].e === 1 && t !== this.tail);
          const fresh = ends.flatMap((t) => this.nodes[t].i ?? []).filter((name) => !intents.has(name));
          if (fresh.length) {
            perIntent.push(sentence);
            for (const name of fresh) intents.add(name);
          } else if (ends.length && !firstWords.has(sentence[0])) {
            others.push(sentence);
          }
          if (ends.length) firstWords.add(sentence[0]);
          next.push([[...targets], sentence]);
        }
      }
      frontier = next;
    }
    return [...perIntent, ...others];
  }

  /** Whether free text (a wildcard slot) took part in reaching `state`: then the graph vouches for less. */
  usesFreeText(state) {
    const pairs = state.word ? this.#step(state.pairs, state.word) : state.pairs;
    const exact = pairs.some(([node, ret]) => node !== FREE && ret === NO_RETURN && this.nodes[node].e === 1);
    return !exact && pairs.some(([node]) => node === FREE);
  }

  /** Whether a word beginning with `prefix` can come next. */
  #canStart(pairs, prefix) {
    for (const [node] of pairs) {
      if (node === FREE) return true;
      const words = this.sortedWords[node];
      let low = 0, high = words.length;
      while (low < high) {
        const mid = (low + high) >> 1;
        if (words[mid] < prefix) low = mid + 1;
        else high = mid;
      }
      if (low < words.length && words[low].startsWith(prefix)) return true;
    }
    return false;
  }

  /** @returns {[number, number][]} */
  #step(pairs, word) {
    const next = [];
    for (const [node, ret] of pairs) {
      if (node === FREE) {
        next.push([FREE, NO_RETURN]);
        continue;
      }
      for (const target of this.nodes[node].w?.[word] ?? []) next.push([target, ret]);
    }
    return this.#closure(next);
  }

  /** Every pair reachable without reading a word: slot calls and returns, free text, the skip-word tail. */
  #closure(pairs) {
    const seen = new Set();
    const out = [];
    const stack = [...pairs];
    while (stack.length) {
      const pair = stack.pop();
      const key = pair[0] * 1e6 + pair[1];
      if (seen.has(key)) continue;
      seen.add(key);
      out.push(pair);
      const [node, ret] = pair;
      if (node === FREE) continue;
      const spec = this.nodes[node];
      if (spec.f) stack.push([FREE, NO_RETURN]);
      if (ret === NO_RETURN) {
        for (const [entry, back] of spec.c ?? []) stack.push([entry, back]);
        if (spec.e && node !== this.tail) stack.push([this.tail, NO_RETURN]);
      } else if (spec.r) {
        stack.push([ret, NO_RETURN]);
      }
    }
    return out;
  }
}

/**
 * A token's text folded for comparing readings: case, spaces and punctuation removed (" Stop." and "stop" agree).
 * @param {string} text
 */
export function foldToken(text) {
  let out = '';
  for (const ch of text.normalize('NFKC').toLowerCase()) if (WORD_CHAR.test(ch) || ch === '%') out += ch;
  return out;
}
