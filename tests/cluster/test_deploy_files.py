"""The container files in deploy/ agree with the code (docker is not run here: no registry)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from shelfhand.cli.main import COMMAND_MODULES

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
ROOT = DEPLOY.parent


def test_compose_gives_every_shelfhand_service_the_shared_database_and_redis() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "replica-1", "replica-2", "worker", "nginx"} <= set(services)
    for name in ("replica-1", "replica-2", "worker"):
        env = services[name]["environment"]
        assert env["SHELFHAND_DATABASE_URL"].startswith("postgresql://")
        assert env["SHELFHAND_REDIS_URL"] == "redis://redis:6379/0"
        assert services[name]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "pgvector" in services["postgres"]["image"]
    assert services["worker"]["command"][:2] == ["shelfhand", "worker"]


def test_compose_serves_the_searches_from_qdrant_with_a_three_node_profile() -> None:
    services = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())["services"]
    assert services["qdrant"]["image"].startswith("qdrant/qdrant:")
    for name in ("replica-1", "replica-2", "worker"):
        env = services[name]["environment"]
        assert env["SHELFHAND_QDRANT_URL"].endswith("http://qdrant:6333}")
        assert "qdrant" in services[name]["depends_on"]
    nodes = [services[f"qdrant-node-{i}"] for i in (1, 2, 3)]
    assert all(n["profiles"] == ["qdrant-cluster"] for n in nodes)
    assert all(n["environment"]["QDRANT__CLUSTER__ENABLED"] == "true" for n in nodes)
    assert all("http://qdrant-node-1:6335" in n["command"] for n in nodes[1:])


def test_nginx_balances_both_replicas_and_does_not_buffer_streams() -> None:
    conf = (DEPLOY / "nginx.conf").read_text()
    assert re.findall(r"server (replica-\d):8080", conf) == ["replica-1", "replica-2"]
    assert "proxy_buffering off" in conf


def test_the_image_installs_extras_that_exist() -> None:
    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    wanted = re.search(
        r'pip install --no-cache-dir "\.\[([a-z,]+)\]"', (DEPLOY / "Dockerfile").read_text()
    )
    assert wanted is not None
    assert set(wanted.group(1).split(",")) <= extras
    assert "cluster" in COMMAND_MODULES
