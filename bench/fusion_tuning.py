"""Offline fusion tuning (issue 13 pt 2): dump candidate lists once, then score fusion variants.

Re-running ``shelfhand eval`` per idea costs minutes (query embedding dominates). This script
runs every judged query of a BEIR dataset through the workspace's keyword index and every
vector space once, stores the candidate lists (rowid, raw score) with the chunk → document
mapping, and then replays fusion variants in pure Python/numpy against the qrels, using the
same functions the retriever uses (:mod:`shelfhand.knowledge.retrieval.fusion`).

::

    # 1. dump (workspace already ingested by `shelfhand eval --beir ... -w WS`)
    python bench/fusion_tuning.py dump --beir /work/shared/data/scifact -w /tmp/ws \\
        --out /tmp/scifact.pkl
    # 2. compare fusion variants (seconds)
    python bench/fusion_tuning.py tune /tmp/scifact.pkl /tmp/cmrc.pkl

Metrics are those of ``shelfhand eval`` (chunks mapped to doc ids, first occurrence kept).
"""

from __future__ import annotations

import argparse
import pickle
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

FETCH = 100
K = 30  # chunks per query, as `shelfhand eval` asks


def dump(beir: Path, workspace: Path, out: Path, limit: int | None = None) -> None:
    from shelfhand.app import App
    from shelfhand.core.context import ANONYMOUS
    from shelfhand.evals.retrieval import load_beir
    from shelfhand.knowledge import fusion
    from shelfhand.knowledge.analysis import tokenize_query
    from shelfhand.knowledge.types import Scope

    ds = load_beir(beir)
    app = App.from_settings(workspace)
    kb = app.open_knowledge()
    stack = kb._stack
    retriever = stack.retriever
    scope = Scope.of(ANONYMOUS)
    rows: list[dict[str, Any]] = []
    for n, (qid, query) in enumerate(ds.queries.items()):
        if qid not in ds.qrels:
            continue
        if limit is not None and len(rows) >= limit:
            break
        keyword = stack.keyword.search(tokenize_query(query), FETCH, scope=scope)
        embedded = retriever._embed(query)[0] or {}
        home = retriever.router.space_for(query) if retriever.router else None
        vectors = {
            space: stack.vectors.search(space, qvec, FETCH, scope=scope)
            for space, qvec in embedded.items()
        }
        # exact cosines of the keyword candidates (the vector top-N misses some of them)
        kw_cos: dict[str, dict[int, float]] = {}
        stored = stack.store.vectors_by_rowids([r for r, _ in keyword])
        for space, (ids, matrix) in stored.items():
            if space in embedded:
                sims = matrix @ embedded[space]
                kw_cos[space] = dict(zip(ids.tolist(), sims.tolist(), strict=True))
        num_docs, freqs = stack.keyword.doc_freqs(tokenize_query(query))
        rows.append(
            {
                "kw_cos": kw_cos,
                "idf_sum": sum(fusion.bm25_idf(df, num_docs) for df in freqs),
                "qid": qid,
                "query": query,
                "keyword": keyword,
                "vectors": vectors,
                "home": home,
                "qrels": dict(ds.qrels[qid]),
            }
        )
        if n % 50 == 0:
            print(f"{n}/{len(ds.queries)}", file=sys.stderr, flush=True)
    ids = {r for row in rows for r, _ in row["keyword"]}
    ids |= {r for row in rows for found in row["vectors"].values() for r, _ in found}
    chunks = stack.store.chunk_map(sorted(ids))
    doc_of = {rowid: c.doc_id for rowid, c in chunks.items()}
    hash_of = {rowid: c.content_hash for rowid, c in chunks.items()}
    kb.close()
    with out.open("wb") as handle:
        pickle.dump({"rows": rows, "doc_of": doc_of, "hash_of": hash_of}, handle)
    print(f"wrote {len(rows)} queries to {out}", file=sys.stderr)


Fuser = Callable[[dict[str, Any]], list[int]]


def score(data: dict[str, Any], fuse: Fuser) -> dict[str, float]:
    from shelfhand.evals.retrieval import evaluate

    doc_of = data["doc_of"]
    run: dict[str, list[str]] = {}
    qrels: dict[str, dict[str, int]] = {}
    for row in data["rows"]:
        ranked = fuse(row)[:K]
        run[row["qid"]] = [doc_of[r] for r in ranked if r in doc_of]
        qrels[row["qid"]] = row["qrels"]
    s = evaluate(run, qrels, k=10, recall_ks=(5,))
    return {k: round(v, 4) for k, v in s.items() if k != "n_queries"}


def _lists(row: dict[str, Any], fetch: int) -> tuple[list[Any], list[list[Any]], list[float]]:
    vecs, weights = [], []
    for space, found in row["vectors"].items():
        if found:
            vecs.append(found[:fetch])
            weights.append(1.0 if space == row["home"] else 0.5)
    return row["keyword"][:fetch], vecs, weights


_CJK = re.compile("[\u4e00-\u9fff\u3400-\u4dbf\uf900-\ufaff]")
_LETTERS = re.compile(r"[^\W\d_]")
_CODE = re.compile(r"(?<![\w])(?=[\w./:#-]*\d)[A-Za-z0-9]+(?:[-_./:#][A-Za-z0-9]+)+(?![\w])")


def _alpha(
    query: str, default: float = 0.4, chinese: float = 0.4, identifier: float = 0.4
) -> float:
    """Keyword weight per query type (tried; the shipped fusion uses one weight)."""
    if _CODE.search(query):
        return identifier
    letters = len(_LETTERS.findall(query))
    if letters and len(_CJK.findall(query)) / letters >= 0.2:
        return chinese
    return default


def variants() -> dict[str, Fuser]:
    from shelfhand.knowledge import fusion

    out: dict[str, Fuser] = {}

    def keyword_only(row: dict[str, Any]) -> list[int]:
        return [r for r, _ in row["keyword"]]

    def home_vector(row: dict[str, Any]) -> list[int]:
        return [r for r, _ in row["vectors"].get(row["home"], [])]

    out["keyword"] = keyword_only
    out["vector(home)"] = home_vector

    def rrf_old(row: dict[str, Any], fetch: int = 90) -> list[int]:
        kw, vecs, w = _lists(row, fetch)
        lists = [x for x in [kw, *vecs] if x]
        ws = ([1.0] if kw else []) + w
        return [r for r, _ in fusion.rrf([[r for r, _ in x] for x in lists], k=60, weights=ws)]

    out["rrf (old, 90)"] = rrf_old
    out["rrf 100"] = lambda row: rrf_old(row, 100)

    def convex(
        row: dict[str, Any], fetch: int = FETCH, fill: bool = True, **alphas: float
    ) -> list[int]:
        kw, vecs, w = _lists(row, fetch)
        maps = []
        for (space, _), found in zip(
            [(sp, f) for sp, f in row["vectors"].items() if f], vecs, strict=True
        ):
            cos = dict(found)
            if fill:
                for r, c in row["kw_cos"].get(space, {}).items():
                    if any(r == k for k, _ in kw):
                        cos.setdefault(r, c)
            maps.append(cos)
        alpha = _alpha(row["query"], **alphas)
        ranked = fusion.convex_fusion(kw, list(zip(maps, w, strict=True)), alpha)
        return [r for r, _ in ranked]

    out["convex (shipped)"] = convex
    out["convex, no exact-cosine fill"] = lambda row: convex(row, fill=False)
    out["convex, 30 candidates"] = lambda row: convex(row, fetch=30)
    out["convex, codes alpha 0.7"] = lambda row: convex(row, identifier=0.7)
    out["convex, Chinese alpha 0.6"] = lambda row: convex(row, chinese=0.6)
    for a in (0.2, 0.3, 0.5, 0.6, 0.7):
        out[f"convex, alpha {a} everywhere"] = lambda row, a=a: convex(
            row, default=a, chinese=a, identifier=a
        )
    return out


def relevances(row: dict[str, Any]) -> dict[int, float]:
    """Each candidate's relevance, as the retriever computes it."""
    from shelfhand.knowledge import fusion

    kw = {r: fusion.keyword_evidence(s, row["idf_sum"]) for r, s in row["keyword"]}
    cos: dict[int, float] = {}
    for space, found in row["vectors"].items():
        w = 1.0 if space == row["home"] else 0.5
        for r, c in [*found, *row["kw_cos"].get(space, {}).items()]:
            cos[r] = max(cos.get(r, 0.0), w * c)
    return {r: fusion.relevance(cos.get(r), kw.get(r)) for r in kw.keys() | cos.keys()}


def threshold_report(data: dict[str, Any], fuse: Fuser, taus: Sequence[float]) -> str:
    """Share of queries whose first relevant hit (in the top 10) a cut at each tau drops, and
    nDCG@10 with the cut applied."""
    doc_of = data["doc_of"]
    out = []
    for tau in taus:
        lost = 0
        with_rel = 0

        def cut(row: dict[str, Any], tau: float = tau) -> list[int]:
            rel = relevances(row)
            return [r for r in fuse(row) if rel.get(r, 0.0) >= tau]

        for row in data["rows"]:
            ranked = fuse(row)[:K]
            docs = [doc_of.get(r) for r in ranked]
            first = next((i for i, d in enumerate(docs[:10]) if row["qrels"].get(d or "", 0)), None)
            if first is None:
                continue
            with_rel += 1
            if relevances(row).get(ranked[first], 0.0) < tau:
                lost += 1
        s = score(data, cut)
        out.append(f"tau {tau}: first relevant cut {lost}/{with_rel}, nDCG@10 {s['nDCG@10']:.4f}")
    return "; ".join(out)


def tune(paths: Sequence[Path]) -> None:
    datasets = {p.stem: pickle.loads(p.read_bytes()) for p in paths}
    for name, fuse in variants().items():
        parts = []
        for ds_name, data in datasets.items():
            s = score(data, fuse)
            parts.append(
                f"{ds_name}: nDCG@10 {s['nDCG@10']:.4f} R@5 {s['Recall@5']:.4f} "
                f"R@10 {s['Recall@10']:.4f} MRR {s['MRR@10']:.4f}"
            )
        print(f"{name:32s} " + " | ".join(parts))
    shipped = variants()["convex (shipped)"]
    for ds_name, data in datasets.items():
        print(ds_name, threshold_report(data, shipped, (0.2, 0.25, 0.3)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--beir", type=Path, required=True)
    d.add_argument("-w", "--workspace", type=Path, required=True)
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--limit", type=int, help="only the first N judged queries")
    t = sub.add_parser("tune")
    t.add_argument("dumps", type=Path, nargs="+")
    args = parser.parse_args()
    if args.cmd == "dump":
        dump(args.beir, args.workspace, args.out, args.limit)
    else:
        tune(args.dumps)


if __name__ == "__main__":
    main()
