"""shelfhand side of ``bench/retrieval.py embedded``: the embedded store at 100k and 1M chunks.

Not run directly. Every chunk goes through the real store path (``upsert_document`` into
SQLite with its vector, the outbox, ``sync`` every 1,000 documents into the tantivy keyword
index and the faiss vector space, exact until 20k vectors, then HNSW grown by adds), and every
search through ``HybridRetriever.search_timed`` with its tenant/role/doc-type filters inside the
tantivy query and the faiss selector. Nothing stands in for the store.

Corpus (seeded, deterministic, regenerated on demand rather than held in memory):

* 10 chunks per document; 80% English documents, each chunk 3-6 sentences drawn from the
  SciFact abstracts with a SciFact title, 20% Chinese, 2-5 sentences of CMRC 2018 passages
  with a CMRC title (``/work/shared/data``), so the analysis is the real one (stemming, jieba);
* per document: tenant ``default`` 70% / ``acme`` 20% / ``globex`` 10%; permission tags none
  50%, ``sales`` 20%, ``hr`` 15%, ``finance`` 10%, ``sales``+``finance`` 5%; doc type
  ``text``/``pdf``/``md``/``html`` uniformly;
* vectors: 384-d, clustered (10,000 random centres: 100 chunks per centre at 1M, 10 at 100k;
  chunk = centre + noise, unit length), the recipe of ``bench/retrieval_latency.py``;
* every per-document draw is seeded by the document number, so the 100k corpus is the first
  tenth of the 1M one and a 1M workspace is grown from a copy of the 100k one;
* queries: 150 SciFact and 150 CMRC 2018 questions (seeded sample); each query vector is a
  random ``default``-tenant chunk's vector plus noise, so it has real neighbours. The text and
  the vector of a query are unrelated: the bench measures latency, not quality.

Callers (tenant ``default``): admin (reads the whole tenant, 70% of the store), anonymous
(untagged: 35%), role ``sales`` (untagged or sales-tagged: 52.5%), and ``sales`` asking for
``doc_type=pdf`` only (13%).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import resource
import statistics
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tantivy

from shelfhand.core.context import UserContext
from shelfhand.knowledge.analysis import tokenize_query
from shelfhand.knowledge.retrieval.hybrid import SearchMode
from shelfhand.knowledge.scoring import ranking_terms
from shelfhand.knowledge.stack import EmbeddedKnowledge, open_embedded_store
from shelfhand.knowledge.stores.faiss import adaptive_ef
from shelfhand.knowledge.types import Chunk, Document, Scope, Section

logger = logging.getLogger("bench.retrieval")

DATA = Path(os.environ.get("SHELFHAND_BENCH_DATA", "/work/shared/data"))
SPACE = "default"
DIM = 384
PER_DOC = 10
TENANTS = ("default", "acme", "globex")
TENANT_P = (0.7, 0.2, 0.1)
TAGSETS: tuple[tuple[str, ...], ...] = ((), ("sales",), ("hr",), ("finance",), ("sales", "finance"))
TAGSET_P = (0.5, 0.2, 0.15, 0.1, 0.05)
DOC_TYPES = ("text", "pdf", "md", "html")
ZH_SHARE = 0.2
CENTRES = 10_000
CALLERS: dict[str, tuple[UserContext, dict[str, Any] | None]] = {
    "admin": (UserContext(tenant_id="default", user_id="bench", roles=["admin"]), None),
    "anonymous": (UserContext(tenant_id="default", user_id="bench"), None),
    "sales": (UserContext(tenant_id="default", user_id="bench", roles=["sales"]), None),
    "sales, pdf only": (
        UserContext(tenant_id="default", user_id="bench", roles=["sales"]),
        {"doc_type": "pdf"},
    ),
}


def _sentences(path: Path, splitter: str) -> tuple[list[str], list[str]]:
    titles: list[str] = []
    sentences: list[str] = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if d.get("title"):
                titles.append(d["title"].strip())
            for s in re.split(splitter, d["text"]):
                if len(s.strip()) >= 8:
                    sentences.append(s.strip())
    return titles, sentences


@dataclass(slots=True)
class MixedCorpus:
    """The corpus of the module docstring: ``n`` chunks, documents of ``PER_DOC`` chunks."""

    n: int
    seed: int
    tenant: np.ndarray
    tagset: np.ndarray
    doc_type: np.ndarray
    zh: np.ndarray
    centres: np.ndarray
    en: tuple[list[str], list[str]]
    cn: tuple[list[str], list[str]]
    queries: list[str] = field(default_factory=list)
    qvecs: np.ndarray = field(default_factory=lambda: np.zeros((0, DIM), dtype=np.float32))

    @property
    def n_docs(self) -> int:
        return self.n // PER_DOC

    def fingerprint(self) -> dict[str, Any]:
        """Identifies the corpus independently of its size: a smaller one is a prefix."""
        head = "\n".join(c.text for c in self.chunks(0)[0])
        return {"seed": self.seed, "head": hashlib.sha256(head.encode()).hexdigest()}

    def document(self, d: int) -> Document:
        return self.chunks(d)[1]

    def chunks(self, d: int) -> tuple[list[Chunk], Document]:
        rng = np.random.default_rng([self.seed, d])
        titles, sents = self.cn if self.zh[d] else self.en
        title = titles[int(rng.integers(len(titles)))]
        tags = TAGSETS[self.tagset[d]]
        tenant = TENANTS[self.tenant[d]]
        doc_type = DOC_TYPES[self.doc_type[d]]
        joiner, lo, hi = ("。", 2, 6) if self.zh[d] else (" ", 3, 7)
        texts = [
            joiner.join(
                sents[int(i)] for i in rng.integers(0, len(sents), int(rng.integers(lo, hi)))
            )
            for _ in range(PER_DOC)
        ]
        doc_id = f"doc{d}"
        chunks = [
            Chunk(
                chunk_id=f"{doc_id}::{j}",
                doc_id=doc_id,
                chunk_index=j,
                text=text,
                title=title,
                section_path=(),
                page=None,
                source=doc_id,
                start=0,
                end=len(text),
                content_hash=hashlib.sha256(text.encode()).hexdigest(),
                doc_type=doc_type,
                permission_tags=tags,
                tenant_id=tenant,
            )
            for j, text in enumerate(texts)
        ]
        doc = Document(
            doc_id=doc_id,
            source=doc_id,
            title=title,
            doc_type=doc_type,
            sections=(Section(text="\n".join(texts)),),
            content_hash=hashlib.sha256("\n".join(texts).encode()).hexdigest(),
            permission_tags=tags,
            tenant_id=tenant,
        )
        return chunks, doc

    def vectors(self, d: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, d, 1])
        x = self.centres[rng.integers(0, len(self.centres), PER_DOC)]
        x = x + 0.5 * rng.standard_normal((PER_DOC, DIM)).astype(np.float32)
        out: np.ndarray = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
        return out

    def visible(self, caller: str) -> np.ndarray:
        """Per document: may the caller read it (the rule written out plainly)."""
        user, filters = CALLERS[caller]
        ok = np.asarray(self.tenant == TENANTS.index(user.tenant_id))
        if not {"admin", "system"} & set(user.roles):
            readable = [
                i for i, tags in enumerate(TAGSETS) if not tags or set(tags) & set(user.roles)
            ]
            ok = ok & np.isin(self.tagset, readable)
        if filters and "doc_type" in filters:
            ok = ok & (self.doc_type == DOC_TYPES.index(filters["doc_type"]))
        return ok


def workspace_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of a bench that reads a workspace built by ``retrieval.py embedded``."""
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--ws-dir", type=Path, default=Path("/tmp/shelfhand-bench-embedded"))
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--callers", nargs="+", default=["admin", "anonymous", "sales"])


def _draw(seed: int, what: int, n: int, p: tuple[float, ...]) -> np.ndarray:
    """``n`` draws from ``p``; a prefix of a longer series (one generator per attribute)."""
    u = np.random.default_rng([seed, 1000 + what]).random(n)
    out: np.ndarray = np.searchsorted(np.cumsum(p), u, side="right").astype(np.int8)
    return np.minimum(out, len(p) - 1)


def make_mixed_corpus(n: int, *, seed: int = 0, n_queries: int = 300) -> MixedCorpus:
    rng = np.random.default_rng(seed)
    n_docs = n // PER_DOC
    corpus = MixedCorpus(
        n=n_docs * PER_DOC,
        seed=seed,
        tenant=_draw(seed, 0, n_docs, TENANT_P),
        tagset=_draw(seed, 1, n_docs, TAGSET_P),
        doc_type=_draw(seed, 2, n_docs, (0.25,) * 4),
        zh=_draw(seed, 3, n_docs, (1 - ZH_SHARE, ZH_SHARE)) == 1,
        centres=rng.standard_normal((CENTRES, DIM)).astype(np.float32),
        en=_sentences(DATA / "scifact" / "corpus.jsonl", r"(?<=[.!?])\s+"),
        cn=_sentences(DATA / "cmrc2018" / "corpus.jsonl", r"[。！？]"),
    )
    en_q = [json.loads(x)["text"] for x in (DATA / "scifact" / "queries.jsonl").open()]
    zh_q = [json.loads(x)["text"] for x in (DATA / "cmrc2018" / "queries.jsonl").open()]
    half = n_queries // 2
    corpus.queries = [en_q[int(i)] for i in rng.choice(len(en_q), half, replace=False)] + [
        zh_q[int(i)] for i in rng.choice(len(zh_q), n_queries - half, replace=False)
    ]
    default_docs = np.flatnonzero(corpus.tenant == 0)
    qv = []
    for d in rng.choice(default_docs, n_queries):
        v = corpus.vectors(int(d))[int(rng.integers(PER_DOC))]
        v = v + 0.05 * rng.standard_normal(DIM).astype(np.float32)
        qv.append(v / np.linalg.norm(v))
    corpus.qvecs = np.asarray(qv, dtype=np.float32)
    return corpus


# -- build -------------------------------------------------------------------------------------


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _du_mb(path: Path) -> float:
    out = subprocess.run(["du", "-sm", str(path)], capture_output=True, text=True, check=False)
    return float(out.stdout.split()[0]) if out.stdout else float("nan")


def build_workspace(
    workspace: Path, corpus: MixedCorpus, *, seed_from: Path | None = None
) -> tuple[EmbeddedKnowledge, dict[str, Any]]:
    """Store every document through ``upsert_document`` (chunks + vectors in one transaction),
    syncing the indexes every 1,000 documents as a bulk ingest does.

    ``workspace`` is reused when it holds this corpus, and continued when it holds a prefix of
    it (an interrupted build, or ``seed_from``: a finished smaller workspace of the same corpus
    is copied first). Build seconds add up over the continued parts.
    """
    meta_path = workspace / "bench-corpus.json"
    if not meta_path.exists() and seed_from is not None and (seed_from / meta_path.name).exists():
        seed_meta = json.loads((seed_from / meta_path.name).read_text(encoding="utf-8"))
        if seed_meta.get("corpus") == corpus.fingerprint() and seed_meta["docs"] < corpus.n_docs:
            logger.info("copying %s to %s to grow it", seed_from, workspace)
            subprocess.run(["cp", "-r", str(seed_from), str(workspace)], check=True)
    meta: dict[str, Any] = {"corpus": corpus.fingerprint(), "docs": 0, "build_s": 0.0, "cpu_s": 0.0}
    if meta_path.exists():
        found = json.loads(meta_path.read_text(encoding="utf-8"))
        if found.get("corpus") == corpus.fingerprint() and found["docs"] <= corpus.n_docs:
            meta = found
    t0 = time.perf_counter()
    workspace.mkdir(parents=True, exist_ok=True)
    kb = open_embedded_store(workspace, None)
    open_s = time.perf_counter() - t0
    if meta["docs"] == corpus.n_docs:
        logger.info("reusing the %d-chunk store in %s", kb.store.count_chunks(), workspace)
        info = meta.get("info")
        if not info or info.get("chunks") != corpus.n:  # a build stopped at a checkpoint
            info = {  # (its RSS peak is in the build's log)
                "chunks": kb.store.count_chunks(),
                "build_s": meta["build_s"],
                "build_cpu_s": meta["cpu_s"],
                "rss_peak_mb": float("nan"),
                "disk_mb": _du_mb(workspace),
                "stopped_at_checkpoint": True,
            }
        return kb, {**info, "reused": True, "open_s": open_s}
    start = meta["docs"]
    meta.pop("info", None)  # a copied smaller workspace's figures
    logger.info("building %s from document %d to %d", workspace, start, corpus.n_docs)
    t0, c0 = time.perf_counter(), time.process_time()

    def save(done: int) -> None:
        meta.update(
            docs=done,
            build_s=meta["build_s"] + time.perf_counter() - t0,
            cpu_s=meta["cpu_s"] + time.process_time() - c0,
        )
        meta_path.write_text(json.dumps(meta), encoding="utf-8")

    with kb.store.deferred_sync():
        for d in range(start, corpus.n_docs):
            chunks, doc = corpus.chunks(d)
            vectors = {SPACE: (list(range(PER_DOC)), corpus.vectors(d))}
            kb.store.upsert_document(doc, chunks, vectors)
            if (d + 1) % 1000 == 0:
                kb.store.sync()
            if (d + 1) % 10_000 == 0:
                kb.store.sync(durable=True)
                save(d + 1)
                t0, c0 = time.perf_counter(), time.process_time()
                logger.info(
                    "%d chunks stored (%.0f s in all, RSS peak %.0f MB, load %.1f)",
                    (d + 1) * PER_DOC,
                    meta["build_s"],
                    _rss_mb(),
                    os.getloadavg()[0],
                )
    save(corpus.n_docs)
    meta["info"] = {
        "chunks": kb.store.count_chunks(),
        "build_s": meta["build_s"],
        "build_cpu_s": meta["cpu_s"],
        "rss_peak_mb": _rss_mb(),
        "disk_mb": _du_mb(workspace),
        "grown_from": str(seed_from) if start else None,
    }
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    return kb, {**meta["info"], "reused": False, "open_s": open_s}


# -- measure -----------------------------------------------------------------------------------


def _pcts(values: list[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=np.float64)
    return {"p50_ms": float(np.percentile(arr, 50)), "p95_ms": float(np.percentile(arr, 95))}


def _exact_topk(corpus: MixedCorpus, qvecs: np.ndarray, k: int) -> dict[str, list[set[str]]]:
    """Per caller, the exact top-``k`` chunk ids of each query among the chunks it may read,
    from the regenerated vectors (one pass over the corpus for every caller)."""
    visible = {name: corpus.visible(name) for name in CALLERS}
    best: dict[str, tuple[np.ndarray, np.ndarray]] = {
        name: (
            np.full((len(qvecs), 0), -np.inf, dtype=np.float32),
            np.zeros((len(qvecs), 0), dtype=np.int64),
        )
        for name in CALLERS
    }
    for a in range(0, corpus.n_docs, 5000):
        docs = np.arange(a, min(corpus.n_docs, a + 5000))
        mat = np.concatenate([corpus.vectors(int(d)) for d in docs])
        ids = (docs[:, None] * PER_DOC + np.arange(PER_DOC)).reshape(-1)
        scores = qvecs @ mat.T
        for name, (best_s, best_i) in best.items():
            keep_docs = np.repeat(visible[name][docs], PER_DOC)
            s_all = np.concatenate([best_s, scores[:, keep_docs]], axis=1)
            i_all = np.concatenate(
                [best_i, np.broadcast_to(ids[keep_docs], (len(qvecs), int(keep_docs.sum())))],
                axis=1,
            )
            top = np.argsort(-s_all, axis=1)[:, :k]
            best[name] = (np.take_along_axis(s_all, top, 1), np.take_along_axis(i_all, top, 1))
    return {
        name: [{f"doc{i // PER_DOC}::{i % PER_DOC}" for i in row.tolist()} for row in best_i]
        for name, (_, best_i) in best.items()
    }


def measure(
    kb: EmbeddedKnowledge, corpus: MixedCorpus, *, k: int = 10, recall_queries: int = 50
) -> dict[str, Any]:
    """Per caller: keyword / vector / hybrid wall and CPU p50/p95 through ``search_timed``
    (query vectors given), the bare indexes on the same queries, the first query's ACL cost
    and the filtered vector recall@k against exact search."""
    retriever = kb.retriever
    fetch = k * retriever.options.candidates_factor
    out: dict[str, Any] = {"k": k, "fetch_per_side": fetch, "queries": len(corpus.queries)}
    out["load_before"] = "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    qvecs = {i: {SPACE: v} for i, v in enumerate(corpus.qvecs)}
    kw = kb.keyword
    space = kb.vectors.space(SPACE)
    assert space is not None
    out["vector_mode"] = space.mode
    out["keyword_segments"] = int(kw._index.searcher().num_segments)

    # bare indexes: the query terms as an unfiltered union (every term, and the terms the
    # search ranks by: the common-terms rule), faiss without a selector
    schema_should = kw._should
    searcher = kw._index.searcher()
    tokens = [list(dict.fromkeys(t for t in tokenize_query(q) if t)) for q in corpus.queries]
    n_docs = int(searcher.num_docs)
    for label, rule in (("", False), (", rarer terms", True)):
        bare_kw: list[float] = []
        bare_kw_cpu: list[float] = []
        for toks in tokens:
            if rule:
                freqs = [int(searcher.doc_freq("body", t)) for t in toks]
                toks = ranking_terms(toks, freqs, n_docs, kw.common_share)
            if not toks:
                continue
            query = tantivy.Query.boolean_query(
                schema_should("body", toks) + schema_should("head", toks)
            )
            t, c = time.perf_counter(), time.process_time()
            hits = searcher.search(query, fetch, count=False).hits
            searcher.fast_field_values("rowid", [a for _, a in hits])
            bare_kw.append((time.perf_counter() - t) * 1000)
            bare_kw_cpu.append((time.process_time() - c) * 1000)
        out[f"bare tantivy (no filter{label})"] = {
            **_pcts(bare_kw),
            "cpu_p50_ms": statistics.median(bare_kw_cpu),
        }
    if space.hnsw is not None:
        import faiss  # type: ignore[import-untyped]

        ef = adaptive_ef(space.ef_search, fetch, space.n, space.n)
        params = faiss.SearchParametersHNSW(efSearch=ef)
        lat, cpu = [], []
        for v in corpus.qvecs:
            t, c = time.perf_counter(), time.process_time()
            space.hnsw.search(v.reshape(1, -1), fetch, params=params)
            lat.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
        out["bare faiss HNSW (no filter)"] = {
            **_pcts(lat),
            "cpu_p50_ms": statistics.median(cpu),
            "ef": ef,
        }

    truths = _exact_topk(corpus, corpus.qvecs[:recall_queries], k)
    for name, (user, filters) in CALLERS.items():
        # first query: builds the caller's ACL selection (SQL + bitmap), cached afterwards
        t = time.perf_counter()
        kb.vectors.search(SPACE, corpus.qvecs[0], fetch, scope=Scope.of(user, filters))
        first_ms = (time.perf_counter() - t) * 1000
        modes: tuple[SearchMode, ...] = ("keyword", "vector", "hybrid")
        wall: dict[str, list[float]] = {m: [] for m in modes}
        cpu_ms: dict[str, list[float]] = {m: [] for m in modes}
        stages: dict[str, dict[str, list[float]]] = {
            m: {"keyword_ms": [], "vector_ms": [], "fuse_ms": [], "exact_ms": []} for m in modes
        }
        kw.paths.clear()
        for i, q in enumerate(corpus.queries):
            for mode in modes[i % 3 :] + modes[: i % 3]:
                c = time.process_time()
                _, timing = retriever.search_timed(
                    q, k=k, user=user, mode=mode, filters=filters, query_vectors=qvecs[i]
                )
                cpu_ms[mode].append((time.process_time() - c) * 1000)
                wall[mode].append(timing.total_ms)
                for stage, values in stages[mode].items():
                    values.append(getattr(timing, stage))
        row: dict[str, Any] = {
            "readable_share": float(corpus.visible(name).mean()),
            "first_vector_query_ms": first_ms,
            "keyword_paths": dict(kw.paths),
        }
        for mode in modes:
            row[mode] = {
                **_pcts(wall[mode]),
                "cpu_p50_ms": statistics.median(cpu_ms[mode]),
                **{f"{st}_p50": statistics.median(v) for st, v in stages[mode].items()},
            }
        found = 0
        for v, want in zip(corpus.qvecs[:recall_queries], truths[name], strict=True):
            got = kb.vectors.search(SPACE, v, k, scope=Scope.of(user, filters))
            chunks = kb.store.chunk_map([r for r, _ in got])
            found += len(want & {c.chunk_id for c in chunks.values()})
        row["vector_recall@k_vs_exact"] = found / (k * recall_queries)
        out[name] = row
        logger.info("%s: %s", name, json.dumps(row))
    out["load_after"] = "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    return out


def iter_rows(res: dict[str, Any]) -> Iterator[list[Any]]:
    for name in CALLERS:
        row = res[name]
        yield [
            f"{name} ({100 * row['readable_share']:.0f}%)",
            f"{row['keyword']['p50_ms']:.2f} / {row['keyword']['p95_ms']:.2f}",
            f"{row['vector']['p50_ms']:.2f} / {row['vector']['p95_ms']:.2f}",
            f"**{row['hybrid']['p50_ms']:.2f}** / {row['hybrid']['p95_ms']:.2f}",
            f"{row['keyword']['cpu_p50_ms']:.2f} / {row['vector']['cpu_p50_ms']:.2f}"
            f" / {row['hybrid']['cpu_p50_ms']:.2f}",
            f"{row['hybrid']['keyword_ms_p50']:.2f} / {row['hybrid']['vector_ms_p50']:.2f}"
            f" / {row['hybrid']['fuse_ms_p50'] + row['hybrid']['exact_ms_p50']:.2f}",
            f"{row['vector_recall@k_vs_exact']:.3f}",
            f"{row['first_vector_query_ms']:.0f}",
        ]
    for bare in ("bare tantivy (no filter)", "bare tantivy (no filter, rarer terms)"):
        if bare not in res:
            continue
        r = res[bare]
        cell = f"{r['p50_ms']:.2f} / {r['p95_ms']:.2f}"
        yield [bare, cell, "", "", f"{r['cpu_p50_ms']:.2f} / – / –", "", "", ""]
    if "bare faiss HNSW (no filter)" in res:
        r = res["bare faiss HNSW (no filter)"]
        cell = f"{r['p50_ms']:.2f} / {r['p95_ms']:.2f}"
        yield [
            f"bare faiss HNSW (no filter, ef {r['ef']})",
            "",
            cell,
            "",
            f"– / {r['cpu_p50_ms']:.2f} / –",
            "",
            "",
            "",
        ]
