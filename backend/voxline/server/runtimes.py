"""The browser runtimes (onnxruntime-web, Pyodide): pinned by version and by the sha256 of every file served.

Each runtime is served at a versioned URL, `/vendor/<package>/<version>/<file>`, so its URLs are content-addressed
(the server refuses to send a file whose bytes differ from its pin) and may be cached forever. The page checks the
big binaries itself against the same digests (web/voxline/loader.js), as it checks the models, so a runtime altered
in its Cache Storage or on the way is refused too.

npm's package-lock pins each tarball's integrity; these digests pin the files inside it that the page loads. An
upgrade of either package changes them: `tests/test_assets.py` names the file whose digest moved.
"""

from __future__ import annotations

import hashlib
import logging
import mimetypes
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RuntimePackage:
    """One npm package the page loads files of."""

    name: str
    """The npm package name, also its URL segment."""
    version: str
    """The pinned version (`package-lock.json`); part of every URL of the package."""
    folder: str
    """Where its files are, inside `node_modules/<name>/` ('' for the package root)."""
    files: dict[str, str] = field(hash=False)
    """File name → pinned sha256 of every file served; nothing else of the package is."""

    @property
    def url_prefix(self) -> str:
        """The versioned URL folder of its files, e.g. `/vendor/onnxruntime-web/1.30.0/`."""
        return f"/vendor/{self.name}/{self.version}/"

    def directory(self, node_modules: Path) -> Path:
        return node_modules / self.name / self.folder


ONNXRUNTIME_WEB = RuntimePackage("onnxruntime-web", "1.30.0", "dist", {
    # The wasm build web/voxline/ort.js imports, its threaded glue and binary.
    "ort.wasm.min.mjs": "219e6a1fc8a9938268d18efca3c91d310bd2f4a59bbd13744df5b2b7fc6cee3b",
    "ort-wasm-simd-threaded.mjs": "e13f7f94fc51b4ca72b12faeb1ee95f4ace6dfbc8939bc718aabdc0a27c4299b",
    "ort-wasm-simd-threaded.wasm": "3398c10d07d229bd91b364548e130e0e51a8e5704b88c7c083ebbeb78842dee2",
})
PYODIDE = RuntimePackage("pyodide", "314.0.7", "", {
    # What `loadPyodide` fetches for the intents worker (no packages: the engine comes as our own wheel).
    "pyodide.mjs": "6f1d60f7bf529beb300f0f47983c921d3982363640ba20af0e38efdddbc66109",
    "pyodide.asm.mjs": "f7cdc8ece80678ceb712f8e65ebe6d3a83203a180c399865f49612a051693635",
    "pyodide.asm.wasm": "cc36e3cab04fdfc9a63ff13eb52eae2b911bf46c025cc7b281f394bd3de1d5e6",
    "python_stdlib.zip": "fa1957e5777068fc4f7437f96d860ae2fbe9c19732ba06c84e004ec16dd7dd7a",
    "pyodide-lock.json": "5dc2fc119108bc148c7457dc86e7675b5c87e1cafd420b9c34c1eaef7b36c010",
})
RUNTIMES = (ONNXRUNTIME_WEB, PYODIDE)


@dataclass(frozen=True)
class RuntimeFile:
    """One runtime file as read and hashed at startup."""

    package: RuntimePackage
    name: str
    data: bytes | None
    """The bytes, or None when the file is missing or differs from its pin (then it is never served)."""
    problem: str | None
    """Why it is not served, with the fix; None when it is."""

    @property
    def sha256(self) -> str:
        return self.package.files[self.name]

    @property
    def media_type(self) -> str:
        return mimetypes.guess_type(self.name)[0] or "application/octet-stream"


def load_runtime_files(node_modules: Path,
                       packages: tuple[RuntimePackage, ...] = RUNTIMES) -> dict[str, dict[str, RuntimeFile]]:
    """Read every pinned runtime file into memory, checked against its digest (~28 MB, ~0.1 s of hashing).

    Returns package name → file name → RuntimeFile. A missing or altered file is logged and kept out (served as
    503 with the fix), never sent: the rest of the server (native clients, the other runtime) still works.
    """
    out: dict[str, dict[str, RuntimeFile]] = {}
    for package in packages:
        out[package.name] = {}
        for name, pinned in package.files.items():
            path = package.directory(node_modules) / name
            data, problem = None, None
            try:
                raw = path.read_bytes()
            except OSError as error:
                problem = (f"{package.name} {name} could not be read ({error.strerror}): run `bash scripts/setup.sh` "
                           "(it runs `npm ci`)")
            else:
                actual = hashlib.sha256(raw).hexdigest()
                if actual == pinned:
                    data = raw
                else:
                    problem = (f"{package.name} {name} differs from its pin (sha256 {actual[:12]}…, pinned "
                               f"{pinned[:12]}…): run `npm ci` to restore {package.name}@{package.version}, or "
                               "update the pins in voxline/server/runtimes.py after reviewing an upgrade")
            if problem:
                log.error("not served: %s", problem)
            out[package.name][name] = RuntimeFile(package, name, data, problem)
    return out


def browser_runtimes(packages: tuple[RuntimePackage, ...] = RUNTIMES) -> dict[str, dict]:
    """What the page needs to fetch and check the runtimes: versioned URL folder and each file's URL, sha256, size."""
    return {
        package.name: {
            "version": package.version,
            "base": package.url_prefix,
            "files": {name: {"url": package.url_prefix + name, "sha256": digest}
                      for name, digest in package.files.items()},
        }
        for package in packages
    }
