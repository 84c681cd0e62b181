"""The Kubernetes manifests in deploy/kuberay against docs/deploy.md: every setting the doc names is in the YAML
with the value the doc gives, the RayService's Serve config is one Ray Serve accepts, and its builders build."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from voxline.config import REPO_ROOT, Settings

DEPLOY = REPO_ROOT / "deploy" / "kuberay"
DOC = REPO_ROOT / "docs" / "deploy.md"
_SEGMENT = re.compile(r"\[([^\]]+)\]|([^.\[\]]+)")


def documents(file: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / file).read_text()) if d]


def doc_settings() -> list[tuple[str, str, str]]:
    """(file, path, value) of each row of the doc's manifest settings table."""
    rows = re.findall(r"^\| `([\w.-]+\.yaml)` \| `([^`]+)` \| `([^`]*)` \|$", DOC.read_text(), re.MULTILINE)
    assert rows, "docs/deploy.md lists no manifest settings"
    return rows


def resolve(file: str, path: str) -> object:
    """Follow `path` into the file: a first segment naming a kind picks that document of a multi-document file;
    a list item is picked by its `name`, `groupName` or position; a string holding YAML (`serveConfigV2`) is
    parsed on the way."""
    segments = [quoted or plain for quoted, plain in _SEGMENT.findall(path)]
    docs = documents(file)
    node: object = docs[0] if len(docs) == 1 else None
    if len(docs) > 1 or "kind" in docs[0] and segments[0] == docs[0]["kind"]:
        kind = segments.pop(0)
        node = next(d for d in docs if d.get("kind") == kind)
    for segment in segments:
        if isinstance(node, str):
            node = yaml.safe_load(node)
        if isinstance(node, list):
            named = [item for item in node if isinstance(item, dict)
                     and segment in (item.get("name"), item.get("groupName"))]
            node = named[0] if named else node[int(segment)]
        else:
            node = node[segment]
    return node


def scalar(value: object) -> str:
    """A YAML scalar as the doc writes it."""
    return str(value).lower() if isinstance(value, bool) else str(value)


@pytest.mark.parametrize(("file", "path", "value"), doc_settings(), ids=lambda v: v)
def test_every_setting_the_doc_names_is_in_the_manifests(file, path, value):
    assert scalar(resolve(file, path)) == value


def test_every_ray_setting_of_the_server_is_documented():
    text = DOC.read_text()
    for name in ("engine", "ray_address", "ray_local_cpus", "ray_llm", "ray_tts", "ray_asr"):
        assert hasattr(Settings, name)
        assert f"| `{name}` |" in text, name


def test_the_serve_config_is_one_ray_serve_accepts_and_its_builders_build():
    pytest.importorskip("ray", reason="the ray extra is not installed")
    from ray.serve._private.api import call_user_app_builder_with_args_if_necessary
    from ray.serve._private.utils import import_attr
    from ray.serve.schema import ServeDeploySchema

    config = yaml.safe_load(resolve("rayservice.yaml", "RayService.spec.serveConfigV2"))
    schema = ServeDeploySchema.model_validate(config)
    assert [app.name for app in schema.applications] == ["voxline-llm", "voxline-tts", "voxline-asr"]
    for app in schema.applications:
        built = call_user_app_builder_with_args_if_necessary(import_attr(app.import_path), app.args)
        (deployment,) = [d.name for d in app.deployments]
        assert built._bound_deployment.name == deployment


def test_the_llm_replicas_accept_a_full_queue_plus_a_batch():
    """Serve must never hold back a request a forming batch waits for (docs/deploy.md, batching)."""
    from voxline.scheduler import SchedulerConfig

    app = resolve("rayservice.yaml", "RayService.spec.serveConfigV2.applications.voxline-llm")
    worker = app["deployments"][0]
    config = SchedulerConfig.from_settings(Settings(scheduler_queue_limit=app["args"]["scheduler_queue_limit"]))
    assert worker["max_ongoing_requests"] == config.queue_limit + config.max_batch
    assert worker["max_queued_requests"] == config.queue_limit


def test_front_pods_join_the_cluster_without_cpus_and_serve_with_the_ray_engine():
    (command,) = resolve("front.yaml", "Deployment.spec.template.spec.containers.front.args")
    assert "--num-cpus=0" in command and "--num-gpus=0" in command
    assert "voxline-models-head-svc:6379" in command  # KubeRay's head service of the RayService `voxline-models`
    assert "voxline serve" in command and "--engine ray --ray-address auto" in command
    assert resolve("rayservice.yaml", "RayService.metadata.name") == "voxline-models"


def test_the_hpa_scales_the_front_deployment():
    target = resolve("front.yaml", "HorizontalPodAutoscaler.spec.scaleTargetRef")
    assert (target["kind"], target["name"]) == ("Deployment", resolve("front.yaml", "Deployment.metadata.name"))


def test_a_path_that_is_not_in_the_manifests_is_not_found():
    with pytest.raises((KeyError, IndexError, ValueError, StopIteration)):
        resolve("front.yaml", "Service.spec.sessionAffinityy")


def test_the_adapter_rule_serves_the_metric_the_front_exports():
    rule = resolve("prometheus-adapter-values.yaml", "rules.custom.0")
    assert "voxline_active_sessions" in rule["seriesQuery"]
    assert Path(REPO_ROOT / "backend" / "voxline" / "server" / "app.py").read_text().count(
        '"voxline_active_sessions"') == 1
