"""A prefix initialised from a public prompt's keys and values (dpcare.text.lm.prefix_init): the prefix model
computes what the base model computes with the prompt in front, in training and in decoding; the default of
dp-prefix fine-tuning; a saved model reloads its trained prefix."""

import pytest
import torch
from lm_fixtures import tiny_gpt2
from test_text_finetune import NOTES, tiny_llama

from dpcare.exceptions import DataError, SpecError
from dpcare.text.lm import generative_ner as G
from dpcare.text.lm.finetune import SUMMARY_INSTRUCTION, TargetLoss, apply_mode, encode, finetune, make_examples
from dpcare.text.lm.prefix_init import (
    init_prefix_from_text,
    prefix_embedding,
    prefix_token_ids,
    public_prefix_text,
)

TEXT = "Extract the problems, treatments and tests in this note as JSON."


@pytest.fixture(scope="module")
def tok():
    return tiny_gpt2()[1]


def base_model(arch, tok, seed=3):
    """A random base model (GPT-2: absolute positions, multi-head; Llama: rotary, grouped-query), float64."""
    model = tiny_gpt2(seed=seed)[0] if arch == "gpt2" else tiny_llama(tok)
    with torch.no_grad():  # larger weights than the default init: attention that depends on what it reads
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return model.double().eval()


def prefix_model(arch, tok, k=10):
    base = base_model(arch, tok)
    reference = base_model(arch, tok)  # the same weights (same seeds), never wrapped by peft
    model = apply_mode(base, "dp-prefix", prefix_tokens=k).double()
    return model, reference


def rows(tok):
    return encode(make_examples(NOTES, "ner", tok, window=10, stride=5)[:4], tok)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("k", [10, 3])
def test_the_prefix_is_the_prompts_cache_in_training(arch, k, tok):
    """The prefix model's logits on a row (positions left to the model, as dpcare trains a prefix) equal the
    base model's logits on (prompt tokens + row), for every row token."""
    model, reference = prefix_model(arch, tok, k)
    model.train()  # dpcare trains it so (GPT-2's dropout is 0 in eval only: compared in eval below)
    ids = init_prefix_from_text(model, tok, TEXT)
    assert ids == tok(TEXT, add_special_tokens=False)["input_ids"][:k] and model.training
    model.eval()
    data = rows(tok)
    x = data["ids"][:1, :25]
    with torch.no_grad():
        got = model(input_ids=x).logits
        want = reference(input_ids=torch.cat([torch.tensor([ids]), x], 1)).logits[:, k:]
    torch.testing.assert_close(got, want, rtol=1e-7, atol=1e-7)
    # the loss dpcare trains on: the same per-row loss as the base model reading the prompt first
    loss = TargetLoss(private=False, positions=False)
    with torch.no_grad():
        got = loss.private_loss(model, data)
        prompt = torch.tensor([ids]).expand(len(data["ids"]), -1)
        shifted = {"ids": torch.cat([prompt, data["ids"]], 1),
                   "mask": torch.cat([torch.ones_like(prompt), data["mask"]], 1),
                   "loss_mask": torch.cat([torch.zeros_like(prompt), data["loss_mask"]], 1)}
        want = TargetLoss(private=False, positions=True).private_loss(reference, shifted)
    torch.testing.assert_close(got, want, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_the_prefix_is_the_prompts_cache_in_decoding(arch, tok):
    """The decoder's left-padded batch (its own positions from 0; peft adds the prefix's k) gives the logits
    of the base model reading (prompt tokens + row)."""
    model, reference = prefix_model(arch, tok)
    ids = init_prefix_from_text(model, tok, TEXT)
    prompts = [tok(G.ner_prompt(t), add_special_tokens=False)["input_ids"] for t in ("Cr 1.2", "Seen for CHF.")]
    with torch.no_grad():
        batch = G._Batch(model, prompts, pad=0)
        first = batch.start()
        nxt = batch.step([11, 12])
        for row, p in enumerate(prompts):
            full = reference(input_ids=torch.tensor([ids + p + [11 + row]])).logits[0]
            torch.testing.assert_close(first[row], full[-2].float(), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(nxt[row], full[-1].float(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_a_random_prefix_is_not_the_prompt_and_a_text_one_is_near_the_base_model(arch, tok):
    """The comparison above is not vacuous: peft's random prefix changes the logits; each layer's keys and
    values land in their own rows of the embedding (layer l: rows 2l and 2l+1 of get_prompt's view)."""
    model, reference = prefix_model(arch, tok)
    x = rows(tok)["ids"][:1, :20]
    with torch.no_grad():
        random_logits = model.eval()(input_ids=x).logits
        ids = init_prefix_from_text(model, tok, TEXT)
        want = reference(input_ids=torch.cat([torch.tensor([ids]), x], 1)).logits[:, 10:]
    assert (random_logits - want).abs().max() > 1e-2
    config = model.active_peft_config
    prompt = model.get_prompt(1)  # the cache peft builds: layer l's keys and values
    with torch.no_grad():
        out = reference(input_ids=torch.tensor([ids]), use_cache=True)
    for layer, got in enumerate(prompt.layers):
        want_layer = out["cache"].layers[layer]
        torch.testing.assert_close(got.keys, want_layer.keys)
        torch.testing.assert_close(got.values, want_layer.values)
    assert len(prompt.layers) == config.num_layers


def test_prefix_tokens_repeat_a_short_text_and_refuse_an_empty_one(tok):
    one = tok("Summary:", add_special_tokens=False)["input_ids"]
    assert prefix_token_ids(tok, "Summary:", 5) == [one[i % len(one)] for i in range(5)]
    with pytest.raises(DataError, match="no tokens"):
        prefix_token_ids(tok, "", 5)


def test_the_public_texts_are_the_task_instructions():
    assert public_prefix_text("summarisation") == SUMMARY_INSTRUCTION
    ner = public_prefix_text("ner", ["problem", "test"])
    assert ner.startswith("Extract the clinical entities of types problem, test") and "Note" not in ner
    with pytest.raises(SpecError, match="unknown task"):
        public_prefix_text("qa")


def test_only_a_prefix_model_is_initialised(tok):
    with pytest.raises(SpecError, match="not a peft prefix-tuning model"):
        init_prefix_from_text(apply_mode(tiny_gpt2()[0], "dp-lora"), tok, TEXT)


@pytest.mark.slow  # end to end
@pytest.mark.parametrize("prefix_init", ["text", "random"])
def test_dp_prefix_fine_tuning_starts_from_the_text_prefix_and_reloads_the_trained_one(prefix_init, tmp_path,
                                                                                         monkeypatch):
    """finetune(dp-prefix) initialises the prefix from the task's public instruction (prefix_init="random":
    peft's random one); the saved model reloads the TRAINED prefix, whatever the init."""
    import dpcare.text.lm.finetune as F
    from dpcare.text.lm.saved import load_finetuned, save_finetuned

    model, tok = tiny_gpt2()
    model.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    seen = {}
    real_init = F.init_prefix_from_text

    def spy(net, tokenizer, text):
        seen["text"] = text
        ids = real_init(net, tokenizer, text)
        seen["weight"] = prefix_embedding(net).weight.detach().clone()
        return ids

    monkeypatch.setattr(F, "init_prefix_from_text", spy)
    net, tok, info = finetune(NOTES, "summarisation", "dp-prefix", epsilon=8.0, delta=1e-3,
                              model=str(tmp_path / "base"), epochs=1, batch_size=1, prefix_init=prefix_init)
    assert info["prefix_init"] == prefix_init
    if prefix_init == "text":
        assert seen["text"] == SUMMARY_INSTRUCTION
        assert not torch.equal(seen["weight"], prefix_embedding(net).weight)  # trained from there
    else:
        assert not seen
    save_finetuned(net, info, tmp_path / "saved")
    again, _, _ = load_finetuned(tmp_path / "saved")
    torch.testing.assert_close(prefix_embedding(again).weight, prefix_embedding(net).weight, rtol=0, atol=0)
