"""The browser runtimes (onnxruntime-web, Pyodide): pinned by version and by the sha256 of every file served.

They come the way the models do: `voxline models fetch` downloads each pinned npm tarball (checked by its sha256)
into the cache and unpacks only the files the page loads, each checked against its pin, into
`<cache>/runtimes/<package>/<version>/` (`fetch_runtimes`; Pyodide's stdlib zip is rewritten with its members
stored, `stored_zip`, so that brotli compresses it by a third more). So an installed wheel serves them without a
checkout or npm's `node_modules`, and the wheel stays small: the served files are ~35 MB (~7 MB brotli'd), the
tarballs ~40 MB.

Each runtime is served at a versioned URL, `/vendor/<package>/<version>/<file>`, so its URLs are content-addressed
(the server refuses to send a file whose bytes differ from its pin) and may be cached forever. The page checks the
big binaries itself against the same digests (web/voxline/loader.js), as it checks the models, so a runtime altered
in its Cache Storage or on the way is refused too.

The tarball pins agree with npm's package-lock (the checkout's `node_modules`, which the widget build and the node
tests use; `tests/test_runtimes.py` compares them); these digests pin the files inside it that the page loads. An
upgrade of either package changes them: `tests/test_assets.py` names the file whose digest moved.
"""

from __future__ import annotations

import hashlib
import io
import logging
import mimetypes
import shutil
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from voxline import paths
from voxline.errors import DigestMismatch
from voxline.models.manifest import PackageSpec
from voxline.models.supply import Log, ensure_package, open_member, stderr_log

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RuntimePackage:
    """One npm package the page loads files of."""

    name: str
    """The npm package name, also its URL segment."""
    version: str
    """The pinned version (`package-lock.json`); part of every URL of the package."""
    folder: str
    """Where its files are inside the package ('' for its root): `node_modules/<name>/<folder>`, and
    `package/<folder>` in its tarball."""
    files: dict[str, str] = field(hash=False)
    """File name → pinned sha256 of every file served; nothing else of the package is."""
    tarball: str = ""
    """The file `npm pack` saves for the pinned version."""
    tarball_sha256: str = ""
    """The sha256 of that tarball as downloaded (the registry's `integrity` is its sha512)."""
    license: str = ""
    """Its SPDX licence, as the manifest gives each model's package."""
    stored_zips: dict[str, str] = field(default_factory=dict, hash=False)
    """Zip file name → pinned sha256 of the zip as the tarball has it, for a zip served with its members stored
    rather than deflated (`stored_zip`): the same files, so brotli compresses across them (Pyodide's stdlib: 2.48 MB
    brotli'd as shipped, 1.63 MB stored). `files` pins the served (rewritten) bytes."""

    @property
    def url_prefix(self) -> str:
        """The versioned URL folder of its files, e.g. `/vendor/onnxruntime-web/1.30.0/`."""
        return f"/vendor/{self.name}/{self.version}/"

    def directory(self, node_modules: Path | None = None) -> Path:
        """Where its files are: in the cache (`voxline models fetch` puts them there), or in a `node_modules`."""
        if node_modules is not None:
            return node_modules / self.name / self.folder
        return paths.runtimes_dir() / self.name / self.version

    def package_spec(self) -> PackageSpec:
        """The pinned npm tarball, as the model supply downloads and checks registry packages."""
        return PackageSpec(self.name, "npm", self.version, self.tarball, self.tarball_sha256, self.license)

    def member_sha256(self, name: str) -> str:
        """The pinned digest of a served file as its tarball (or `node_modules`) has it."""
        return self.stored_zips.get(name, self.files[name])

    def member(self, name: str) -> str:
        """The path of one served file inside the tarball (npm packs everything under `package/`)."""
        return "/".join(part for part in ("package", self.folder, name) if part)


ONNXRUNTIME_WEB = RuntimePackage("onnxruntime-web", "1.30.0", "dist", {
    # The wasm build web/voxline/ort.js imports, its threaded glue and binary.
    "ort.wasm.min.mjs": "219e6a1fc8a9938268d18efca3c91d310bd2f4a59bbd13744df5b2b7fc6cee3b",
    "ort-wasm-simd-threaded.mjs": "e13f7f94fc51b4ca72b12faeb1ee95f4ace6dfbc8939bc718aabdc0a27c4299b",
    "ort-wasm-simd-threaded.wasm": "3398c10d07d229bd91b364548e130e0e51a8e5704b88c7c083ebbeb78842dee2",
}, tarball="onnxruntime-web-1.30.0.tgz",
    tarball_sha256="d2228df7e4616bc3348bf504ee888f3bec43789a273f0a63f3e68d203ce3bf71", license="MIT")
PYODIDE = RuntimePackage("pyodide", "314.0.7", "", {
    # What `loadPyodide` fetches for the intents worker (no packages: the engine comes as our own wheel).
    "pyodide.mjs": "6f1d60f7bf529beb300f0f47983c921d3982363640ba20af0e38efdddbc66109",
    "pyodide.asm.mjs": "f7cdc8ece80678ceb712f8e65ebe6d3a83203a180c399865f49612a051693635",
    "pyodide.asm.wasm": "cc36e3cab04fdfc9a63ff13eb52eae2b911bf46c025cc7b281f394bd3de1d5e6",
    # stored_zip() of the tarball's copy (pinned in stored_zips below)
    "python_stdlib.zip": "d19da5736c9c0a594ad61933906d4773b502838ebb9636a5fc0cdf495d084c44",
    "pyodide-lock.json": "5dc2fc119108bc148c7457dc86e7675b5c87e1cafd420b9c34c1eaef7b36c010",
}, tarball="pyodide-314.0.7.tgz",
    tarball_sha256="66b7949e5a0cba2250b586d7e368bf12fb482800748d182c4618254b685ffaa0", license="MPL-2.0",
    stored_zips={"python_stdlib.zip": "fa1957e5777068fc4f7437f96d860ae2fbe9c19732ba06c84e004ec16dd7dd7a"})
RUNTIMES = (ONNXRUNTIME_WEB, PYODIDE)


def stored_zip(data: bytes) -> bytes:
    """The zip `data` rewritten with every member stored (not deflated): the same names, bytes, times and modes, in
    the same order, so the result is a function of the input (and of this Python's zipfile) and can be pinned."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            member = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            member.external_attr = info.external_attr
            member.create_system = 3  # as written on Unix, wherever this runs
            dst.writestr(member, src.read(info), compress_type=zipfile.ZIP_STORED)
    return out.getvalue()


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


def load_runtime_files(node_modules: Path | None = None,
                       packages: tuple[RuntimePackage, ...] = RUNTIMES) -> dict[str, dict[str, RuntimeFile]]:
    """Read every pinned runtime file into memory, checked against its digest (~28 MB, ~0.1 s of hashing).

    From the cache (where `voxline models fetch` puts them), or from a `node_modules` folder when one is given.
    Returns package name → file name → RuntimeFile. A missing or altered file is logged and kept out (served as
    503 with the fix), never sent: the rest of the server (native clients, the other runtime) still works.
    """
    out: dict[str, dict[str, RuntimeFile]] = {}
    for package in packages:
        out[package.name] = {}
        for name in package.files:
            out[package.name][name] = file = read_runtime_file(package, name, node_modules)
            if file.problem:
                log.error("not served: %s", file.problem)
    return out


def read_runtime_file(package: RuntimePackage, name: str, node_modules: Path | None = None) -> RuntimeFile:
    """One pinned runtime file, read and hashed; its `problem` says what is wrong and how to fix it."""
    pinned = package.files[name]
    try:
        raw = (package.directory(node_modules) / name).read_bytes()
        if node_modules is not None and name in package.stored_zips:  # npm's copy is the tarball's, deflated
            raw = stored_zip(raw) if hashlib.sha256(raw).hexdigest() == package.stored_zips[name] else raw
    except OSError as error:
        return RuntimeFile(package, name, None, f"{package.name} {name} could not be read ({error.strerror}): "
                                                f"run `voxline models fetch` (it downloads {package.name}@"
                                                f"{package.version})")
    actual = hashlib.sha256(raw).hexdigest()
    if actual == pinned:
        return RuntimeFile(package, name, raw, None)
    return RuntimeFile(package, name, None, f"{package.name} {name} differs from its pin (sha256 {actual[:12]}…, "
                                            f"pinned {pinned[:12]}…): run `voxline models fetch` to restore "
                                            f"{package.name}@{package.version}, or update the pins in "
                                            "voxline/server/runtimes.py after reviewing an upgrade")


def fetch_runtimes(packages: tuple[RuntimePackage, ...] = RUNTIMES, log_line: Log = stderr_log) -> list[str]:
    """Put every pinned runtime file into the cache (`voxline models fetch`); returns the packages unpacked.

    A package whose files are all there and as pinned is skipped (~0.1 s of hashing). Otherwise its tarball is
    downloaded with npm (checked by its sha256, kept in `downloads/`) and only the served files are unpacked, each
    checked against its pin before the folder is moved into place: an altered tarball or file installs nothing.
    """
    unpacked = []
    for package in packages:
        final = package.directory()
        if all(_digest(final / name) == pinned for name, pinned in package.files.items()):
            log_line(f"{package.name} {package.version}: unpacked and verified, skipped")
            continue
        tarball = ensure_package(package.package_spec(), log_line)
        partial = final.with_name(f".{final.name}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        try:
            for name, pinned in package.files.items():
                try:
                    with open_member(tarball, package.member(name)) as src, open(partial / name, "wb") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
                except KeyError:
                    raise DigestMismatch(f"{tarball.name} has no {package.member(name)}: the pins in "
                                         "voxline/server/runtimes.py do not describe this tarball") from None
                except tarfile.TarError as error:
                    raise DigestMismatch(f"{tarball.name} is not a readable tarball ({error})") from None
                if (actual := _digest(partial / name)) != package.member_sha256(name):
                    raise DigestMismatch(f"{package.name} {name} in {tarball.name} has sha256 {actual}, pinned "
                                         f"{package.member_sha256(name)}; nothing was unpacked")
                if name in package.stored_zips:
                    (partial / name).write_bytes(stored_zip((partial / name).read_bytes()))
                    if (actual := _digest(partial / name)) != pinned:
                        raise DigestMismatch(f"{package.name} {name} rewritten with its members stored has sha256 "
                                             f"{actual}, pinned {pinned} (another Python's zipfile?); nothing was "
                                             "unpacked")
            shutil.rmtree(final, ignore_errors=True)
            partial.replace(final)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        log_line(f"{package.name} {package.version}: unpacked {len(package.files)} files into {final}")
        unpacked.append(package.name)
    return unpacked


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


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
