"""A stand-in model for tests: it emits a fixed token list, whatever it is fed."""

import torch

from sinkflex_lib.envs.oracle import oracle_script
from sinkflex_lib.rl.chat import END, canonical_action
from sinkflex_lib.rl.policy import Policy


class ForcedTokens(torch.nn.Module):
    """A 'model' that emits a fixed token list, one token per forward (batch of one)."""

    def __init__(self, tokens: list[int], vocab: int):
        super().__init__()
        self.tokens, self.vocab, self.i = tokens, vocab, 0
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, **kw):
        logits = torch.full((input_ids.shape[0], 1, self.vocab), -1e4)
        logits[:, :, self.tokens[min(self.i, len(self.tokens) - 1)]] = 1e4
        self.i += 1
        return type("Out", (), {"logits": logits})()


def forced_oracle(policy, task: dict, insert: dict | None = None, products: dict | None = None) -> Policy:
    """A policy that emits the oracle's tokens for `task` (compact format; confirmation requests
    name items by `products` if given); `insert` maps an index of the oracle's actions to an
    action emitted before it."""
    tok, actions = policy.tokenizer, oracle_script(task, products)
    for at, action in sorted((insert or {}).items(), reverse=True):
        actions.insert(at, action)
    script = [t for a in actions
              for t in tok(canonical_action(a), add_special_tokens=False)["input_ids"] + [policy.token_id(END)]]
    return Policy(ForcedTokens(script, len(tok)), tok, "forced")
