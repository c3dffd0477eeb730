"""Policies: a small gpt-oss on our sink attention with the project tokenizer, or a local HF model.

`build_policy("tiny")` (or "micro", for tests and smoke runs) makes a randomly initialised
`GptOssForCausalLM` (learned sinks, alternating sliding / full layers, mixture of experts)
whose vocabulary is the project tokenizer's (data/tokenizer/, see :mod:`.chat`), running on
the "sinkflex" attention (blocked backend on CPU, flex on CUDA).
`build_policy(path)` loads a local Hugging Face causal-LM directory and its tokenizer (and
chat template), optionally wrapping the model in a LoRA adapter through peft.
`build_policy("base-tiny")` (or "grpo-tiny") loads a checkpoint this project trained and ships
in data/checkpoints/<name>/ (:mod:`.checkpoints`): the tiny shape, pretrained on oracle episodes
of generated worlds (:mod:`.pretrain`), and that base after GRPO.

The reference policy for the KL term is the starting weights: `Policy.reference_model()` is a
context yielding the model that computes reference log-probs (for LoRA: the adapter
disabled; otherwise a frozen copy of the starting weights made by `Policy.freeze_reference`).
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..models import PRESETS, build_gpt_oss, ensure_registered, gpt_oss_config
from ..paths import CHECKPOINTS_DIR
from .chat import SPECIAL_TOKENS, build_tokenizer
from .formats import ChatFormat, CompactFormat

SHIPPED_POLICIES = ("base-tiny", "grpo-tiny")

# Policy presets: the model presets of the same names (:data:`..models.PRESETS`), with the
# vocabulary of the tokenizer (the project's, or Harmony's).
POLICY_PRESETS = ("micro", "tiny")


def policy_shape(name: str) -> dict:
    """The GptOssConfig fields policy preset `name` sets (its model preset but the vocabulary)."""
    return {k: v for k, v in PRESETS[name].items() if k != "vocab_size"}


@dataclass
class Policy:
    """A causal LM, its tokenizer and the token ids the rollout worker needs."""

    model: torch.nn.Module
    tokenizer: object               # None for a Harmony preset (the format holds the encoding)
    name: str
    lora: bool = False
    reference: torch.nn.Module | None = field(default=None, repr=False)
    chat: ChatFormat | None = field(default=None, repr=False)   # default: CompactFormat(tokenizer)

    def __post_init__(self):
        if self.chat is None:
            self.chat = CompactFormat(self.tokenizer)

    @property
    def pad_id(self) -> int:
        return self.chat.pad_id

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def token_id(self, token: str) -> int:
        i = self.tokenizer.convert_tokens_to_ids(token)
        if i is None or i == self.tokenizer.unk_token_id:
            raise KeyError(f"token {token!r} is not in the tokenizer of policy {self.name!r}")
        return int(i)

    def freeze_reference(self) -> None:
        """Keep the current weights as the KL reference (a no-op for LoRA: adapter off)."""
        if not self.lora:
            self.reference = copy.deepcopy(self.model).eval().requires_grad_(False)

    @contextlib.contextmanager
    def reference_model(self):
        """Context yielding the reference model (starting weights)."""
        if self.lora:
            with self.model.disable_adapter():
                yield self.model
        else:
            if self.reference is None:
                raise RuntimeError("call freeze_reference() before asking for the reference model")
            yield self.reference


def lora_config(r: int):
    """A peft LoraConfig of rank `r` on gpt-oss's attention projections (the experts are fused
    tensors), alpha 2r, no dropout: the one LoRA recipe of our trainer and the TRL path."""
    from peft import LoraConfig

    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise ValueError(f"LoRA rank must be an integer >= 1, got {r!r}")
    return LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0, task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])


FORMATS = ("auto", "compact", "harmony")


def policy_dir(name_or_path: str | Path) -> Path:
    """The directory of a shipped checkpoint's name ("base-tiny", "grpo-tiny"), else the path itself.
    FileNotFoundError when a shipped checkpoint is missing."""
    if name_or_path not in SHIPPED_POLICIES:
        return Path(name_or_path)
    path = CHECKPOINTS_DIR / name_or_path
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"the shipped policy {name_or_path!r} is missing from {path} "
                                f"(`make pretrain` regenerates base-tiny)")
    return path


def policy_source(name_or_path: str | Path) -> str:
    """What `build_policy` builds from `name_or_path`: a preset's name, or a directory (a shipped
    checkpoint's, or the path itself). ValueError for anything else."""
    if name_or_path in POLICY_PRESETS:
        return str(name_or_path)
    path = policy_dir(name_or_path)
    if not path.is_dir():
        raise ValueError(f"a policy must be one of {sorted(POLICY_PRESETS) + list(SHIPPED_POLICIES)} or an existing "
                         f"local model directory, got {str(name_or_path)!r}")
    return str(path)


def build_policy(name_or_path: str = "tiny", attn_implementation: str = "sinkflex", seed: int = 0,
                 dtype: torch.dtype = torch.float32, device="cpu", lora: int | None = None,
                 tokenizer_dir: str | Path | None = None, format: str = "auto",
                 reasoning_effort: str = "low", **overrides) -> Policy:
    """A policy: preset name ("tiny", "micro"), shipped checkpoint ("base-tiny", "grpo-tiny") or a
    local HF causal-LM directory.

    format: the chat format (:mod:`.formats`). "auto": Harmony for a directory whose tokenizer
    has Harmony's tokens (a gpt-oss checkpoint), else the compact format; a preset with
    format="harmony" gets gpt-oss's real vocabulary (201,088 ids) and no HF tokenizer.
    reasoning_effort: the Harmony system message's setting.
    overrides: GptOssConfig fields for presets (e.g. num_hidden_layers=2).
    lora: a rank r to wrap the model in a LoRA adapter (`lora_config(r)`); the reference
    policy is then the model with the adapter off.
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
    name_or_path = policy_source(name_or_path)
    if name_or_path in POLICY_PRESETS:
        model, tok, chat = _preset(name_or_path, attn_implementation, seed, dtype, device, tokenizer_dir,
                                   format == "harmony", reasoning_effort, overrides)
    else:
        model, tok, chat = _local(name_or_path, attn_implementation, seed, dtype, device, format, reasoning_effort)
    if lora:
        from peft import get_peft_model

        model = get_peft_model(model, lora_config(lora))
    return Policy(model, tok, str(name_or_path), lora=bool(lora), chat=chat)


def _preset(name, attn_implementation, seed, dtype, device, tokenizer_dir, harmony, effort, overrides):
    """(model, tokenizer, chat format) of a preset shape with random weights."""
    if harmony:
        from .harmony import HARMONY_VOCAB_SIZE, HarmonyFormat

        tok, chat = None, HarmonyFormat(reasoning_effort=effort)
        ids = dict(vocab_size=HARMONY_VOCAB_SIZE, pad_token_id=chat.pad_id, eos_token_id=chat.return_id)
    else:
        tok = build_tokenizer(tokenizer_dir) if tokenizer_dir else build_tokenizer()
        chat = CompactFormat(tok)
        ids = dict(vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    cfg = gpt_oss_config(name, **{**ids, "bos_token_id": None, **overrides})
    model = build_gpt_oss(cfg, attn_implementation=attn_implementation, seed=seed, dtype=dtype, device=device)
    return model, tok, chat


def write_gpt_oss_dir(folder: str | Path, preset: str = "micro", seed: int = 0, dtype: torch.dtype = torch.float32,
                      device="cpu", **overrides) -> Path:
    """A local directory shaped like a gpt-oss checkpoint, which `build_policy` loads in Harmony:
    a model preset's shape (`models.PRESETS`; GptOssConfig `overrides`, e.g. num_hidden_layers=2)
    with seeded random weights, gpt-oss's vocabulary and Harmony's pad and end ids, and
    o200k_harmony's tokenizer.json. For tests and `make gpu-check` (no download)."""
    from .harmony import harmony_tokenizer

    model, _, _ = _preset(preset, "sinkflex", seed, dtype, device, None, True, "low", overrides)
    model.save_pretrained(folder)
    harmony_tokenizer().save_pretrained(folder)
    return Path(folder)


def is_harmony_tokenizer(tok) -> bool:
    """True for a tokenizer with Harmony's message tokens (gpt-oss's own chat format)."""
    vocab = tok.get_vocab()
    return all(t in vocab for t in ("<|start|>", "<|channel|>", "<|message|>", "<|call|>"))


def _local(path, attn_implementation, seed, dtype, device, format, effort):
    """(model, tokenizer, chat format) of a local HF directory. The compact format adds its
    role markers as new tokens; Harmony never touches a tokenizer that has its own format."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ensure_registered(attn_implementation) if attn_implementation.startswith("sinkflex") else None
    tok = AutoTokenizer.from_pretrained(path)
    if format == "auto":
        format = "harmony" if is_harmony_tokenizer(tok) else "compact"
    if format == "harmony":
        from .harmony import HarmonyFormat, harmony_encoding

        if not is_harmony_tokenizer(tok):
            raise ValueError(f"format='harmony' needs a tokenizer with Harmony's tokens; {path} has none")
        chat = HarmonyFormat(harmony_encoding(path), reasoning_effort=effort)
        probe = "Order #W2378156: luis.okafor3544@example.com, 3 items."
        if tok(probe, add_special_tokens=False)["input_ids"] != chat.enc.encode(probe):
            raise ValueError(f"the tokenizer in {path} does not encode as openai-harmony's o200k_harmony")
    else:
        missing = [t for t in SPECIAL_TOKENS if t not in tok.get_vocab()]
        if missing:  # the compact format needs its role markers; add them as new tokens
            tok.add_special_tokens({"additional_special_tokens": missing})
        if tok.pad_token is None:
            tok.pad_token = SPECIAL_TOKENS[0]
        chat = CompactFormat(tok)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=attn_implementation,
                                                 dtype=dtype).to(device)
    if format != "harmony" and len(tok) > model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tok))     # the compact format's added role markers
    return model, tok, chat


def num_parameters(model: torch.nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
