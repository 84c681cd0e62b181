"""Replicas, resources and autoscaling of one Ray Serve deployment, as `Settings.ray_*` strings spell them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from voxline.errors import VoxlineError


@dataclass(frozen=True)
class WorkerSpec:
    """Replicas, resources and autoscaling of one deployment, parsed from a `Settings.ray_*` string."""

    min_replicas: int = 1
    max_replicas: int = 1
    """Above `min_replicas`, Serve autoscales between the two on ongoing requests per replica."""
    cpus: float = 1.0
    """Ray's logical CPUs per replica; the model's thread count too (rounded up)."""
    gpus: float = 0.0
    """GPUs per replica; fractions share a GPU between replicas."""
    target_ongoing: float = 8.0
    """Ongoing requests per replica the autoscaler aims at."""

    FIELDS = ("replicas", "cpus", "gpus", "target_ongoing")

    @classmethod
    def parse(cls, text: str) -> WorkerSpec:
        """`replicas=1-4 cpus=2 gpus=0.5 target_ongoing=8` (any order, spaces or commas); omitted keys keep the
        defaults. Raises `VoxlineError` naming the bad part."""
        values: dict[str, float | int] = {}
        for part in text.replace(",", " ").split():
            key, sep, raw = part.partition("=")
            if not sep or key not in cls.FIELDS:
                raise VoxlineError(f"bad Ray worker spec {text!r}: {part!r} is not one of "
                                   f"{', '.join(k + '=' for k in cls.FIELDS)}")
            try:
                if key == "replicas":
                    low, _, high = raw.partition("-")
                    values["min_replicas"], values["max_replicas"] = int(low), int(high or low)
                else:
                    values[key] = float(raw)
            except ValueError:
                raise VoxlineError(f"bad Ray worker spec {text!r}: {part!r} is not a number") from None
        spec = cls(**values)
        if not 0 <= spec.min_replicas <= spec.max_replicas or spec.max_replicas < 1:
            raise VoxlineError(f"bad Ray worker spec {text!r}: replicas must be N or MIN-MAX with 0 ≤ MIN ≤ MAX, "
                               "MAX ≥ 1")
        if spec.cpus < 0 or spec.gpus < 0 or spec.target_ongoing <= 0:
            raise VoxlineError(f"bad Ray worker spec {text!r}: cpus and gpus must be ≥ 0, target_ongoing > 0")
        return spec

    @property
    def threads(self) -> int:
        """Model threads: the CPUs Ray reserved for the replica (0 lets the runtime choose, with no CPU reserved)."""
        return math.ceil(self.cpus) if self.cpus > 0 else 0

    def deployment_options(self, max_ongoing_requests: int) -> dict[str, Any]:
        """`serve.deployment(...)` options."""
        options: dict[str, Any] = {
            "ray_actor_options": {"num_cpus": self.cpus, "num_gpus": self.gpus},
            "max_ongoing_requests": max_ongoing_requests,
        }
        if self.max_replicas > self.min_replicas:
            options["autoscaling_config"] = {"min_replicas": self.min_replicas, "max_replicas": self.max_replicas,
                                             "target_ongoing_requests": self.target_ongoing}
        else:
            options["num_replicas"] = self.min_replicas
        return options
