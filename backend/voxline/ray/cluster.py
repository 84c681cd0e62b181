"""The front's connection to Ray: a local instance it starts, or a cluster it joins, and the applications on it."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from voxline.config import Settings
from voxline.errors import VoxlineError
from voxline.ray.apps import ASR_APP, LLM_APP, TTS_APP, asr_application, llm_application, tts_application

log = logging.getLogger(__name__)

APP_READY_TIMEOUT_S = 600.0
"""Deploying (or waiting for) the three applications: a GPU node may have to be provisioned first."""
REPLICA_LOGGING = {"enable_access_log": False}
"""Serve logs every call by default: with a TTS call per clause that is a log line per spoken phrase."""


@dataclass
class RayCluster:
    """The front's connection to Ray: started here (no address) or joined; deploys the applications it misses."""

    owns_ray: bool
    """This process started the local Ray instance, so it stops it when the front closes."""

    @classmethod
    def connect(cls, settings: Settings) -> RayCluster:
        import ray
        from ray import serve

        owns = False
        if not ray.is_initialized():
            if settings.ray_address:
                ray.init(address=settings.ray_address)
            else:
                ray.init(num_cpus=settings.ray_local_cpus or None, include_dashboard=False)
                owns = True
        # The front calls the deployments through handles: no HTTP proxy is needed (a RayService starts its own).
        serve.start(proxy_location="Disabled")
        return cls(owns)

    def handles(self, settings: Settings) -> dict[str, Any]:
        """Handles to the three applications, deploying those that do not run yet; waits until all run."""
        from ray import serve
        from ray.serve.schema import ApplicationStatus

        builders = {LLM_APP: llm_application, TTS_APP: tts_application, ASR_APP: asr_application}
        running = serve.status().applications
        for name, build in builders.items():
            status = running.get(name)
            if status is None or status.status in (ApplicationStatus.DEPLOY_FAILED, ApplicationStatus.DELETING):
                log.info("deploying Ray Serve application %s", name)
                serve.run(build(settings), name=name, route_prefix=None, logging_config=REPLICA_LOGGING)
            else:
                log.info("attaching to Ray Serve application %s (%s)", name, status.status)
        self._wait_running(list(builders))
        return {name: serve.get_app_handle(name) for name in builders}

    @staticmethod
    def _wait_running(names: list[str]) -> None:
        from ray import serve
        from ray.serve.schema import ApplicationStatus

        deadline = time.monotonic() + APP_READY_TIMEOUT_S
        while True:
            apps = serve.status().applications
            pending = {n: apps[n].status if n in apps else "missing" for n in names
                       if n not in apps or apps[n].status != ApplicationStatus.RUNNING}
            if not pending:
                return
            if time.monotonic() > deadline:
                raise VoxlineError(f"Ray Serve applications not running after {APP_READY_TIMEOUT_S:g} s: {pending}")
            time.sleep(0.5)

    def release(self) -> None:
        """Stop what this front started: the local Ray instance and its Serve applications; a shared cluster's
        applications stay for the other fronts."""
        if not self.owns_ray:
            return
        import ray
        from ray import serve

        try:
            serve.shutdown()
        finally:
            ray.shutdown()
