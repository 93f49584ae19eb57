"""Agents: the ReAct loop, supervisors with subagents, pipelines, and the knowledge agent.

The public names (imported lazily)::

    from shelfhand.agent import Agent, Subagent, Supervisor, sequential
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shelfhand.core.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "Agent": "shelfhand.agent.agent",
    "AnswerCheck": "shelfhand.agent.answer_check",
    "check_grounding": "shelfhand.agent.grounding_check",
    "extractive_answer": "shelfhand.agent.extractive",
    "DEFAULT_SYSTEM_PROMPT": "shelfhand.agent.agent",
    "ConversationMemory": "shelfhand.agent.memory",
    "KnowledgeAgent": "shelfhand.agent.retrieve",
    "retrieve_tool": "shelfhand.agent.retrieve",
    "LlmReranker": "shelfhand.agent.llm_rerank",
    "ModelJudge": "shelfhand.agent.model_check",
    "RerankJudge": "shelfhand.agent.rerank_check",
    "QueryRewriter": "shelfhand.agent.rewrite",
    "Subagent": "shelfhand.agent.subagents",
    "Supervisor": "shelfhand.agent.supervisor",
    "as_tool": "shelfhand.agent.supervisor",
    "conditional": "shelfhand.agent.pipelines",
    "fan_out": "shelfhand.agent.pipelines",
    "sequential": "shelfhand.agent.pipelines",
}

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "Agent",
    "AnswerCheck",
    "ConversationMemory",
    "KnowledgeAgent",
    "LlmReranker",
    "ModelJudge",
    "QueryRewriter",
    "RerankJudge",
    "Subagent",
    "Supervisor",
    "as_tool",
    "check_grounding",
    "conditional",
    "extractive_answer",
    "fan_out",
    "retrieve_tool",
    "sequential",
]

if TYPE_CHECKING:
    from shelfhand.agent.agent import DEFAULT_SYSTEM_PROMPT, Agent
    from shelfhand.agent.answer_check import AnswerCheck
    from shelfhand.agent.extractive import extractive_answer
    from shelfhand.agent.grounding_check import check_grounding
    from shelfhand.agent.llm_rerank import LlmReranker
    from shelfhand.agent.memory import ConversationMemory
    from shelfhand.agent.model_check import ModelJudge
    from shelfhand.agent.pipelines import conditional, fan_out, sequential
    from shelfhand.agent.rerank_check import RerankJudge
    from shelfhand.agent.retrieve import KnowledgeAgent, retrieve_tool
    from shelfhand.agent.rewrite import QueryRewriter
    from shelfhand.agent.subagents import Subagent
    from shelfhand.agent.supervisor import Supervisor, as_tool

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
