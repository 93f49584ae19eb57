"""Fake embedders for knowledge tests: real vector spaces, no model to load."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from shelfhand.knowledge.analysis import tokenize_for_index


class BagEmbedder:
    """A hashing bag of analysed words (what the keyword index sees), normalised: lexical, but
    a real vector space. ``fail = True`` makes it raise like a provider out of quota;
    ``query_calls`` counts query embeddings."""

    def __init__(self, name: str = "bag", dim: int = 64) -> None:
        self._name, self._dim = name, dim
        self.fail = False
        self.query_calls = 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.fail:
            raise RuntimeError("quota exceeded")
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for tok in tokenize_for_index(text):
                out[i, int(hashlib.md5(tok.encode("utf-8")).hexdigest(), 16) % self._dim] += 1
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return out / norms

    def embed_query(self, text: str) -> np.ndarray:
        self.query_calls += 1
        return self.embed([text])[0]
