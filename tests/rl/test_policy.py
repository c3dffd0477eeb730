"""build_policy: presets, a local HF directory, LoRA, and the KL reference policy; what a policy name resolves to."""

import pytest
import torch

from sinkflex_lib.paths import CHECKPOINTS_DIR
from sinkflex_lib.rl.policy import build_policy, lora_config, num_parameters, policy_dir, policy_source

IDS = torch.tensor([[5, 17, 42, 99, 7, 3]])


def logits(model):
    with torch.no_grad():
        return model(input_ids=IDS, use_cache=False).logits


def test_preset_uses_sinkflex_and_the_project_vocabulary(micro_policy):
    cfg = micro_policy.model.config
    assert cfg._attn_implementation == "sinkflex"
    assert cfg.vocab_size == len(micro_policy.tokenizer)
    assert micro_policy.model.model.layers[0].self_attn.sinks.shape == (cfg.num_attention_heads,)
    assert micro_policy.token_id("<|end|>") == micro_policy.tokenizer.eos_token_id


def test_local_directory_loads_the_same_model(micro_policy, tmp_path):
    micro_policy.model.save_pretrained(tmp_path)
    micro_policy.tokenizer.save_pretrained(tmp_path)
    loaded = build_policy(str(tmp_path))
    assert loaded.model.config._attn_implementation == "sinkflex"
    torch.testing.assert_close(logits(loaded.model), logits(micro_policy.model), rtol=0, atol=0)


def test_a_written_gpt_oss_directory_loads_in_harmony_with_its_shape_and_dtype(tmp_path):
    from sinkflex_lib.models import PRESETS
    from sinkflex_lib.rl.harmony import HARMONY_VOCAB_SIZE, HarmonyFormat
    from sinkflex_lib.rl.policy import write_gpt_oss_dir

    folder = write_gpt_oss_dir(tmp_path / "g", "micro", dtype=torch.bfloat16, num_hidden_layers=3)
    loaded = build_policy(str(folder), dtype=torch.bfloat16)
    cfg, harmony = loaded.model.config, HarmonyFormat()
    assert isinstance(loaded.chat, HarmonyFormat)
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size) == (3, PRESETS["micro"]["hidden_size"], HARMONY_VOCAB_SIZE)
    assert (cfg.pad_token_id, cfg.eos_token_id) == (harmony.pad_id, harmony.return_id)
    assert all(p.dtype == torch.bfloat16 for p in loaded.model.parameters())
    again = build_policy(str(write_gpt_oss_dir(tmp_path / "h", "micro", dtype=torch.bfloat16, num_hidden_layers=3)),
                         dtype=torch.bfloat16)
    torch.testing.assert_close(logits(again.model), logits(loaded.model), rtol=0, atol=0)     # seeded


def test_reference_is_the_starting_weights(micro_policy_factory):
    policy = micro_policy_factory()
    with pytest.raises(RuntimeError, match="freeze_reference"):
        with policy.reference_model():
            pass
    before = logits(policy.model)
    policy.freeze_reference()
    with torch.no_grad():
        policy.model.lm_head.weight.add_(0.1)
    assert not torch.allclose(logits(policy.model), before)
    with policy.reference_model() as ref:
        torch.testing.assert_close(logits(ref), before, rtol=0, atol=0)


def test_lora_trains_the_adapter_only_and_its_reference_turns_it_off(micro_policy_factory):
    base = micro_policy_factory()
    policy = micro_policy_factory(lora=4)
    assert policy.lora
    trainable = [n for n, p in policy.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert {n.split(".")[-4] for n in trainable} == {"q_proj", "k_proj", "v_proj", "o_proj"}
    assert 0 < num_parameters(policy.model, trainable_only=True) < num_parameters(base.model) / 5
    with torch.no_grad():  # LoRA's B starts at zero; move it so the adapter changes the output
        for n, p in policy.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5, generator=torch.Generator().manual_seed(0))
    assert not torch.allclose(logits(policy.model), logits(base.model))
    policy.freeze_reference()  # a no-op for LoRA
    with policy.reference_model() as ref:
        torch.testing.assert_close(logits(ref), logits(base.model), rtol=1e-6, atol=1e-6)


def test_bad_arguments_are_named(tmp_path):
    with pytest.raises(ValueError, match="existing local model directory"):
        build_policy(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="LoRA rank"):
        lora_config(0)


def test_a_policy_name_resolves_to_a_preset_or_a_directory(tmp_path):
    shipped = CHECKPOINTS_DIR / "base-tiny"
    assert policy_dir("base-tiny") == shipped and policy_dir(tmp_path) == tmp_path
    assert policy_source("micro") == "micro"
    assert policy_source("base-tiny") == str(shipped)
    assert policy_source(tmp_path) == str(tmp_path)
    with pytest.raises(ValueError, match="existing local model directory"):
        policy_source(tmp_path / "missing")
