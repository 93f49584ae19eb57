"""What the job tests share: an app on a workspace and a database, and small documents."""

from __future__ import annotations

from pathlib import Path

from shelfhand.app import App
from shelfhand.core.context import UserContext
from shelfhand.core.settings import Settings

ALICE = UserContext(tenant_id="acme", user_id="alice", roles=("support",))

FAQ_EN = (
    "# Returns\n\nProjectors can be returned within 30 days of delivery when the lamp hours "
    "stay under 50.\n"
)
FAQ_ZH = "# 退货政策\n\n投影仪在签收后七天内可以无理由退货，灯泡使用时长需低于五十小时。\n"


def job_env(pg_url: str, *, mode: str = "keyword") -> dict[str, str]:
    return {"SHELFHAND_DATABASE_URL": pg_url, "SHELFHAND_RETRIEVAL_MODE": mode}


def make_app(workspace: Path, pg_url: str, *, mode: str = "keyword") -> App:
    workspace.mkdir(parents=True, exist_ok=True)
    env = job_env(pg_url, mode=mode)
    if mode != "keyword":
        env["SHELFHAND_EMBEDDER"] = "hashing"
    return App(settings=Settings.load(workspace, env=env))
