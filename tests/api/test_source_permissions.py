"""Permission tags govern writes and listings too: replace, delete, list (issue 11 point 1).

The real app, served by uvicorn on 127.0.0.1 (a thread of the test process, so the test can
look into the knowledge base behind it), real SQLite files, Chinese and English documents.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from service_helpers import (
    ALICE,
    BOB,
    CAROL,
    DORA,
    ThreadServer,
    start_thread_server,
    user_contexts,
)

from shelfhand.api import ServiceConfig, create_app
from shelfhand.app import App
from shelfhand.core.context import UserContext
from shelfhand.core.settings import Settings
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.service.source_access import access, replacement_tags

ADA = {"Authorization": "Bearer key-ada"}  # tenant t1, admin
EVE = {"Authorization": "Bearer key-eve"}  # tenant t1, hr and finance

PAY_V1 = "# 薪资\n\n第三季度投影仪团队的奖金池为 120,000 元。代号 PAYROLL-ONE。\n"
PAY_V2 = "# 薪资\n\n第四季度奖金池调整为 150,000 元。代号 PAYROLL-TWO。\n"
PAY_V3 = "# Salaries\n\nThe Q1 bonus pool is 90,000. Code PAYROLL-THREE.\n"


@pytest.fixture
def server(tmp_path: Path, thread_servers: list[ThreadServer]) -> ThreadServer:
    settings = Settings.load(tmp_path, env={"SHELFHAND_EMBEDDER": "hashing"})
    app = App(settings=settings, model=None, router=EmbeddingRouter({"any": HashingEmbedder()}))
    keys = user_contexts() | {
        "key-ada": UserContext(tenant_id="t1", user_id="ada", roles=["admin"]),
        "key-eve": UserContext(tenant_id="t1", user_id="eve", roles=["hr", "finance"]),
    }
    started = start_thread_server(create_app(app, config=ServiceConfig(), api_keys=keys))
    thread_servers.append(started)
    return started


def client(server: ThreadServer, headers: dict[str, str]) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers=headers, timeout=30)


def upload(c: httpx.Client, name: str, text: str, tags: list[str] | None = None) -> httpx.Response:
    data: dict[str, Any] = {"tags": tags} if tags else {}
    return c.post("/v1/knowledge/files", data=data, files=[("files", (name, text.encode()))])


def listed(c: httpx.Client) -> set[str]:
    r = c.get("/v1/knowledge/sources")
    assert r.status_code == 200, r.text
    return {s["source"] for s in r.json()["sources"]}


def found(c: httpx.Client, code: str) -> bool:
    r = c.get("/v1/knowledge/search", params={"q": code, "top_k": 5, "mode": "keyword"})
    assert r.status_code == 200, r.text
    return any(code in hit["text"] for hit in r.json()["results"])


def tags_of(server: ThreadServer, source: str) -> set[str]:
    tags: set[str] = server.service.kb.source_access([source])[source][1]
    return tags


def test_without_the_role_a_tagged_source_cannot_be_replaced_deleted_or_listed(
    server: ThreadServer,
) -> None:
    with client(server, DORA) as dora, client(server, ALICE) as alice:
        assert upload(dora, "pay.md", PAY_V1, ["hr"]).status_code == 200
        assert upload(dora, "faq.md", "# FAQ\n\n保修期两年。代号 FAQ-OPEN。\n").status_code == 200
        assert "t1/pay.md" in listed(dora)
        assert listed(alice) == {"t1/faq.md"}  # the hr file's name is not shown

        # a re-upload without tags (it would have become public) and one with other tags
        for tags in (None, ["public"]):
            r = upload(alice, "pay.md", PAY_V2, tags)
            assert r.status_code == 409 and r.json()["code"] == "source_conflict", r.text
            assert "hr" not in r.text  # tags and owner are not revealed
        # deleting looks exactly like deleting something that does not exist
        gone = alice.delete("/v1/knowledge/sources/t1/pay.md")
        missing = alice.delete("/v1/knowledge/sources/t1/no-such-file.md")
        assert gone.status_code == missing.status_code == 404
        assert gone.json()["detail"] == missing.json()["detail"]

        # nothing changed: still hr-only, still the first version
        assert found(dora, "PAYROLL-ONE") and not found(dora, "PAYROLL-TWO")
        assert not found(alice, "PAYROLL-ONE") and not found(alice, "PAYROLL-TWO")
        assert tags_of(server, "t1/pay.md") == {"hr"}
    with client(server, CAROL) as carol, client(server, BOB) as bob:
        assert listed(carol) == {"t1/faq.md"}
        assert carol.delete("/v1/knowledge/sources/t1/pay.md").status_code == 404
        assert listed(bob) == set()  # another tenant sees none of t1
        assert bob.delete("/v1/knowledge/sources/t1/pay.md").status_code == 404
        assert bob.delete("/v1/knowledge/sources/t1/faq.md").status_code == 404
    with client(server, ALICE) as alice:  # an untagged source stays the tenant's to manage
        assert alice.delete("/v1/knowledge/sources/t1/faq.md").status_code == 204


def test_a_holder_of_the_role_replaces_and_deletes_and_the_tags_stay(
    server: ThreadServer,
) -> None:
    with client(server, ADA) as ada, client(server, DORA) as dora, client(server, ALICE) as alice:
        assert upload(ada, "pay.md", PAY_V1, ["hr"]).status_code == 200
        assert (
            upload(ada, "budget.md", "# 预算\n\n代号 BUDGET-ONE。\n", ["hr", "finance"]).status_code
            == 200
        )

        # dora (hr) replaces without tags: the replacement keeps "hr", alice still cannot read
        r = upload(dora, "pay.md", PAY_V2)
        assert r.status_code == 200 and r.json()["updated"] == ["t1/pay.md"], r.text
        assert found(dora, "PAYROLL-TWO") and not found(dora, "PAYROLL-ONE")
        assert not found(alice, "PAYROLL-TWO") and tags_of(server, "t1/pay.md") == {"hr"}

        # dora may drop "hr" (she holds it) but never "finance" (she does not)
        r = upload(dora, "budget.md", "# 预算\n\n代号 BUDGET-TWO。\n", ["staff"])
        assert r.status_code == 200, r.text
        assert tags_of(server, "t1/budget.md") == {"staff", "finance"}
        assert "t1/budget.md" in listed(dora)  # she uploaded it last: listed as hers ...

        assert not found(dora, "BUDGET-TWO")  # ... but only "finance" or "staff" may read it

        assert dora.delete("/v1/knowledge/sources/t1/pay.md").status_code == 204
        assert not found(ada, "PAYROLL-TWO") and "t1/pay.md" not in listed(ada)


def test_an_admin_sees_replaces_and_deletes_everything_of_the_tenant(server: ThreadServer) -> None:
    with client(server, EVE) as eve, client(server, ADA) as ada, client(server, ALICE) as alice:
        assert upload(eve, "pay.md", PAY_V1, ["hr", "finance"]).status_code == 200
        assert listed(ada) == {"t1/pay.md"}
        # an admin may set any tags, dropping ones it does not hold
        assert upload(ada, "pay.md", PAY_V3, ["board"]).status_code == 200
        assert tags_of(server, "t1/pay.md") == {"board"}
        assert found(ada, "PAYROLL-THREE") and not found(eve, "PAYROLL-THREE")
        assert "t1/pay.md" not in listed(eve)
        assert ada.delete("/v1/knowledge/sources/t1/pay.md").status_code == 204
        assert listed(ada) == set() and not found(ada, "PAYROLL-THREE")
        assert listed(alice) == set()


def test_the_uploader_keeps_control_of_a_file_tagged_with_a_role_it_lacks(
    server: ThreadServer,
) -> None:
    with client(server, ALICE) as alice, client(server, CAROL) as carol:
        assert upload(alice, "memo.md", "# 备忘\n\n代号 MEMO-ONE。\n", ["hr"]).status_code == 200
        assert "t1/memo.md" in listed(alice) and "t1/memo.md" not in listed(carol)
        assert upload(carol, "memo.md", "# 备忘\n\n代号 MEMO-X。\n").status_code == 409
        r = upload(alice, "memo.md", "# 备忘\n\n代号 MEMO-TWO。\n", ["staff"])
        assert r.status_code == 200, r.text
        assert tags_of(server, "t1/memo.md") == {"staff", "hr"}  # "hr" is not hers to drop
        assert alice.delete("/v1/knowledge/sources/t1/memo.md").status_code == 204


def test_a_source_ingested_from_the_command_line_is_readable_but_not_deletable(
    server: ThreadServer, tmp_path: Path
) -> None:
    folder = tmp_path / "handbook"
    folder.mkdir()
    (folder / "rules.md").write_text("# 规章\n\n代号 RULES-ONE。\n", encoding="utf-8")
    server.service.kb.ingest([folder], tenant_id="t1")
    source = next(s.source for s in server.service.kb.sources() if "rules" in s.source)
    with client(server, ALICE) as alice, client(server, BOB) as bob:
        assert found(alice, "RULES-ONE")
        r = alice.delete(f"/v1/knowledge/sources/{source}")
        assert r.status_code == 403 and r.json()["code"] == "forbidden", r.text
        assert bob.delete(f"/v1/knowledge/sources/{source}").status_code == 404
        assert found(alice, "RULES-ONE")


def test_the_access_rules_as_data() -> None:
    alice = UserContext(tenant_id="t1", user_id="alice")
    dora = UserContext(tenant_id="t1", user_id="dora", roles=["hr"])
    admin = UserContext(tenant_id="t1", user_id="ada", roles=["admin"])
    other = UserContext(tenant_id="t2", user_id="bob", roles=["admin"])

    class Record:
        tenant_id = "t1"
        uploaded_by = "dora"

    hr_source = ({"t1"}, {"hr"})
    assert access(alice, hr_source, Record()) == "none"
    assert access(dora, hr_source, Record()) == "write"
    assert access(admin, hr_source, Record()) == "write"
    assert access(other, hr_source, Record()) == "none"  # an admin of another tenant
    assert access(alice, ({"t1"}, set()), None) == "read"  # not uploaded: read only
    assert access(alice, None, Record()) == "none"  # nothing stored: owner or admin only
    assert access(dora, None, Record()) == "write" and access(admin, None, Record()) == "write"
    assert replacement_tags(alice, {"hr", "finance"}, None) == ("finance", "hr")
    assert replacement_tags(dora, {"hr", "finance"}, []) == ("finance",)
    assert replacement_tags(admin, {"hr"}, []) == ()


def test_the_same_file_uploaded_again_with_narrower_tags_is_hidden_at_once(
    server: ThreadServer,
) -> None:
    """Only the tags change, not a byte of the file: the new tags apply (the upload used to
    report it unchanged and leave it readable by the whole tenant)."""
    with client(server, EVE) as eve, client(server, ALICE) as alice:
        assert upload(eve, "pay.md", PAY_V1).status_code == 200
        assert found(alice, "PAYROLL-ONE")

        r = upload(eve, "pay.md", PAY_V1, ["hr"])
        assert r.status_code == 200 and r.json()["updated"] == ["t1/pay.md"], r.text
        assert tags_of(server, "t1/pay.md") == {"hr"}
        assert not found(alice, "PAYROLL-ONE") and found(eve, "PAYROLL-ONE")
        assert "t1/pay.md" not in listed(alice)

        again = upload(eve, "pay.md", PAY_V1)  # no tags: the source keeps "hr"
        assert again.status_code == 200 and again.json()["unchanged"] == ["t1/pay.md"], again.text
        assert not found(alice, "PAYROLL-ONE")
