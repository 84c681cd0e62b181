// The transcript normalisation spec, the browser twin of the Python `voxline.intents.normalize` (its docstring is
// the spec; the steps below are numbered as there). Both implementations are checked against the same vectors in
// tests/vectors/normalize.json: the normalised text is the intent cache's key and the only text the grammar
// engine sees, so the two must agree byte for byte.
//
// Known divergence, by design of the platforms: a code point assigned in a newer Unicode version than the other
// side's tables (Python's `unicodedata` lags the browser's ICU) is "other, unassigned" (a space) on the older
// side and possibly a letter on the newer. Only such code points can differ, and a differing key only costs a
// cache miss, never a wrong intent (the engine re-normalises in Python).

/** Deleted outright, so that contractions stay one word ("what's" → "whats"). */
export const APOSTROPHES = new Set(['\u0027', '\u2018', '\u2019', '\u02bc']);

/** The one symbol kept, as a token of its own ("30%" → "30 %"). */
export const PERCENT = '%';

/** Closed code point intervals whose characters each become a token (Chinese and Japanese have no spaces). */
export const CJK_RANGES = Object.freeze([
  [0x3005, 0x3007],
  [0x3040, 0x30ff],
  [0x3400, 0x4dbf],
  [0x4e00, 0x9fff],
  [0xf900, 0xfaff],
  [0x20000, 0x3ffff],
]);

// Punctuation, symbols, separators and "other" (controls, format, unassigned): the categories step 6 drops.
const DROPPED = /^[\p{P}\p{S}\p{Z}\p{C}]$/u;

/** @param {string} char one code point */
export function isCjk(char) {
  const code = char.codePointAt(0);
  return CJK_RANGES.some(([low, high]) => low <= code && code <= high);
}

/** @param {string|undefined} char */
function isAsciiDigit(char) {
  return char !== undefined && char >= '0' && char <= '9';
}

/** @param {string} char one ASCII character, already case-folded */
function isAsciiWordChar(char) {
  return (char >= 'a' && char <= 'z') || isAsciiDigit(char);
}

const DOTLESS_I = '\u0131';

/** Cherokee folds to its capitals, the opposite of every other script (Unicode CaseFolding.txt). */
function isCherokee(code) {
  return (code >= 0x13a0 && code <= 0x13ff) || (code >= 0xab70 && code <= 0xabbf);
}

/**
 * Python's `str.casefold` (Unicode full case folding) of one code point of NFKC text. JavaScript has no
 * casefold; lower(upper(lower(c))) equals it on every NFKC-stable code point except Cherokee and the dotless i
 * (checked exhaustively against CPython's tables when this was written). It is applied per code point, so a
 * capital sigma never takes the word-final form that `toLowerCase` gives a whole string.
 * @param {string} char one code point
 */
export function foldCase(char) {
  if (char === DOTLESS_I) return char;
  if (isCherokee(char.codePointAt(0))) return char.toUpperCase();
  return char.toLowerCase().toUpperCase().toLowerCase();
}

function caseFold(text) {
  let out = '';
  for (const char of text) out += char < '\u0080' ? char.toLowerCase() : foldCase(char);
  return out;
}

/**
 * Normalise a transcript or template by the shared spec.
 * @param {string} text
 * @returns {string} tokens separated by single spaces; normalising it again changes nothing
 */
export function normalize(text) {
  // Iterate by code point, as Python does: a surrogate pair (𠀀, emoji) is one character.
  const chars = Array.from(caseFold(text.normalize('NFKC')));
  const pieces = [];
  for (let i = 0; i < chars.length; i++) {
    const char = chars[i];
    if (APOSTROPHES.has(char)) continue;
    if (char === '.' || char === ',') {
      if (isAsciiDigit(chars[i - 1]) && isAsciiDigit(chars[i + 1])) {
        if (char === '.') pieces.push(char);
        continue;
      }
      pieces.push(' ');
    } else if (char === PERCENT) {
      pieces.push(` ${char} `);
    } else if (char < '\u0080') {
      // ASCII's categories are fixed: letters and digits are kept, all the rest is P, S, Z or C. Same result as
      // the general test below, without a regular expression per character (the cache's hit path runs this).
      pieces.push(isAsciiWordChar(char) ? char : ' ');
    } else if (DROPPED.test(char)) {
      pieces.push(' ');
    } else if (isCjk(char)) {
      pieces.push(` ${char} `);
    } else {
      pieces.push(char);
    }
  }
  return pieces.join('').split(' ').filter(Boolean).join(' ');
}

/** @param {string} normalised already normalised text */
export function tokens(normalised) {
  return normalised ? normalised.split(' ') : [];
}
