// shelfhand web chat: plain JS, no build step. Talks to the /v1 API with the key from the
// sidebar (kept in localStorage), reads Server-Sent Events from fetch() streams.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { sessionId: null, busy: false };

function apiKey() { return $("api-key").value.trim(); }

function headers(extra = {}) {
  const h = { ...extra };
  if (apiKey()) h["Authorization"] = "Bearer " + apiKey();
  return h;
}

function setStatus(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

async function api(method, path, body) {
  const init = { method, headers: headers(body ? { "Content-Type": "application/json" } : {}) };
  if (body) init.body = JSON.stringify(body);
  const res = await fetch(path, init);
  if (!res.ok) throw new Error(await errorText(res));
  return res.status === 204 ? null : res.json();
}

async function errorText(res) {
  try {
    const body = await res.json();
    const detail = Array.isArray(body.detail) ? body.detail.map((d) => d.msg).join("; ") : body.detail;
    return `${res.status}: ${detail}` + (body.trace_id ? ` (trace ${body.trace_id})` : "");
  } catch (_) {
    return `${res.status} ${res.statusText}`;
  }
}

// Parse an SSE body from a fetch Response, calling onEvent(type, data) per event.
async function readEvents(res, onEvent) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let type = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) type = line.slice(7);
        else if (line.startsWith("data: ")) data.push(line.slice(6));
      }
      if (data.length) onEvent(type, JSON.parse(data.join("\n")));
    }
  }
}

// --- sessions ------------------------------------------------------------------------------
async function loadSessions() {
  if (!apiKey()) { setStatus("Enter an API key to start."); return; }
  try {
    const { sessions } = await api("GET", "/v1/sessions");
    const list = $("sessions");
    list.textContent = "";
    for (const s of sessions) {
      const li = document.createElement("li");
      li.textContent = s.title || "(new chat)";
      li.title = new Date(s.updated_at * 1000).toLocaleString();
      li.dataset.id = s.id;
      li.classList.toggle("active", s.id === state.sessionId);
      li.onclick = () => openSession(s.id);
      list.appendChild(li);
    }
    setStatus("");
  } catch (err) {
    setStatus(err.message, true);
  }
}

async function openSession(id) {
  const detail = await api("GET", "/v1/sessions/" + id);
  state.sessionId = id;
  $("messages").textContent = "";
  let answer = null;
  for (const m of detail.messages) {
    if (m.role === "user") {
      addBubble("user").textContent = textOf(m);
      answer = null;
    } else if (m.role === "assistant") {
      const calls = m.content.filter((b) => b.type === "tool_call");
      if (!answer) answer = newAnswer();
      for (const c of calls) addStep(answer, `→ ${c.name}(${c.arguments})`);
      const text = textOf(m);
      // steps of one turn are kept apart, as the live stream does ("\n\n" between them)
      if (text) { answer.text += (answer.text ? "\n\n" : "") + text; renderAnswer(answer); }
    } else if (m.role === "tool" && answer) {
      for (const r of m.content.filter((b) => b.type === "tool_result")) {
        answer.citations.push(...r.citations);
        addStep(answer, `← ${r.name} ${r.is_error ? "error" : "ok"}`, r.is_error);
      }
    }
    for (const b of m.content.filter((b) => b.type === "citations")) answer && answer.citations.push(...b.citations);
    if (answer) renderAnswer(answer);
  }
  await loadSessions();
showReadiness();
}

function textOf(m) { return m.content.filter((b) => b.type === "text").map((b) => b.text).join(""); }

async function newSession() {
  const s = await api("POST", "/v1/sessions", {});
  state.sessionId = s.id;
  $("messages").textContent = "";
  await loadSessions();
showReadiness();
  return s.id;
}

// --- messages ------------------------------------------------------------------------------
function addBubble(role) {
  const li = document.createElement("li");
  li.className = "msg " + role;
  $("messages").appendChild(li);
  li.scrollIntoView({ block: "end" });
  return li;
}

function newAnswer() {
  const el = addBubble("assistant");
  const steps = document.createElement("ul");
  steps.className = "steps";
  const body = document.createElement("div");
  body.className = "answer";
  const cites = document.createElement("div");
  cites.className = "citations";
  el.append(steps, body, cites);
  return { el, steps, body, cites, text: "", citations: [] };
}

function addStep(answer, text, failed = false) {
  const li = document.createElement("li");
  li.textContent = text;
  if (failed) li.classList.add("failed");
  answer.steps.appendChild(li);
  return li;
}

function citationByIndex(answer, index) {
  // a run numbers its passages once: a number names one passage (or none, if never given)
  for (const c of answer.citations) if (c.index === index) return c;
  return null;
}

function citeLabel(c) {
  let where = c.title || c.source;
  if (c.section && c.section !== c.title) where += " › " + c.section.replace(c.title + " > ", "");
  return where + " (" + c.source + (c.page != null ? ", p. " + c.page : "") + ")";
}

function renderAnswer(answer) {
  answer.body.textContent = "";
  const parts = answer.text.split(/(\[\d+\])/);
  for (const part of parts) {
    const m = /^\[(\d+)\]$/.exec(part);
    const c = m && citationByIndex(answer, Number(m[1]));
    if (c) {
      const a = document.createElement("a");
      a.className = "cite";
      a.textContent = part;
      a.href = "#";
      a.dataset.index = m[1];
      a.onclick = (e) => { e.preventDefault(); showPassage(c); };
      answer.body.appendChild(a);
    } else if (m) {
      // a number no passage has: plain text, marked, never a link
      const span = document.createElement("span");
      span.className = "cite-unknown";
      span.textContent = part;
      span.title = "no passage has this number";
      answer.body.appendChild(span);
    } else {
      answer.body.appendChild(document.createTextNode(part));
    }
  }
  answer.cites.textContent = "";
  const seen = new Set();
  const used = answer.final ? usedPassages(answer) : null;
  for (const c of answer.citations) {
    const key = c.index + "|" + c.chunk_id;
    if (seen.has(key) || (used && !used.has(c.index))) continue;
    seen.add(key);
    const b = document.createElement("button");
    b.type = "button";
    b.className = "citation";
    b.textContent = `[${c.index}] ${citeLabel(c)}`;
    b.onclick = () => showPassage(c);
    answer.cites.appendChild(b);
  }
  renderGrounding(answer);
}

function usedPassages(answer) {
  // evidence is what the answer uses: the passages it cites, else those the check found
  // supporting it; none for a refusal
  const used = new Set();
  for (const m of answer.text.matchAll(/\[(\d+)\]/g)) used.add(Number(m[1]));
  const g = answer.final.grounding;
  if (!used.size && g) for (const s of g.sentences) if (s.supported && s.passage != null) used.add(s.passage);
  return used;
}

function renderGrounding(answer) {
  const ev = answer.final;
  if (!ev) return;
  const notes = document.createElement("div");
  notes.className = "grounding";
  if (answer.replaced) {
    const p = document.createElement("p");
    p.className = "replaced";
    // a Chinese question's notice ends in Chinese (its closing parenthesis too): its full stop
    p.textContent = answer.replaced + (/[\u3400-\u9fff）]$/.test(answer.replaced) ? "。" : ".");
    notes.appendChild(p);
  }
  // what the page says under an answer is in the question's language, as the answer is
  const words = inChinese(answer.question || "") ? NOTES_ZH : NOTES;
  if (ev.extractive) {
    const p = document.createElement("p");
    p.className = "extractive";
    p.textContent = words.extractive(words.reasons[ev.fallback_reason] || ev.fallback_reason);
    notes.appendChild(p);
  } else if (ev.grounding) {
    for (const s of ev.grounding.sentences) {
      if (s.supported) continue;
      const p = document.createElement("p");
      p.className = "unsupported";
      p.textContent = words.unsupported + s.text + (s.missing.length ? words.missing(s.missing) : "") + ((s.misplaced || []).length ? words.misplaced(s.misplaced) : "");
      notes.appendChild(p);
    }
  }
  if (notes.childNodes.length) answer.cites.appendChild(notes);
}

function inChinese(text) {
  // as shelfhand.knowledge.analysis.in_chinese: Chinese characters make a third of the
  // letters, not counting those of the names after the first word ("Lumen X1 Pro 多少钱？")
  const letters = text.replace(/[\s\d_\p{P}\p{S}]+/gu, "").length;
  const chinese = (text.match(/[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]/g) || []).length;
  if (!chinese) return false;
  if (chinese / letters >= 1 / 3) return true;
  // as shelfhand.knowledge.analysis.latin_names, their letters only
  const names = [...text.matchAll(/(?<![A-Za-z0-9])(?:[A-Z]|[A-Za-z]+(?=\d))[A-Za-z0-9-]*/g)];
  const named = names.filter((m) => m.index > 0).reduce((n, m) => n + m[0].replace(/[^A-Za-z]/g, "").length, 0);
  return named > 0 && chinese / (letters - named) >= 1 / 3;
}

const REASONS = {
  ungrounded: "the model's answer was not supported by the passages",
  refusal: "the model declined although the passages cover the question",
  declined: "the model declined; the documents hold nothing on the question",
  tool_failed: "the model declined after a tool called for the question failed",
  prompt_echo: "the model repeated its instructions instead of answering",
  posed_as_quoted: "the model passed its own words off as the documents' sentences",
  heading_echo: "the model answered with the passages' headings only",
  off_topic: "the model's answer was about something the question did not ask",
  unanswered: "the model's answer did not state the amount asked for",
  partial: "the model's answer gave one part of what the documents say on the question",
  other_language: "the model answered in another language than the question's",
  repeated_call: "the model kept repeating a failing tool call",
  max_iters: "the model did not finish within its steps",
  empty: "the model gave no answer",
  no_model: "no chat model is configured",
  budget_exceeded: "a budget ran out before the model could finish",
  model_error: "the chat model failed",
  model_timeout: "the chat model did not answer in time",
};

// as shelfhand.agent.answer_check.REASONS_ZH
const REASONS_ZH = {
  ungrounded: "文档不支持这个回答",
  refusal: "模型拒绝了回答，但文档涉及这个问题",
  declined: "模型拒绝了回答；文档中没有这方面的内容",
  tool_failed: "模型在为此调用的工具出错后拒绝了回答",
  prompt_echo: "模型复述了给它的指令",
  posed_as_quoted: "模型把自己的话当作文档原文",
  heading_echo: "模型只复述了段落标题",
  off_topic: "回答的不是所问的内容",
  unanswered: "回答没有给出所问的数量",
  partial: "回答只给出了文档所述的一部分",
  other_language: "回答所用的语言与问题不同",
  repeated_call: "模型反复发出失败的工具调用",
  max_iters: "模型没有在限定步数内完成",
  empty: "模型没有给出回答",
  no_model: "没有配置对话模型",
  model_error: "对话模型出错",
  model_timeout: "对话模型没有按时回答",
  budget_exceeded: "预算已用完",
};

const NOTES = {
  reasons: REASONS,
  extractive: (why) => `Sentences of the documents, not written by the model (${why}).`,
  unsupported: "Not supported by the passages: ",
  missing: (items) => ` (${items.join(", ")} not in them)`,
  misplaced: (items) => ` (${items.join(", ")}: another row's in their table)`,
};

const NOTES_ZH = {
  reasons: REASONS_ZH,
  extractive: (why) => `摘录式回答：文档的原句，并非模型所写（${why}）。`,
  unsupported: "无依据：",
  missing: (items) => `（段落中没有 ${items.join("、")}）`,
  misplaced: (items) => `（${items.join("、")} 在段落的表格中属于另一行）`,
};

function showPassage(c) {
  $("passage").hidden = false;
  $("passage-title").textContent = `[${c.index}] ${c.title || c.source}`;
  $("passage-where").textContent = citeLabel(c);
  $("passage-text").textContent = c.text;
}

function showApproval(answer, event) {
  const box = document.createElement("div");
  box.className = "approval";
  box.textContent = `${event.tool} needs your confirmation: ${JSON.stringify(event.arguments)} `;
  for (const [label, approved] of [["Approve", true], ["Reject", false]]) {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = label;
    b.onclick = async () => {
      box.querySelectorAll("button").forEach((x) => (x.disabled = true));
      try {
        await api("POST", `/v1/sessions/${state.sessionId}/approvals/${event.approval_id}`, { approved, reason: approved ? "" : "rejected in the web page" });
        box.append(approved ? " approved" : " rejected");
      } catch (err) { setStatus(err.message, true); }
    };
    box.appendChild(b);
  }
  answer.el.insertBefore(box, answer.body);
}

async function send(text) {
  if (state.busy || !text.trim()) return;
  if (!apiKey()) { setStatus("Enter an API key first.", true); return; }
  state.busy = true;
  $("send").disabled = true;
  let answer = null;
  try {
    const id = state.sessionId || (await newSession());
    addBubble("user").textContent = text;
    answer = newAnswer();
    answer.question = text;
    const steps = {};
    const res = await fetch(`/v1/sessions/${id}/messages`, {
      method: "POST",
      headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
      body: JSON.stringify({ content: text, stream: true }),
    });
    if (!res.ok) throw new Error(await errorText(res));
    setStatus("trace " + (res.headers.get("X-Trace-Id") || ""));
    await readEvents(res, (type, ev) => {
      if (type === "text_delta") { answer.text += ev.text; renderAnswer(answer); }
      // a subagent's tool events carry its id in `agent` (its call ids are its own)
      else if (type === "tool_started") steps[(ev.agent || "") + ev.call_id] = addStep(answer, `${ev.agent ? `[${ev.agent}] ` : ""}→ ${ev.name}(${ev.arguments})`);
      else if (type === "tool_finished") {
        const line = steps[(ev.agent || "") + ev.call_id] || addStep(answer, "");
        line.textContent += ` ← ${ev.is_error ? "error" : "ok"} ${Math.round(ev.duration_ms)} ms`;
        if (ev.failure) line.textContent += `: ${ev.failure}`;  // why, as people may read it
        if (ev.is_error) line.classList.add("failed");
      } else if (type === "citations") { answer.citations.push(...ev.citations); renderAnswer(answer); }
      else if (type === "approval_required") showApproval(answer, ev);
      else if (type === "subagent_started") addStep(answer, `⇢ ${ev.subagent} (depth ${ev.depth}): ${ev.task}`);
      else if (type === "subagent_finished") addStep(answer, `⇠ ${ev.subagent}: ${ev.is_error ? "failed" : ev.stop_reason}, ${Math.round(ev.duration_ms)} ms`, ev.is_error);
      else if (type === "human_needed") addStep(answer, `a person is needed: ${ev.reason}`, true);
      // the deltas were a draft the run dropped (a guess, searched for now): they go
      else if (type === "text_withdrawn") {
        answer.text = answer.text.endsWith(ev.text) ? answer.text.slice(0, answer.text.length - ev.text.length) : "";
        addStep(answer, ev.notice);
        renderAnswer(answer);
      }
      // the deltas were the model's answer: the check's answer takes their place
      else if (type === "answer_replaced") { answer.text = ev.output; answer.replaced = ev.notice; renderAnswer(answer); }
      else if (type === "final") {
        if (!answer.text) answer.text = ev.output;
        answer.final = ev;
        renderAnswer(answer);
        addTraceButton(answer, ev.trace_id, ev.usage);
      }
      else if (type === "error") showFailure(answer, `${ev.status}: ${ev.message}` + (ev.trace_id ? ` (trace ${ev.trace_id})` : ""));
      answer.el.scrollIntoView({ block: "end" });
    });
    await loadSessions();
showReadiness();
  } catch (err) {
    setStatus(err.message, true);
    if (answer) showFailure(answer, err.message);
  } finally {
    state.busy = false;
    $("send").disabled = false;
  }
}

// --- the trace of an answer: the tree of its steps, their times, the passages and scores ------
function addTraceButton(answer, traceId, usage) {
  if (!traceId) return;
  const b = document.createElement("button");
  b.type = "button";
  b.className = "trace-toggle";
  const tokens = usage ? ` · ${usage.input_tokens}/${usage.output_tokens} tokens, ${usage.model_calls} model calls` : "";
  b.textContent = "trace" + tokens;
  const box = document.createElement("ul");
  box.className = "trace";
  box.hidden = true;
  b.onclick = async () => {
    if (!box.hidden) { box.hidden = true; return; }
    try {
      renderTrace(box, await api("GET", `/v1/traces/${encodeURIComponent(traceId)}`));
      box.hidden = false;
    } catch (err) { setStatus(err.message, true); }
  };
  answer.el.append(b, box);
}

function renderTrace(box, trace) {
  box.textContent = "";
  const children = {};
  const ids = new Set(trace.spans.map((s) => s.span_id));
  for (const s of trace.spans) (children[ids.has(s.parent_id) ? s.parent_id : ""] ||= []).push(s);
  const start = Math.min(...trace.spans.map((s) => s.start_ns));
  const walk = (span, depth) => {
    const li = document.createElement("li");
    li.className = "span" + (span.status === "error" ? " failed" : "");
    li.style.paddingLeft = `${depth * 1.2}em`;
    const a = span.attributes;
    const at = ((span.start_ns - start) / 1e6).toFixed(1);
    let line = `${span.name} · ${span.duration_ms.toFixed(1)} ms (at ${at} ms)`;
    if (a["gen_ai.usage.input_tokens"] !== undefined) line += ` · tokens ${a["gen_ai.usage.input_tokens"]}/${a["gen_ai.usage.output_tokens"]}${a["shelfhand.usage.estimated"] ? " (estimated)" : ""}`;
    if (a["shelfhand.tool.outcome"]) line += ` · ${a["shelfhand.tool.decision"]}/${a["shelfhand.tool.outcome"]}`;
    if (a["error.type"]) line += ` · ${a["error.type"]}` + (a["shelfhand.chat.failure"] ? `: ${a["shelfhand.chat.failure"]}` : "");
    if (a["shelfhand.answer.fallback_reason"]) line += ` · fallback ${a["shelfhand.answer.fallback_reason"]}`;
    if (a["shelfhand.answer.extractive"]) line += " · extractive";
    if (a["gen_ai.retrieval.query.text"]) line += ` · “${a["gen_ai.retrieval.query.text"]}” (${a["shelfhand.retrieval.mode"]})`;
    if (a["shelfhand.retrieval.degraded_reason"]) line += ` · degraded: ${a["shelfhand.retrieval.degraded_reason"]}`;
    if (a["shelfhand.retrieval.rerank_reason"]) line += ` · ${a["shelfhand.retrieval.rerank_reason"]}`;
    li.textContent = line;
    const docs = a["gen_ai.retrieval.documents"] || [];
    if (docs.length) {
      const hits = document.createElement("ol");
      hits.className = "hits";
      for (const d of docs) {
        const h = document.createElement("li");
        h.textContent = `${d.score.toFixed(3)} ${d.source} ${d.title || ""}`;
        hits.appendChild(h);
      }
      li.appendChild(hits);
    }
    box.appendChild(li);
    for (const c of children[span.span_id] || []) walk(c, depth + 1);
  };
  for (const root of children[""] || []) walk(root, 0);
}

// A failed turn says so in its own bubble (never an empty bubble).
function showFailure(answer, message) {
  answer.el.classList.add("error");
  answer.text += (answer.text ? "\n" : "") + message;
  renderAnswer(answer);
}

// --- ingest --------------------------------------------------------------------------------
async function upload(files) {
  if (!files.length) return;
  if (!apiKey()) { setStatus("Enter an API key first.", true); return; }
  const log = $("ingest-log");
  const line = document.createElement("li");
  line.textContent = `uploading ${files.length} file(s)…`;
  log.prepend(line);
  const form = new FormData();
  for (const f of files) form.append("files", f, f.name);
  try {
    const res = await fetch("/v1/knowledge/files?stream=true", { method: "POST", headers: headers(), body: form });
    if (!res.ok) throw new Error(await errorText(res));
    await readEvents(res, (type, ev) => {
      if (type === "ingest_progress" && ev.source) line.textContent = `${ev.done}/${ev.total} ${ev.kind} ${ev.source}`;
      else if (type === "ingest_done") line.textContent = `done: ${ev.added.length} added, ${ev.updated.length} updated, ${ev.unchanged.length} unchanged, ${ev.chunks} chunks`;
      else if (type === "error") { line.textContent = ev.message; line.className = "error"; }
    });
  } catch (err) {
    line.textContent = err.message;
    line.className = "error";
  }
}

// --- readiness: say when no chat model is configured ---------------------------------------
async function showReadiness() {
  try {
    const res = await fetch("/readyz");
    const body = await res.json();
    const notice = $("notice");
    if (String(body.model || "").startsWith("not configured")) {
      notice.textContent = "No chat model is configured: answers are the cited passages that "
        + "match your question. Set SHELFHAND_MODEL (and OPENAI_BASE_URL) and restart the "
        + "server to get written answers.";
      notice.hidden = false;
    } else if (!res.ok) {
      notice.textContent = `The service is not ready: store ${body.store}; model ${body.model}`;
      notice.classList.add("error");
      notice.hidden = false;
    }
  } catch (_) { /* the chat itself reports what fails */ }
}

// --- wiring --------------------------------------------------------------------------------
$("api-key").value = localStorage.getItem("shelfhand.apiKey") || "";
$("api-key").addEventListener("change", () => {
  localStorage.setItem("shelfhand.apiKey", apiKey());
  state.sessionId = null;
  $("messages").textContent = "";
  loadSessions();
showReadiness();
});
$("new-session").onclick = () => newSession().catch((e) => setStatus(e.message, true));
$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("message-input").value;
  $("message-input").value = "";
  send(text);
});
$("message-input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); $("composer").requestSubmit(); }
});
$("passage-close").onclick = () => { $("passage").hidden = true; };
const zone = $("dropzone");
zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
zone.addEventListener("dragleave", () => zone.classList.remove("over"));
zone.addEventListener("drop", (e) => { e.preventDefault(); zone.classList.remove("over"); upload([...e.dataTransfer.files]); });
$("file-input").addEventListener("change", (e) => { upload([...e.target.files]); e.target.value = ""; });
loadSessions();
showReadiness();
