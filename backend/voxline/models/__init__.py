"""The model supply chain: one manifest, registry downloads pinned by sha256, builds into the cache."""

from voxline.models.manifest import Manifest, ModelSpec, PackageSpec, load_manifest

__all__ = ["Manifest", "ModelSpec", "PackageSpec", "load_manifest"]
