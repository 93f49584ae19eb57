"""The extractive answer in a workspace of many handbooks: a passage that shares a word or two
with a question is more often about something else than in one handbook, and is not quoted
for it (each case below was a wrong answer over ``bench/handbooks``' six handbooks in one
workspace; ``python bench/handbooks.py --only combined``)."""

from __future__ import annotations

from dataclasses import replace

from shelfhand.agent.extractive import ACROSS_RANK, FAR, extractive_answer
from shelfhand.core.messages import Citation


def test_the_doing_asked_about_does_not_make_a_section_about_the_question() -> None:
    """ "调休怎么申请？": a section named 申请 (of production access) is not about 调休, and the
    overtime rule saying 调休 does not say how to apply for it."""
    access = Citation(
        index=1,
        source="access.md",
        title="生产环境权限管理",
        section="生产环境权限管理 > 申请",
        text="生产环境权限须通过权限平台申请，写明用途和期限。",
    )
    overtime = Citation(
        index=2,
        source="hr.md",
        title="员工手册",
        section="员工手册 > 加班",
        text="休息日加班可选择调休或按 2 倍工资计算。",
    )
    assert extractive_answer("调休怎么申请？", [access, overtime]) is None
    # the section on 调休 is
    leave = Citation(
        index=3,
        source="hr.md",
        title="员工手册",
        section="员工手册 > 调休",
        text="须提前一天在 OA 中提交。",
    )
    extract = extractive_answer("调休怎么申请？", [access, overtime, leave])
    assert extract is not None and extract.passages == (3,)
    # the doing first: the question names no thing before it, the rule is as before
    assert extractive_answer("怎么申请权限？", [access]) is not None


def test_an_amount_of_the_same_doing_to_another_thing_is_not_the_answer() -> None:
    """ "工单附件保存多久？": "所有操作录像保存 180 天" holds 保存 and a duration, of recordings."""
    tickets = Citation(
        index=1,
        source="service.md",
        title="客服服务规范",
        section="客服服务规范 > 工单优先级",
        text="紧急：客服须在 30 分钟内首次响应。",
    )
    recordings = Citation(
        index=2,
        source="access.md",
        title="生产环境权限管理",
        section="生产环境权限管理 > 登录",
        text="堡垒机会话空闲 15 分钟自动断开，所有操作录像保存 180 天。",
    )
    assert extractive_answer("工单附件保存多久？", [tickets, recordings]) is None
    # a passage about the thing (附件) stating an amount still answers
    attachments = Citation(
        index=3, source="service.md", title="客服服务规范", text="附件在结案后 2 年删除。"
    )
    extract = extractive_answer("工单附件保存多久？", [tickets, recordings, attachments])
    assert extract is not None and extract.sentences == (("附件在结案后 2 年删除。", 3),)


def test_a_latin_name_in_a_chinese_question_says_which_passage_is_about_it() -> None:
    """ "GlobalProtect 客户端要升级到什么版本？": the IT FAQ's entry, not a complaint rule's
    "升级给客户成功经理" that holds two of its Chinese words."""
    faq = Citation(
        index=1,
        source="it-faq.md",
        title="IT Help Desk FAQ",
        section="IT Help Desk FAQ > VPN",
        text=(
            "Install the GlobalProtect client from the software center. If the VPN "
            "disconnects every few minutes, update the client to version 6.2."
        ),
    )
    complaints = Citation(
        index=2,
        source="service.md",
        title="客服服务规范",
        section="客服服务规范 > 投诉处理",
        text="同一客户 30 天内投诉超过 2 次的，升级给客户成功经理跟进。",
    )
    question = "GlobalProtect 客户端要升级到什么版本？"
    extract = extractive_answer(question, [faq, complaints], across=True)
    assert extract is not None and extract.passages == (1,)
    assert "6.2" in extract.text
    # with no passage holding the name, the Chinese words decide as before
    extract = extractive_answer(question, [complaints], across=True)
    assert extract is not None and extract.passages == (2,)


def test_an_english_passage_far_down_the_search_is_not_quoted_across() -> None:
    """ "办公用品怎么申请？": an office guide's opening hours, fifth under Chinese passages about
    applying for other things, is not its answer."""
    english = "The office is open from 8:00 to 20:00 on weekdays."
    others = ["离职须提前 30 天提交书面申请。", "试用期内可申请提前转正。", "出差餐费每天 100 元。"]

    def searched(place: int) -> list[Citation]:
        chinese = [
            Citation(index=n, source=f"{n}.md", text=text, relevance=0.45)
            for n, text in enumerate(others, start=1)
        ]
        guide = Citation(index=9, source="office.md", text=english, relevance=0.3)
        return [*chinese[: place - 1], guide, *chinese[place - 1 :]]

    question = "办公用品怎么领？"
    assert extractive_answer(question, searched(ACROSS_RANK + 1), across=True) is None
    extract = extractive_answer(question, searched(ACROSS_RANK), across=True)
    assert extract is not None and extract.passages == (9,)


def test_a_passage_far_from_the_question_in_meaning_is_not_about_it() -> None:
    """In a workspace that also holds encyclopedia articles, "公司有健身房吗？" shares 公司 (half its
    words) with a company's article, whose meaning is far from it: the search's cosine says so
    (``Citation.cosine``), and the answer is that the documents do not cover it."""
    article = Citation(
        index=1,
        source="noise/DEV_72.md",
        title="中国建筑工程总公司",
        text="中国建筑工程总公司是中华人民共和国的中央企业，主要从事房屋建筑业务。",
        cosine=0.098,
    )
    assert extractive_answer("公司有健身房吗？", [article]) is None
    # the same passage with no cosine (a keyword search, not embedded yet): quoted as before
    unscored = replace(article, cosine=None)
    assert extractive_answer("公司有健身房吗？", [unscored]) is not None
    # a near passage holding half the words is about the question
    assert extractive_answer("公司有健身房吗？", [replace(article, cosine=FAR)]) is not None
    news = Citation(
        index=1,
        source="noise/DEV_344.md",
        title="海翠花园",
        text="至晚上11时，女户主下班致电返家惟无人接听。",
        cosine=0.15,
    )
    service = Citation(
        index=2,
        source="service.md",
        title="客服服务规范",
        section="客服服务规范 > 服务时间",
        text="在线客服的服务时间为每天 9:00 至 21:00，法定节假日照常服务。",
        cosine=0.38,
    )
    extract = extractive_answer("在线客服晚上几点下班？", [news, service])
    assert extract is not None and extract.passages == (2,)
    # holding more than half, a passage is about the question however far (an encyclopedia
    # passage on a person: USE-multilingual gives such passages 0.01-0.12)
    assert extractive_answer("女户主晚上几点下班？", [news]) is not None  # 3 of its 4 words
    assert extractive_answer("女户主晚上几点下班？", [replace(news, cosine=0.01)]) is not None


def test_a_named_identifier_is_about_the_question_however_far() -> None:
    """An error code's entry is about the question that names it, whatever its cosine."""
    entry = Citation(
        index=1,
        source="manual.md",
        title="Manual",
        text="E-203 Lamp overheating. Clean the air filter and restart.",
        cosine=0.02,
    )
    extract = extractive_answer("E-203 是什么故障？", [entry])
    assert extract is not None and extract.passages == (1,)
