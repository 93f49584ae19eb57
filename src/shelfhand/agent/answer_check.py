"""What a run's answer becomes before anyone reads it: checked against its passages, and
replaced by the extractive answer when it cannot be trusted.

:class:`AnswerCheck` is applied once, to the run's result (``Agent(answer_check=...)``):

1. the answer is checked sentence by sentence (:func:`~.grounding_check.check_grounding`);
   the result carries the check (``RunResult.grounding``);
2. the model's answer is replaced by the passages' best sentences
   (:func:`~.extractive.extractive_answer`, ``RunResult.extractive``) when it is ungrounded
   (most sentences unsupported, or a number or code no passage holds), a refusal while the
   passages are clearly about the question (:data:`~.extractive.MIN_RELEVANCE`), an echo of
   one of shelfhand's own prompts or of the passages' labels, grounded but not an answer to
   the question (:mod:`.answer_topic`: resting on a passage without the identifier asked
   about, no amount for "how long", nothing of passages none of which is about it), or the
   end of a run the loop guard, ``max_iters`` or a blank reply stopped;
3. when no passage is about the question, an ungrounded or off-topic answer or an echo
   becomes "the documents do not cover this" (:data:`~.fallbacks.NOT_COVERED`), or, when a
   tool other than ``retrieve`` failed in the run, which tools did not answer
   (:func:`tools_failed`); a refusal after such a failure becomes the latter too
   (``tool_failed``).

``RunResult.fallback_reason`` says which. The check is per result: concurrent runs of
different callers never share it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from shelfhand.core.citations import (
    announces_only,
    cited_numbers,
    only_marks,
    points_only,
    unknown_citations,
)
from shelfhand.core.events import AnswerReplaced
from shelfhand.core.grounding import Grounding
from shelfhand.core.messages import Citation, Message
from shelfhand.core.results import RunResult
from shelfhand.knowledge.analysis import SynonymTable, query_identifiers
from shelfhand.knowledge.evidence.citations import NOTHING_FOUND

from .amounts import asked_amount
from .answer_topic import (
    in_other_language,
    misses_amount,
    misses_identifier,
    misses_tool_identifier,
    only_labels,
    quotes_beyond_names,
    rests_elsewhere,
    shares_only_names,
    states_nothing_held,
    tells_one_part,
)
from .extractive import LEADS, NOT_ASKED, extractive_answer, in_language
from .fallbacks import (
    ECHO_NUDGE,
    NUDGE,
    RETRIEVE_TOOL,
    found_nothing,
    in_chinese,
    not_covered,
    says_not_covered,
    tool_failure_lines,
    tool_result_lines,
    tool_results,
)
from .grounding import FAILED_INTRO, PASSAGES_INTRO, rewritten_query, searched_as_typed
from .grounding_check import check_grounding, facts, without_citations, words
from .model_check import JUDGE_INSTRUCTIONS
from .rewrite import asks_the_same, carried, points_back
from .side_calls import side_usage

__all__ = [
    "AGENT_SCAFFOLDS",
    "GUESS_NEW_WORDS",
    "REASONS",
    "REASONS_ZH",
    "REPLACED_NOTICE",
    "REPLACED_NOTICE_ZH",
    "TOOLS_FAILED_LEAD",
    "TOOLS_FAILED_LEAD_ZH",
    "TOOLS_LEAD",
    "TOOLS_LEAD_ZH",
    "TOOLS_RETURNED_LEAD",
    "TOOLS_RETURNED_LEAD_ZH",
    "WITHDRAWN_NOTICE",
    "WITHDRAWN_NOTICE_ZH",
    "AnswerCheck",
    "AnswerJudge",
    "about_tools",
    "echoes_scaffold",
    "extractive_result",
    "failed_model_answer",
    "guessed",
    "is_refusal",
    "needs_search",
    "no_model_answer",
    "relevant_citations",
    "replaced_by",
    "replacement",
    "replacement_notice",
    "rests_on_tools",
    "tool_evidence",
    "tools_failed",
    "tools_told",
    "withdrawal_notice",
]

_NOTHING_FOUND_TOLD = (
    NOTHING_FOUND.removesuffix(" cover this instead of guessing."),
    NOTHING_FOUND[NOTHING_FOUND.index("do not cover") :],
)
"""What ``retrieve`` tells the model when it finds nothing, in two pieces that leave out
"the documents do not cover this": a model saying that in its own words says what it was
told to; "… do not cover this instead of guessing." is the instruction passed on."""
AGENT_SCAFFOLDS: tuple[str, ...] = (
    PASSAGES_INTRO,
    FAILED_INTRO,
    NUDGE,
    ECHO_NUDGE,
    JUDGE_INSTRUCTIONS,
    *_NOTHING_FOUND_TOLD,
)
"""The agent's own prompt text that a model may copy into its answer (the instruction of
``retrieve``'s answer when it finds nothing too: a small model repeats it to the user)."""
_SCAFFOLD_WORDS = 6
"""A run of this many words of a prompt, in an answer, is an echo of it."""
_SCAFFOLD_CHARS = 12
"""The same for Chinese-free text without spaces: this many characters."""
_WORD = re.compile(r"[A-Za-z0-9']+|[^\sA-Za-z0-9']")
# 无法 with what it cannot do: "其他时间无法买到" (it cannot be bought at other times), in a
# passage a model quoted, is a fact, not a refusal
_REFUSAL = re.compile(
    r"not (?:specified|mentioned|provided|stated|covered|available|found|included)"
    r"|(?:no|not enough|insufficient) (?:information|details|relevant)"
    r"|(?:can(?:no|')t|cannot|unable to|not able to) (?:help|assist|answer|find|provide|determine)"
    r"|(?:do|does)(?: not|n't) (?:contain|cover|mention|say|specify|include|have)"
    r"|I (?:do not|don't) know"
    r"|(?:is|are)(?: not|n't) in the (?:knowledge base|documents?|passages|context)"
    r"|无法(?:在[^，。]{0,12}?)?(?:协助|帮助|回答|回复|提供|找到|查到|查询|确定|确认|判断|获取|获得"
    r"|得知|给出|完成|删除|处理|执行|访问|识别|理解)"
    r"|未(?:提及|提到|说明|指定|找到)|没有(?:提及|提到|说明|相关|找到|具体)|不能(?:协助|回答|提供)"
    r"|(?:文档|资料|知识库|上下文|段落)(?:中|里)(?:并|也|还)?没有"
    r"|(?:帮|答|回答|查)不了|无能为力|爱莫能助|超出了?我的(?:能力|范围|知识)"
    r"|(?:我|我们|目前|暂时|文档|资料|知识库)(?:中|里)?(?:也|并|还)?(?:不清楚|不知道)"
    r"|(?:check|refer to|consult|see|read) (?:the|your) (?:manual|documentation|user guide)"
    r" for (?:more|further) (?:information|details)"
    r"|请(?:参考|参阅|查阅|查看)(?:产品)?(?:说明书|手册|用户手册)(?:以)?(?:获取|了解)(?:更多|详细)",
    re.IGNORECASE,
)
"""What a refusal says. An apology is not one ("抱歉，拆封超过七天的商品不能退货 [1]。" is
a negative answer, as polite Chinese service writes it), nor is "不清楚" in a sentence of the
answer's ("如果您不清楚型号，请查看机身标签"): only with the refusal itself, or said of what
the writer (or the documents) does not know, or that the documents hold nothing of
("文档中没有关于健身房的信息"). Sending the user to the manual "for more
information" is one: the manual's passages are what the answer was to say ("The projector
does not show E-310. Please check the manual for more information.", Qwen2.5-Coder-0.5B)."""
_STOPPED = {"max_iters", "repeated_call", "empty"}
REPLACED_NOTICE = "The answer above was replaced after checking it against the documents ({reason})"
"""What :class:`~shelfhand.core.events.AnswerReplaced` says to people (every stream's wording)."""
REASONS = {
    "ungrounded": "the model's answer was not supported by the passages",
    "refusal": "the model declined although the passages cover the question",
    "declined": "the model declined; the documents hold nothing on the question",
    "tool_failed": "the model declined after a tool called for the question failed",
    "prompt_echo": "the model repeated its instructions instead of answering",
    "posed_as_quoted": "the model passed its own words off as the documents' sentences",
    "repeated_call": "the model kept repeating a failing tool call",
    "max_iters": "the model did not finish within its steps",
    "empty": "the model gave no answer",
    "no_model": "no chat model is configured",
    "model_error": "the chat model failed",
    "model_timeout": "the chat model did not answer in time",
    "budget_exceeded": "a budget ran out before the model could finish",
    "heading_echo": "the model answered with the passages' headings only",
    "off_topic": "the model's answer was about something the question did not ask",
    "unanswered": "the model's answer did not state the amount asked for",
    "partial": "the model's answer gave one part of what the documents say on the question",
    "other_language": "the model answered in another language than the question's",
}
"""Why an answer was replaced, in words (``RunResult.fallback_reason``); in Chinese,
:data:`REASONS_ZH`."""
REPLACED_NOTICE_ZH = "上面的回答经与文档核对后已被替换（{reason}）"
""":data:`REPLACED_NOTICE` for a question asked in Chinese, its reason from :data:`REASONS_ZH`."""
REASONS_ZH = {
    "ungrounded": "文档不支持这个回答",
    "refusal": "模型拒绝了回答，但文档涉及这个问题",
    "declined": "模型拒绝了回答；文档中没有这方面的内容",
    "tool_failed": "模型在为此调用的工具出错后拒绝了回答",
    "prompt_echo": "模型复述了给它的指令",
    "posed_as_quoted": "模型把自己的话当作文档原文",
    "heading_echo": "模型只复述了段落标题",
    "off_topic": "回答的不是所问的内容",
    "unanswered": "回答没有给出所问的数量",
    "partial": "回答只给出了文档所述的一部分",
    "other_language": "回答所用的语言与问题不同",
    "repeated_call": "模型反复发出失败的工具调用",
    "max_iters": "模型没有在限定步数内完成",
    "empty": "模型没有给出回答",
    "no_model": "没有配置对话模型",
    "model_error": "对话模型出错",
    "model_timeout": "对话模型没有按时回答",
    "budget_exceeded": "预算已用完",
}
"""Why an answer was replaced, in Chinese, for the people reading a Chinese question's stream
(``RunResult.fallback_reason``; the code itself stays the same for programs)."""
WITHDRAWN_NOTICE = (
    "The draft above was withdrawn: it stated what only the documents can tell, before they "
    "were searched; searching them now"
)
"""What :class:`~shelfhand.core.events.TextWithdrawn` says to people after a guessed reply."""
WITHDRAWN_NOTICE_ZH = (
    "上面的草稿已撤回：它在查阅文档之前就说出了只有文档才能回答的内容；正在查阅文档"
)
""":data:`WITHDRAWN_NOTICE` for a question asked in Chinese."""
TOOLS_LEAD = "The answer did not match what the tools returned, which was:"
"""The line over the tool results that replace an ungrounded answer resting on them."""
TOOLS_LEAD_ZH = "回答与工具返回的结果不符，工具返回的是："
""":data:`TOOLS_LEAD` for a question asked in Chinese."""
TOOLS_FAILED_LEAD = "The tools called for this did not answer:"
"""What opens the list of failed tool calls that replaces an answer no passage backs."""
TOOLS_FAILED_LEAD_ZH = "为此调用的工具没有返回结果："
""":data:`TOOLS_FAILED_LEAD` for a question asked in Chinese."""
TOOLS_RETURNED_LEAD = "What the tools called for this returned:"
"""What opens the list of tool results under the passages' sentences (or "the documents do
not cover this") that replace an answer not about them."""
TOOLS_RETURNED_LEAD_ZH = "为此调用的工具返回的是："
""":data:`TOOLS_RETURNED_LEAD` for a question asked in Chinese."""
UNSUPPORTED_SHARE = 0.5
"""An answer with at least this share of unsupported sentences is ungrounded."""


def _shingles(text: str, size: int) -> set[tuple[str, ...]]:
    tokens = [t.lower() for t in _WORD.findall(text)]
    return {tuple(tokens[i : i + size]) for i in range(max(0, len(tokens) - size + 1))}


def echoes_scaffold(answer: str, scaffolds: Iterable[str]) -> bool:
    """Whether ``answer`` repeats a run of :data:`_SCAFFOLD_WORDS` words (or characters, for
    Chinese) of one of ``scaffolds``."""
    if not answer.strip():
        return False
    own = _shingles(answer, _SCAFFOLD_WORDS)
    return any(own & _scaffold_shingles(s) for s in scaffolds if s.strip())


@functools.lru_cache(maxsize=256)
def _scaffold_shingles(scaffold: str) -> frozenset[tuple[str, ...]]:
    """A prompt's shingles, made once: the prompts are the same for every answer."""
    return frozenset(_shingles(scaffold, _SCAFFOLD_WORDS))


def poses_as_quoted(answer: str) -> bool:
    """Whether a model's ``answer`` opens with the lead line of the extractive answer
    (:data:`~.extractive.LEADS`, "From the documents:", "摘自文档："): it would pass its own
    words off as the documents' sentences. A small model does so in a conversation whose
    earlier answer was extractive (it imitates the format: "From the documents: -
    保修维修需要 6 个月 …", the lamp's warranty period reworded as the repair time)."""
    return answer.lstrip().lower().startswith(_LEADS)


_LEADS = tuple(text.lower() for text in LEADS)


def repeats_question(answer: str, question: str) -> bool:
    """Whether ``answer`` is ``question`` said again (its citation marks, spaces,
    punctuation and case aside): Qwen2.5-Coder-0.5B answered "艾努语使用的地区是哪里？" with
    itself; or asks it back in other words, ending with a question mark and holding none of
    its own ("The projector keeps overheating. What can I do?" for "My projector keeps
    overheating. What can I do?"; "U盘不能用吗？" for "U盘可以用吗？": a yes turned into a no is
    not its own, nor is a number: "The answer to the user's question is: 5000 元的报销谁审批?"
    for "3000 元的报销谁审批？"); or, for a question asking what, how, which or why and
    offering no choice, says nothing but its words ("The projector does not show E-310." for
    "What should I do if the projector shows E-310?")."""
    if not question:
        return False
    said = _ANNOUNCED.sub("", without_citations(answer), count=1)
    if _bare(said) == _bare(question) != "":
        return True
    asks_back = said.rstrip().endswith(("?", "？"))
    if not asks_back and (
        _OPEN_QUESTION.search(question) is None or _CHOICE.search(question) is not None
    ):
        # "Yes, the X1 supports HDR." holds only the question's words too, and so does "The
        # Cinema C4K." for "Which is brighter, the X1 Pro or the Cinema C4K?"
        return False
    if len(said) > 2 * len(question):
        return False  # (read before its words: an answer that long says more)
    if any(q not in question.casefold() for q in _QUANTIFIERS.findall(said.casefold())):
        return False  # "All models support HDR." for "Which models support HDR?" says which
    own = words(said) - _YES_OR_NO
    if asks_back:  # (a number asked back is not an answer's)
        own = {w for w in own if not w.isdigit()}
    return bool(own) and own <= words(question)


_YES_OR_NO = words("能 不能 可以 不可以 不 没 没有 会 不会 是 不是 can't cannot not")
"""Words that turn a yes into a no: "U盘不能用吗？" asks "U盘可以用吗？" back (Qwen2.5-Coder-0.5B)."""
_ANNOUNCED = re.compile(
    r"^\s*[^\n:：。.!?！？]{0,60}?(?:answer|答案|回答)[^\n:：。!?！？]{0,40}[:：]\s*", re.I
)
"""A lead-in announcing the answer ("The answer to the user's question is: "), read past
when the rest asks the question back ("…: 5000 元的报销谁审批?" for "3000 元的报销谁审批？")."""


_OPEN_QUESTION = re.compile(
    r"什么|怎么|怎样|如何|为何|为什么|哪|多久|多少|多长|几|谁"
    r"|\b(?:what|how|why|which|when|where|who)\b",
    re.IGNORECASE,
)
"""A question no answer holding only its own words can answer: "What should I do if the
projector shows E-310?" answered "The projector does not show E-310." says nothing."""
_QUANTIFIERS = re.compile(r"\b(?:all|every|each|both|none|only|any)\b|所有|全部|都|均|仅|只有|每")
"""Words saying how many of what the question names (stop words to the word comparison)."""
_CHOICE = re.compile(
    r"\bor\b|还是|或者|区别|不同|比较|哪个|哪一个|\bvs\b|versus|differ|compar", re.IGNORECASE
)
"""A question offering its answers ("the X1 Pro or the Cinema C4K?"): one of its words is one."""


def _bare(text: str) -> str:
    return _NOT_WORDS.sub("", text).casefold()


_NOT_WORDS = re.compile(r"[\W_]+")


def is_refusal(answer: str) -> bool:
    """Whether ``answer`` says it cannot answer or that the information is missing."""
    return bool(_REFUSAL.search(answer))


_ASKS = re.compile(
    r"[?？]|什么|怎么|如何|为何|哪|\b(?:what|how|why|which|explain|means?)\b", re.IGNORECASE
)
"""A question, or a message asking something (:func:`guessed`'s codes are the ones asked about)."""
GUESS_NEW_WORDS = 3
"""An answer that explains a code the question asks about (``E-203``) in at least this many
content words of its own is a guess when nothing was searched (see :func:`guessed`)."""


def guessed(answer: str, prompt: str, history: Sequence[Message] = ()) -> bool:
    """Whether ``answer``, written with no tool run, states what only the documents could
    tell: a number or code that neither ``prompt`` nor the conversation so far (``history``)
    holds, a citation mark with no passage in the conversation, that the information is
    not there (:func:`is_refusal`), or what a code the question asks about means (restated
    with :data:`GUESS_NEW_WORDS` or more content words that neither the question nor the
    conversation holds: "Error E-203 means a network failure", where "Your order is A-1001"
    only repeats it). The agent loop searches for such an answer's question (see
    :mod:`.loop`)."""
    if is_refusal(answer):
        return True
    if cited_numbers(answer) and not any(r.citations for m in history for r in m.tool_results):
        return True
    stated = facts(answer)
    if not stated:
        return False
    asked = facts(prompt)
    texts = [t for m in history for t in (m.text, *(r.content for r in m.tool_results))]
    told = [facts(t) for t in texts]
    # what a code the question asks about means, said in words of the answer's own, the
    # conversation never having mentioned the code ("My order is A-1001": told, not asked)
    codes = {f for f in asked & stated if not f.isdigit()}
    if codes and _ASKS.search(prompt) and not any(codes & t for t in told):
        known = words(prompt).union(*(words(t) for t in texts))
        if len(words(answer) - known) >= GUESS_NEW_WORDS:
            return True
    return bool(stated.difference(asked, *told))


def needs_search(answer: str, prompt: str, history: Sequence[Message] = ()) -> bool:
    """Whether ``answer``, written with no tool run, is not taken before the documents are
    searched for ``prompt``: it :func:`guessed`, or it states no amount where the question
    asks how long or how much (:func:`~.answer_topic.misses_amount`: "the period depends on
    the purchase date" for "How long does a refund take?"; it claims nothing, so it is no
    guess, but the documents hold the amount)."""
    return guessed(answer, prompt, history) or misses_amount(prompt, answer)


class AnswerJudge(Protocol):
    """The stronger check after the lexical one: :class:`~.model_check.ModelJudge` (the chat
    model) or :class:`~.rerank_check.RerankJudge` (a rerank endpoint)."""

    async def review(self, grounding: Grounding, citations: Sequence[Citation]) -> Grounding:
        """``grounding`` with the judge's verdict per sentence, or as it is with a note."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerCheck:
    """The grounding check and the extractive fallback of an agent's answers.

    Args:
        fallback: Replace an answer that cannot be trusted by the extractive answer (the
            check alone, flags only, with ``False``).
        scaffolds: Prompt text that must never reach an answer (the agent's own,
            :data:`AGENT_SCAFFOLDS`, plus the tool-mode instructions the app adds).
    """

    fallback: bool = True
    scaffolds: tuple[str, ...] = AGENT_SCAFFOLDS
    judge: AnswerJudge | None = None
    """The stronger check (the chat model or a rerank endpoint judges each sentence), used
    by :meth:`review`; ``None``: the lexical check alone."""
    synonyms: SynonymTable | None = None
    """The word groups the search reads questions with (the workspace's ``synonyms`` and
    the built-in ones), so the extractive answer reads them alike; ``None``: built-in only."""

    def reason(self, result: RunResult, question: str = "") -> str:
        """Why ``result``'s answer cannot be shown as the model wrote it ("" when it can);
        with ``question``, also whether it answers it (:mod:`.answer_topic`)."""
        if result.stop_reason in _STOPPED:
            return result.stop_reason
        if result.stop_reason != "final":
            return ""
        if echoes_scaffold(result.output, self.scaffolds):
            return "prompt_echo"
        if not result.extractive and poses_as_quoted(result.output):
            return "posed_as_quoted"
        if result.citations and (
            not result.output.strip()
            or only_marks(result.output)  # "[1][2]": citation marks, no words
            or announces_only(result.output)  # "The answer is:" and nothing after it
            or points_only(result.output)  # "The security hotline is located at [1][2]."
            or repeats_question(result.output, question)  # "艾努语使用的地区是哪里？" for itself
        ):
            return "empty"
        if result.citations and only_labels(result.output, result.citations):
            return "heading_echo"
        if not result.citations:
            refusing = is_refusal(result.output)  # (read once: the two cases below need it)
            if refusing and _tool_failed(result.messages):
                return "tool_failed"  # a refusal after a tool that could answer failed
            if refusing and _declined_on_nothing(result, question):
                return "declined"
            if result.grounding is None or (refusing and not _guessed(result, question)):
                return ""
        elif is_refusal(result.output) and not _tool_answered_no(result):
            return "ungrounded" if _guessed(result, question) else "refusal"
        grounding = result.grounding
        if grounding is not None and _ungrounded(grounding.sentences, about_tools(grounding)):
            return "ungrounded"
        if (
            question
            and about_tools(grounding)
            and misses_tool_identifier(
                question, result.output, grounding, tool_evidence(result.messages)
            )
        ):
            return "off_topic"  # about another tool's result than the one naming what is asked
        if question and result.citations:
            return self._unanswered(result, question)
        return ""

    def _unanswered(self, result: RunResult, question: str) -> str:
        """``off_topic`` or ``unanswered`` when the grounded answer does not answer
        ``question``; "" when it does, as far as words and numbers can tell."""
        answer, citations = result.output, result.citations
        # a follow-up naming no identifier ("怎么修？" after "E-203 是什么故障？") asks about the
        # one its search carried: an answer about another code is off the question
        named = question
        if not query_identifiers(question):
            named = rewritten_query(result.messages) or question
        if misses_identifier(named, answer, result.grounding, citations):
            return "off_topic"
        if misses_amount(amount_asked(question, result.messages), answer):
            return "unanswered"
        if rests_on_tools(result.grounding):
            return ""  # what the run's tools returned, not the passages: no passage to prefer
        if (
            _other_tool_ran(result.messages)  # (read first: most runs call none)
            and shares_only_names(question, answer)
            and (
                _tool_failed(result.messages)
                or (
                    # (an answer in the other language shares no word with the question)
                    in_chinese(answer) == in_chinese(question)
                    and quotes_beyond_names(answer, citations)
                    and bool(tools_returned(result.messages, question))
                )
            )
        ):
            # a tool was called for it (the stock system: down, or its count about the SKU
            # asked not said) and the answer quotes the product's description: it is about
            # the product, not what was asked (the passages, and what the tools returned or
            # that they failed); "Yes, it is currently available" over ``in_stock: true``
            # quotes no passage, and a tool that returned nothing about the question (the
            # stock a small model looked up for a returns question) leaves the answer be
            return "off_topic"
        if rests_elsewhere(question, result.grounding, citations, self.synonyms):
            return "off_topic"
        if tells_one_part(question, result.grounding, citations, self.synonyms):
            return "partial"
        if states_nothing_held(answer, citations) and (
            extractive_answer(question, citations, synonyms=self.synonyms) is None
        ):
            return "off_topic"  # no passage is about the question, nothing of theirs is said
        if in_other_language(question, answer, result.grounding, citations, self.synonyms):
            return "other_language"
        return ""

    def apply(self, result: RunResult, question: str) -> RunResult:
        """``result`` with its answer checked (lexically) and, when it cannot be trusted,
        replaced."""
        if result.stop_reason != "final":
            return self._decided(result, question)
        return self._decided(self._checked(result, question), question)

    async def review(self, result: RunResult, question: str) -> RunResult:
        """:meth:`apply`, with the :attr:`judge`'s verdict on each sentence when there is
        one (its failure leaves the lexical check, with a note)."""
        if self.judge is None or result.stop_reason != "final":
            return self.apply(result, question)
        checked = self._checked(result, question)
        if checked.grounding is not None and checked.citations:
            with side_usage() as spent:  # (a judge that asks a model: its call is the run's)
                grounding = await self.judge.review(checked.grounding, checked.citations)
            checked = replace(
                checked,
                grounding=_tool_sentences_kept(checked.grounding, grounding),
                usage=checked.usage + spent.total if spent.total.model_calls else checked.usage,
            )
        return self._decided(checked, question)

    def _checked(self, result: RunResult, question: str) -> RunResult:
        tool_failed = _tool_failed(result.messages)  # (read once: both need it)
        if result.citations or _claims_without_evidence(result, tool_failed):
            grounding = check_grounding(
                result.output,
                result.citations,
                question=question,
                tools=tool_evidence(result.messages),
                tool_failed=tool_failed,
                asked=rewritten_query(result.messages) or "",
            )
            return replace(result, grounding=grounding)
        return result

    def _decided(self, checked: RunResult, question: str) -> RunResult:
        why = self.reason(checked, question)
        if not why or not self.fallback:
            return checked
        replaced = _replaced(checked, why, question, self.synonyms)
        if why == "unanswered" and not (
            replaced.extractive
            and not misses_amount(amount_asked(question, checked.messages), replaced.output)
        ):
            return checked  # the passages' sentences state no such amount either: no better
        if why in ("partial", "other_language") and not replaced.extractive:
            # (a follow-up's rewrite, read as the question, may give no overview and no
            # passage in the question's language): nothing better to show
            return checked
        if replaced.extractive or says_not_covered(replaced.output):
            replaced = _tools_under(replaced, question)
        note = checked.grounding.note if checked.grounding is not None else ""
        if note and replaced.grounding is not None:  # why the judge did not decide: kept
            return replace(replaced, grounding=replace(replaced.grounding, note=note))
        return replaced


def replacement(before: RunResult, after: RunResult, question: str = "") -> AnswerReplaced | None:
    """The event telling a stream's clients that the check replaced ``before``'s answer by
    ``after``'s; ``None`` when the answer stands."""
    if not after.fallback_reason or after.output == before.output:
        return None
    return replaced_by(after, question)


def replaced_by(result: RunResult, question: str = "") -> AnswerReplaced:
    """The event saying that ``result``'s answer took the place of the one streamed before;
    its notice in the language ``question`` is asked in."""
    reason = result.fallback_reason
    return AnswerReplaced(
        reason=reason, output=result.output, notice=replacement_notice(reason, question)
    )


def replacement_notice(reason: str, question: str = "") -> str:
    """:data:`REPLACED_NOTICE` for ``reason``, in the language ``question`` is asked in."""
    if in_chinese(question):
        return REPLACED_NOTICE_ZH.format(reason=REASONS_ZH.get(reason, reason))
    return REPLACED_NOTICE.format(reason=REASONS.get(reason, reason.replace("_", " ")))


def withdrawal_notice(question: str) -> str:
    """:data:`WITHDRAWN_NOTICE` in the language ``question`` is asked in."""
    return WITHDRAWN_NOTICE_ZH if in_chinese(question) else WITHDRAWN_NOTICE


def tool_evidence(messages: Sequence[Message]) -> list[tuple[str, str]]:
    """The results of the tools other than ``retrieve`` that ran in ``messages`` (not
    errors, not passages), as (tool name, text): what an answer may state besides the
    passages (an order's status from the caller's order system)."""
    return [
        (r.name, r.content)
        for m in messages
        for r in m.tool_results
        if r.name != RETRIEVE_TOOL and not r.is_error and not r.citations
    ]


def tools_told(messages: Sequence[Message], question: str) -> str:
    """What the run's tools other than ``retrieve`` returned, listed under a line saying the
    answer did not match it (in the language of ``question``); "" when none returned
    anything."""
    lines = tool_result_lines(messages, leave_out=RETRIEVE_TOOL)
    return _listed(lines, question, TOOLS_LEAD, TOOLS_LEAD_ZH)


def tools_failed(messages: Sequence[Message], question: str) -> str:
    """The run's failed tool calls (other than ``retrieve``'s) that no later call of the same
    tool made good, listed under a line saying so (in the language of ``question``); "" when
    none failed."""
    lines = tool_failure_lines(messages, leave_out=RETRIEVE_TOOL)
    return _listed(lines, question, TOOLS_FAILED_LEAD, TOOLS_FAILED_LEAD_ZH)


def tools_returned(messages: Sequence[Message], question: str) -> str:
    """What the run's tools other than ``retrieve`` returned about ``question`` (a result
    sharing a word or a name with it: the stock of the SKU asked about, not the stock a small
    model looked up for a question on returns), listed under a line saying so (in the
    language of ``question``); "" when none did."""
    results = tool_results(messages, leave_out=RETRIEVE_TOOL)
    if not results:
        return ""  # (read first: most runs call no other tool)
    asked = words(question).difference(NOT_ASKED)
    lines = [f"- {name}: {said}" for name, said in results if not asked.isdisjoint(words(said))]
    return _listed(lines, question, TOOLS_RETURNED_LEAD, TOOLS_RETURNED_LEAD_ZH)


def _listed(lines: Sequence[str], question: str, lead: str, lead_zh: str) -> str:
    """``lines`` under ``lead`` (``lead_zh`` for a question in Chinese); "" for no lines."""
    if not lines:
        return ""
    return "\n".join([lead_zh if in_chinese(question) else lead, *lines])


def rests_on_tools(grounding: Grounding | None) -> bool:
    """Whether a supported sentence of the answer rests on a tool result, not a passage."""
    return grounding is not None and any(s.supported and s.tool for s in grounding.sentences)


def about_tools(grounding: Grounding | None) -> bool:
    """Whether a sentence of the answer is about a tool result (supported by it or not)."""
    return grounding is not None and any(s.tool for s in grounding.sentences)


def _tool_sentences_kept(lexical: Grounding, judged: Grounding) -> Grounding:
    """``judged`` with the sentences a tool result supports as the lexical check found them
    (a judge sees the passages only)."""
    if len(lexical.sentences) != len(judged.sentences) or not rests_on_tools(lexical):
        return judged
    sentences = tuple(
        before if before.tool else after
        for before, after in zip(lexical.sentences, judged.sentences, strict=True)
    )
    return replace(judged, sentences=sentences)


def _guessed(result: RunResult, question: str) -> bool:
    """Whether ``result``'s answer, a refusal, goes on with a number, code or date that
    neither ``question`` nor the evidence holds: the model's guess, which the user reads as
    the company's ("The documents do not cover this. Usually employees get 25 days of
    leave."). "The documents do not mention error E-999." for "What does error E-999
    mean?" states only what the question does."""
    grounding = result.grounding
    if grounding is None:
        return False
    stated = facts(result.output)
    if not stated or stated <= facts(question):
        return False
    return _ungrounded(grounding.sentences, about_tools(grounding))


def _claims_without_evidence(result: RunResult, tool_failed: bool) -> bool:
    """The documents were searched and had nothing, or the tools called failed, yet the
    answer cites a passage or states numbers and codes: it is checked (and found
    unsupported), not shown as evidence-based. ``tool_failed``: :func:`_tool_failed` of its
    messages."""
    if not tool_failed and not found_nothing(result.messages):
        return False
    return bool(result.unknown_citations or facts(result.output))


def _ungrounded(sentences: Sequence[object], on_tools: bool = False) -> bool:
    """Whether an answer's checked ``sentences`` make it ungrounded: a fact no passage holds,
    or too many sentences unsupported; for an answer resting on tool results (``on_tools``),
    only a fact neither they nor the passages hold ("please contact support" is in no
    order system's reply: flagged, not replaced)."""
    supports = [s for s in sentences if hasattr(s, "supported")]
    if not supports:
        return False
    bad = [s for s in supports if not getattr(s, "supported", True)]
    if any(getattr(s, "missing", ()) or getattr(s, "misplaced", ()) for s in bad):
        return True  # a number, duration or code no passage holds (or another row's)
    return not on_tools and len(bad) / len(supports) >= UNSUPPORTED_SHARE


def extractive_result(
    result: RunResult,
    why: str,
    question: str,
    *,
    synonyms: SynonymTable | None = None,
    asked: str | None = None,
    searched_for_it: bool = False,
) -> RunResult | None:
    """``result`` answered by the extractive answer, or ``None`` when no passage is about
    ``question`` (read with ``synonyms``, default the built-in groups). ``searched_for_it``:
    ``result``'s passages were searched for ``question`` as typed, so one in English found
    for a question in Chinese may be quoted (see
    :func:`~shelfhand.agent.extractive.extractive_answer`'s ``across``).

    A follow-up searched as rewritten (:func:`~.grounding.rewritten_query`: "它的光源能用多
    久？" after a question about the Lumen X1 Pro names no product) is read as the search
    read it, with its rewrite ("Lumen X1 Pro light source" or the earlier question carried), and as typed
    when that finds no passage: the message alone takes the warranty's sentence about light
    sources for the answer. ``asked``: that query, when ``result``'s transcript does not
    record it (default: :func:`~.grounding.rewritten_query` of it)."""
    extract = None
    if asked is None and result.citations:
        asked = rewritten_query(result.messages)
    if asked is not None and result.citations:
        query = asked if question.strip() in asked else f"{asked} {question}"
        extract = extractive_answer(
            query, result.citations, synonyms=synonyms, language_of=question
        )
    if extract is None:
        extract = extractive_answer(
            question, result.citations, synonyms=synonyms, across=searched_for_it
        )
    if extract is None:
        return None
    grounding = check_grounding(extract.text, result.citations, question=question)
    return replace(
        result,
        output=extract.text,
        grounding=grounding,
        extractive=True,
        fallback_reason=why,
        unknown_citations=unknown_citations(extract.text, result.citations),
    )


_NOT_COVERED_REASONS = (
    "ungrounded",
    "prompt_echo",
    "posed_as_quoted",
    "heading_echo",
    "off_topic",
    "declined",
)
"""Reasons whose answer, when no passage is about the question, is that the documents do
not cover it."""


_ANSWERED = ("ungrounded", "off_topic", "tool_failed")
"""Reasons for which the model answered (in words the passages do not bear out), or a tool
that could have did not: a passage that shares no word with the question does not replace
that."""


def _replaced(
    result: RunResult, why: str, question: str, synonyms: SynonymTable | None
) -> RunResult:
    """``result`` with the answer that replaces its own; its transcript ends with that answer
    too, so the conversation's memory holds what the user read, not what the model wrote."""
    # an answer about what the run's tools returned that states something they did not:
    # what they returned, not the model's words (nor passages off the point)
    if why in ("ungrounded", "off_topic") and about_tools(result.grounding):
        told = tools_told(result.messages, question)
        if told:
            return _told(result, told, why)
    extracted = extractive_result(
        result,
        why,
        question,
        synonyms=synonyms,
        # an English passage for a Chinese question the model declined or did not answer:
        # as without a model, when the passages are the search's for the question as typed
        # (a Chinese answer the model wrote from it stands, flagged: _unreadable)
        searched_for_it=why not in _ANSWERED
        and searched_as_typed(result.messages, result.citations),
    )
    if extracted is not None:
        return replace(extracted, messages=_answered(result, extracted.output))
    if why in ("ungrounded", "off_topic") and _unreadable(result, question):
        return replace(result, fallback_reason=why)  # (flagged: words cannot tell)
    # no passage is about the question: that is the answer, whether the model said something
    # unfounded or stopped without an answer (unrelated passages are not listed as if they were),
    # unless a tool that could have answered failed: then that is (the order system is down)
    if why in _NOT_COVERED_REASONS or (
        why in _STOPPED and (result.citations or found_nothing(result.messages))
    ):
        failed = tools_failed(result.messages, question)
        if failed:
            return _told(result, failed, why)
        return _not_covered(result, question, why)
    if why in ("refusal", "tool_failed"):
        # a refusal ("I cannot help with that") after a tool that could answer failed: which
        # tool did not answer, not the model's apology; none failed, and one that gives no
        # reason while no passage is about the question: the documents do not cover it
        # (the passages found were about something else), as does one in the other language
        # than the question's, said in the question's; else the refusal stands
        failed = tools_failed(result.messages, question)
        if failed:
            return _told(result, failed, "tool_failed")
        if why == "refusal" and (
            (_declines_bare(result) and _unrelated(result, question))
            or _declines_unheard(result, question)
        ):
            return _not_covered(result, question, "declined")
        return result
    return replace(result, fallback_reason=why)


def _unreadable(result: RunResult, question: str) -> bool:
    """Whether every passage ``result`` found is in the other language than ``question``
    while its answer is in the question's, and no sentence of it states a number or code
    they do not hold: its words cannot be compared with theirs, so that it is not borne out
    says nothing, and neither would "the documents do not cover this" (a Chinese answer over
    the English IT FAQ found by its "VPN" was replaced by that). The answer stands, its
    sentences flagged."""
    if not result.citations or _one_in_its_language(result, question):
        return False
    grounding = result.grounding
    return (
        in_chinese(result.output) == in_chinese(question)
        and grounding is not None
        and not any(s.missing or s.misplaced for s in grounding.sentences)
    )


def _not_covered(result: RunResult, question: str, why: str) -> RunResult:
    """``result`` answered "the documents do not cover this" (in the question's language)."""
    return replace(
        result,
        output=not_covered(question),
        grounding=None,
        fallback_reason=why,
        unknown_citations=(),
        messages=_answered(result, not_covered(question)),
    )


def amount_asked(question: str, messages: Sequence[Message]) -> str:
    """What to read for the amount ``question`` asks (:func:`~.amounts.asked_amount`): the
    question, or, when it asks none and asks what the question before it asked
    (:func:`~.rewrite.asks_the_same`), its rewrite or the earlier question it was searched
    with (:func:`~.grounding.rewritten_query`): "那 Mini M2 呢？" after "Lumen X1 多少钱？"
    asks a price too; "它有多重？" asks its own question."""
    if asked_amount(question) is not None or not asks_the_same(question):
        return question
    return rewritten_query(messages) or question


def _tools_under(result: RunResult, question: str) -> RunResult:
    """``result``'s extractive answer (or "the documents do not cover this") with what the
    run's other tools returned (:func:`tools_returned`) and which of them failed
    (:func:`tools_failed`) listed under it: the passages' sentences about "How many Lumen X1
    are left?" are the product's description and its spec row, and the stock system's
    answer (``stock: 12``), or that it did not answer, is what the user asked for."""
    under = [
        part
        for part in (
            tools_returned(result.messages, question),
            tools_failed(result.messages, question),
        )
        if part
    ]
    if not under:
        return result
    output = "\n\n".join([result.output, *under])
    return replace(result, output=output, messages=_answered(result, output))


_ABOUT_SOURCES = re.compile(
    r"\b(?:documents?|passages?|context|knowledge base|information|details|sources?|texts?"
    r"|results?)\b|文档|资料|信息|知识库|上下文|段落|内容",
    re.IGNORECASE,
)
"""What a refusal says is missing: the documents, the information (not the product)."""


def _declined_on_nothing(result: RunResult, question: str) -> bool:
    """``result``'s answer, a refusal (:func:`is_refusal`), declines without saying why
    ("抱歉，我无法协助完成这个请求。", "I can't assist with that request.") after the
    documents were searched and held nothing, and no other tool ran: the documents do not
    cover the question, and that is what the user is told (seen with Qwen2.5-Coder-0.5B for
    "E-203 是什么故障？" in a tenant with no documents: the user read a refusal to help). One
    that speaks of the documents or the information ("文档中没有相关信息") says so already, and
    stands, unless it says so in the other language (:func:`_declines_unheard`)."""
    return found_nothing(result.messages) and (
        _declines_bare(result) or _declines_unheard(result, question)
    )


def _unrelated(result: RunResult, question: str) -> bool:
    """Whether the passages ``result`` found, none of which the extractive answer reads as
    about ``question``, can be taken as about something else: the question names its own
    subject (a follow-up pointing back, "它的光源能用多久？", holds none of its product's
    words), and a passage is in its language (a Chinese passage may answer an English
    question in none of its words)."""
    return not points_back(question) and _one_in_its_language(result, question)


def _one_in_its_language(result: RunResult, question: str) -> bool:
    """Whether a passage ``result`` found is in ``question``'s language (a bilingual one is in
    both)."""
    zh = in_chinese(question)
    return any(in_language(c.text, zh) for c in result.citations)


def _declines_bare(result: RunResult) -> bool:
    """``result``'s refusal says nothing of the documents or the information, and no tool
    but the search ran: it declines without saying why."""
    return _ABOUT_SOURCES.search(result.output) is None and not _other_tool_ran(result.messages)


def _declines_unheard(result: RunResult, question: str) -> bool:
    """``result``'s refusal says the documents or the information lack it, in the other
    language than ``question`` ("The documents do not cover the question '公司有健身房吗？'",
    Qwen2.5-Coder-0.5B), and no tool but the search ran: the user would read it in a language
    they did not ask in, and is told so in their own. One that gives no reason ("I cannot
    help with that.") does not say the documents lack it: it is not said for it."""
    return (
        bool(question)
        and in_chinese(result.output) != in_chinese(question)
        and _ABOUT_SOURCES.search(result.output) is not None
        and not _other_tool_ran(result.messages)
    )


def _tool_answered_no(result: RunResult) -> bool:
    """``result``'s answer reads as a refusal ("does not have") but is a negative answer a
    tool's result supports: "The Lumen X1 Pro does not have stock at the moment." over
    ``stock: 0`` (seen with Qwen2.5-Coder-0.5B: it was replaced by the spec table, and the
    stock count was lost). One that speaks of the documents or the information ("The
    documents do not mention its stock") is a refusal still."""
    return rests_on_tools(result.grounding) and _ABOUT_SOURCES.search(result.output) is None


def _other_tool_ran(messages: Sequence[Message]) -> bool:
    """A tool other than ``retrieve`` answered or failed in ``messages``."""
    return any(r.name != RETRIEVE_TOOL for m in messages for r in m.tool_results)


def _tool_failed(messages: Sequence[Message]) -> bool:
    """A tool other than ``retrieve`` failed in ``messages`` with no later result of its
    own (:func:`tool_failure_lines`)."""
    if not any(r.is_error for m in messages for r in m.tool_results):
        return False  # (the common case, read first: no tool failed)
    return bool(tool_failure_lines(messages, leave_out=RETRIEVE_TOOL))


def _told(result: RunResult, told: str, why: str) -> RunResult:
    return replace(
        result,
        output=told,
        grounding=None,
        fallback_reason=why,
        unknown_citations=(),
        messages=_answered(result, told),
    )


def relevant_citations(citations: Sequence[Citation], answer: str) -> list[Citation]:
    """The passages ``answer`` cites, in its order; when it cites none, none."""
    by_index = {c.index: c for c in citations}
    return [by_index[n] for n in dict.fromkeys(cited_numbers(answer)) if n in by_index]


def no_model_answer(
    result: RunResult,
    question: str,
    *,
    synonyms: SynonymTable | None = None,
    asked: str | None = None,
) -> RunResult:
    """The answer without a chat model: the extractive answer of ``result``'s passages (the
    search's for ``question``, or for ``asked``: a follow-up carried with the question it
    follows, :func:`~.rewrite.carried`), or "the documents do not cover this" when none is
    about ``question`` (the passages stay in ``result.citations`` either way)."""
    extracted = extractive_result(
        result, "no_model", question, synonyms=synonyms, asked=asked, searched_for_it=asked is None
    )
    if extracted is not None:
        return replace(extracted, messages=_answered(result, extracted.output))
    return replace(
        result,
        output=not_covered(question),
        fallback_reason="no_model",
        messages=_answered(result, not_covered(question)),
    )


def failed_model_answer(
    question: str,
    citations: Sequence[Citation],
    why: str,
    *,
    trace_id: str = "",
    synonyms: SynonymTable | None = None,
    history: Sequence[Message] = (),
) -> RunResult | None:
    """The answer of a turn whose chat model failed after its passages were found: their
    best sentences (``fallback_reason`` = ``why``, the failure's code), or ``None`` when
    no passage is about ``question`` (then there is nothing to show but the failure).
    ``history``: the conversation before the turn, whose question a follow-up pointing back
    was searched with (:func:`~.rewrite.carried`), and is read with here too."""
    carry = carried(question, history) if history else None
    found = RunResult(
        output="",
        messages=(Message.user(question), Message.assistant("")),
        citations=tuple(citations),
        trace_id=trace_id,
    )
    asked = carry.query if carry is not None else None
    extracted = extractive_result(found, why, question, synonyms=synonyms, asked=asked)
    if extracted is None:
        return None
    return replace(extracted, messages=_answered(found, extracted.output))


def _answered(result: RunResult, output: str) -> tuple[Message, ...]:
    """``result``'s transcript with its last message (the answer) saying ``output``."""
    if not result.messages or result.messages[-1].role != "assistant":
        return result.messages
    last = result.messages[-1]
    return (*result.messages[:-1], Message.assistant(output, citations=last.citations))
